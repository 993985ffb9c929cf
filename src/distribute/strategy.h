/*
 * strategy.h - tf.distribute strategies on MPI: who trains, how gradients
 * travel, who applies the update.
 *
 * The trainer sees a narrow interface: create the strategy (roles,
 * sub-communicators), set it up for the graph (fusion buckets, buffers),
 * then per step run backward between dtf_strategy_backward_begin() and
 * dtf_strategy_backward_end() and finish with
 * dtf_strategy_finish_step(), which reduces the gradients and the step
 * statistics, checks them for NaN/Inf (one verdict on every rank) and
 * applies the optimizer update wherever the strategy keeps the variables.
 *
 * Strategies (DESIGN.md section 5; dtf-train-job(5) STRATEGIES):
 *  - one_device: one process; more than one rank is a job error.
 *  - mirrored: synchronous replicas on one node (ranks on several nodes are
 *    a job error); multi_worker_mirrored: the same across nodes, optionally
 *    hierarchical (reduce to a leader per node, allreduce among leaders,
 *    broadcast inside the node).  Every replica applies the same update.
 *  - central_storage: gradients are reduced to replica 0, which alone holds
 *    the optimizer state, applies the update and broadcasts the variables.
 *  - parameter_server: ps ranks own the variables, partitioned whole by
 *    size (greedy: largest first onto the least-loaded ps); workers push
 *    gradients and get the variables back with point-to-point messages.
 *    sync: every step's gradients from all workers are summed in worker
 *    order before one update (= synchronous data parallelism).  async:
 *    each push is applied on arrival and answered with the current
 *    variables; a worker more than max_staleness steps ahead of the slowest
 *    worker waits for its answer (stale synchronous parallel).
 *
 * Communication (Horovod / PyTorch DDP): gradients are fused into buckets
 * of at most bucket_mb in the order backward produces them (one bucket
 * holds a whole variable, so a variable larger than the cap is a bucket of
 * its own); with overlap, a bucket's nonblocking reduction starts as soon
 * as its last gradient is written and is progressed (MPI_Test) after every
 * later backward node.  Calls are cut into chunks of at most 16 MB, where
 * Open MPI's shared-memory collectives are fastest (DESIGN.md section 7).
 * With every replica on one node (implementation auto or shared_memory),
 * the gradient vectors live in one shared-memory window and a bucket is
 * reduced by loads and stores between two barriers instead of
 * MPI_Iallreduce (distribute/shm.h), the same bits on every replica.
 * Compression fp16/bf16 sends 16-bit values pre-divided by the number of
 * replicas (so the sum stays in range) with a reduction operator that adds
 * in float32, and multiplies back after.
 *
 * Gradient accumulation: with train.accumulate_steps k, micro-batches
 * 1..k-1 add their gradients into an accumulator; the k-th adds it in as
 * each bucket becomes ready, so one communication serves k micro-batches.
 *
 * The strategy reads no job and applies no optimizer itself: the caller
 * gives it a struct dtf_strategy_opts (dtf_strategy_opts_from_job) and
 * the update as callbacks (struct dtf_update_ops), so distribute/ includes
 * nothing from train/.  The code: strategy.c dispatches to buckets.c
 * (fusion buckets), compress.c (fp16/bf16), shard.c (the shared window
 * and the sharded update) and ps.c (parameter_server);
 * distribute/strategy_impl.h holds what they share.
 *
 * Nothing is allocated per step.  Only distribute/ includes <mpi.h>.
 */
#ifndef DTF_DIST_STRATEGY_H
#define DTF_DIST_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"       /* the enums of the strategy section */
#include "config/tf_config.h"
#include "graph/graph.h"

struct dtf_comm;
struct dtf_strategy;

/*
 * What the strategy reads of the job, filled by the caller
 * (dtf_strategy_opts_from_job does it from a whole job).  Strings are
 * borrowed and must outlive the strategy.
 */
