/*
 * pipeline.h - the training input pipeline: TFRecord shards -> decoded,
 * shuffled, batched tensors for one replica (tf.data semantics).
 *
 * Stages, in order (each as the tf.data transformation of the same name):
 *
 *   files (sorted) -> shard -> interleave(cycle_length, block_length)
 *     -> [DATA: shard records] -> parse (feature schema) -> shuffle(buffer,
 *     reshuffle_each_iteration) -> augment -> batch(drop_remainder)
 *     -> prefetch(N)
 *
 * Sharding (tf.data AutoShardPolicy, opts.read->shard_policy): FILE: rank r
 * reads the files i with i % world == r; DATA: every rank reads every file
 * and keeps the records whose index in the interleaved stream k satisfies
 * k % world == r; OFF: every rank reads everything; AUTO: FILE with at least
 * as many files as ranks, else DATA.  FILE with fewer files than ranks is
 * DTF_ERR_CONFIG at open, on every rank alike (no communication needed).
 *
 * Interleave: cycle_length files are open at once; block_length records are
 * taken from each in turn; a finished file's place goes to the next file
 * (InterleaveDataset's deterministic order).  cycle_length 1 = files one
 * after another.
 *
 * Shuffle: a buffer of `shuffle_buffer` decoded examples (fill, emit a
 * uniformly chosen one, refill its slot), reshuffled each epoch from the
 * Philox stream (seed, DTF_RNG_SHUFFLE) with counter {draw, rank, epoch,
 * draw >> 32}: the order is a pure function of (files, rank, world, seed,
 * epoch, options), whatever the prefetch threads do.  An epoch never mixes
 * with the next: the buffer drains at the end of the epoch's input.
 *
 * Each example carries a 64-bit id, (file index << 40) | record index in
 * file, which is the same whatever the number of ranks (dropout and
 * augmentation key on it).
 *
 * Prefetch (opts.read->prefetch = N > 0): one background thread runs all
 * of the stages above into a ring of N batches; dtf_pipeline_next() copies
 * the oldest ready batch out.  The thread produces exactly the batches the
 * caller's thread would (the stages are sequential and seeded), so results
 * do not depend on N.  An error met by the thread is returned by the
 * dtf_pipeline_next() call that reaches it, with the same message.
 *
 * Bad data (opts.read->on_error): FAIL returns DTF_ERR_DATA naming file,
 * record index and byte offset.  SKIP leaves bad records out: a record
 * whose data CRC fails or that does not decode is skipped; after a framing
 * error (truncated header or data, length CRC mismatch, corrupt compressed
 * stream) the rest of the file is skipped, since its record boundaries
 * cannot be trusted.  With SKIP, open reads this rank's records once through
 * (CRCs and decoding) so the number of records per epoch is exact before
 * the first step; the counts come back from dtf_pipeline_get_stats() and
 * the first problems are logged at open as warnings.
 *
 * Threads: a pipeline is used from one thread (plus its own prefetch
 * thread); distinct pipelines are independent.
 */
#ifndef DTF_DATA_PIPELINE_H
#define DTF_DATA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "data/feature.h"
#include "data/input.h"

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
	/* Reading options; NULL = all defaults of struct dtf_read_spec except
	 * prefetch 0 (decode on the caller's thread).  Copied. */
	const struct dtf_read_spec *read;
	/* 1: the last batch of an epoch is dropped when short (tf.data
	 * drop_remainder=True; the trainer's default); 0: delivered short. */
	int drop_remainder;
	/* NULL, or augmentation of one [H, W, C] float feature.  Copied. */
	const struct dtf_augment_spec *augment;
	/* For messages ("data.train"); NULL = "data".  Not copied: a string
	 * that outlives the pipeline (a literal). */
	const char *label;
	/* 1: log nothing (a replay of reading another run did, as an
	 * elastic resume makes; the run's own pipeline logs); errors are
	 * returned as ever.  0: log as described below. */
	int quiet;
};

