/*
 * checkpoint.h - versioned single-file checkpoints, written atomically by
 * the chief from a background thread, and resume from the newest one that
 * verifies (DESIGN.md section 6; the format is documented in
 * dtf-train-job(5), CHECKPOINTS).
 *
 * File format, version 1, all integers little-endian:
 *
 *   offset size  field
 *   0      8     magic "DTFCKPT\0"
 *   8      4     format version (1)
 *   12     4     header bytes H (everything up to and including the
 *                header CRC)
 *   16     8     file bytes (the whole file; a shorter file is truncated)
 *   24     8     step: global training steps completed (the learning-rate
 *                schedule's step and the dropout RNG counter)
 *   32     8     epoch: 0-based epoch in progress (the shuffle RNG counter)
 *   40     8     step in epoch: batches of that epoch consumed
 *   48     8     job hash: CRC-32C of the job file's bytes
 *   56     4     world size (ranks) at save time
 *   60     4     per-replica batch at save time
 *   64     8     global batch
 *   72     8     seed
 *   80     4     tensor count T
 *   84     4     earlier segments of the epoch (elastic resume, below)
 *   88     ...   T table entries: u16 name length L, L bytes of name (no
 *                NUL), u8 dtype (1 float32, 2 int64, 3 uint8), u8 rank R,
 *                u16 reserved, R x u64 dimensions, u64 data offset,
 *                u64 data bytes, u32 CRC-32C of the data
 *   H-4    4     CRC-32C of bytes [0, H-4)
 *   ...          tensor data, each at a 64-byte aligned offset
 *
 * Tensors: every variable by its graph node name (trainable or not, e.g.
 * batch-norm moving statistics), optimizer slots "optimizer/m/<var>",
 * "optimizer/v/<var>" (Adam) or "optimizer/momentum/<var>" (SGD),
 * "optimizer/iterations" (int64 scalar), "global_step" (int64 scalar),
 * "rng/state" (int64 [3]: seed, step, epoch: the generator is counter-based,
 * so these counters are its whole state), "pipeline/position" (int64
 * [5]: epoch, step in epoch, examples of the epoch consumed over all ranks,
 * world size, per-replica batch) and "pipeline/segments" (int64 [8, 3]:
 * world size, per-replica batch and steps of each earlier part of the
 * epoch run on another world size; the header says how many rows count).
 * Nothing depends on the world size except the recorded position, which
 * resume re-shards (elastic.h).
 *
 * Files in checkpoint.dir: "ckpt-<step>.dtf", written as
 * "ckpt-<step>.dtf.tmp", fsync'd, renamed, and the directory fsync'd; then
 * the index "checkpoint" (TensorFlow's text format:
 * model_checkpoint_path: "ckpt-40.dtf", then one all_model_checkpoint_paths
 * line per kept file) the same way; then checkpoints beyond the newest
 * `keep` are deleted.  A crash at any moment leaves every complete file
 * intact.  Only the chief writes into the directory, and only one run at a
 * time: it holds "checkpoint.lock" (core/lock.h) from start-up to its end.
 * Nothing is deleted that the run did not write (a resumed run continues
 * the files it resumed from), except by an explicit
 * --overwrite-checkpoints at start-up (dtf_checkpoint_dir_open).
 */
#ifndef DTF_TRAIN_CHECKPOINT_H
#define DTF_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"

struct dtf_comm;
struct dtf_fault;
struct dtf_graph;
struct dtf_optimizer;

#define DTF_CKPT_VERSION 1
#define DTF_CKPT_NAME_MAX 255

enum dtf_ckpt_dtype { DTF_CKPT_F32 = 1, DTF_CKPT_I64 = 2, DTF_CKPT_U8 = 3 };

#define DTF_CKPT_MAX_SEGMENTS 8

/* Part of an epoch run on one world size. */
struct dtf_ckpt_segment {
	int64_t world, per_replica_batch, steps;
};

/* Where training stands; saved in the header, restored on resume. */
struct dtf_ckpt_position {
	int64_t step;          /* global steps completed */
	int64_t epoch;         /* 0-based epoch in progress */
	int64_t step_in_epoch; /* batches of that epoch consumed, per rank */
	int64_t global_batch;
	int32_t world;             /* ranks at save time */
	int32_t per_replica_batch; /* at save time */
	uint64_t seed;
	uint64_t job_hash;
	/* Earlier parts of this epoch that ran on other world sizes or
	 * batches (elastic resume), oldest first; their steps are included
	 * in step_in_epoch, the rest ran with (world, per_replica_batch). */
	int32_t nprev;
	struct dtf_ckpt_segment prev[DTF_CKPT_MAX_SEGMENTS];
};

