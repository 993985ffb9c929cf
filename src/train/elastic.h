/*
 * elastic.h - resume an epoch on a different number of ranks (or another
 * per-replica batch) without repeating or skipping its records.
 *
 * A checkpoint records where the epoch stands as segments: each part of
 * the epoch run with W ranks at per-replica batch b for s steps (more than
 * one when an epoch was itself resumed elastically; at most
 * DTF_CKPT_MAX_SEGMENTS).  The record order of a rank is a pure function of
 * (files, rank, world, seed, epoch) and the records left out before it
 * (pipeline.h), so the set of records consumed so far is computed exactly
 * by replaying each earlier rank's pipeline for its steps, segment by
 * segment, on every rank (all ranks compute the same set; it costs one
 * decode of the records consumed, per rank).  The new ranks then read the
 * epoch with that set left out.
 *
 * Guarantee: within the epoch, no record consumed before the checkpoint is
 * read again, and every other record of the epoch is read unless it falls
 * in the end-of-epoch remainder that every epoch drops (the new shards can
 * be uneven; all ranks run min over ranks of remaining / per-replica batch
 * steps, as at the start of any epoch).  Later epochs are those of a run
 * started on the new world size.  Bitwise equality with an uninterrupted
 * run is not promised (the batches differ); the data is the same.
 */
#ifndef DTF_TRAIN_ELASTIC_H
#define DTF_TRAIN_ELASTIC_H

#include <stdint.h>

#include "config/job.h"
#include "train/checkpoint.h"

struct dtf_pipeline;
struct dtf_elastic;

/* 1 when `pos` (from a checkpoint) cannot be resumed by skipping batches on
 * `world` ranks at per-replica batch `batch`. */
int dtf_elastic_needed(const struct dtf_ckpt_position *pos, int world,
		       int batch);

/*
 * Replay the segments of `pos` (the last one is (pos->world,
 * pos->per_replica_batch, the steps not in pos->prev)) and collect the ids
 * of the records consumed.  Errors: DTF_ERR_CHECKPOINT (a bad segment
 * table), DTF_ERR_DATA (as the pipeline), DTF_ERR_NOMEM.
 */
int dtf_elastic_new(const struct dtf_job *job,
		    const struct dtf_ckpt_position *pos,
		    struct dtf_elastic **out);
void dtf_elastic_free(struct dtf_elastic *el);

/* Records consumed in the epoch before the checkpoint, over all ranks. */
int64_t dtf_elastic_consumed(const struct dtf_elastic *el);

/*
 * Start epoch pos->epoch on `p` with the consumed records left out, and
 * count the records this rank has left in it by reading them (into the
 * batch buffers dst/ids, as dtf_pipeline_next), then start it again.  The
 * filter stays on `p` until dtf_pipeline_set_exclude(p, NULL, NULL).
 * Errors: as dtf_pipeline_next.
 */
int dtf_elastic_start_epoch(struct dtf_elastic *el, struct dtf_pipeline *p,
			    int epoch, void *const *dst, uint64_t *ids,
			    int64_t *remaining);

#endif