/*
 * Open the pipeline: expand nothing (files are given), resolve the shard
 * policy, scan this rank's files (framing: lengths and length CRCs; with
 * on_error SKIP, every record read and decoded) and count its records.
 * A file of 0 bytes is noted (logged) and read as empty.  With shard
 * policy AUTO, rank 0 logs one line saying which policy it chose.  With
 * opts->quiet, nothing is logged.
 * Errors: DTF_ERR_CONFIG (FILE sharding with fewer files than ranks, with a
 * HINT line; an augment feature that is not [H, W, C] float), DTF_ERR_DATA
 * (unreadable file, corrupt framing with on_error FAIL: message names file,
 * record index and byte offset), DTF_ERR_NOMEM, DTF_ERR_RUNTIME (no thread).
 */
int dtf_pipeline_open(const struct dtf_pipeline_opts *opts,
		      struct dtf_pipeline **out);

/* The DTF_ERR_CONFIG error (message and HINT) of FILE sharding with
 * `nfiles` files for `world` ranks: prefixed by `where` ("file:line:col"
 * of the policy, or "") and naming `files` (e.g. "data.eval.files (PATTERN)",
 * or NULL).  Returns the error code. */
int dtf_pipeline_file_shard_error(const char *where, const char *files,
				  int nfiles, int world);

/* Records this rank sees per epoch (known after open). */
int64_t dtf_pipeline_num_records(const struct dtf_pipeline *p);

/* What open found and decided (the same every epoch). */
struct dtf_pipeline_stats {
	enum dtf_shard_policy policy; /* as resolved: FILE, DATA or OFF */
	int files;                    /* files this rank reads */
	int empty_files;              /* of those, files of 0 bytes */
	int64_t records;              /* records per epoch (this rank) */
	int64_t skipped_records;      /* on_error SKIP: bad records left out
					 per epoch (this rank) */
	int64_t cut_files;            /* files whose rest was left out */
	uint64_t skipped_bytes;       /* bytes left out in those, where the
					 file size is known */
};
void dtf_pipeline_get_stats(const struct dtf_pipeline *p,
			    struct dtf_pipeline_stats *st);

/* On every rank that left records out (on_error SKIP), one INFO line:
 * "epoch E: data.train: N bad records skipped, the rest of M files (B bytes)
 * skipped (data.on_error: skip)", each part only when it is not 0.
 * Nothing when nothing was skipped. */
void dtf_pipeline_log_skipped(const struct dtf_pipeline *p, int epoch);

/* Rewind to the start of `epoch` (0-based) and reseed the shuffle.
 * Errors: only those of dtf_pipeline_next() on the caller's thread when
 * prefetch is 0 (none today); with prefetch, errors surface from next. */
int dtf_pipeline_begin_epoch(struct dtf_pipeline *p, int epoch);

/*
 * Decode up to `batch` examples into dst[f] (one buffer per feature, each
 * batch * dtf_feature_numel(f) elements of the feature's dtype) and their
 * ids into example_ids (batch entries).  *count is the number decoded: less
 * than batch only at the end of the epoch without drop_remainder, 0 when
 * the epoch is over (and on every later call until the next begin_epoch).
 * Errors: DTF_ERR_DATA with file, record index and byte offset; a feature
 * missing or of the wrong type or size names the feature too.  An error is
 * sticky: later calls return it again until the next begin_epoch/restore.
 */
int dtf_pipeline_next(struct dtf_pipeline *p, void *const *dst,
		      uint64_t *example_ids, int *count);

/*
 * Exact position, for checkpoints.  Design: (epoch, examples this rank has
 * taken in the epoch) + replay.  Restoring re-runs the epoch's stages from
 * its start and discards `consumed` examples (decoded, not copied out), so
 * the next batch is exactly the one an uninterrupted pipeline would give,
 * shuffle buffer and interleave state included, without storing them.
 * Replay reads at decode speed (see tests/bench), at most one epoch.
 * Every rank takes the same number of examples per step, so the state is
 * the same on every rank and the chief's copy serves all of them.
 *
 * `fingerprint` hashes what the order depends on besides epoch and
 * position (seed, world size, number of files, shard policy, cycle and
 * block length, shuffle buffer) so a restore under different options is
 * refused rather than silently resumed elsewhere.
 */
