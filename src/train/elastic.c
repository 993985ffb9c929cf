/*
 * elastic.c - the records an interrupted epoch consumed, replayed from the
 * checkpoint's segments (contract in elastic.h).
 *
 * The consumed ids are one sorted array; a segment's replay leaves out the
 * ids of the segments before it (the prefix sorted so far), appends its
 * own, and the whole array is sorted again.  Only setup-time allocation.
 */
#include "train/elastic.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "data/pipeline.h"

struct dtf_elastic {
	uint64_t *ids; /* sorted */
	size_t n, cap;
	size_t nfilter; /* ids[0..nfilter) are left out (sorted) */
};

int dtf_elastic_needed(const struct dtf_ckpt_position *pos, int world,
		       int batch)
{
	return pos->nprev > 0 || pos->world != world ||
	       pos->per_replica_batch != batch;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int excluded(void *ctx, uint64_t id)
{
	const struct dtf_elastic *el = ctx;
	return el->nfilter &&
	       bsearch(&id, el->ids, el->nfilter, sizeof(uint64_t),
		       cmp_u64) != NULL;
}

int64_t dtf_elastic_consumed(const struct dtf_elastic *el)
{
	return (int64_t)el->n;
}

void dtf_elastic_free(struct dtf_elastic *el)
{
	if (!el)
		return;
	dtf_free(el->ids);
	dtf_free(el);
}

/* Replay `steps` batches of rank `rank` of `world` and append their ids. */
static int replay(const struct dtf_job *job, char **files, int nfiles,
		  int epoch, const struct dtf_ckpt_segment *sg, int rank,
		  void **dst, uint64_t *batch_ids, struct dtf_elastic *el)
{
	/* the training pipeline's reading options (the order depends on
	 * them), on this thread: the filter reads el->ids as they grow */
	struct dtf_read_spec rd = job->data.read;
	rd.compression = (enum dtf_compression)job->data.train_compression;
	rd.prefetch = 0;
	struct dtf_pipeline_opts po = {
		.files = (const char *const *)files, .nfiles = nfiles,
		.rank = rank, .world = (int)sg->world,
		.features = job->data.features,
		.nfeatures = job->data.nfeatures,
		.batch = (int)sg->per_replica_batch,
		.shuffle_buffer = (size_t)job->data.shuffle_buffer,
		.seed = job->seed, .read = &rd,
		.drop_remainder = job->data.drop_remainder,
		/* the run's own pipeline says how it shards, once */
		.quiet = 1};
	struct dtf_pipeline *p = NULL;
	int rc = dtf_pipeline_open(&po, &p);
	if (rc < 0)
		return rc;
	dtf_pipeline_set_exclude(p, excluded, el);
	rc = dtf_pipeline_begin_epoch(p, epoch);
	for (int64_t s = 0; rc == 0 && s < sg->steps; s++) {
		int count = 0;
		rc = dtf_pipeline_next(p, dst, batch_ids, &count);
		if (rc == 0 && count < sg->per_replica_batch)
			rc = dtf_error(DTF_ERR_CHECKPOINT,
				       "replaying epoch %d of rank %d of %lld: the data ends at step %lld of %lld; were the files changed since the checkpoint?",
				       epoch + 1, rank, (long long)sg->world,
				       (long long)s, (long long)sg->steps);
		if (rc < 0)
			break;
		if (el->n + (size_t)count > el->cap) {
			size_t cap = el->cap ? el->cap * 2 : 4096;
			while (cap < el->n + (size_t)count)
				cap *= 2;
			uint64_t *grown = dtf_realloc(el->ids, cap * sizeof(uint64_t));
			if (!grown) {
				rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
				break;
			}
			el->ids = grown;
			el->cap = cap;
		}
		memcpy(el->ids + el->n, batch_ids, (size_t)count * sizeof(uint64_t));
		el->n += (size_t)count;
	}
	dtf_pipeline_free(p);
	return rc;
}

int dtf_elastic_new(const struct dtf_job *job,
		    const struct dtf_ckpt_position *pos,
		    struct dtf_elastic **out)
{
	*out = NULL;
	struct dtf_ckpt_segment seg[DTF_CKPT_MAX_SEGMENTS + 1];
	int nseg = 0;
	int64_t before = 0;
	for (int i = 0; i < pos->nprev; i++) {
		seg[nseg++] = pos->prev[i];
		before += pos->prev[i].steps;
	}
	seg[nseg++] = (struct dtf_ckpt_segment){
		pos->world, pos->per_replica_batch, pos->step_in_epoch - before};
	int64_t widest = 0;
	for (int i = 0; i < nseg; i++) {
		if (seg[i].world < 1 || seg[i].world > 1 << 20 ||
		    seg[i].per_replica_batch < 1 ||
		    seg[i].per_replica_batch > DTF_BATCH_MAX || seg[i].steps < 0)
			return dtf_error(DTF_ERR_CHECKPOINT,
					 "the checkpoint's position has a bad segment (%lld ranks, batch %lld, %lld steps)",
					 (long long)seg[i].world,
					 (long long)seg[i].per_replica_batch,
					 (long long)seg[i].steps);
		if (seg[i].per_replica_batch > widest)
			widest = seg[i].per_replica_batch;
	}
	struct dtf_elastic *el = dtf_calloc(1, sizeof(*el));
	void **dst = dtf_calloc((size_t)job->data.nfeatures, sizeof(void *));
	uint64_t *batch_ids = dtf_calloc((size_t)widest, sizeof(uint64_t));
	char **files = NULL;
	int nfiles = 0, rc = 0;
	if (!el || !dst || !batch_ids) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int f = 0; f < job->data.nfeatures && rc == 0; f++) {
		dst[f] = dtf_malloc((size_t)widest * 4 *
				    (size_t)dtf_feature_numel(&job->data.features[f]));
		if (!dst[f])
			rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	if (rc == 0)
		rc = dtf_glob_files(job->data.train_files, &files, &nfiles);
	for (int i = 0; i < nseg && rc == 0; i++) {
		el->nfilter = el->n; /* earlier segments are left out */
		for (int r = 0; r < seg[i].world && rc == 0; r++)
			rc = replay(job, files, nfiles, (int)pos->epoch, &seg[i],
				    r, dst, batch_ids, el);
		qsort(el->ids, el->n, sizeof(uint64_t), cmp_u64);
		for (size_t k = 1; k < el->n && rc == 0; k++)
			if (el->ids[k] == el->ids[k - 1])
				rc = dtf_error(DTF_ERR_RUNTIME,
					       "replaying the epoch read record %llu twice",
					       (unsigned long long)el->ids[k]);
	}
	el->nfilter = el->n;
out:
	if (dst)
		for (int f = 0; f < job->data.nfeatures; f++)
			dtf_free(dst[f]);
	dtf_free(dst);
	dtf_free(batch_ids);
	dtf_free(files);
	if (rc < 0) {
		dtf_elastic_free(el);
		return rc;
	}
	*out = el;
	return 0;
}

int dtf_elastic_start_epoch(struct dtf_elastic *el, struct dtf_pipeline *p,
			    int epoch, void *const *dst, uint64_t *ids,
			    int64_t *remaining)
{
	*remaining = 0;
	dtf_pipeline_set_exclude(p, excluded, el);
	int rc = dtf_pipeline_begin_epoch(p, epoch);
	for (int count = 1; rc == 0 && count > 0;) {
		rc = dtf_pipeline_next(p, dst, ids, &count);
		*remaining += count;
	}
	if (rc == 0)
		rc = dtf_pipeline_begin_epoch(p, epoch);
	return rc;
}
