/*
 * context.c - the CUDA device context: device discovery, streams, events,
 * library handles, memory, scratch and the sticky failure.
 *
 * Design: one context per rank drives one device from one thread (the
 * training thread; MPI is FUNNELED).  Two non-blocking streams: compute
 * (every kernel, cuDNN and cuBLAS call) and copy (the next batch's inputs,
 * so they overlap the current step).  Calls that are asynchronous keep the
 * first failure in the context instead of returning it, so kernels keep the
 * CPU kernels' "never fail" signature; dtf_cuda_sync() reports it.  The
 * driver may be missing entirely (a CPU machine with the toolkit
 * installed): cudaGetDeviceCount then fails with "no driver" or "no
 * device", which dtf_cuda_device_count() turns into 0 and a reason.
 */
#include "ops/cuda/internal.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* cuBLAS workspace: 32 MiB is NVIDIA's recommendation for Hopper. */
#define BLAS_WS_BYTES ((size_t)32 << 20)

int dtf_cuda_built(void)
{
	return 1;
}

int dtf_cuda_device_count(char *why, size_t why_size)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		int rt = 0;
		cudaRuntimeGetVersion(&rt);
		if (why && why_size && e == cudaErrorInsufficientDriver)
			snprintf(why, why_size,
				 "no NVIDIA driver was found, or it is older than CUDA %d.%d needs (%s)",
				 rt / 1000, rt % 1000 / 10, cudaGetErrorName(e));
		else if (why && why_size && e == cudaErrorNoDevice)
			snprintf(why, why_size,
				 "no CUDA device is visible (check CUDA_VISIBLE_DEVICES) (%s)",
				 cudaGetErrorName(e));
		else if (why && why_size)
			snprintf(why, why_size, "%s (%s)",
				 cudaGetErrorString(e), cudaGetErrorName(e));
		cudaGetLastError(); /* not sticky: clear it */
		return 0;
	}
	if (n == 0 && why && why_size)
		snprintf(why, why_size, "no CUDA device is visible");
	return n;
}

/* ---- failures -------------------------------------------------------------- */

static void keep(struct dtf_cuda_ctx *ctx, const char *call, const char *what)
{
	if (ctx->failed)
		return;
	ctx->failed = 1;
	snprintf(ctx->failure, sizeof(ctx->failure), "%s: %s", call, what);
}

void dtf_cuda_fail_cuda(struct dtf_cuda_ctx *ctx, cudaError_t e,
			const char *call)
{
	char what[256];
	snprintf(what, sizeof(what), "%s (%s)", cudaGetErrorString(e),
		 cudaGetErrorName(e));
	keep(ctx, call, what);
}

void dtf_cuda_fail_cudnn(struct dtf_cuda_ctx *ctx, cudnnStatus_t s,
			 const char *call)
{
	keep(ctx, call, cudnnGetErrorString(s));
}

const char *dtf_cublas_status_name(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
	default: return "unknown cuBLAS status";
	}
}

void dtf_cuda_fail_cublas(struct dtf_cuda_ctx *ctx, cublasStatus_t s,
			  const char *call)
{
	keep(ctx, call, dtf_cublas_status_name(s));
}

/* Take the kept failure (and any sticky CUDA error) as a return code. */
static int take_failure(struct dtf_cuda_ctx *ctx)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		dtf_cuda_fail_cuda(ctx, e, "a kernel launch");
	if (!ctx->failed)
		return 0;
	ctx->failed = 0;
	return dtf_error(DTF_ERR_RUNTIME, "CUDA device %d: %s", ctx->device,
			 ctx->failure);
}

/* For the synchronous setup calls: a failure right now, as a return code. */
#define SETUP_CUDA(call)                                                     \
	do {                                                                 \
		cudaError_t e_ = (call);                                     \
		if (e_ != cudaSuccess) {                                     \
			rc = dtf_error(DTF_ERR_RUNTIME, "%s: %s (%s)", #call, \
				       cudaGetErrorString(e_),               \
				       cudaGetErrorName(e_));                \
			goto fail;                                           \
		}                                                            \
	} while (0)

/* ---- context ---------------------------------------------------------------- */

