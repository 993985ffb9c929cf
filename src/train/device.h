/*
 * device.h - where a replica computes (the CPU or one GPU) and the GPU's
 * side of the training step.
 *
 * Selection (the job's `device`): cpu; cuda (an error when this rank sees
 * no GPU); auto (CUDA when cudaGetDeviceCount() > 0 on this rank, which is
 * 0 without a driver or in a build without CUDA, else the CPU; also the CPU,
 * with a warning, when the model has an op or a conv2d geometry the CUDA
 * backend lacks).  Placement: each rank drives the GPU of its node-local
 * rank (MPI_Comm_split_type SHARED, distribute/comm.h), as Horovod's
 * local_rank -> device rule; more ranks on a node than GPUs is an error with
 * a hint unless `allow_gpu_sharing: true`, which maps local rank r to GPU
 * r % GPUs.  `precision: tf32` turns on TF32 tensor cores.
 *
 * The GPU step (train.c keeps the loop and calls these):
 *   next_batch  the batch decoded into pinned staging, already on its way
 *               to the GPU (read ahead during the previous step when the
 *               loop allowed it, else read now);
 *   step        forward + backward on the GPU; meanwhile the CPU decodes
 *               the next batch into the other staging set and queues its
 *               copy on the copy stream; then the gradients come back;
 *   allreduce   host-staged MPI_Allreduce by default; device pointers when
 *               Open MPI is CUDA-aware; nothing to move with one rank;
 *   apply       the fused optimizer update on the GPU.
 * Parameters live on the GPU during training: upload after the broadcast,
 * download before anything on the host reads them (export, checkpoints).
 */
#ifndef DTF_TRAIN_DEVICE_H
#define DTF_TRAIN_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "ops/cpu/exec.h"
#include "graph/graph.h"
#include "mem/plan.h"
#include "train/optimizer.h"

struct dtf_comm;
struct dtf_pipeline;
struct dtf_gpu;

/*
 * The GPU for node-local rank `local_rank` of `local_size` ranks on a node
 * with `ngpus` visible GPUs (ngpus > 0).  Errors: DTF_ERR_RUNTIME with a
 * HINT when local_size > ngpus and sharing is not allowed.
 */
int dtf_device_place(int local_rank, int local_size, int ngpus,
		     int allow_sharing, int *gpu);

struct dtf_gpu_opts {
	const struct dtf_job *job;
	struct dtf_comm *comm;     /* NULL: one process, no MPI */
	struct dtf_graph *g;       /* planned; its input nodes are pointed at
				      the staging buffer of each batch */
	const struct dtf_plan *plan;
	float *params, *grads;     /* host vectors of the replica */
	size_t nstats;             /* floats behind the gradients */
	const struct dtf_optimizer *opt;
};

/*
 * Choose the device for this rank and, for CUDA, open it and mirror the
 * graph.  *out is NULL when the replica runs on the CPU.
 * Errors: DTF_ERR_RUNTIME (device: cuda without a GPU, placement, CUDA
 * failures), DTF_ERR_CONFIG (device: cuda and an op the backend lacks),
 * DTF_ERR_NOMEM.
 */
int dtf_gpu_open(const struct dtf_gpu_opts *o, struct dtf_gpu **out);
void dtf_gpu_free(struct dtf_gpu *gpu);

/* "NVIDIA H200 (device 0, ...)". */
const char *dtf_gpu_describe(const struct dtf_gpu *gpu);

/* Parameters GPU -> host (synchronous).  Errors: DTF_ERR_RUNTIME. */
int dtf_gpu_download_params(struct dtf_gpu *gpu);

/* The parameters and the optimizer's slots (the host copies a checkpoint
 * saves and a restore fills; opt->iterations is kept on the host
 * throughout) host -> GPU and GPU -> host (synchronous).
 * Errors: DTF_ERR_RUNTIME. */
int dtf_gpu_upload_state(struct dtf_gpu *gpu);
int dtf_gpu_download_state(struct dtf_gpu *gpu);

/*
 * The next training batch, as dtf_pipeline_next: *count examples; their
 * ids are copied to `ids` (batch entries) and the graph's input nodes point
 * at the staged features, so host code can check labels.  Returns the
 * result of a read-ahead when the previous step made one.
 */
int dtf_gpu_next_batch(struct dtf_gpu *gpu, struct dtf_pipeline *p,
		       uint64_t *ids, int *count);

/*
 * Forward and backward of the current batch, statistics behind the
 * gradients.  With `read_ahead`, decode the next batch of `p` while the GPU
 * works (the caller allows it only within an epoch).  Returns when the
 * gradients are ready for the allreduce.  Errors: DTF_ERR_RUNTIME (a CUDA
 * failure; a read-ahead failure comes from the next dtf_gpu_next_batch).
 */
int dtf_gpu_step(struct dtf_gpu *gpu, const struct dtf_exec_ctx *ctx,
		 struct dtf_pipeline *p, int read_ahead);

/* Sum gradients and statistics over ranks; afterwards the statistics are
 * in grads[nparams..] on the host.  Errors: as the comm, DTF_ERR_RUNTIME. */
int dtf_gpu_allreduce(struct dtf_gpu *gpu, struct dtf_comm *comm);

/* The optimizer update on the GPU with the summed gradients (queued). */
void dtf_gpu_apply(struct dtf_gpu *gpu, struct dtf_optimizer *opt,
		   double lr);

/*
 * One pass over `eval` on the GPU in inference mode: local[0] += loss sum,
 * local[1] += correct, local[2] += examples.  Errors: the pipeline's,
 * DTF_ERR_RUNTIME.
 */
int dtf_gpu_evaluate(struct dtf_gpu *gpu, struct dtf_pipeline *eval,
		     double local[3]);

#endif
