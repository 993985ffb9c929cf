/*
 * backend.h - the backend interface: where one replica's step runs (the
 * CPU or one GPU), as function pointers plus an opaque context.
 *
 * After ggml's ggml_backend_i: the training loop (train/train.c) holds a
 * `struct dtf_backend *` and calls only these members, so a device
 * difference is a member, never an `if (gpu)` in the loop.  Per step:
 *
 *   load      the next batch into the graph's input nodes (the loop's read
 *             function fills the buffers the backend names);
 *   forward   the forward nodes (training: the CUDA backend queues forward
 *             and backward together, as one graph on its stream);
 *   prefetch  optional: read the next batch while the device works;
 *   backward  the backward nodes, calling after(arg, node) once each node's
 *             result is written: where a distribution strategy starts the
 *             allreduce of a bucket whose last gradient is ready;
 *   step_stats the step's loss sum, correct count and examples;
 *   apply     optional: the optimizer update on the backend's own copy of
 *             the variables, with the gradients the distribution strategy
 *             summed (distribute/strategy.h reduces, checks and calls the
 *             update; train/optimizer_ops.h makes this member its update);
 *             NULL: the host vectors are the backend's, and the strategy
 *             applies the update to them.
 * The gradients always end in the host vector bg->grads, where the
 * strategy's buckets take them: there is one gradient reduction, the
 * strategy's, whatever the backend.
 * Variables and optimizer slots live where the backend keeps them; upload
 * and download move them to and from the host copies a checkpoint, an
 * export or an evaluation reads.  Evaluation runs load + forward in
 * inference mode per batch and reads eval_totals once at the end.
 *
 * Nothing here allocates per step.  The interface takes no job, no
 * pipeline and no communicator: the caller passes what it needs as small
 * structs and callbacks, so ops/ includes nothing from config/, data/,
 * distribute/ or train/.
 */
#ifndef DTF_OPS_BACKEND_H
#define DTF_OPS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/exec.h"
#include "graph/graph.h"

struct dtf_plan;
struct dtf_pool;

/* Fill the per-feature buffers feed[f] (batch examples each) and ids
 * (batch entries) with the next batch; *count examples were read (0: the
 * data is done).  dtf_pipeline_next's contract; returns 0 or -DTF_ERR_*. */
typedef int (*dtf_backend_read_fn)(void *arg, void *const *feed,
				   uint64_t *ids, int *count);
/* Called after backward node `node` has run. */
typedef void (*dtf_backend_node_fn)(void *arg, int node);
/* What prepare needs of a planned graph (mem/plan.h).  Borrowed: they
 * outlive the backend. */
struct dtf_backend_graph {
	struct dtf_graph *g;        /* planned; the CUDA backend points its
				       input nodes at its staging buffers */
	const char *arena;          /* the plan's arena, arena_bytes bytes */
	size_t arena_bytes;
	float *params;              /* host, g->nparams */
	float *grads;               /* host, g->nparams + nstats */
	size_t nstats;              /* floats behind the gradients: loss sum,
				       correct, examples */
	void *const *feed;          /* host input buffers per feature (the
				       CPU backend reads batches into them) */
	const size_t *feature_bytes; /* per feature, bytes of one example */
	int nfeatures;
	size_t optimizer_slots;     /* floats of optimizer state (0, n, 2n) */
	float *slots;               /* host copy of those, or NULL */
	int top_k;                  /* model.metric_top_k, 0: none */
	/* CPU only */
	struct dtf_pool *pool;      /* fast kernels on this pool; NULL: the
				       reference kernels */
	struct dtf_plan *poison;  /* memory.poison: poison the plan's
				    buffers before each forward; NULL */
};

/* One optimizer update (train/optimizer.h's formulas), for apply. */
struct dtf_backend_update {
	int adam;                  /* 1: Adam, 0: SGD with momentum */
	double lr;
	double momentum;           /* SGD */
	int nesterov;              /* SGD */
	double beta_1, beta_2, epsilon; /* Adam */
	int64_t iterations;        /* updates so far, this one included */
};

/* What upload and download move. */
enum {
	DTF_BACKEND_PARAMS = 1, /* the variables */
	DTF_BACKEND_SLOTS = 2,  /* the optimizer's slots */
};

