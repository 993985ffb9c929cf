/*
 * pipeline.c - TFRecord shards -> decoded, shuffled, batched examples for
 * one replica (the contract is in pipeline.h).
 *
 * Design: one TFRecord reader is reused for every file (reopened, keeping
 * its record buffer, sized at open from the framing scan); the shuffle
 * buffer holds decoded examples, `example_bytes` each, in one block
 * allocated at open.  Without a shuffle buffer records decode straight into
 * the caller's batch buffers; with one, records decode into the slot that
 * was just emitted, and the emitted example is copied out.  After the first
 * epoch has opened every file once nothing is allocated.
 *
 * Record order is a pure function of (files, rank, world, seed, epoch):
 * draws come from Philox with key (seed, DTF_RNG_SHUFFLE) and counter
 * {draw, rank, epoch, draw >> 32}, one block per draw.
 */
#include "data/pipeline.h"

#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/example.h"
#include "data/tfrecord.h"

enum shard_mode { SHARD_FILE, SHARD_DATA };

struct dtf_pipeline {
	char **paths; /* nfiles paths, pointers and strings in one block */
	int nfiles;
	int rank, world;
	enum shard_mode mode;
	struct dtf_feature_spec *features;
	int nfeatures;
	size_t feat_bytes[DTF_EXAMPLE_MAX_FEATURES]; /* per example */
	size_t feat_off[DTF_EXAMPLE_MAX_FEATURES];   /* within a slot */
	size_t example_bytes;                        /* one decoded example */
	int batch;
	size_t shuf_cap; /* slots; 0 = no shuffle */
	struct dtf_philox_key key;
	int64_t nrecords; /* this rank, per epoch */
	int (*exclude)(void *ctx, uint64_t id); /* or NULL */
	void *exclude_ctx;

	struct dtf_tfrecord_reader *rd;
	uint8_t *slots;     /* shuf_cap * example_bytes */
	uint64_t *slot_ids; /* shuf_cap */

	/* Iteration state of the current epoch. */
	int epoch;
	int cur_file;         /* index into paths of the file being read */
	int file_open;        /* rd holds paths[cur_file] */
	int64_t global_index; /* DATA: records seen over the sorted list */
	size_t shuf_n;        /* filled slots */
	int filled;           /* the buffer had its initial fill */
	uint64_t draws;
};

static int mine(const struct dtf_pipeline *p, int file)
{
	return p->mode == SHARD_DATA || file % p->world == p->rank;
}

/* Prefix the current (feature) error with file, record and offset. */
static int wrap_error(int rc, const char *path, int64_t idx, uint64_t off)
{
	if (rc != -DTF_ERR_DATA)
		return rc;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
	return dtf_error(DTF_ERR_DATA,
			 "%s: record %" PRId64 " at byte offset %" PRIu64
			 ": %s",
			 path, idx, off, msg);
}

/*
 * Decode this rank's next record into out[f] (one pointer per feature) and
 * its id into *id.  Returns 1, 0 when the epoch's input is exhausted, or an
 * error.
 */
static int next_input(struct dtf_pipeline *p, void *const *out, uint64_t *id)
{
	int rc;
	for (;;) {
		if (!p->file_open) {
			while (p->cur_file < p->nfiles && !mine(p, p->cur_file))
				p->cur_file++;
			if (p->cur_file >= p->nfiles)
				return 0;
			rc = dtf_tfrecord_reader_reopen(p->rd,
							p->paths[p->cur_file]);
			if (rc)
				return rc;
			p->file_open = 1;
		}
		if (p->mode == SHARD_DATA &&
		    p->global_index % p->world != p->rank) {
			rc = dtf_tfrecord_reader_skip(p->rd, NULL);
			if (rc < 0)
				return rc;
			if (rc == 0) {
				p->file_open = 0;
				p->cur_file++;
			} else {
				p->global_index++;
			}
			continue;
		}
		int64_t idx = dtf_tfrecord_reader_index(p->rd);
		uint64_t off = dtf_tfrecord_reader_offset(p->rd);
		const uint8_t *data;
		size_t len;
		rc = dtf_tfrecord_reader_next(p->rd, &data, &len);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			p->file_open = 0;
			p->cur_file++;
			continue;
		}
		p->global_index++;
		if (p->exclude &&
		    p->exclude(p->exclude_ctx,
			       (uint64_t)p->cur_file << 40 | (uint64_t)idx))
			continue;
		rc = dtf_example_decode(data, len, p->features, p->nfeatures,
					out);
		if (rc)
			return wrap_error(rc, p->paths[p->cur_file], idx, off);
		*id = (uint64_t)p->cur_file << 40 | (uint64_t)idx;
		return 1;
	}
}

static void slot_ptrs(struct dtf_pipeline *p, size_t slot, void **ptrs)
{
	uint8_t *base = p->slots + slot * p->example_bytes;
	for (int f = 0; f < p->nfeatures; f++)
		ptrs[f] = base + p->feat_off[f];
}