struct dtf_ckpt_tensor {
	char name[DTF_CKPT_NAME_MAX + 1];
	int dtype; /* enum dtf_ckpt_dtype */
	int rank;
	int64_t dims[8];
	uint64_t offset, nbytes; /* into the file */
	uint32_t crc;            /* CRC-32C of the data */
};

/* A checkpoint read into memory and verified. */
struct dtf_ckpt_file {
	uint8_t *data; /* the whole file */
	size_t size;
	uint32_t version;
	struct dtf_ckpt_position pos;
	struct dtf_ckpt_tensor *tensors;
	int ntensors;
};

/*
 * Read `path` whole and verify it: magic, version, size (a truncated file
 * says "truncated: N of M bytes"), header CRC, table bounds, every tensor's
 * CRC.  Errors: DTF_ERR_CHECKPOINT with the path and what failed,
 * DTF_ERR_NOMEM.  On success free with dtf_ckpt_file_deinit.
 */
int dtf_ckpt_file_read(const char *path, struct dtf_ckpt_file *out);
void dtf_ckpt_file_deinit(struct dtf_ckpt_file *f);

/*
 * Read and verify the checkpoint `path` names, as dtf_ckpt_file_read: the
 * file itself, or in a directory the newest ckpt-<step>.dtf that verifies
 * (each newer one that does not is a warning naming it, and the previous
 * is tried), as `dtf-train evaluate` and a resume choose it; the file read
 * is written to used[used_size].  Errors: DTF_ERR_CHECKPOINT (a missing
 * path, a directory that cannot be listed, holds no ckpt-<step>.dtf or
 * none that verifies; a file's own errors), DTF_ERR_NOMEM.
 */
int dtf_ckpt_file_read_newest(const char *path, struct dtf_ckpt_file *out,
			      char *used, size_t used_size);
const struct dtf_ckpt_tensor *dtf_ckpt_file_find(const struct dtf_ckpt_file *f,
						 const char *name);

/* How a run starts with the files already in checkpoint.dir. */
enum dtf_ckpt_start {
	DTF_CKPT_START_FRESH,     /* none may be there (a new run) */
	DTF_CKPT_START_RESUME,    /* resume from them (--resume) */
	DTF_CKPT_START_OVERWRITE, /* delete them (--overwrite-checkpoints) */
};

/*
 * The chief, at start-up, before any collective (the caller agrees on the
 * status with every rank): make checkpoint.dir `dir` (mkdir -p), lock it
 * for the life of the run (<dir>/checkpoint.lock, core/lock.h; *lock_fd
 * holds it, close it after the last save), and prove a checkpoint can be
 * written there by creating, writing, fsyncing and removing
 * <dir>/checkpoint.probe.tmp.  Then, by `start`: FRESH refuses a
 * directory holding checkpoints (ckpt-<step>.dtf) of an earlier run;
 * RESUME leaves them to dtf_checkpointer_restore; OVERWRITE deletes the
 * index, every ckpt-<step>.dtf and its .tmp and .corrupt files (the
 * earlier run is superseded; nothing else in the directory is touched)
 * and says what it deleted.  *lock_fd is -1 on error.
 * Errors: DTF_ERR_CHECKPOINT: "checkpoint.dir DIR is not writable: FILE:
 * CALL: REASON", "checkpoint.dir DIR: another run is using it", "... holds
 * N checkpoint(s) of an earlier run, steps A to B" with a HINT naming
 * --resume and --overwrite-checkpoints, or the directory cannot be made.
 */
int dtf_checkpoint_dir_open(const char *dir, enum dtf_ckpt_start start,
			    int *lock_fd);

struct dtf_checkpointer;

/*
 * Set up checkpoints of the model `g` with parameter vector `params`
 * (g->nparams floats) and optimizer `opt` (slots and iterations), both
 * owned by the caller and alive until dtf_checkpointer_free.  On the chief
 * (`chief` != 0) this creates checkpoint.dir (one level) and allocates the
 * staging buffer, one whole file image, so saving allocates nothing.
 * `fault` (may be NULL) injects kill-in-checkpoint-write.  A reader that
 * only loads named files (not the chief) may have no checkpoint.dir.
 * Errors: DTF_ERR_CHECKPOINT (directory), DTF_ERR_NOMEM.
 */
