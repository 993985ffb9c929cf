/*
 * train_priv.h - inside train/ only: one replica's graph, buffers and
 * backend, and the phases of training that `dtf-train evaluate` and
 * `predict` (infer.c) run the same way as the training loop (train.c),
 * so there is one copy of each: building and planning the graph, opening
 * the backend and a pipeline, checking labels, the evaluation loop and
 * the status agreement between ranks.
 */
#ifndef DTF_TRAIN_TRAIN_PRIV_H
#define DTF_TRAIN_TRAIN_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "graph/graph.h"
#include "mem/plan.h"
#include "train/optimizer.h"
#include "train/train.h"

struct dtf_backend;
struct dtf_comm;
struct dtf_fault;
struct dtf_pipeline;
struct dtf_pool;

#define NSTATS 3 /* loss sum, correct, examples: behind the gradients */

/* Everything one replica holds, set up once. */
struct replica {
	struct dtf_graph g;
	struct dtf_plan plan;
	int *layer_out;
	float *params;   /* g.nparams */
	float *grads;    /* g.nparams + NSTATS */
	int grads_shared; /* grads is the strategy's (shared memory) */
	int params_shared; /* params too: one copy for every replica */
	void **feed;     /* per feature: destination buffer of a batch */
	void *scratch;   /* for features the graph does not use */
	float *own_stats; /* this replica's non-trainable variables, kept
			     while a checkpoint saves their mean (or NULL) */
	uint64_t *ids;   /* batch example ids */
	struct dtf_optimizer opt;
	struct dtf_backend *be;     /* where the step runs (ops/backend.h) */
	size_t *feature_bytes;      /* per feature, bytes of one example */
	struct dtf_pool *pool;      /* worker threads of the fast kernels */
	int use_fast;
};

/* Sums over the evaluation data (this rank's, or all ranks' after the
 * allreduce of dtf_train_evaluate). */
struct eval_totals {
	double loss_sum, correct, count, top_k;
	int has_top_k; /* top_k was counted (the backend counts top-k) */
};

/* Zero *r and lower the job's model at per-replica batch `batch`, with
 * its backward pass when `with_backward`.  Errors: graph building's
 * (DTF_ERR_GRAPH, DTF_ERR_CONFIG), DTF_ERR_NOMEM.  Release with
 * dtf_replica_deinit (also after a failure). */
int dtf_replica_build(const struct dtf_job *job, int batch, int with_backward,
		      struct replica *r);

/* The parameter, gradient and feed buffers, the memory plan and the
 * optimizer's slots of a built replica (params and grads unless the
 * strategy set them).  Errors: DTF_ERR_NOMEM, planning's. */
int dtf_replica_setup_buffers(const struct dtf_job *job, struct replica *r);

/* r->be prepared for the planned graph: the job's device where
 * `device_ok`, else the CPU.  Errors: the backends' open and prepare. */
int dtf_replica_open_backend(const struct dtf_job *job, struct dtf_comm *comm,
			     struct replica *r, int device_ok);

void dtf_replica_deinit(struct replica *r);

/* The per-replica batch of train.batch_size (global) or
 * per_replica_batch_size over `world` replicas.  Errors: DTF_ERR_CONFIG
 * (not divisible, too large), naming the key. */
int dtf_train_per_replica_batch(const struct dtf_job *job, int world,
				int *out);

/*
 * A pipeline over the files matching `pattern`, sharded for `rank` of
 * `world` at per-replica batch `batch`; `training`: the job's shuffle,
 * drop_remainder and augmentation (else none: every record once, the last
 * batch short).  `label` names the data in messages: "data.train",
 * "data.eval" (as "data.eval.files: ...") or an option ("--data"); a
 * string literal.  Errors: DTF_ERR_DATA (no file matches, unreadable),
 * those of dtf_pipeline_open.
 */
int dtf_train_open_pipeline(const struct dtf_job *job, const char *pattern,
			    const char *label, int rank, int world,
			    int batch, int training,
			    struct dtf_pipeline **out);

/* Every label of the first `count` examples of the batch just loaded
 * inside the classes of the loss (sparse labels): else DTF_ERR_DATA
 * naming file, record index and byte offset. */
int dtf_train_check_labels(const struct replica *r,
			   const struct dtf_pipeline *p, int count,
			   const char *logits_layer);

/* Read the pipeline once through (framing, decoding, labels), so bad
 * data stops a run before its first step.  Errors: as
 * dtf_pipeline_next and dtf_train_check_labels. */
int dtf_train_check_eval_data(const struct dtf_job *job, struct replica *r,
			      struct dtf_pipeline *eval);

/*
 * One epoch of `eval` through r's backend in inference (dropout off,
 * batch_norm's moving statistics), every record once, then the sums over
 * the ranks of comm (NULL: this process alone) into *tot.  A collective:
 * every rank agrees on the status first.  `step` is for messages.  Each
 * batch marks progress on `fault` (NULL: none), so the watchdog
 * (fault.timeout_seconds) measures one batch, not the whole evaluation.
 * Errors: the data's, the backend's, DTF_ERR_REMOTE (another rank failed),
 * DTF_ERR_MPI.
 */
int dtf_train_evaluate(const struct dtf_job *job, struct dtf_comm *comm,
		       struct replica *r, struct dtf_pipeline *eval,
		       int64_t step, struct eval_totals *tot,
		       struct dtf_train_result *result, struct dtf_fault *fault);

/* dtf_pipeline_next(arg, ...) as the backends' read function
 * (ops/backend.h dtf_backend_read_fn); arg is the pipeline. */
int dtf_train_read_batch(void *arg, void *const *feed, uint64_t *ids,
			 int *count);

/* Agree on rc over comm (NULL: returns rc): 0 when every rank succeeded;
 * a rank that failed returns its rc, the others an error of the failing
 * rank's kind ("stopping: rank R failed WHEN step S").  A collective. */
int dtf_train_agree(struct dtf_comm *comm, int rc, const char *when,
		    int64_t step, struct dtf_train_result *result);

#endif