int dtf_cuda_ctx_new(int device, enum dtf_cuda_math math,
		     struct dtf_cuda_ctx **out)
{
	int rc = 0;
	*out = NULL;
	struct dtf_cuda_ctx *ctx = dtf_calloc(1, sizeof(*ctx));
	if (!ctx)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	ctx->device = device;
	ctx->math = math;
	SETUP_CUDA(cudaSetDevice(device));
	struct cudaDeviceProp prop;
	SETUP_CUDA(cudaGetDeviceProperties(&prop, device));
	snprintf(ctx->describe, sizeof(ctx->describe),
		 "%.200s (device %d, %.1f GiB, sm_%d%d, %s math)", prop.name,
		 device, (double)prop.totalGlobalMem / (1 << 30), prop.major,
		 prop.minor, math == DTF_CUDA_TF32 ? "tf32" : "fp32");
	for (int s = 0; s < 2; s++)
		SETUP_CUDA(cudaStreamCreateWithFlags(&ctx->stream[s],
						     cudaStreamNonBlocking));
	for (int e = 0; e < DTF_CUDA_NEVENTS; e++)
		SETUP_CUDA(cudaEventCreateWithFlags(&ctx->event[e],
						    cudaEventDisableTiming));
	cublasStatus_t bs = cublasCreate(&ctx->blas);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		ctx->blas = NULL;
		rc = dtf_error(DTF_ERR_RUNTIME, "cublasCreate: %s",
			       dtf_cublas_status_name(bs));
		goto fail;
	}
	cublasSetStream(ctx->blas, ctx->stream[DTF_CUDA_COMPUTE]);
	cublasSetMathMode(ctx->blas, math == DTF_CUDA_TF32
					     ? CUBLAS_TF32_TENSOR_OP_MATH
					     : CUBLAS_DEFAULT_MATH);
	cudnnStatus_t ds = cudnnCreate(&ctx->dnn);
	if (ds != CUDNN_STATUS_SUCCESS) {
		ctx->dnn = NULL;
		rc = dtf_error(DTF_ERR_RUNTIME, "cudnnCreate: %s",
			       cudnnGetErrorString(ds));
		goto fail;
	}
	cudnnSetStream(ctx->dnn, ctx->stream[DTF_CUDA_COMPUTE]);
	if (cudnnCreateTensorDescriptor(&ctx->act) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateActivationDescriptor(&ctx->relu) != CUDNN_STATUS_SUCCESS ||
	    cudnnSetActivationDescriptor(ctx->relu, CUDNN_ACTIVATION_RELU,
					 CUDNN_NOT_PROPAGATE_NAN, 0.0) !=
		    CUDNN_STATUS_SUCCESS) {
		rc = dtf_error(DTF_ERR_RUNTIME, "cuDNN activation descriptors");
		goto fail;
	}
	*out = ctx;
	return 0;
fail:
	dtf_cuda_ctx_free(ctx);
	return rc;
}

static void free_plans(struct dtf_cuda_ctx *ctx)
{
	for (struct dtf_cuda_conv *p = ctx->convs, *next; p; p = next) {
		next = p->next;
		cudnnDestroyTensorDescriptor(p->x);
		cudnnDestroyTensorDescriptor(p->y);
		cudnnDestroyFilterDescriptor(p->w);
		cudnnDestroyConvolutionDescriptor(p->conv_fwd);
		cudnnDestroyConvolutionDescriptor(p->conv_bwd_data);
		cudnnDestroyConvolutionDescriptor(p->conv_bwd_filter);
		dtf_free(p);
	}
	for (struct dtf_cuda_pool *p = ctx->pools, *next; p; p = next) {
		next = p->next;
		if (p->x)
			cudnnDestroyTensorDescriptor(p->x);
		if (p->y)
			cudnnDestroyTensorDescriptor(p->y);
		if (p->pool)
			cudnnDestroyPoolingDescriptor(p->pool);
		dtf_free(p);
	}
	ctx->convs = NULL;
	ctx->pools = NULL;
}

void dtf_cuda_ctx_free(struct dtf_cuda_ctx *ctx)
{
	if (!ctx)
		return;
	cudaSetDevice(ctx->device);
	for (int s = 0; s < 2; s++)
		if (ctx->stream[s])
			cudaStreamSynchronize(ctx->stream[s]);
	free_plans(ctx);
	if (ctx->act)
		cudnnDestroyTensorDescriptor(ctx->act);
	if (ctx->relu)
		cudnnDestroyActivationDescriptor(ctx->relu);
	if (ctx->dnn)
		cudnnDestroy(ctx->dnn);
	if (ctx->blas)
		cublasDestroy(ctx->blas);
	cudaFree(ctx->ws);
	cudaFree(ctx->filter);
	cudaFree(ctx->reduce);
	cudaFree(ctx->blas_ws);
	for (int e = 0; e < DTF_CUDA_NEVENTS; e++)
		if (ctx->event[e])
			cudaEventDestroy(ctx->event[e]);
	for (int s = 0; s < 2; s++)
		if (ctx->stream[s])
			cudaStreamDestroy(ctx->stream[s]);
	cudaGetLastError();
	dtf_free(ctx);
}