struct dtf_backend_iface {
	const char *name; /* "cpu", "cuda" */
	/* "NVIDIA H200 (device 0, ...)", "the CPU (fast kernels)". */
	const char *(*describe)(void *ctx);
	/* Get ready to run the planned graph bg->g; once, before anything
	 * else.  Errors: DTF_ERR_CONFIG (an op or geometry this backend
	 * lacks, named), DTF_ERR_NOMEM, DTF_ERR_RUNTIME. */
	int (*prepare)(void *ctx, const struct dtf_backend_graph *bg);
	/* The next batch into the graph's inputs through read(arg, ...);
	 * ids (g->batch entries) receive the example ids, and the input
	 * nodes' host data pointers show the batch (labels can be checked).
	 * Returns read's status; *count as read's. */
	int (*load)(void *ctx, dtf_backend_read_fn read, void *arg,
		    uint64_t *ids, int *count);
	/* Optional (NULL: no read-ahead).  Read the next batch now, while
	 * the device computes the current one; the next load returns it
	 * (and its error, if reading failed). */
	void (*prefetch)(void *ctx, dtf_backend_read_fn read, void *arg);
	/* The forward nodes, to the loss; x->loss_sum out.  In inference
	 * (x->training 0) the loss and correct counts are added to the
	 * evaluation totals. */
	void (*forward)(void *ctx, struct dtf_exec_ctx *x);
	/* The backward nodes, after forward with the same x; after(arg, i)
	 * (may be NULL) once node i has run.  Returns 0 when the gradients
	 * are written to the host vector bg->grads (a device backend has
	 * waited for them).  Errors: DTF_ERR_RUNTIME (a device failure). */
	int (*backward)(void *ctx, struct dtf_exec_ctx *x,
			dtf_backend_node_fn after, void *arg);
	/* 1: backward can fail (a device): the caller agrees on its status
	 * over the replicas before any gradient leaves them, so it passes no
	 * per-node callback (the strategy then starts every bucket after
	 * backward).  0: backward cannot fail (the CPU). */
	int checked_backward;
	/* Add this micro-batch's loss sum, correct count and `count`
	 * examples to stats[0..2], after backward. */
	void (*step_stats)(void *ctx, const struct dtf_exec_ctx *x, int count,
			   float *stats);
	/* Optional (NULL: the update applies to the host vectors).  The
	 * optimizer update with the summed gradients of the host vector on
	 * the backend's copy of the variables (queued); u->iterations counts
	 * this update. */
	void (*apply)(void *ctx, const struct dtf_backend_update *u);
	/* Optional (NULL: the host copies are the backend's).  Host ->
	 * backend and backend -> host of `what` (DTF_BACKEND_*), synchronous.
	 * Errors: DTF_ERR_RUNTIME. */
	int (*upload)(void *ctx, unsigned what);
	int (*download)(void *ctx, unsigned what);
	/* The evaluation totals since the last call, and reset them:
	 * out[0] loss sum, out[1] correct, out[2] top-k correct (NAN when this
	 * backend does not count top-k).  Waits for queued work.  Errors:
	 * DTF_ERR_RUNTIME. */
	int (*eval_totals)(void *ctx, double out[3]);
	/* Release ctx. */
	void (*free)(void *ctx);
};

struct dtf_backend {
	const struct dtf_backend_iface *i;
	void *ctx;
};

/* Release a backend (NULL: nothing). */
void dtf_backend_free(struct dtf_backend *be);

/* upload / download where the backend has them; 0 where the host copies
 * are the backend's. */
static inline int dtf_backend_upload(struct dtf_backend *be, unsigned what)
{
	return be->i->upload ? be->i->upload(be->ctx, what) : 0;
}
static inline int dtf_backend_download(struct dtf_backend *be, unsigned what)
{
	return be->i->download ? be->i->download(be->ctx, what) : 0;
}

/* ---- the CPU (ops/cpu/backend.c) ----------------------------------------
 * The reference executor (graph/exec.h), with the fast one
 * (graph/fast_exec.h) where bg->pool is given; the gradients stay in the
 * host vector for the strategy.  Errors: DTF_ERR_NOMEM. */
int dtf_backend_cpu_new(struct dtf_backend **out);

/* Floats of scratch the CPU kernels need for g (the largest conv2d im2col
 * block; a node's gradients share its geometry), for the planner's arena
 * (mem/plan.h).  Every backend plans with it: the CPU evaluates and
 * checks beside any device.  Never fails. */
size_t dtf_backend_cpu_workspace(const struct dtf_graph *g);

/* ---- one GPU (ops/cuda/backend.c) ---------------------------------------
 * exec_cuda.h's executor on the GPU of this node-local rank, as Horovod's
 * local_rank -> device rule: more ranks on a node than GPUs is an error
 * with a hint unless sharing is allowed, which maps local rank r to GPU
 * r % GPUs.  Gradients: copied to the host vector after backward for
 * the strategy to sum (GPU -> host, its buckets, host -> GPU for apply);
 * with one replica and no accumulation the device applies its own copy.
 * Parameters live on the GPU during training:
 * upload after the broadcast, download before the host reads them. */
struct dtf_backend_cuda_opts {
	int required;         /* device: cuda (an error without a GPU); 0:
				 auto (the CPU then, *out NULL) */
	int allow_sharing;    /* allow_gpu_sharing */
	int tf32;             /* precision: tf32 */
	int local_rank, local_size; /* this rank on its node */
	int world;            /* replicas */
	int accumulate_steps; /* train.accumulate_steps: > 1 sums micro-
				 batches on the host */
	int plain_update;     /* the update is sgd (momentum, nesterov) or
				 adam, without weight decay or clipping: the
				 only ones the GPU path has */
};

/*
 * Open the GPU for this rank.  *out is NULL when the replica should run on
 * the CPU (auto without a GPU or without plain_update, with a warning for
 * the latter).  Errors: DTF_ERR_RUNTIME (required without a GPU,
 * placement, CUDA failures), DTF_ERR_CONFIG (required without
 * plain_update), DTF_ERR_NOMEM.
 */
int dtf_backend_cuda_open(const struct dtf_backend_cuda_opts *o,
			  struct dtf_backend **out);

/* 1 when this process sees a GPU it could train on (a CUDA build with a
 * visible device); never fails. */
int dtf_backend_cuda_visible(void);

/* The GPU for node-local rank `local_rank` of `local_size` ranks on a node
 * with `ngpus` visible GPUs (ngpus > 0).  Errors: DTF_ERR_RUNTIME with a
 * HINT when local_size > ngpus and sharing is not allowed. */
int dtf_backend_cuda_place(int local_rank, int local_size, int ngpus,
			   int allow_sharing, int *gpu);

#endif
