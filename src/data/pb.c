/*
 * pb.c - protobuf wire encoding (pb.h).
 */
#include "data/pb.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

size_t dtf_pb_varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

size_t dtf_pb_put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

void dtf_pb_writer_init(struct dtf_pb_writer *w)
{
	memset(w, 0, sizeof(*w));
}

void dtf_pb_writer_deinit(struct dtf_pb_writer *w)
{
	dtf_free(w->buf);
	memset(w, 0, sizeof(*w));
}

/* Room for `more` bytes behind len; 0 or the (kept) error. */
static int reserve(struct dtf_pb_writer *w, size_t more)
{
	if (w->err)
		return w->err;
	if (more > SIZE_MAX / 2 - w->len)
		return w->err = dtf_error(DTF_ERR_NOMEM,
					  "protobuf message too large");
	size_t need = w->len + more;
	if (need <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 4096;
	while (cap < need)
		cap *= 2;
	uint8_t *p = dtf_realloc(w->buf, cap);
	if (!p)
		return w->err = dtf_error(DTF_ERR_NOMEM,
					  "out of memory encoding %zu bytes",
					  need);
	w->buf = p;
	w->cap = cap;
	return 0;
}

static void key(struct dtf_pb_writer *w, int field, int wt)
{
	w->len += dtf_pb_put_varint(w->buf + w->len,
				    (uint64_t)field << 3 | (uint64_t)wt);
}

void dtf_pb_varint(struct dtf_pb_writer *w, int field, uint64_t v)
{
	if (reserve(w, 20))
		return;
	key(w, field, DTF_PB_VARINT);
	w->len += dtf_pb_put_varint(w->buf + w->len, v);
}

static void put_le32(uint8_t *p, uint32_t u)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(u >> (8 * i));
}

void dtf_pb_float(struct dtf_pb_writer *w, int field, float v)
{
	if (reserve(w, 14))
		return;
	key(w, field, DTF_PB_I32);
	uint32_t u;
	memcpy(&u, &v, 4);
	put_le32(w->buf + w->len, u);
	w->len += 4;
}

void dtf_pb_bytes(struct dtf_pb_writer *w, int field, const void *data,
		  size_t n)
{
	if (reserve(w, 20) || reserve(w, 20 + n))
		return;
	key(w, field, DTF_PB_LEN);
	w->len += dtf_pb_put_varint(w->buf + w->len, n);
	if (n)
		memcpy(w->buf + w->len, data, n);
	w->len += n;
}

void dtf_pb_string(struct dtf_pb_writer *w, int field, const char *s)
{
	dtf_pb_bytes(w, field, s, strlen(s));
}

void dtf_pb_floats_le(struct dtf_pb_writer *w, int field, const float *v,
		      size_t n)
{
	if (n > SIZE_MAX / 8) {
		if (!w->err)
			w->err = dtf_error(DTF_ERR_NOMEM,
					   "protobuf message too large");
		return;
	}
	if (reserve(w, 20 + 4 * n))
		return;
	key(w, field, DTF_PB_LEN);
	w->len += dtf_pb_put_varint(w->buf + w->len, 4 * n);
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &v[i], 4);
		put_le32(w->buf + w->len + 4 * i, u);
	}
	w->len += 4 * n;
}

void dtf_pb_begin(struct dtf_pb_writer *w, int field)
{
	if (reserve(w, 10))
		return;
	if (w->depth >= DTF_PB_MAX_DEPTH) {
		w->err = dtf_error(DTF_ERR_RUNTIME,
				   "protobuf messages nested deeper than %d",
				   DTF_PB_MAX_DEPTH);
		return;
	}
	key(w, field, DTF_PB_LEN);
	w->open[w->depth++] = w->len;
}

void dtf_pb_end(struct dtf_pb_writer *w)
{
	if (w->err || w->depth == 0 || reserve(w, 10))
		return;
	size_t start = w->open[--w->depth];
	size_t body = w->len - start;
	size_t h = dtf_pb_varint_size(body);
	memmove(w->buf + start + h, w->buf + start, body);
	dtf_pb_put_varint(w->buf + start, body);
	w->len += h;
}

int dtf_pb_writer_error(const struct dtf_pb_writer *w)
{
	if (w->err)
		return w->err;
	if (w->depth)
		return dtf_error(DTF_ERR_RUNTIME,
				 "%d protobuf message(s) left open", w->depth);
	return 0;
}