/* A uniform index in [0, n) from the next draw of this epoch's stream. */
static size_t draw(struct dtf_pipeline *p, size_t n)
{
	uint32_t ctr[4] = {(uint32_t)p->draws, (uint32_t)p->rank,
			   (uint32_t)p->epoch, (uint32_t)(p->draws >> 32)};
	uint32_t w[4];
	dtf_philox4x32(p->key, ctr, w);
	p->draws++;
	uint64_t r = (uint64_t)w[0] << 32 | w[1];
	return (size_t)(r % n);
}

int dtf_pipeline_next(struct dtf_pipeline *p, void *const *dst,
		      uint64_t *example_ids, int *count)
{
	void *ptrs[DTF_EXAMPLE_MAX_FEATURES];
	int rc = 0, n = 0;
	*count = 0;
	if (!p->shuf_cap) {
		for (; n < p->batch; n++) {
			for (int f = 0; f < p->nfeatures; f++)
				ptrs[f] = (uint8_t *)dst[f] +
					  (size_t)n * p->feat_bytes[f];
			rc = next_input(p, ptrs, &example_ids[n]);
			if (rc <= 0)
				break;
		}
		*count = n;
		return rc < 0 ? rc : 0;
	}
	if (!p->filled) {
		while (p->shuf_n < p->shuf_cap) {
			slot_ptrs(p, p->shuf_n, ptrs);
			rc = next_input(p, ptrs, &p->slot_ids[p->shuf_n]);
			if (rc < 0)
				return rc;
			if (rc == 0)
				break;
			p->shuf_n++;
		}
		p->filled = 1;
	}
	for (; n < p->batch && p->shuf_n; n++) {
		size_t j = draw(p, p->shuf_n);
		const uint8_t *src = p->slots + j * p->example_bytes;
		for (int f = 0; f < p->nfeatures; f++)
			memcpy((uint8_t *)dst[f] + (size_t)n * p->feat_bytes[f],
			       src + p->feat_off[f], p->feat_bytes[f]);
		example_ids[n] = p->slot_ids[j];
		slot_ptrs(p, j, ptrs);
		rc = next_input(p, ptrs, &p->slot_ids[j]);
		if (rc < 0) {
			*count = n;
			return rc;
		}
		if (rc == 0) {
			/* Input done: the last slot fills the hole. */
			size_t last = --p->shuf_n;
			if (j != last) {
				memcpy(p->slots + j * p->example_bytes,
				       p->slots + last * p->example_bytes,
				       p->example_bytes);
				p->slot_ids[j] = p->slot_ids[last];
			}
		}
	}
	*count = n;
	return 0;
}

int dtf_pipeline_begin_epoch(struct dtf_pipeline *p, int epoch)
{
	p->epoch = epoch;
	p->cur_file = 0;
	p->file_open = 0;
	p->global_index = 0;
	p->shuf_n = 0;
	p->filled = 0;
	p->draws = 0;
	return 0;
}

void dtf_pipeline_set_exclude(struct dtf_pipeline *p,
			      int (*exclude)(void *ctx, uint64_t id),
			      void *ctx)
{
	p->exclude = exclude;
	p->exclude_ctx = ctx;
}

const char *dtf_pipeline_file(const struct dtf_pipeline *p, int index)
{
	return index >= 0 && index < p->nfiles ? p->paths[index] : "?";
}

int64_t dtf_pipeline_num_records(const struct dtf_pipeline *p)
{
	return p->nrecords;
}

/* Copy the path list into one block: pointers, then the strings. */
static char **copy_paths(const char *const *files, int n)
{
	size_t bytes = (size_t)n * sizeof(char *);
	for (int i = 0; i < n; i++)
		bytes += strlen(files[i]) + 1;
	char **v = dtf_malloc(bytes);
	if (!v)
		return NULL;
	char *s = (char *)(v + n);
	for (int i = 0; i < n; i++) {
		size_t l = strlen(files[i]) + 1;
		memcpy(s, files[i], l);
		v[i] = s;
		s += l;
	}
	return v;
}