struct dtf_strategy_opts {
	enum dtf_strategy_kind type;
	const char *type_where;     /* "file:line:col" of strategy.type, or "" */
	enum dtf_comm_implementation implementation;
	const char *implementation_where; /* of the implementation, or "" */
	enum dtf_grad_compression compression;
	int hierarchical, overlap;
	double bucket_mb;           /* fusion bucket cap, MB (1e6 B) */
	int sync;                   /* parameter_server: synchronous */
	int64_t max_staleness;      /* parameter_server async */
	int on_cuda;                /* device cuda: no shared memory */
	enum dtf_lr_scaling lr_scaling;
	int64_t lr_warmup_steps;
	int accumulate_steps;       /* train.accumulate_steps, >= 1 */
	double clipnorm;            /* train.clipnorm; > 0: update unsharded */
	enum dtf_on_nonfinite on_nonfinite;
	int keep_slots;             /* checkpoints: central_storage's other
				       replicas keep their optimizer slots */
};

/* The options of job's strategy, train and device sections. */
void dtf_strategy_opts_from_job(const struct dtf_job *job,
				struct dtf_strategy_opts *out);

/* A range of the flat parameter vector: floats [off, off + n). */
struct dtf_update_range {
	size_t off, n;
};

/*
 * The optimizer update as the strategy drives it, filled by the caller
 * (the trainer wraps its optimizer; distribute/ knows no optimizer).
 * Every member takes ctx first.  The strategy owns what
 * dtf_strategy_setup is given: it calls free(ctx) once when done.
 */
struct dtf_update_ops {
	void *ctx;
	/* One update of params with grads (the n floats the update was made
	 * for) at learning rate lr; grads may be changed in place. */
	void (*apply)(void *ctx, float *params, float *grads, double lr);
	/* The same update on the elements of r[0 .. nr) only (disjoint):
	 * each changes exactly as under apply, and the update counts once.
	 * Errors: DTF_ERR_NOMEM. */
	int (*apply_ranges)(void *ctx, float *params, float *grads, double lr,
			    const struct dtf_update_range *r, int nr);
	/* 1 when g (n floats) holds a NaN or an infinity, else 0. */
	int (*nonfinite)(void *ctx, const float *g, size_t n);
	/* Drop the state: this rank applies no update (it stays valid to
	 * call free). */
	void (*release)(void *ctx);
	/* Slot k of the optimizer state (n floats, as apply's vector), NULL
	 * past the last or after release. */
	float *(*slot)(void *ctx, int k);
	/* A second, independent update (a ps rank's share of the
	 * variables) into *out, freed with out->free: of the vector that
	 * concatenates the ranges from[0..nfrom) of apply's vector, each
	 * range treated as this update treats it there (trainable, weight
	 * decay).  Errors: DTF_ERR_NOMEM. */
	int (*part_new)(void *ctx, const struct dtf_update_range *from,
			int nfrom, struct dtf_update_ops *out);
	/* Release ctx and everything it owns; NULL ctx is a no-op. */
	void (*free)(void *ctx);
};

/* The step statistics that travel with the gradients. */
enum { DTF_STAT_LOSS, DTF_STAT_CORRECT, DTF_STAT_COUNT, DTF_NSTATS };

/*
 * Take this rank's role from `cluster` (TF_CONFIG, or dtf_cluster_from_job)
 * and check the strategy against the world: one_device on more than one
 * rank, mirrored across nodes, hierarchical without multi_worker_mirrored
 * are DTF_ERR_CONFIG (the same on every rank).  Then split the world into
 * the replicas (chief and workers), the ps ranks and per-node groups: a
 * collective over `world`.  `world` is borrowed and must outlive *out.
 * on_device: the replicas compute on a GPU (device cuda, or auto with a
 * GPU in sight): no shared-memory window (as device: cuda).
 * Errors: DTF_ERR_CONFIG, DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
int dtf_strategy_new(const struct dtf_job *job, struct dtf_comm *world,
		     int on_device,
		     const struct dtf_cluster *cluster,
		     struct dtf_strategy **out);

/* The same from the options alone: cluster is required (and borrowed for
 * the call only), opts is copied. */