const char *dtf_cuda_ctx_describe(const struct dtf_cuda_ctx *ctx)
{
	return ctx->describe;
}

void dtf_cuda_ctx_need(struct dtf_cuda_ctx *ctx, size_t workspace_bytes,
		       size_t filter_floats, size_t reduce_floats)
{
	if (workspace_bytes > ctx->need_ws)
		ctx->need_ws = workspace_bytes;
	if (filter_floats > ctx->need_filter)
		ctx->need_filter = filter_floats;
	if (reduce_floats > ctx->need_reduce)
		ctx->need_reduce = reduce_floats;
}

static int device_alloc(void **p, size_t bytes, const char *what)
{
	cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		*p = NULL;
		cudaGetLastError();
		return dtf_error(e == cudaErrorMemoryAllocation ? DTF_ERR_NOMEM
								: DTF_ERR_RUNTIME,
				 "cudaMalloc of %zu MB for %s: %s", bytes >> 20,
				 what, cudaGetErrorString(e));
	}
	return 0;
}

int dtf_cuda_ctx_reserve(struct dtf_cuda_ctx *ctx)
{
	int rc;
	if (ctx->need_ws > ctx->ws_bytes) {
		cudaFree(ctx->ws);
		ctx->ws = NULL;
		ctx->ws_bytes = 0;
		if ((rc = device_alloc(&ctx->ws, ctx->need_ws,
				       "the cuDNN workspace")) < 0)
			return rc;
		ctx->ws_bytes = ctx->need_ws;
	}
	if (ctx->need_filter > ctx->filter_floats) {
		cudaFree(ctx->filter);
		ctx->filter = NULL;
		ctx->filter_floats = 0;
		if ((rc = device_alloc((void **)&ctx->filter,
				       ctx->need_filter * sizeof(float),
				       "transposed filters")) < 0)
			return rc;
		ctx->filter_floats = ctx->need_filter;
	}
	if (ctx->need_reduce > ctx->reduce_floats) {
		cudaFree(ctx->reduce);
		ctx->reduce = NULL;
		ctx->reduce_floats = 0;
		if ((rc = device_alloc((void **)&ctx->reduce,
				       ctx->need_reduce * sizeof(float),
				       "bias-gradient partial sums")) < 0)
			return rc;
		ctx->reduce_floats = ctx->need_reduce;
	}
	if (!ctx->blas_ws) {
		if ((rc = device_alloc(&ctx->blas_ws, BLAS_WS_BYTES,
				       "the cuBLAS workspace")) < 0)
			return rc;
		ctx->blas_ws_bytes = BLAS_WS_BYTES;
		CUBLAS_KEEP(ctx, cublasSetWorkspace(ctx->blas, ctx->blas_ws,
						    ctx->blas_ws_bytes));
	}
	return dtf_cuda_sync(ctx);
}

size_t dtf_cuda_ctx_scratch_bytes(const struct dtf_cuda_ctx *ctx)
{
	return ctx->ws_bytes + ctx->filter_floats * sizeof(float) +
	       ctx->reduce_floats * sizeof(float) + ctx->blas_ws_bytes;
}

/* ---- memory -------------------------------------------------------------- */

int dtf_cuda_malloc(struct dtf_cuda_ctx *ctx, size_t bytes, void **dptr)
{
	int rc = device_alloc(dptr, bytes, "device buffers");
	if (rc == 0) {
		cudaError_t e = cudaMemset(*dptr, 0, bytes);
		if (e != cudaSuccess) {
			cudaFree(*dptr);
			*dptr = NULL;
			return dtf_error(DTF_ERR_RUNTIME, "cudaMemset: %s",
					 cudaGetErrorString(e));
		}
	}
	(void)ctx;
	return rc;
}

void dtf_cuda_free(struct dtf_cuda_ctx *ctx, void *dptr)
{
	(void)ctx;
	if (dptr)
		cudaFree(dptr);
}