int dtf_pipeline_open(const struct dtf_pipeline_opts *o,
		      struct dtf_pipeline **out)
{
	int rc;
	*out = NULL;
	if (o->nfiles <= 0)
		return dtf_error(DTF_ERR_DATA, "no input files");
	if (o->world < 1 || o->rank < 0 || o->rank >= o->world ||
	    o->batch < 1 || o->nfeatures < 1 ||
	    o->nfeatures > DTF_EXAMPLE_MAX_FEATURES)
		return dtf_error(DTF_ERR_USAGE,
				 "pipeline: bad options (rank %d of %d, batch "
				 "%d, %d features; at most %d)",
				 o->rank, o->world, o->batch, o->nfeatures,
				 DTF_EXAMPLE_MAX_FEATURES);
	struct dtf_pipeline *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->nfiles = o->nfiles;
	p->rank = o->rank;
	p->world = o->world;
	p->mode = o->nfiles >= o->world ? SHARD_FILE : SHARD_DATA;
	p->nfeatures = o->nfeatures;
	p->batch = o->batch;
	p->key = dtf_philox_make_key(o->seed, DTF_RNG_SHUFFLE);
	p->paths = copy_paths(o->files, o->nfiles);
	p->features = dtf_malloc((size_t)o->nfeatures * sizeof(*p->features));
	if (!p->paths || !p->features) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	memcpy(p->features, o->features,
	       (size_t)o->nfeatures * sizeof(*p->features));
	for (int f = 0; f < p->nfeatures; f++) {
		int64_t numel = dtf_feature_numel(&p->features[f]);
		if (numel < 0) {
			rc = dtf_error(DTF_ERR_CONFIG,
				       "feature '%s': negative shape",
				       p->features[f].name);
			goto out_free;
		}
		/* float32 and int32 are both 4 bytes */
		p->feat_bytes[f] = (size_t)numel * 4;
		p->feat_off[f] = p->example_bytes;
		p->example_bytes += (p->feat_bytes[f] + 7) & ~(size_t)7;
	}

	/* Framing scan of the files this rank reads. */
	uint64_t max_record = 0;
	int64_t total = 0, first = -1;
	for (int i = 0; i < p->nfiles; i++) {
		if (!mine(p, i))
			continue;
		struct dtf_tfrecord_stats st;
		rc = dtf_tfrecord_scan(p->paths[i], &st);
		if (rc)
			goto out_free;
		total += st.records;
		if (st.max_record > max_record)
			max_record = st.max_record;
		if (first < 0)
			first = i;
	}
	if (p->mode == SHARD_FILE)
		p->nrecords = total;
	else
		p->nrecords = total > p->rank
				      ? (total - p->rank + p->world - 1) / p->world
				      : 0;

	rc = dtf_tfrecord_reader_open(p->paths[first], &p->rd);
	if (rc)
		goto out_free;
	if (max_record > SIZE_MAX) {
		rc = dtf_error(DTF_ERR_DATA, "record too large");
		goto out_free;
	}
	rc = dtf_tfrecord_reader_reserve(p->rd, max_record ? max_record : 1);
	if (rc)
		goto out_free;

	if (o->shuffle_buffer > 1) {
		size_t cap = o->shuffle_buffer;
		if ((uint64_t)cap > (uint64_t)p->nrecords)
			cap = p->nrecords > 0 ? (size_t)p->nrecords : 1;
		p->shuf_cap = cap;
		if (p->example_bytes && cap > SIZE_MAX / p->example_bytes) {
			rc = dtf_error(DTF_ERR_NOMEM, "shuffle buffer too large");
			goto out_free;
		}
		p->slots = dtf_malloc(cap * p->example_bytes);
		p->slot_ids = dtf_malloc(cap * sizeof(uint64_t));
		if (!p->slots || !p->slot_ids) {
			rc = dtf_error(DTF_ERR_NOMEM,
				       "out of memory for a shuffle buffer of "
				       "%zu examples (%zu bytes each)",
				       cap, p->example_bytes);
			goto out_free;
		}
	}
	dtf_pipeline_begin_epoch(p, 0);
	*out = p;
	return 0;
out_free:
	dtf_pipeline_free(p);
	return rc;
}

void dtf_pipeline_free(struct dtf_pipeline *p)
{
	if (!p)
		return;
	dtf_tfrecord_reader_free(p->rd);
	dtf_free(p->slots);
	dtf_free(p->slot_ids);
	dtf_free(p->features);
	dtf_free(p->paths);
	dtf_free(p);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int dtf_glob_files(const char *pattern, char ***files, int *nfiles)
{
	glob_t g;
	*files = NULL;
	*nfiles = 0;
	int r = glob(pattern, 0, NULL, &g);
	if (r == GLOB_NOMATCH)
		return dtf_error(DTF_ERR_DATA, "no files match '%s'", pattern);
	if (r == GLOB_NOSPACE) {
		globfree(&g);
		return dtf_error(DTF_ERR_NOMEM, "out of memory expanding '%s'",
				 pattern);
	}
	if (r != 0) {
		globfree(&g);
		return dtf_error(DTF_ERR_DATA, "cannot read the files of '%s'",
				 pattern);
	}
	if (g.gl_pathc > (size_t)INT32_MAX) {
		globfree(&g);
		return dtf_error(DTF_ERR_DATA, "too many files match '%s'",
				 pattern);
	}
	int n = (int)g.gl_pathc;
	/* Byte order, not the locale's collation: every rank must agree. */
	qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);
	char **v = copy_paths((const char *const *)g.gl_pathv, n);
	globfree(&g);
	if (!v)
		return dtf_error(DTF_ERR_NOMEM, "out of memory expanding '%s'",
				 pattern);
	*files = v;
	*nfiles = n;
	return 0;
}
