/*
 * backend.c - the CUDA backend (ops/backend.h): GPU placement and one
 * replica's step on exec_cuda.h's executor (what was train/device.c).
 *
 * Design: this file owns the CUDA context and executor of one replica and
 * the bookkeeping of the two staging sets: `cur` is the set holding the
 * current batch; a prefetch decodes into the other set while the GPU runs
 * and leaves its result pending for the next load.  Errors of a prefetch
 * are kept with their message and raised by that load, so they reach the
 * step's status agreement exactly as a synchronous read's would.
 *
 * Gradients: after backward they are copied to the host gradient vector
 * (asynchronously, behind the backward kernels; backward waits for them),
 * where the distribution strategy sums them in its fusion buckets, checks
 * them for NaN/Inf and calls apply, as on the CPU (distribute/strategy.h);
 * apply uploads the sums and runs the update on the device.  With one
 * replica and no accumulation nothing changes them on the host: the
 * device's own copy is applied (the host copy serves the check only).  The
 * step statistics come down into a buffer of their own, added to the
 * step's by step_stats, so micro-batches accumulate them as on the CPU.
 */
#include "ops/backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/exec_cuda.h"

enum grad_path {
	GRADS_LOCAL,       /* one replica, no accumulation: the device's
			      gradients are applied as they are */
	GRADS_HOST_STAGED, /* GPU -> host, the strategy's sum, host -> GPU */
};

struct gpu {
	struct dtf_cuda_ctx *ctx;
	struct dtf_cuda_exec *ex;
	struct dtf_graph *g;
	float *grads;         /* host */
	float stats[8];       /* this micro-batch's statistics, from the GPU */
	float *slots;         /* host copies of the optimizer's slots */
	size_t nparams, nstats;
	enum grad_path path;
	int cur;              /* staging set of the current batch */
	int pending;          /* a prefetch into set 1 - cur is waiting */
	int pending_rc, pending_count;
	char pending_msg[1024];
	char desc[512];
};

int dtf_backend_cuda_place(int local_rank, int local_size, int ngpus,
			   int allow_sharing, int *gpu)
{
	DTF_ASSERT(ngpus > 0 && local_rank >= 0 && local_rank < local_size);
	if (local_size > ngpus && !allow_sharing)
		return dtf_error(DTF_ERR_RUNTIME,
				 "%d ranks on this node but %d GPU%s visible: each rank needs its own GPU\n"
				 "HINT: start at most %d rank%s per node (mpirun --map-by ppr:%d:node), set allow_gpu_sharing: true to share GPUs, or use device: cpu",
				 local_size, ngpus, ngpus == 1 ? "" : "s", ngpus,
				 ngpus == 1 ? "" : "s", ngpus);
	*gpu = local_rank % ngpus;
	return 0;
}

static void gpu_free(void *ctx)
{
	struct gpu *gpu = ctx;
	if (!gpu)
		return;
	dtf_cuda_exec_free(gpu->ex);
	dtf_cuda_ctx_free(gpu->ctx);
	dtf_free(gpu);
}

static const char *gpu_describe(void *ctx)
{
	struct gpu *gpu = ctx;
	return dtf_cuda_ctx_describe(gpu->ctx);
}

static int gpu_prepare(void *ctx, const struct dtf_backend_graph *bg)
{
	struct gpu *gpu = ctx;
	gpu->g = bg->g;
	gpu->grads = bg->grads;
	gpu->slots = bg->slots;
	gpu->nparams = bg->g->nparams;
	gpu->nstats = bg->nstats;
	DTF_ASSERT(bg->nstats <= sizeof(gpu->stats) / sizeof(gpu->stats[0]));
	struct dtf_cuda_exec_opts eo = {
		.g = bg->g, .arena = bg->arena, .arena_bytes = bg->arena_bytes,
		.params = bg->params, .grads = bg->grads, .nstats = bg->nstats,
		.feature_bytes = bg->feature_bytes,
		.nfeatures = bg->nfeatures,
		.optimizer_slots = bg->optimizer_slots};
	int rc = dtf_cuda_exec_new(gpu->ctx, &eo, &gpu->ex);
	if (rc < 0)
		return rc;
	dtf_log(DTF_LOG_INFO, 0,
		"device: %s, %zu MB of device memory; gradients %s",
		dtf_cuda_ctx_describe(gpu->ctx),
		dtf_cuda_exec_device_bytes(gpu->ex) >> 20,
		gpu->path == GRADS_LOCAL ? "applied on the GPU (one replica)"
					 : "summed by the strategy through host memory");
	return 0;
}