int dtf_cuda_host_alloc(struct dtf_cuda_ctx *ctx, size_t bytes, void **hptr)
{
	(void)ctx;
	cudaError_t e = cudaMallocHost(hptr, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		*hptr = NULL;
		cudaGetLastError();
		return dtf_error(DTF_ERR_NOMEM,
				 "cudaMallocHost of %zu MB (pinned staging): %s",
				 bytes >> 20, cudaGetErrorString(e));
	}
	memset(*hptr, 0, bytes);
	return 0;
}

void dtf_cuda_host_free(struct dtf_cuda_ctx *ctx, void *hptr)
{
	(void)ctx;
	if (hptr)
		cudaFreeHost(hptr);
}

int dtf_cuda_host_register(struct dtf_cuda_ctx *ctx, void *p, size_t bytes)
{
	(void)ctx;
	cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return dtf_error(DTF_ERR_RUNTIME,
				 "cudaHostRegister of %zu MB: %s", bytes >> 20,
				 cudaGetErrorString(e));
	}
	return 0;
}

void dtf_cuda_host_unregister(struct dtf_cuda_ctx *ctx, void *p)
{
	(void)ctx;
	if (p)
		cudaHostUnregister(p);
	cudaGetLastError();
}

/* ---- copies, streams, events ---------------------------------------------- */

static int copy_sync(struct dtf_cuda_ctx *ctx, void *dst, const void *src,
		     size_t bytes, enum cudaMemcpyKind kind)
{
	int rc = dtf_cuda_sync(ctx);
	if (rc < 0)
		return rc;
	cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return dtf_error(DTF_ERR_RUNTIME, "cudaMemcpy of %zu bytes: %s",
				 bytes, cudaGetErrorString(e));
	}
	return 0;
}

int dtf_cuda_upload(struct dtf_cuda_ctx *ctx, void *dst, const void *src,
		    size_t bytes)
{
	return copy_sync(ctx, dst, src, bytes, cudaMemcpyHostToDevice);
}

int dtf_cuda_download(struct dtf_cuda_ctx *ctx, void *dst, const void *src,
		      size_t bytes)
{
	return copy_sync(ctx, dst, src, bytes, cudaMemcpyDeviceToHost);
}

void dtf_cuda_copy_async(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			 void *dst, const void *src, size_t bytes)
{
	CUDA_KEEP(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
				       ctx->stream[s]));
}

void dtf_cuda_event_record(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			   int e)
{
	CUDA_KEEP(ctx, cudaEventRecord(ctx->event[e], ctx->stream[s]));
}

void dtf_cuda_stream_wait(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			  int e)
{
	CUDA_KEEP(ctx, cudaStreamWaitEvent(ctx->stream[s], ctx->event[e], 0));
}

int dtf_cuda_event_sync(struct dtf_cuda_ctx *ctx, int e)
{
	CUDA_KEEP(ctx, cudaEventSynchronize(ctx->event[e]));
	return take_failure(ctx);
}

int dtf_cuda_sync(struct dtf_cuda_ctx *ctx)
{
	for (int s = 0; s < 2; s++)
		CUDA_KEEP(ctx, cudaStreamSynchronize(ctx->stream[s]));
	return take_failure(ctx);
}

/* ---- own kernels with a one-line host side ---------------------------------- */

#define STREAM(ctx) ((ctx)->stream[DTF_CUDA_COMPUTE])

void dtf_cuda_relu_grad(struct dtf_cuda_ctx *ctx, size_t n, const float *dy,
			const float *y, float *dx)
{
	LAUNCHED(ctx, dtf_cu_relu_grad(STREAM(ctx), n, dy, y, dx));
}

void dtf_cuda_bias_add(struct dtf_cuda_ctx *ctx, size_t rows, int c,
		       const float *x, const float *bias, float *y)
{
	LAUNCHED(ctx, dtf_cu_bias_add(STREAM(ctx), rows, c, x, bias, y));
}

void dtf_cuda_bias_add_grad(struct dtf_cuda_ctx *ctx, size_t rows, int c,
			    const float *dy, float *db)
{
	if (dtf_cuda_bias_add_grad_scratch(rows, c) > ctx->reduce_floats) {
		dtf_cuda_fail_cuda(ctx, cudaErrorInvalidValue,
				   "dtf_cuda_bias_add_grad (scratch not reserved for this shape)");
		return;
	}
	LAUNCHED(ctx, dtf_cu_bias_add_grad(STREAM(ctx), rows, c, dy,
					   ctx->reduce, db));
}