int dtf_strategy_new_opts(const struct dtf_strategy_opts *opts,
			  struct dtf_comm *world,
			  const struct dtf_cluster *cluster,
			  struct dtf_strategy **out);

/* NULL is a no-op.  A worker of a parameter_server strategy that has not
 * called dtf_strategy_end() tells the ps ranks it failed. */
void dtf_strategy_free(struct dtf_strategy *s);

/* This rank's task type (chief, worker, ps, evaluator). */
enum dtf_task_type dtf_strategy_role(const struct dtf_strategy *s);

/* The communicator of the training replicas (chief and workers; replica
 * index = world rank), NULL on ps and evaluator ranks.  Owned by s. */
struct dtf_comm *dtf_strategy_replica_comm(const struct dtf_strategy *s);

/* Number of training replicas (chief and workers). */
int dtf_strategy_num_replicas(const struct dtf_strategy *s);

/* The gradient buckets of the last step (allreduce strategies across
 * replicas; 0 otherwise): how many, and for bucket k (0-based, in launch
 * order) the CLOCK_MONOTONIC seconds it was launched at and its reduction
 * was seen complete at (the first test or wait that found it done, so
 * with overlap an upper bound).  Returns 0, or -1 when k is out of range
 * or the bucket was not timed in the last step. */
int dtf_strategy_num_buckets(const struct dtf_strategy *s);
int dtf_strategy_bucket_span(const struct dtf_strategy *s, int k,
			     double *launched, double *done);

/* The learning rate of update `step` (0-based): `base`, the rate of
 * train.schedule at that step (dtf_schedule_lr), times the number of
 * replicas under train.learning_rate_scaling: linear, the factor reached
 * linearly from 1 over the scaling's warmup steps (Goyal et al. 2017,
 * "gradual warmup"); `base` itself without scaling.  The factor
 * multiplies the whole schedule, as Horovod's LearningRateWarmupCallback
 * and LearningRateScheduleCallback compose. */
double dtf_strategy_learning_rate(const struct dtf_strategy *s, double base,
				  int64_t step);

/*
 * Shared-memory gradients (distribute/shm.h; strategy.communication.implementation
 * auto or shared_memory): 1 when the replicas reduce through one window,
 * so the trainer must take its gradient vector from
 * dtf_strategy_share_grads (mirrored or multi_worker_mirrored, more than
 * one replica, all on this node, no compression, not hierarchical, device
 * not cuda).  The same on every replica; 0 for s == NULL.
 */
int dtf_strategy_wants_shared_grads(const struct dtf_strategy *s);

/*
 * The replica's flat gradient vector of n floats (g->nparams plus the
 * statistics), zeroed, as its segment of a shared-memory window
 * (MPI_Win_allocate_shared); *grads = NULL when the strategy does not
 * share (then the caller allocates), or when the window cannot be had
 * under implementation auto (logged once; MPI_Iallreduce is used).
 * With the sharded update (ZeRO stage 1: no train.clipnorm, no
 * non-trainable variables in g; params != NULL) also *params: the
 * g->nparams variables, zeroed, one copy for all the replicas in the same
 * window (else *params = NULL and the caller allocates its own); replica
 * 0 alone writes them before training (dtf_strategy_writes_params), then
 * dtf_strategy_share_params publishes them.  Both owned by s: valid until
 * dtf_strategy_free, never freed by the caller.  g may be NULL (no
 * sharded update; benchmarks).  A collective over the replicas when
 * dtf_strategy_wants_shared_grads; call it before dtf_strategy_setup,
 * only after the replicas agreed that every one got this far.  Errors:
 * DTF_ERR_MPI (implementation shared_memory and no window),
 * DTF_ERR_NOMEM.
 */