static int gpu_upload(void *ctx, unsigned what)
{
	struct gpu *gpu = ctx;
	int rc = 0;
	if (what & DTF_BACKEND_PARAMS)
		rc = dtf_cuda_exec_upload_params(gpu->ex);
	if (rc == 0 && (what & DTF_BACKEND_SLOTS) && gpu->slots)
		rc = dtf_cuda_exec_upload_slots(gpu->ex, gpu->slots);
	return rc;
}

static int gpu_download(void *ctx, unsigned what)
{
	struct gpu *gpu = ctx;
	int rc = 0;
	if (what & DTF_BACKEND_PARAMS)
		rc = dtf_cuda_exec_download_params(gpu->ex);
	if (rc == 0 && (what & DTF_BACKEND_SLOTS) && gpu->slots)
		rc = dtf_cuda_exec_download_slots(gpu->ex, gpu->slots);
	return rc;
}

/* The graph's input nodes on the host see staging set `set`. */
static void point_inputs(struct gpu *gpu, int set)
{
	void *const *feed = dtf_cuda_exec_feed(gpu->ex, set);
	for (int i = 0; i < gpu->g->nnodes; i++) {
		struct dtf_node *n = &gpu->g->nodes[i];
		if (n->op == DTF_OP_INPUT)
			n->data = feed[n->a.in.feature];
		else if (n->op == DTF_OP_RESHAPE)
			n->data = gpu->g->nodes[n->inputs[0]].data;
	}
}

/* Read the next batch into staging set `set` and queue its copy. */
static int read_into(struct gpu *gpu, dtf_backend_read_fn read, void *arg,
		     int set, int *count)
{
	int rc = dtf_cuda_exec_staging_ready(gpu->ex, set);
	if (rc < 0)
		return rc;
	rc = read(arg, dtf_cuda_exec_feed(gpu->ex, set),
		  dtf_cuda_exec_ids(gpu->ex, set), count);
	if (rc == 0 && *count > 0)
		dtf_cuda_exec_upload(gpu->ex, set);
	return rc;
}

static int gpu_load(void *ctx, dtf_backend_read_fn read, void *arg,
		    uint64_t *ids, int *count)
{
	struct gpu *gpu = ctx;
	int rc, set = 1 - gpu->cur;
	if (gpu->pending) {
		gpu->pending = 0;
		*count = gpu->pending_count;
		rc = gpu->pending_rc;
		if (rc < 0)
			rc = dtf_error((enum dtf_err)-rc, "%s", gpu->pending_msg);
	} else {
		rc = read_into(gpu, read, arg, set, count);
	}
	gpu->cur = set;
	if (rc == 0) {
		memcpy(ids, dtf_cuda_exec_ids(gpu->ex, set),
		       (size_t)*count * sizeof(*ids));
		point_inputs(gpu, set);
	}
	return rc;
}

/* Training: forward and backward in one run on the compute stream, then
 * the gradients and the statistics start back; inference: forward, its
 * loss and correct count added to the evaluation totals. */
static void gpu_forward(void *ctx, struct dtf_exec_ctx *x)
{
	struct gpu *gpu = ctx;
	if (!x->training) {
		dtf_cuda_exec_run(gpu->ex, gpu->cur, x, 0, DTF_CUDA_STATS_EVAL);
		return;
	}
	dtf_cuda_exec_run(gpu->ex, gpu->cur, x, 1, DTF_CUDA_STATS_STEP);
	dtf_cuda_exec_download_grads(gpu->ex);
	dtf_cuda_exec_download_stats(gpu->ex, gpu->stats);
}

static void gpu_prefetch(void *ctx, dtf_backend_read_fn read, void *arg)
{
	struct gpu *gpu = ctx;
	int count = 0;
	int rc = read_into(gpu, read, arg, 1 - gpu->cur, &count);
	gpu->pending = 1;
	gpu->pending_rc = rc;
	gpu->pending_count = count;
	if (rc < 0)
		snprintf(gpu->pending_msg, sizeof(gpu->pending_msg), "%s",
			 dtf_error_msg());
}

/* The backward nodes were queued with forward: wait for them.  The device
 * runs the graph as a whole, so `after` is called for every backward node
 * once all have run. */
