/*
 * example.h - tf.train.Example protobuf wire format, decoded and encoded by
 * hand (no protobuf library).
 *
 * Messages (tensorflow/core/example/{example,feature}.proto):
 *
 *     Example   { Features features = 1; }
 *     Features  { map<string, Feature> feature = 1; }   entries: key=1, value=2
 *     Feature   { oneof kind { BytesList bytes_list = 1;
 *                              FloatList float_list = 2;
 *                              Int64List int64_list = 3; } }
 *     BytesList { repeated bytes value = 1; }
 *     FloatList { repeated float value = 1 [packed]; }   packed or not
 *     Int64List { repeated int64 value = 1 [packed]; }   packed or not
 *
 * Every length and varint is bounds-checked against the input, so any byte
 * string is safe to decode.  Unknown fields are skipped (wire types 0, 1, 2
 * and 5); groups (3, 4) are malformed.  As in protobuf, a key that occurs
 * twice takes its last value, and so does a Feature with two lists.
 * Pure functions, thread-safe; errors are DTF_ERR_DATA whose message names
 * the feature where there is one (the caller adds file and record).
 */
#ifndef DTF_DATA_EXAMPLE_H
#define DTF_DATA_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "data/feature.h"
#include "data/pb.h" /* dtf_pb_put_varint, for tests that hand-build messages */

/* Most features one decode call handles. */
#define DTF_EXAMPLE_MAX_FEATURES 64

/*
 * Decode the serialized Example buf[0..len) into fixed-shape outputs:
 * dst[i] receives dtf_feature_numel(&specs[i]) elements of specs[i].dtype
 * (float32 or int32, host order).  Per spec type:
 *   bytes:  exactly one value of numel * element-size bytes, decoded as
 *           uint8 / int8 / little-endian float32, out = raw*scale + offset;
 *           DTF_INT32 output (uint8 / int8 only): the raw values (ids);
 *   float:  exactly numel values, out = raw*scale + offset;
 *   int64:  exactly numel values; DTF_INT32 output must fit in int32,
 *           DTF_FLOAT32 output is raw*scale + offset.
 * Errors (DTF_ERR_DATA): a missing feature, a list of another type
 * ("feature 'label' is a float_list but the job declares int64"), a value
 * count or byte size not matching the shape, an int64 outside int32,
 * malformed wire data.  DTF_ERR_CONFIG if nspecs exceeds
 * DTF_EXAMPLE_MAX_FEATURES or a spec is inconsistent.  dst contents are
 * unspecified after an error.
 */
int dtf_example_decode(const uint8_t *buf, size_t len,
		       const struct dtf_feature_spec *specs, int nspecs,
		       void *const *dst);

/* One feature as seen by dtf_example_walk(). */
struct dtf_example_feature_info {
	const char *name; /* not NUL-terminated: name_len bytes into the input */
	size_t name_len;
	int has_list;               /* 0 for a Feature with no list set */
	enum dtf_feature_type type; /* valid when has_list */
	int64_t count;              /* number of values */
	uint64_t bytes;             /* bytes_list: total bytes of the values */
};

/* Called for every map entry, in wire order; a nonzero return stops the
 * walk and is returned by dtf_example_walk(). */
typedef int (*dtf_example_visit_fn)(void *ctx,
				    const struct dtf_example_feature_info *f);

/*
 * Walk the features of a serialized Example (for inspection tools).
 * Returns 0, the visitor's nonzero value, or DTF_ERR_DATA if the wire data
 * is malformed (checked up to the point reached).
 */
int dtf_example_walk(const uint8_t *buf, size_t len, dtf_example_visit_fn fn,
		     void *ctx);

/*
 * Example builder: append features, then finish to get the serialized
 * bytes.  Lists are written packed (as TensorFlow's proto3 encoder does).
 * The first failing call records its error and later calls return it too,
 * so a caller may check only finish().  Reuse with _reset (keeps memory).
 */
struct dtf_example_builder {
	uint8_t *buf; /* owned; header space then the Features body */
	size_t len;   /* bytes used, header space included */
	size_t cap;
	int err; /* first error, 0 if none */
};

void dtf_example_builder_init(struct dtf_example_builder *b);
void dtf_example_builder_deinit(struct dtf_example_builder *b);
void dtf_example_builder_reset(struct dtf_example_builder *b);

/* A bytes_list with one value of n bytes. Errors: DTF_ERR_NOMEM. */
int dtf_example_builder_add_bytes(struct dtf_example_builder *b,
				  const char *name, const void *data,
				  size_t n);
/* A float_list of n values (packed). Errors: DTF_ERR_NOMEM. */
int dtf_example_builder_add_floats(struct dtf_example_builder *b,
				   const char *name, const float *v, size_t n);
/* An int64_list of n values (packed varints). Errors: DTF_ERR_NOMEM. */
int dtf_example_builder_add_int64s(struct dtf_example_builder *b,
				   const char *name, const int64_t *v,
				   size_t n);

/*
 * Serialize: *data / *len get the Example bytes, valid until the next
 * builder call.  Returns the first error of the adds, if any.
 */
int dtf_example_builder_finish(struct dtf_example_builder *b,
			       const uint8_t **data, size_t *len);

#endif