int dtf_strategy_share_grads(struct dtf_strategy *s, const struct dtf_graph *g,
			     size_t n, float **grads, float **params);

/* 1 when this replica writes the initial variables (or restores them):
 * always, except with the one shared copy of the sharded update, which
 * replica 0 writes.  1 for s == NULL. */
int dtf_strategy_writes_params(const struct dtf_strategy *s);

/*
 * Give every replica replica 0's n variables at params before training: a
 * broadcast over comm (the replicas), or with the shared copy of
 * dtf_strategy_share_grads a barrier that orders replica 0's stores
 * before the others' loads (MPI-3.1 section 11.7).  A collective over the
 * replicas.  Errors: DTF_ERR_MPI.
 */
int dtf_strategy_share_params(struct dtf_strategy *s, struct dtf_comm *comm,
			      float *params, size_t n);

/*
 * Prepare a replica (or a ps) for graph g: buckets from g->var_grad, fusion
 * and compression buffers, the accumulator, the ps partition.  params and
 * grads are the replica's flat vectors (g->nparams floats; grads has
 * DTF_NSTATS more floats behind it); upd is its optimizer update, which
 * the strategy drives (on replicas that keep no state, central_storage's
 * non-root replicas and parameter_server workers, upd->release drops it).
 * The pointers are borrowed; *upd is copied and its ctx owned by s from
 * here (freed by dtf_strategy_free, also after an error).
 * Errors: DTF_ERR_NOMEM.
 */
int dtf_strategy_setup(struct dtf_strategy *s, const struct dtf_graph *g,
		       float *params, float *grads,
		       const struct dtf_update_ops *upd);

/* Replace the update given to dtf_strategy_setup by *upd (its ctx owned by
 * s from here; the old one is freed), before the first step: for a
 * backend that applies the update on its own copy of the variables. */
void dtf_strategy_set_update(struct dtf_strategy *s,
			     const struct dtf_update_ops *upd);

/* Human-readable summary of the buckets, for the start-up log. */
void dtf_strategy_describe(const struct dtf_strategy *s, char *buf,
			   size_t size);

/*
 * Around the backend's backward pass (ops/backend.h) of micro-batch
 * `micro` of `nmicro` (train.accumulate_steps) on a replica at learning
 * rate lr:
 *   hook = dtf_strategy_backward_begin(s, micro, nmicro, lr);
 *   backend backward, with dtf_strategy_after_node and s as its per-node
 *     callback when hook is 1 (else none);
 *   dtf_strategy_backward_end(s, micro, nmicro);
 * The last micro-batch starts the communication: with the callback, each
 * bucket as soon as its last gradient is written (overlap); the buckets
 * not started by then start in dtf_strategy_finish_step.  A backend whose
 * backward can fail runs without the callback, so that the replicas agree
 * on its status before any gradient leaves them.  The earlier
 * micro-batches' gradients are added into the strategy's accumulator.
 */
int dtf_strategy_backward_begin(struct dtf_strategy *s, int micro, int nmicro,
				double lr);
void dtf_strategy_after_node(void *s, int node);
void dtf_strategy_backward_end(struct dtf_strategy *s, int micro, int nmicro);

/*
 * Finish update `step`: complete the reduction, sum `stats` (DTF_NSTATS
 * floats, this replica's; replaced by the sums over replicas, or kept local
 * for asynchronous parameter_server), check for non-finite gradients and
 * apply the update at learning rate lr.  *applied is 0 when the update was
 * skipped (train.on_nonfinite: skip).  Seconds spent waiting on
 * communication and in the optimizer are added to *comm_s and *opt_s.
 * Errors: DTF_ERR_RUNTIME (non-finite gradients with on_nonfinite: fail;
 * the same on every replica), DTF_ERR_REMOTE (a worker of a
 * parameter_server job failed), DTF_ERR_MPI.
 */
