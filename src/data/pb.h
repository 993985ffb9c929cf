/*
 * pb.h - the protobuf wire format, written by hand: the one encoder of
 * tf.train.Example (data/example.c), TensorBoard Event records
 * (obs/tfevents.c) and ONNX models (export/onnx.c).
 *
 * Encoding as in the Protocol Buffers "Encoding" guide: a field is a key
 * (field number << 3 | wire type) as a varint, then a varint (wire type
 * 0), 8 little-endian bytes (1), a varint length and that many bytes (2:
 * strings, bytes, nested messages, packed repeated scalars) or 4
 * little-endian bytes (5).  Negative int64 values are 10-byte varints
 * (two's complement), as every protobuf encoder writes them.
 *
 * The growable writer keeps a stack of open nested messages: _begin
 * writes the key and remembers where the body starts; _end, once the body
 * is known, slides it up by the size of its length varint and writes the
 * length in front (one move per message and level, nothing precomputed).
 * The first failure (out of memory, nesting deeper than
 * DTF_PB_MAX_DEPTH) is kept, every later call is a no-op, and
 * dtf_pb_writer_error() returns it, so a caller checks once at the end.
 */
#ifndef DTF_DATA_PB_H
#define DTF_DATA_PB_H

#include <stddef.h>
#include <stdint.h>

/* Wire types. */
enum { DTF_PB_VARINT = 0, DTF_PB_I64 = 1, DTF_PB_LEN = 2, DTF_PB_I32 = 5 };

/* Append the varint of v to p (at least 10 bytes free); returns bytes. */
size_t dtf_pb_put_varint(uint8_t *p, uint64_t v);
/* Bytes of the varint encoding of v (1..10). */
size_t dtf_pb_varint_size(uint64_t v);

#define DTF_PB_MAX_DEPTH 16

struct dtf_pb_writer {
	uint8_t *buf; /* owned; the encoded bytes so far */
	size_t len, cap;
	int depth;                       /* open nested messages */
	size_t open[DTF_PB_MAX_DEPTH];   /* where each one's body starts */
	int err;                         /* first error (negative), or 0 */
};

void dtf_pb_writer_init(struct dtf_pb_writer *w);
void dtf_pb_writer_deinit(struct dtf_pb_writer *w);

/* A varint field (int32, int64, uint64, enum, bool). */
void dtf_pb_varint(struct dtf_pb_writer *w, int field, uint64_t v);
/* A float field (wire type 5). */
void dtf_pb_float(struct dtf_pb_writer *w, int field, float v);
/* A length-delimited field of n bytes (bytes, string). */
void dtf_pb_bytes(struct dtf_pb_writer *w, int field, const void *data,
		  size_t n);
/* A string field: strlen(s) bytes. */
void dtf_pb_string(struct dtf_pb_writer *w, int field, const char *s);
/* A length-delimited field of n float32 values, little-endian (a packed
 * repeated float, or the raw_data of a float tensor). */
void dtf_pb_floats_le(struct dtf_pb_writer *w, int field, const float *v,
		      size_t n);
/* Open a nested message field; every _begin has its _end. */
void dtf_pb_begin(struct dtf_pb_writer *w, int field);
void dtf_pb_end(struct dtf_pb_writer *w);

/* 0, or the first error: -DTF_ERR_NOMEM, -DTF_ERR_RUNTIME (nesting deeper
 * than DTF_PB_MAX_DEPTH, or messages left open). */
int dtf_pb_writer_error(const struct dtf_pb_writer *w);

#endif