void dtf_cuda_add(struct dtf_cuda_ctx *ctx, size_t n, const float *a,
		  const float *b, float *y)
{
	LAUNCHED(ctx, dtf_cu_add(STREAM(ctx), n, a, b, y));
}

void dtf_cuda_slice(struct dtf_cuda_ctx *ctx, size_t outer, size_t inner,
		    size_t begin, size_t len, const float *x, float *y)
{
	if (!outer || !len)
		return;
	CUDA_KEEP(ctx, cudaMemcpy2DAsync(y, len * sizeof(float), x + begin,
					 inner * sizeof(float),
					 len * sizeof(float), outer,
					 cudaMemcpyDeviceToDevice, STREAM(ctx)));
}

void dtf_cuda_slice_grad(struct dtf_cuda_ctx *ctx, size_t outer, size_t inner,
			 size_t begin, size_t len, const float *dy, float *dx)
{
	if (!outer || !inner)
		return;
	CUDA_KEEP(ctx, cudaMemsetAsync(dx, 0, outer * inner * sizeof(float),
				       STREAM(ctx)));
	if (!len)
		return;
	CUDA_KEEP(ctx, cudaMemcpy2DAsync(dx + begin, inner * sizeof(float), dy,
					 len * sizeof(float),
					 len * sizeof(float), outer,
					 cudaMemcpyDeviceToDevice, STREAM(ctx)));
}

void dtf_cuda_fill(struct dtf_cuda_ctx *ctx, float *p, size_t n, float v)
{
	LAUNCHED(ctx, dtf_cu_fill(STREAM(ctx), p, n, v));
}

void dtf_cuda_layer_norm(struct dtf_cuda_ctx *ctx, size_t rows, int c,
			 const float *x, const float *gamma, const float *beta,
			 float eps, float *y)
{
	LAUNCHED(ctx, dtf_cu_layer_norm(STREAM(ctx), rows, c, x, gamma, beta,
					eps, y));
}

void dtf_cuda_layer_norm_grad_input(struct dtf_cuda_ctx *ctx, size_t rows,
				    int c, const float *x, const float *gamma,
				    const float *dy, float eps, float *dx)
{
	LAUNCHED(ctx, dtf_cu_layer_norm_grad_input(STREAM(ctx), rows, c, x,
						   gamma, dy, eps, dx));
}

void dtf_cuda_layer_norm_grad_gamma(struct dtf_cuda_ctx *ctx, size_t rows,
				    int c, const float *x, const float *dy,
				    float eps, float *dgamma)
{
	if (dtf_cuda_layer_norm_grad_gamma_scratch(rows) > ctx->reduce_floats) {
		dtf_cuda_fail_cuda(ctx, cudaErrorInvalidValue,
				   "dtf_cuda_layer_norm_grad_gamma (scratch not reserved for this shape)");
		return;
	}
	LAUNCHED(ctx, dtf_cu_layer_norm_grad_gamma(STREAM(ctx), rows, c, x, dy,
						   eps, (double *)ctx->reduce,
						   dgamma));
}

void dtf_cuda_gelu(struct dtf_cuda_ctx *ctx, size_t n, int approximate,
		   const float *x, float *y)
{
	LAUNCHED(ctx, dtf_cu_gelu(STREAM(ctx), n, approximate, x, y));
}

void dtf_cuda_gelu_grad(struct dtf_cuda_ctx *ctx, size_t n, int approximate,
			const float *dy, const float *x, float *dx)
{
	LAUNCHED(ctx, dtf_cu_gelu_grad(STREAM(ctx), n, approximate, dy, x, dx));
}

void dtf_cuda_embedding(struct dtf_cuda_ctx *ctx, size_t n, int vocab,
			int dim, const int32_t *ids, const float *table,
			float *y)
{
	LAUNCHED(ctx, dtf_cu_embedding(STREAM(ctx), n, vocab, dim, ids, table, y));
}

void dtf_cuda_embedding_grad(struct dtf_cuda_ctx *ctx, size_t n, int vocab,
			     int dim, const float *dy, const int32_t *ids,
			     float *dtable)
{
	LAUNCHED(ctx, dtf_cu_embedding_grad(STREAM(ctx), n, vocab, dim, dy, ids,
					    dtable));
}

void dtf_cuda_causal_self_attention(struct dtf_cuda_ctx *ctx, int b, int t,
				    int c, int heads, const float *qkv,
				    float *y)
{
	LAUNCHED(ctx, dtf_cu_causal_self_attention(STREAM(ctx), b, t, c, heads,
						   qkv, y));
}