struct dtf_pipeline_state {
	int64_t epoch;        /* epoch being read, 0-based */
	int64_t consumed;     /* examples taken from it by this rank */
	uint64_t fingerprint; /* see above */
};

/* Bytes of an encoded state: "DTFPIPE1", then epoch, consumed and
 * fingerprint as little-endian 64-bit integers. */
#define DTF_PIPELINE_STATE_BYTES 32

/* The current position (after the batches returned so far). */
void dtf_pipeline_save(const struct dtf_pipeline *p,
		       struct dtf_pipeline_state *st);

/*
 * Go to a saved position: the next dtf_pipeline_next() returns the batch
 * that followed it (call it instead of begin_epoch for that epoch).
 * Errors: DTF_ERR_CHECKPOINT if the fingerprint differs (message says
 * which settings must match) or the position is past the epoch's records
 * of this rank; errors of reading during the replay come back from the
 * replay (prefetch 0) or from the next dtf_pipeline_next() (prefetch > 0).
 */
int dtf_pipeline_restore(struct dtf_pipeline *p,
			 const struct dtf_pipeline_state *st);

/* Serialize to / from DTF_PIPELINE_STATE_BYTES bytes.  decode errors:
 * DTF_ERR_CHECKPOINT (wrong size or magic). */
void dtf_pipeline_state_encode(const struct dtf_pipeline_state *st,
			       uint8_t out[DTF_PIPELINE_STATE_BYTES]);
int dtf_pipeline_state_decode(const uint8_t *in, size_t n,
			      struct dtf_pipeline_state *st);

/*
 * Leave out of this rank's stream every record whose example id `exclude`
 * says 1 for (before decoding; DATA sharding still counts it), until the
 * filter is replaced; NULL removes it.  For an elastic resume: the records
 * of the epoch that other ranks consumed before a checkpoint.  The filter
 * takes effect at the next begin_epoch or restore; called when nothing has
 * been taken since begin_epoch, the epoch starts over with it at once.
 * With prefetch the filter runs on the prefetch thread (it must be
 * thread-safe against the caller, e.g. read-only data).
 */
void dtf_pipeline_set_exclude(struct dtf_pipeline *p,
			      int (*exclude)(void *ctx, uint64_t id),
			      void *ctx);

/* Path of file `index` of the sorted list (the file part of an example id,
 * id >> 40), or "?" when out of range.  Owned by the pipeline. */
const char *dtf_pipeline_file(const struct dtf_pipeline *p, int index);

/*
 * Byte offset in its file of the record of example `id` (file index id >>
 * 40, record index id & (2^40 - 1)), for a message about an example after
 * it was decoded (a label out of range): the file is read again from its
 * start up to the record, framing only, so it costs a read of that much of
 * the file (for error paths).  The offset is counted as in the pipeline's
 * own messages (in the uncompressed stream of a compressed file).  Safe
 * while the prefetch thread runs (its own reader).  Errors: DTF_ERR_DATA
 * (no such file or record, or the file cannot be read up to it),
 * DTF_ERR_NOMEM.
 */
int dtf_pipeline_record_offset(const struct dtf_pipeline *p, uint64_t id,
			       uint64_t *offset);

/* Stops the prefetch thread; dtf_pipeline_free(NULL) is a no-op. */
void dtf_pipeline_free(struct dtf_pipeline *p);

/*
 * Expand a glob pattern (glob(3)) into a sorted list of paths.  The list and
 * its strings are one allocation: free with dtf_free(*files).  A pattern
 * matching nothing is DTF_ERR_DATA naming the pattern.
 */
int dtf_glob_files(const char *pattern, char ***files, int *nfiles);

#endif
