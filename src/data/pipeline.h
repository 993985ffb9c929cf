/*
 * pipeline.h - the training input pipeline: TFRecord shards -> decoded,
 * shuffled, batched tensors for one replica (tf.data semantics).
 *
 * Sharding (tf.data AutoShardPolicy): with at least as many files as ranks,
 * FILE: rank r reads files i with i % world == r; with fewer files, DATA:
 * every rank reads every file and keeps the records whose global index
 * (counted over the sorted file list) satisfies index % world == r.
 *
 * Ordering: files in sorted order, records in file order, then an optional
 * shuffle buffer of `shuffle_buffer` decoded examples (as
 * tf.data.Dataset.shuffle: fill the buffer, emit a uniformly chosen element,
 * refill its slot with the next example), reshuffled each epoch from the
 * Philox stream (seed, DTF_RNG_SHUFFLE, rank, epoch), so the same seed gives
 * the same order.  An epoch never mixes with the next.
 *
 * Each example carries a 64-bit id, (file index << 40) | record index in
 * file, which is the same whatever the number of ranks (dropout keys on it).
 *
 * Not thread-safe: one pipeline per rank, used from one thread.
 */
#ifndef DTF_DATA_PIPELINE_H
#define DTF_DATA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "data/feature.h"

struct dtf_pipeline;

struct dtf_pipeline_opts {
	const char *const *files; /* paths, already sorted; not copied... */
	int nfiles;               /* ...until open returns (it copies) */
	int rank, world;          /* this replica and the number of replicas */
	const struct dtf_feature_spec *features; /* copied */
	int nfeatures;
	int batch;             /* per-replica batch, examples */
	size_t shuffle_buffer; /* examples; 0 or 1 = no shuffle */
	uint64_t seed;
};

/*
 * Open the pipeline and count this rank's records by a scan of the record
 * framing (lengths and length CRCs; data CRCs are checked when read).
 * Errors: DTF_ERR_DATA (unreadable file, corrupt framing: message names
 * file, record index and byte offset), DTF_ERR_NOMEM.
 */
int dtf_pipeline_open(const struct dtf_pipeline_opts *opts,
		      struct dtf_pipeline **out);

/* Records this rank sees per epoch (known after open). */
int64_t dtf_pipeline_num_records(const struct dtf_pipeline *p);

/* Rewind to the start of `epoch` (0-based) and reseed the shuffle. */
int dtf_pipeline_begin_epoch(struct dtf_pipeline *p, int epoch);

/*
 * Decode up to `batch` examples into dst[f] (one buffer per feature, each
 * batch * dtf_feature_numel(f) elements of the feature's dtype) and their
 * ids into example_ids (batch entries).  *count is the number decoded: less
 * than batch only at the end of the epoch, 0 when the epoch is over.
 * Errors: DTF_ERR_DATA with file, record index and byte offset; a feature
 * missing or of the wrong type or size names the feature too.
 */
int dtf_pipeline_next(struct dtf_pipeline *p, void *const *dst,
		      uint64_t *example_ids, int *count);

/*
 * Leave out of this rank's stream every record whose example id `exclude`
 * says 1 for (before decoding; DATA sharding still counts it), until the
 * filter is replaced; NULL removes it.  For an elastic resume: the records
 * of the epoch that other ranks consumed before a checkpoint.
 */
void dtf_pipeline_set_exclude(struct dtf_pipeline *p,
			      int (*exclude)(void *ctx, uint64_t id),
			      void *ctx);

/* Path of file `index` of the sorted list (the file part of an example id,
 * id >> 40), or "?" when out of range.  Owned by the pipeline. */
const char *dtf_pipeline_file(const struct dtf_pipeline *p, int index);

/* dtf_pipeline_free(NULL) is a no-op. */
void dtf_pipeline_free(struct dtf_pipeline *p);

/*
 * Expand a glob pattern (glob(3)) into a sorted list of paths.  The list and
 * its strings are one allocation: free with dtf_free(*files).  A pattern
 * matching nothing is DTF_ERR_DATA naming the pattern.
 */
int dtf_glob_files(const char *pattern, char ***files, int *nfiles);

#endif