int dtf_strategy_finish_step(struct dtf_strategy *s, float *stats, double lr,
			     int64_t step, int *applied, double *comm_s,
			     double *opt_s);

/* Bring this replica's variables up to date before evaluation or export:
 * for asynchronous parameter_server, wait for every worker to get here and
 * pull the variables from the ps ranks; nothing otherwise.  A collective
 * over the replicas.  Errors: DTF_ERR_MPI, DTF_ERR_REMOTE. */
int dtf_strategy_sync_params(struct dtf_strategy *s);

/* Make this replica's optimizer slots whole before a checkpoint saves
 * them: with the sharded update (below) each replica keeps only its own
 * ranges of the slots current, and this brings the others' in through the
 * shared window; nothing otherwise.  A collective over the replicas.
 * Errors: DTF_ERR_MPI.
 *
 * The sharded update (ZeRO stage 1, Rajbhandari et al., SC 2020): where
 * the gradients are reduced through shared memory, train.clipnorm is
 * unset and the graph has no non-trainable variables, the variables are
 * one copy in the window (dtf_strategy_share_grads); replica r sums slice
 * r of every bucket and applies the optimizer to those floats of the copy
 * only, and a barrier ends the update; each element's update is the same
 * operations on the same inputs as an unsharded one, so the variables are
 * bit-identical. */
int dtf_strategy_sync_slots(struct dtf_strategy *s);

/* A ps rank: serve the workers until every one has finished or one has
 * failed.  params holds the initial variables (the same on every rank).
 * Errors: the failing worker's kind of error (exit status), DTF_ERR_MPI. */
int dtf_strategy_serve(struct dtf_strategy *s);

/* A worker is done (rc 0) or failed (rc < 0): tell the ps ranks.  Other
 * strategies: nothing. */
void dtf_strategy_end(struct dtf_strategy *s, int rc);

/* Updates skipped so far for non-finite gradients. */
int64_t dtf_strategy_skipped(const struct dtf_strategy *s);

/* 1 when the error dtf_strategy_finish_step returned is one every replica
 * returned alike, from a verdict they share (non-finite gradients with
 * train.on_nonfinite: fail), so that one rank says it for all. */
int dtf_strategy_error_is_agreed(const struct dtf_strategy *s);

/*
 * Blocking sum over the ranks of c of n floats in place, sent as 16-bit
 * values (compression fp16 or bf16; none is a plain float32 allreduce):
 * each rank sends buf / size, the 16-bit values are added in float32 by a
 * custom reduction operator, the result is multiplied by size.  scratch
 * holds n 16-bit values.  For tests and benchmarks.  Errors: DTF_ERR_MPI.
 */
int dtf_strategy_allreduce_compressed(struct dtf_comm *c, float *buf,
				      uint16_t *scratch, size_t n,
				      enum dtf_grad_compression compression);

/*
 * Sum n floats of buf over the replicas through this strategy's collective
 * path, blocking, in the chunks training uses: flat allreduce,
 * hierarchical reduce/allreduce/broadcast, central_storage reduce to
 * replica 0 then broadcast (what the update costs there), compression as
 * configured; parameter_server: one push and one pull through ps 0 (every
 * rank calls it; the ps answers each worker in turn); shared memory
 * (after dtf_strategy_share_grads): buf must lie in the vector it gave,
 * and a closing barrier stands for the statistics' allreduce of a step.
 * scratch: n 16-bit values for compression.  For benchmarks.
 * Errors: DTF_ERR_MPI, DTF_ERR_USAGE (buf outside the shared vector).
 */
int dtf_strategy_reduce_buffer(struct dtf_strategy *s, float *buf,
			       uint16_t *scratch, size_t n);

/* Round to nearest even: float32 <-> IEEE binary16 and bfloat16. */
uint16_t dtf_f32_to_f16(float f);
float dtf_f16_to_f32(uint16_t h);
uint16_t dtf_f32_to_bf16(float f);
float dtf_bf16_to_f32(uint16_t h);

#endif
