/*
 * device.c - device selection, GPU placement, and the GPU's side of the
 * training step (see device.h).
 *
 * Design: the loop stays in train.c; this file owns the CUDA context and
 * executor of one replica and the bookkeeping of the two staging sets:
 * `cur` is the set holding the current batch; a read-ahead decodes into the
 * other set while the GPU runs and leaves its result pending for the next
 * next_batch call.  Errors of a read-ahead are kept with their message and
 * raised by that call, so they reach the step's status agreement exactly
 * as a synchronous read's would.
 */
#include "train/device.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "data/pipeline.h"
#include "distribute/comm.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/exec_cuda.h"

enum grad_path {
	GRADS_LOCAL,       /* one rank: the gradients never leave the GPU */
	GRADS_HOST_STAGED, /* GPU -> host, MPI_Allreduce, host -> GPU */
	GRADS_DEVICE,      /* MPI_Allreduce on device pointers */
};

struct dtf_gpu {
	struct dtf_cuda_ctx *ctx;
	struct dtf_cuda_exec *ex;
	struct dtf_graph *g;
	const struct dtf_optimizer *opt; /* its host slots: checkpoints */
	float *grads;         /* host */
	size_t nparams, nstats;
	enum grad_path path;
	int cur;              /* staging set of the current batch */
	int pending;          /* a read-ahead into set 1 - cur is waiting */
	int pending_rc, pending_count;
	char pending_msg[1024];
};