void dtf_cuda_causal_self_attention_grad(struct dtf_cuda_ctx *ctx, int b,
					 int t, int c, int heads,
					 const float *qkv, const float *dy,
					 float *dqkv)
{
	if (dtf_cuda_attention_grad_scratch(b, t, heads) > ctx->reduce_floats) {
		dtf_cuda_fail_cuda(ctx, cudaErrorInvalidValue,
				   "dtf_cuda_causal_self_attention_grad (scratch not reserved for this shape)");
		return;
	}
	LAUNCHED(ctx, dtf_cu_causal_self_attention_grad(STREAM(ctx), b, t, c,
							heads, qkv, dy,
							ctx->reduce, dqkv));
}

static void dropout(struct dtf_cuda_ctx *ctx, size_t rows, size_t cols,
		    float rate, struct dtf_philox_key key, const uint64_t *ids,
		    uint32_t salt, const float *x, float *y)
{
	/* the edge cases exactly as elementwise.c's apply_mask */
	if (rate <= 0.0f) {
		if (x != y)
			CUDA_KEEP(ctx, cudaMemcpyAsync(y, x, rows * cols * sizeof *y,
						       cudaMemcpyDeviceToDevice,
						       STREAM(ctx)));
		return;
	}
	if (rate >= 1.0f) {
		CUDA_KEEP(ctx, cudaMemsetAsync(y, 0, rows * cols * sizeof *y,
					       STREAM(ctx)));
		return;
	}
	const float scale = 1.0f / (1.0f - rate);
	LAUNCHED(ctx, dtf_cu_dropout(STREAM(ctx), rows, cols, rate, scale,
				     key.k[0], key.k[1], ids, salt, x, y));
}

void dtf_cuda_dropout(struct dtf_cuda_ctx *ctx, size_t rows, size_t cols,
		      float rate, struct dtf_philox_key key,
		      const uint64_t *example_id, uint32_t salt,
		      const float *x, float *y)
{
	dropout(ctx, rows, cols, rate, key, example_id, salt, x, y);
}

void dtf_cuda_dropout_grad(struct dtf_cuda_ctx *ctx, size_t rows,
			   size_t cols, float rate, struct dtf_philox_key key,
			   const uint64_t *example_id, uint32_t salt,
			   const float *dy, float *dx)
{
	dropout(ctx, rows, cols, rate, key, example_id, salt, dy, dx);
}

void dtf_cuda_sparse_softmax_xent(struct dtf_cuda_ctx *ctx, size_t rows,
				  int classes, const float *logits,
				  const int32_t *labels, size_t valid,
				  int per, float scale, float *loss,
				  float *sum_f, double *sum_acc)
{
	LAUNCHED(ctx, dtf_cu_xent(STREAM(ctx), rows, classes, logits, labels,
				  valid, per, scale, loss, sum_f, sum_acc));
}

void dtf_cuda_sparse_softmax_xent_grad(struct dtf_cuda_ctx *ctx, size_t rows,
				       int classes, const float *logits,
				       const int32_t *labels, size_t valid,
				       float scale, float *dlogits)
{
	LAUNCHED(ctx, dtf_cu_xent_grad(STREAM(ctx), rows, classes, logits,
				       labels, valid, scale, dlogits));
}

void dtf_cuda_count_correct(struct dtf_cuda_ctx *ctx, size_t rows,
			    int classes, const float *logits,
			    const int32_t *labels, size_t valid, int per,
			    float *count_f, double *count_acc)
{
	LAUNCHED(ctx, dtf_cu_count_correct(STREAM(ctx), rows, classes, logits,
					   labels, valid, per, count_f,
					   count_acc));
}

void dtf_cuda_sgd(struct dtf_cuda_ctx *ctx, size_t n, float *p,
		  const float *g, float *v, float lr, float momentum,
		  int nesterov)
{
	LAUNCHED(ctx, dtf_cu_sgd(STREAM(ctx), n, p, g, v, lr, momentum,
				 nesterov));
}

void dtf_cuda_adam(struct dtf_cuda_ctx *ctx, size_t n, float *p,
		   const float *g, float *m, float *v, float step, float b1,
		   float b2, float eps)
{
	LAUNCHED(ctx, dtf_cu_adam(STREAM(ctx), n, p, g, m, v, step, b1, b2,
				  eps));
}
