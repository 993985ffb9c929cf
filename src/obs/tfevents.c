/*
 * tfevents.c - TensorBoard event files: Event protos encoded by hand into
 * TFRecord framing.  Field numbers and wire types are those of
 * tensorboard/compat/proto/event.proto and summary.proto (the same numbers
 * as tensorflow/core/util/event.proto); tests/test_obs.c decodes the output
 * independently, and tests/tensorboard_reader.py reads it with
 * TensorBoard's own loader.
 */
#include "obs/tfevents.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/error.h"
#include "data/pb.h"
#include "data/tfrecord.h"

/* Wire types (data/pb.h) */
#define WT_VARINT DTF_PB_VARINT
#define WT_I64 DTF_PB_I64
#define WT_LEN DTF_PB_LEN
#define WT_I32 DTF_PB_I32
#define KEY(field, wt) ((uint8_t)((field) << 3 | (wt)))

/* Bytes of one encoded Value at most: key + len + tag + float. */
#define VALUE_MAX (1 + 2 + 1 + 2 + DTF_TFEVENTS_MAX_TAG + 1 + 4)
#define BUF_SIZE (64 + 2 * DTF_TFEVENTS_MAX_SCALARS * (VALUE_MAX + 3))

struct dtf_tfevents {
	struct dtf_tfrecord_writer *rec;
	char *path;
	uint8_t buf[BUF_SIZE];   /* the Event being encoded */
	uint8_t value[VALUE_MAX]; /* one Value being encoded */
};

static size_t put_f64(uint8_t *p, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(u >> (8 * i));
	return 8;
}

static size_t put_f32(uint8_t *p, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(u >> (8 * i));
	return 4;
}

/* Event header: wall_time (1, fixed64 double) and step (2, varint). */
static size_t put_header(uint8_t *p, int64_t step, double wall_time)
{
	size_t n = 0;
	p[n++] = KEY(1, WT_I64);
	n += put_f64(p + n, wall_time);
	p[n++] = KEY(2, WT_VARINT);
	n += dtf_pb_put_varint(p + n, (uint64_t)step);
	return n;
}

/* A length-delimited field: key, varint length, bytes. */
static size_t put_len(uint8_t *p, int field, const void *data, size_t len)
{
	size_t n = 0;
	p[n++] = KEY(field, WT_LEN);
	n += dtf_pb_put_varint(p + n, len);
	memcpy(p + n, data, len);
	return n + len;
}

int dtf_tfevents_open(const char *dir, const char *host, double wall_time,
		      struct dtf_tfevents **out)
{
	int rc;
	*out = NULL;
	struct dtf_tfevents *w = dtf_calloc(1, sizeof(*w));
	size_t size = strlen(dir) + strlen(host) + 64;
	if (!w || !(w->path = dtf_malloc(size))) {
		dtf_free(w);
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory", dir);
	}
	struct stat st;
	for (int i = 0;; i++) {
		int len = snprintf(w->path, size, "%s/events.out.tfevents.%010lld.%s",
				   dir, (long long)wall_time, host);
		if (i > 0)
			snprintf(w->path + len, size - (size_t)len, ".%d", i);
		if (stat(w->path, &st) != 0)
			break;
	}
	if ((rc = dtf_tfrecord_writer_open(w->path, &w->rec)) < 0)
		goto out_free;
	static const char version[] = "brain.Event:2";
	size_t n = put_header(w->buf, 0, wall_time);
	n += put_len(w->buf + n, 3, version, sizeof(version) - 1);
	if ((rc = dtf_tfrecord_writer_write(w->rec, w->buf, n)) < 0 ||
	    (rc = dtf_tfrecord_writer_flush(w->rec)) < 0)
		goto out_close;
	*out = w;
	return 0;
out_close:
	dtf_tfrecord_writer_close(w->rec);
out_free:
	dtf_free(w->path);
	dtf_free(w);
	return rc;
}

const char *dtf_tfevents_path(const struct dtf_tfevents *w)
{
	return w->path;
}

int dtf_tfevents_scalars(struct dtf_tfevents *w, int64_t step,
			 double wall_time,
			 const struct dtf_tfevents_scalar *v, int n)
{
	if (n < 0 || n > DTF_TFEVENTS_MAX_SCALARS)
		return dtf_error(DTF_ERR_RUNTIME,
				 "%s: %d scalars in one event (at most %d)",
				 w->path, n, DTF_TFEVENTS_MAX_SCALARS);
	/* Summary body first, after room for the header and its length */
	uint8_t *summary = w->buf + 32;
	size_t slen = 0;
	for (int i = 0; i < n; i++) {
		size_t tl = strlen(v[i].tag);
		if (tl > DTF_TFEVENTS_MAX_TAG)
			return dtf_error(DTF_ERR_RUNTIME,
					 "%s: tag '%s' is longer than %d bytes",
					 w->path, v[i].tag,
					 DTF_TFEVENTS_MAX_TAG);
		size_t vl = put_len(w->value, 1, v[i].tag, tl);
		w->value[vl++] = KEY(2, WT_I32);
		vl += put_f32(w->value + vl, v[i].value);
		slen += put_len(summary + slen, 1, w->value, vl);
	}
	/* header + summary key and length in front, then slide the body */
	uint8_t head[32];
	size_t hl = put_header(head, step, wall_time);
	head[hl++] = KEY(5, WT_LEN);
	hl += dtf_pb_put_varint(head + hl, slen);
	memmove(w->buf + hl, summary, slen);
	memcpy(w->buf, head, hl);
	return dtf_tfrecord_writer_write(w->rec, w->buf, hl + slen);
}

int dtf_tfevents_session_start(struct dtf_tfevents *w, int64_t step,
			       double wall_time)
{
	static const uint8_t start[] = {KEY(1, WT_VARINT), 1}; /* START */
	size_t n = put_header(w->buf, step, wall_time);
	n += put_len(w->buf + n, 7, start, sizeof(start));
	return dtf_tfrecord_writer_write(w->rec, w->buf, n);
}

int dtf_tfevents_flush(struct dtf_tfevents *w)
{
	return dtf_tfrecord_writer_flush(w->rec);
}

int dtf_tfevents_close(struct dtf_tfevents *w)
{
	if (!w)
		return 0;
	int rc = dtf_tfrecord_writer_close(w->rec);
	dtf_free(w->path);
	dtf_free(w);
	return rc;
}