int dtf_device_place(int local_rank, int local_size, int ngpus,
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

void dtf_gpu_free(struct dtf_gpu *gpu)
{
	if (!gpu)
		return;
	dtf_cuda_exec_free(gpu->ex);
	dtf_cuda_ctx_free(gpu->ctx);
	dtf_free(gpu);
}

int dtf_gpu_open(const struct dtf_gpu_opts *o, struct dtf_gpu **out)
{
	const struct dtf_job *job = o->job;
	int auto_pick = job->device.kind == DTF_DEVICE_AUTO;
	int rc;
	*out = NULL;
	if (job->device.kind == DTF_DEVICE_CPU)
		return 0;
	char why[256] = "";
	int ngpus = dtf_cuda_device_count(why, sizeof(why));
	if (ngpus == 0) {
		if (auto_pick) {
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
	const struct dtf_optimizer *op = o->opt;
	if (op->kind == DTF_OPT_ADAMW || op->kind == DTF_OPT_RMSPROP ||
	    op->weight_decay > 0 || op->clipnorm > 0) {
		if (auto_pick) {
			dtf_warn("device: auto: the GPU path has no adamw, rmsprop, weight_decay or clipnorm; training on the CPU");
			return 0;
		}
		return dtf_error(DTF_ERR_CONFIG,
				 "device: cuda: the GPU path updates with sgd or adam only, without train.weight_decay or train.clipnorm\n"
				 "HINT: use device: cpu (or auto) for adamw, rmsprop, weight decay and clipping");
	}
	int local_rank = o->comm ? dtf_comm_local_rank(o->comm) : 0;
	int local_size = o->comm ? dtf_comm_local_size(o->comm) : 1;
	int device = 0;
	if ((rc = dtf_device_place(local_rank, local_size, ngpus,
				   job->device.allow_gpu_sharing, &device)) < 0)
		return rc;

	struct dtf_gpu *gpu = dtf_calloc(1, sizeof(*gpu));
	if (!gpu)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	gpu->g = o->g;
	gpu->opt = o->opt;
	gpu->grads = o->grads;
	gpu->nparams = o->g->nparams;
	gpu->nstats = o->nstats;
	gpu->cur = 1; /* the first batch goes to set 0 */
	rc = dtf_cuda_ctx_new(device,
			      job->device.precision == DTF_PRECISION_TF32
				      ? DTF_CUDA_TF32
				      : DTF_CUDA_FP32,
			      &gpu->ctx);
	if (rc < 0)
		goto fail;
	size_t n = o->g->nparams;
	struct dtf_cuda_exec_opts eo = {
		.g = o->g, .plan = o->plan, .params = o->params,
		.grads = o->grads, .nstats = o->nstats,
		.features = job->data.features,
		.nfeatures = job->data.nfeatures,
		.optimizer_slots = o->opt->kind == DTF_OPT_ADAM ? 2 * n
				   : o->opt->momentum != 0.0	 ? n
								 : 0};
	rc = dtf_cuda_exec_new(gpu->ctx, &eo, &gpu->ex);
	if (rc == -DTF_ERR_CONFIG && auto_pick) {
		dtf_warn("device: auto: %s; training on the CPU",
			 dtf_error_msg());
		dtf_gpu_free(gpu);
		return 0;
	}
	if (rc < 0)
		goto fail;
	int world = o->comm ? dtf_comm_size(o->comm) : 1;
	gpu->path = world == 1		     ? GRADS_LOCAL
		    : dtf_comm_cuda_aware() ? GRADS_DEVICE
					     : GRADS_HOST_STAGED;
	dtf_log(DTF_LOG_INFO, 0,
		"device: %s, %zu MB of device memory; gradients %s",
		dtf_cuda_ctx_describe(gpu->ctx),
		dtf_cuda_exec_device_bytes(gpu->ex) >> 20,
		gpu->path == GRADS_LOCAL	 ? "stay on the GPU (one rank)"
		: gpu->path == GRADS_DEVICE ? "allreduced from device memory (CUDA-aware MPI)"
					     : "allreduced through host memory");
	*out = gpu;
	return 0;
fail:
	dtf_gpu_free(gpu);
	return rc;
}

const char *dtf_gpu_describe(const struct dtf_gpu *gpu)
{
	return dtf_cuda_ctx_describe(gpu->ctx);
}

int dtf_gpu_download_params(struct dtf_gpu *gpu)
{
	return dtf_cuda_exec_download_params(gpu->ex);
}

int dtf_gpu_upload_state(struct dtf_gpu *gpu)
{
	int rc = dtf_cuda_exec_upload_params(gpu->ex);
	if (rc == 0 && gpu->opt->slots)
		rc = dtf_cuda_exec_upload_slots(gpu->ex, gpu->opt->slots);
	return rc;
}

int dtf_gpu_download_state(struct dtf_gpu *gpu)
{
	int rc = dtf_cuda_exec_download_params(gpu->ex);
	if (rc == 0 && gpu->opt->slots)
		rc = dtf_cuda_exec_download_slots(gpu->ex, gpu->opt->slots);
	return rc;
}

/* The graph's input nodes on the host see staging set `set`. */
static void point_inputs(struct dtf_gpu *gpu, int set)
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

/* Decode the next batch of p into staging set `set` and queue its copy. */
static int read_into(struct dtf_gpu *gpu, struct dtf_pipeline *p, int set,
		     int *count)
{
	int rc = dtf_cuda_exec_staging_ready(gpu->ex, set);
	if (rc < 0)
		return rc;
	rc = dtf_pipeline_next(p, dtf_cuda_exec_feed(gpu->ex, set),
			       dtf_cuda_exec_ids(gpu->ex, set), count);
	if (rc == 0 && *count > 0)
		dtf_cuda_exec_upload(gpu->ex, set);
	return rc;
}

int dtf_gpu_next_batch(struct dtf_gpu *gpu, struct dtf_pipeline *p,
		       uint64_t *ids, int *count)
{
	int rc, set = 1 - gpu->cur;
	if (gpu->pending) {
		gpu->pending = 0;
		*count = gpu->pending_count;
		rc = gpu->pending_rc;
		if (rc < 0)
			rc = dtf_error((enum dtf_err)-rc, "%s", gpu->pending_msg);
	} else {
		rc = read_into(gpu, p, set, count);
	}
	gpu->cur = set;
	if (rc == 0) {
		memcpy(ids, dtf_cuda_exec_ids(gpu->ex, set),
		       (size_t)*count * sizeof(*ids));
		point_inputs(gpu, set);
	}
	return rc;
}

int dtf_gpu_step(struct dtf_gpu *gpu, const struct dtf_exec_ctx *ctx,
		 struct dtf_pipeline *p, int read_ahead)
{
	dtf_cuda_exec_run(gpu->ex, gpu->cur, ctx, 1, DTF_CUDA_STATS_STEP);
	if (gpu->path == GRADS_HOST_STAGED)
		dtf_cuda_exec_download_grads(gpu->ex);
	else
		dtf_cuda_exec_download_stats(gpu->ex);
	if (read_ahead) {
		int count = 0;
		int rc = read_into(gpu, p, 1 - gpu->cur, &count);
		gpu->pending = 1;
		gpu->pending_rc = rc;
		gpu->pending_count = count;
		if (rc < 0)
			snprintf(gpu->pending_msg, sizeof(gpu->pending_msg), "%s",
				 dtf_error_msg());
	}
	return dtf_cuda_exec_wait(gpu->ex);
}

int dtf_gpu_allreduce(struct dtf_gpu *gpu, struct dtf_comm *comm)
{
	size_t n = gpu->nparams + gpu->nstats;
	int rc;
	switch (gpu->path) {
	case GRADS_LOCAL:
		return 0; /* statistics came back with the step */
	case GRADS_HOST_STAGED:
		return dtf_comm_allreduce_sum_f32(comm, gpu->grads, n);
	case GRADS_DEVICE:
		rc = dtf_comm_allreduce_sum_f32(
			comm, dtf_cuda_exec_device_grads(gpu->ex), n);
		if (rc < 0)
			return rc;
		dtf_cuda_exec_download_stats(gpu->ex);
		return dtf_cuda_exec_wait(gpu->ex);
	}
	return 0;
}

void dtf_gpu_apply(struct dtf_gpu *gpu, struct dtf_optimizer *opt, double lr)
{
	if (gpu->path == GRADS_HOST_STAGED)
		dtf_cuda_exec_upload_grads(gpu->ex);
	dtf_cuda_exec_apply(gpu->ex, opt, lr);
}

int dtf_gpu_evaluate(struct dtf_gpu *gpu, struct dtf_pipeline *eval,
		     double local[3])
{
	/* Batches alternate between the staging sets; the GPU runs batch j
	 * while the CPU decodes batch j + 1. */
	struct dtf_exec_ctx ctx = {.training = 0, .loss_scale = 1.0f};
	int rc = dtf_pipeline_begin_epoch(eval, 0);
	DTF_ASSERT(!gpu->pending);
	while (rc == 0) {
		int count = 0, set = 1 - gpu->cur;
		rc = read_into(gpu, eval, set, &count);
		if (rc < 0 || count == 0)
			break;
		gpu->cur = set;
		ctx.valid = count;
		dtf_cuda_exec_run(gpu->ex, set, &ctx, 0, DTF_CUDA_STATS_EVAL);
		local[2] += count;
	}
	int wrc = dtf_cuda_exec_wait(gpu->ex);
	if (rc < 0)
		return rc;
	if (wrc < 0)
		return wrc;
	double tot[2];
	if ((rc = dtf_cuda_exec_eval_totals(gpu->ex, tot)) < 0)
		return rc;
	local[0] += tot[0];
	local[1] += tot[1];
	return 0;
}
