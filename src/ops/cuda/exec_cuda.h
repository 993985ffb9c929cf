/*
 * exec_cuda.h - run a planned graph on one GPU (the CUDA twin of
 * ops/cpu/exec.h, which stays the reference).
 *
 * The host plan (mem/plan.h) decides where every node lives; the executor
 * mirrors it on the device: one device allocation holds the arena at the
 * same offsets, the parameter vector, the gradient vector (with the step
 * statistics behind it, as on the host), the optimizer slots and two sets
 * of input buffers.  Node pointers are translated once: host arena + off ->
 * device arena + off, params + off -> device params + off, and so on, so a
 * planner that reuses buffers is followed without change.  Inputs come
 * through two pinned host staging sets: the pipeline decodes batch k+1 into
 * one while step k runs on the other, and its copy runs on the copy stream,
 * overlapping the step.  Planning picks every cuDNN algorithm and sizes the
 * one workspace; a step allocates nothing.
 *
 * Per step (set = the staging set of this batch):
 *   dtf_cuda_exec_upload(set)  -> H2D of the batch on the copy stream
 *   dtf_cuda_exec_run(set, ..) -> forward [+ backward] on the compute stream
 *                                 after that copy, then the statistics
 *   dtf_cuda_exec_download_grads / wait
 *   (allreduce, host-staged or on device pointers)
 *   dtf_cuda_exec_upload_grads + dtf_cuda_exec_apply (fused update)
 */
#ifndef DTF_OPS_CUDA_EXEC_CUDA_H
#define DTF_OPS_CUDA_EXEC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/exec.h"
#include "graph/graph.h"
#include "ops/cuda/cuda.h"

struct dtf_cuda_exec;

struct dtf_cuda_exec_opts {
	const struct dtf_graph *g;  /* planned with arena, params, grads */
	const char *arena;          /* the host plan's arena (mem/plan.h) */
	size_t arena_bytes;
	float *params;              /* host, g->nparams */
	float *grads;               /* host, g->nparams + nstats; pinned
				       (registered) here for async copies */
	size_t nstats;              /* loss sum, correct, examples */
	const size_t *feature_bytes; /* per feature of the job, bytes of one
					example; every one is staged */
	int nfeatures;
	size_t optimizer_slots;     /* floats of optimizer state (0, n, 2n) */
};

/* Statistics the run writes. */
enum dtf_cuda_stats {
	DTF_CUDA_STATS_STEP = 0, /* into the gradient vector's tail */
	DTF_CUDA_STATS_EVAL = 1, /* added to the evaluation totals */
};

/*
 * Mirror the planned graph on ctx's device.  Every op must be on the cuda
 * backend (dtf_cuda_op_missing) and every conv2d have a cuDNN plan;
 * otherwise DTF_ERR_CONFIG naming the node and the op (the caller may fall
 * back to the CPU).
 * Errors: DTF_ERR_CONFIG, DTF_ERR_NOMEM (device or pinned memory),
 * DTF_ERR_RUNTIME.
 */
int dtf_cuda_exec_new(struct dtf_cuda_ctx *ctx,
		      const struct dtf_cuda_exec_opts *opts,
		      struct dtf_cuda_exec **out);
/* Why op `op` is not on the cuda backend (it has no CUDA kernel), or NULL
 * when it is. */
const char *dtf_cuda_op_missing(enum dtf_op op);

/* The ops of `g` that are not on the cuda backend, each named once,
 * ", "-separated, into buf (truncated to size); returns how many.  With
 * any, dtf_cuda_exec_new fails with DTF_ERR_CONFIG (device: auto then
 * trains on the CPU). */
int dtf_cuda_graph_missing(const struct dtf_graph *g, char *buf, size_t size);

/* NULL is a no-op.  Unregisters the host gradient vector. */
void dtf_cuda_exec_free(struct dtf_cuda_exec *ex);

/* Device bytes held (arena, vectors, inputs, scratch). */
size_t dtf_cuda_exec_device_bytes(const struct dtf_cuda_exec *ex);

/* Staging set `set` (0 or 1): per-feature pinned host buffers (batch
 * examples each) and example ids, for dtf_pipeline_next(). */
void *const *dtf_cuda_exec_feed(struct dtf_cuda_exec *ex, int set);
uint64_t *dtf_cuda_exec_ids(struct dtf_cuda_exec *ex, int set);

/* Block until staging set `set` may be overwritten (its last upload is
 * done).  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_staging_ready(struct dtf_cuda_exec *ex, int set);

/* Copy staging set `set` to the device on the copy stream (after the step
 * that last read its device buffers). */
void dtf_cuda_exec_upload(struct dtf_cuda_exec *ex, int set);

/*
 * Run the forward pass (to the loss), and the backward pass when
 * `backward`, on input set `set`, then the statistics of `stats`.  ctx
 * gives training, step, valid, loss_scale and dropout_key (its workspace
 * and example_ids are the CPU's and are not used).  Asynchronous.
 */
void dtf_cuda_exec_run(struct dtf_cuda_exec *ex, int set,
		       const struct dtf_exec_ctx *ctx, int backward,
		       enum dtf_cuda_stats stats);

/* Copy the gradient vector (nparams floats) to the host vector given at
 * creation (asynchronous, compute stream). */
void dtf_cuda_exec_download_grads(struct dtf_cuda_exec *ex);
/* Copy the host gradient vector (nparams floats; summed over the replicas
 * by the strategy) to the device (asynchronous, compute stream). */
void dtf_cuda_exec_upload_grads(struct dtf_cuda_exec *ex);
/* Copy the step's statistics (nstats floats behind the device gradients)
 * to dst, host memory that stays valid until the next wait (asynchronous,
 * compute stream). */
void dtf_cuda_exec_download_stats(struct dtf_cuda_exec *ex, float *dst);

/* Wait for all queued work; the first failure since the last wait.
 * Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_wait(struct dtf_cuda_exec *ex);

/* One optimizer update on the device (train/optimizer.h's formulas; u's
 * iterations count this update, as dtf_optimizer_apply's do after it). */
struct dtf_backend_update;
void dtf_cuda_exec_apply(struct dtf_cuda_exec *ex,
			 const struct dtf_backend_update *u);

/* Parameters between the host vector given at creation and the device
 * (synchronous).  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_upload_params(struct dtf_cuda_exec *ex);
int dtf_cuda_exec_download_params(struct dtf_cuda_exec *ex);

/* The optimizer slots (optimizer_slots floats, in train/optimizer.h's
 * layout: slot k at k * nparams, Adam's m then v) between host memory and
 * the device (synchronous), for checkpoints; nothing when there are none.
 * Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_upload_slots(struct dtf_cuda_exec *ex, const float *slots);
int dtf_cuda_exec_download_slots(struct dtf_cuda_exec *ex, float *slots);

/* Evaluation totals {loss sum, correct} since the last call (synchronous;
 * resets them).  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_eval_totals(struct dtf_cuda_exec *ex, double out[2]);

/* Copy a node's output (forward values) to host memory `dst` (numel * 4
 * bytes); for tests.  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_exec_read_node(struct dtf_cuda_exec *ex, int node, void *dst);

#endif