int dtf_checkpointer_new(const struct dtf_job *job, const struct dtf_graph *g,
			 float *params, struct dtf_optimizer *opt, int chief,
			 struct dtf_fault *fault, struct dtf_checkpointer **out);
void dtf_checkpointer_free(struct dtf_checkpointer *ck);

/* Bytes of one checkpoint file. */
size_t dtf_checkpointer_file_bytes(const struct dtf_checkpointer *ck);

/*
 * Chief: wait for a write still in flight, copy the state into the staging
 * buffer (the only time training waits), and write it from a background
 * thread.  Others: nothing.  Errors: those of the previous write
 * (DTF_ERR_CHECKPOINT naming the file and the failing call).
 */
int dtf_checkpointer_save(struct dtf_checkpointer *ck,
			  const struct dtf_ckpt_position *pos);

/* Chief: the status of a finished background write, without waiting (0
 * while it runs); logs the saved file once.  Others: 0. */
int dtf_checkpointer_poll(struct dtf_checkpointer *ck);

/* Chief: wait for the write in flight and return its status.  Others: 0. */
int dtf_checkpointer_wait(struct dtf_checkpointer *ck);

/* Chief: 1 when checkpoint.every_seconds have passed since the last save
 * (or since training started).  Others: 0. */
int dtf_checkpointer_time_due(const struct dtf_checkpointer *ck);

/* The path of the newest file saved or restored ("" if none). */
const char *dtf_checkpointer_path(const struct dtf_checkpointer *ck);

/*
 * Chief: find the newest checkpoint in checkpoint.dir that verifies and
 * load it into params and the optimizer; *found = 1 and *pos filled.  A
 * newest file that fails verification is reported (a warning naming the
 * file and what failed), renamed to "<name>.corrupt", and the previous one
 * is tried.  No checkpoint file at all: *found = 0 (a fresh start).
 * Errors: DTF_ERR_CHECKPOINT when files exist but none verifies (unless
 * `allow_fresh`: then a warning and *found = 0), or when the model differs
 * from the checkpoint's (the message lists the differences).
 */
int dtf_checkpointer_restore(struct dtf_checkpointer *ck, int allow_fresh,
			     struct dtf_ckpt_position *pos, int *found);

/*
 * Read `path` (a checkpoint file), verify it and load it into params and
 * the optimizer as restore does; *pos filled.  For the evaluator task,
 * which loads each new checkpoint the chief writes (train/evaluator.h);
 * nothing in the directory is changed.  *verified = 1 when the file was
 * read and verified, so an error is then the model's mismatch (0: it is
 * gone, e.g. deleted by checkpoint.keep, or does not verify).
 * Errors: DTF_ERR_CHECKPOINT, DTF_ERR_NOMEM.
 */
int dtf_checkpointer_load(struct dtf_checkpointer *ck, const char *path,
			  struct dtf_ckpt_position *pos, int *verified);

/*
 * Load the newest checkpoint file of `dir` that verifies, as restore
 * does but changing nothing in the directory (one that fails is a
 * warning naming it and what failed; the next older one is tried): for
 * `dtf-train evaluate` and `predict`, which may run while a training
 * writes there.  The path loaded is dtf_checkpointer_path's.
 * Errors: DTF_ERR_CHECKPOINT naming `dir` (no checkpoint there, none
 * verifies, cannot be listed) or the file (the model's mismatch),
 * DTF_ERR_NOMEM.
 */
int dtf_checkpointer_load_newest(struct dtf_checkpointer *ck, const char *dir,
				 struct dtf_ckpt_position *pos);

/*
 * The step of the newest complete checkpoint in `dir`, as its index file
 * "checkpoint" names it (model_checkpoint_path, TensorFlow's
 * tf.train.latest_checkpoint); -1 when there is no index yet.  The index
 * is replaced atomically after the file it names is complete, so it never
 * names a file being written.  Errors: DTF_ERR_CHECKPOINT (unreadable or
 * malformed index).
 */
int dtf_checkpoint_latest(const char *dir, int64_t *step);

/*
 * Collective: broadcast *found, *pos, the parameters and the optimizer
 * state from rank 0 to every rank.  Errors: DTF_ERR_MPI.
 */
int dtf_checkpointer_share(struct dtf_checkpointer *ck, struct dtf_comm *comm,
			   struct dtf_ckpt_position *pos, int *found);

/* CRC-32C of the job file's bytes (0 if unreadable): the job hash. */
uint64_t dtf_checkpoint_job_hash(const char *path);

#endif