static int gpu_backward(void *ctx, struct dtf_exec_ctx *x,
			dtf_backend_node_fn after, void *arg)
{
	struct gpu *gpu = ctx;
	(void)x;
	int rc = dtf_cuda_exec_wait(gpu->ex);
	for (int i = gpu->g->nforward; rc == 0 && after && i < gpu->g->nnodes;
	     i++)
		after(arg, i);
	return rc;
}

/* The statistics came down with the gradients (forward's download, which
 * backward waited for). */
static void gpu_step_stats(void *ctx, const struct dtf_exec_ctx *x,
			   int count, float *stats)
{
	struct gpu *gpu = ctx;
	(void)x;
	(void)count;
	for (size_t i = 0; i < gpu->nstats; i++)
		stats[i] += gpu->stats[i];
}

/* The strategy's sums (host-staged) up, then the update on the device. */
static void gpu_apply(void *ctx, const struct dtf_backend_update *u)
{
	struct gpu *gpu = ctx;
	if (gpu->path == GRADS_HOST_STAGED)
		dtf_cuda_exec_upload_grads(gpu->ex);
	dtf_cuda_exec_apply(gpu->ex, u);
}

static int gpu_eval_totals(void *ctx, double out[3])
{
	struct gpu *gpu = ctx;
	DTF_ASSERT(!gpu->pending);
	double tot[2];
	int rc = dtf_cuda_exec_wait(gpu->ex);
	if (rc == 0)
		rc = dtf_cuda_exec_eval_totals(gpu->ex, tot);
	if (rc < 0)
		return rc;
	out[0] = tot[0];
	out[1] = tot[1];
	out[2] = NAN; /* no top-k on the GPU */
	return 0;
}

static const struct dtf_backend_iface gpu_iface = {
	.name = "cuda",
	.checked_backward = 1,
	.describe = gpu_describe,
	.prepare = gpu_prepare,
	.load = gpu_load,
	.prefetch = gpu_prefetch,
	.forward = gpu_forward,
	.backward = gpu_backward,
	.step_stats = gpu_step_stats,
	.apply = gpu_apply,
	.upload = gpu_upload,
	.download = gpu_download,
	.eval_totals = gpu_eval_totals,
	.free = gpu_free,
};

int dtf_backend_cuda_visible(void)
{
	return dtf_cuda_device_count(NULL, 0) > 0;
}

int dtf_backend_cuda_open(const struct dtf_backend_cuda_opts *o,
			  struct dtf_backend **out)
{
	int rc;
	*out = NULL;
	char why[256] = "";
	int ngpus = dtf_cuda_device_count(why, sizeof(why));
	if (ngpus == 0) {
		if (!o->required) {
			dtf_log(DTF_LOG_DEBUG, 0,
				"device: auto: no GPU (%s); training on the CPU",
				why);
			return 0;
		}
		return dtf_error(DTF_ERR_RUNTIME,
				 "device: cuda, but this rank has no GPU: %s\n"
				 "HINT: use device: auto or device: cpu to train on the CPU",
				 why);
	}
	/* the CUDA executor updates with sgd or adam over the whole vector */
	if (!o->plain_update) {
		if (!o->required) {
			dtf_warn("device: auto: the GPU path has no adamw, rmsprop, weight_decay or clipnorm; training on the CPU");
			return 0;
		}
		return dtf_error(DTF_ERR_CONFIG,
				 "device: cuda: the GPU path updates with sgd or adam only, without train.weight_decay or train.clipnorm\n"
				 "HINT: use device: cpu (or auto) for adamw, rmsprop, weight decay and clipping");
	}
	int device = 0;
	if ((rc = dtf_backend_cuda_place(o->local_rank, o->local_size, ngpus,
					 o->allow_sharing, &device)) < 0)
		return rc;
	struct dtf_backend *be = dtf_calloc(1, sizeof(*be));
	struct gpu *gpu = dtf_calloc(1, sizeof(*gpu));
	if (!be || !gpu) {
		dtf_free(be);
		dtf_free(gpu);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	gpu->cur = 1; /* the first batch goes to set 0 */
	gpu->path = o->world == 1 && o->accumulate_steps <= 1
			    ? GRADS_LOCAL
			    : GRADS_HOST_STAGED;
	rc = dtf_cuda_ctx_new(device, o->tf32 ? DTF_CUDA_TF32 : DTF_CUDA_FP32,
			      &gpu->ctx);
	if (rc < 0) {
		dtf_free(be);
		gpu_free(gpu);
		return rc;
	}
	be->i = &gpu_iface;
	be->ctx = gpu;
	*out = be;
	return 0;
}
