/*
 * internal.h - the CUDA backend's private parts: the context and the
 * launchers of the own kernels (kernels.cu).  Included only by the files of
 * this directory; valid C and C++.
 */
#ifndef DTF_OPS_CUDA_INTERNAL_H
#define DTF_OPS_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ops/cuda/colsum.h"

#ifndef __CUDACC__
#include <cublas_v2.h>
#include <cudnn.h>

#include "ops/cuda/cuda.h"

struct dtf_cuda_conv {
	struct dtf_window_geom g;
	cudnnTensorDescriptor_t x, y;  /* NHWC */
	cudnnFilterDescriptor_t w;     /* KRSC = cuDNN's NHWC filter */
	cudnnConvolutionDescriptor_t conv_fwd, conv_bwd_data, conv_bwd_filter;
	cudnnConvolutionFwdAlgo_t fwd;
	cudnnConvolutionBwdDataAlgo_t bwd_data;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter;
	size_t ws_bytes;               /* max over the three directions */
	struct dtf_cuda_conv *next;
};

struct dtf_cuda_pool {
	struct dtf_window_geom g;
	int use_cudnn;                 /* symmetric padding */
	cudnnTensorDescriptor_t x, y;
	cudnnPoolingDescriptor_t pool;
	struct dtf_cuda_pool *next;
};

struct dtf_cuda_ctx {
	int device;
	enum dtf_cuda_math math;
	char describe[256];
	cudaStream_t stream[2];        /* DTF_CUDA_COMPUTE, DTF_CUDA_COPY */
	cudaEvent_t event[DTF_CUDA_NEVENTS];
	cublasHandle_t blas;
	cudnnHandle_t dnn;
	cudnnTensorDescriptor_t act;   /* reset per relu call (no allocation) */
	cudnnActivationDescriptor_t relu;
	struct dtf_cuda_conv *convs;   /* plan caches */
	struct dtf_cuda_pool *pools;
	/* scratch: needs raised while planning, allocated once */
	size_t need_ws, need_filter, need_reduce;
	void *ws;
	size_t ws_bytes;
	float *filter;                 /* transposed filter / its gradient */
	size_t filter_floats;
	float *reduce;                 /* partial sums of bias_add_grad */
	size_t reduce_floats;
	void *blas_ws;
	size_t blas_ws_bytes;
	/* first failure since the last sync */
	int failed;
	char failure[512];
};

/* Keep the first failure of `call` (a CUDA, cuDNN or cuBLAS status). */
void dtf_cuda_fail_cuda(struct dtf_cuda_ctx *ctx, cudaError_t e,
			const char *call);
void dtf_cuda_fail_cudnn(struct dtf_cuda_ctx *ctx, cudnnStatus_t s,
			 const char *call);
void dtf_cuda_fail_cublas(struct dtf_cuda_ctx *ctx, cublasStatus_t s,
			  const char *call);
const char *dtf_cublas_status_name(cublasStatus_t s);

#define CUDA_KEEP(ctx, call)                                              \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess)                                    \
			dtf_cuda_fail_cuda(ctx, e_, #call);               \
	} while (0)
#define CUDNN_KEEP(ctx, call)                                             \
	do {                                                              \
		cudnnStatus_t s_ = (call);                                \
		if (s_ != CUDNN_STATUS_SUCCESS)                           \
			dtf_cuda_fail_cudnn(ctx, s_, #call);              \
	} while (0)
#define CUBLAS_KEEP(ctx, call)                                            \
	do {                                                              \
		cublasStatus_t s_ = (call);                               \
		if (s_ != CUBLAS_STATUS_SUCCESS)                          \
			dtf_cuda_fail_cublas(ctx, s_, #call);             \
	} while (0)

/* After a launcher: keep a launch failure. */
#define LAUNCHED(ctx, what) CUDA_KEEP(ctx, (what, cudaGetLastError()))
#endif /* !__CUDACC__ */

#ifdef __cplusplus
extern "C" {
#endif

/* Launchers of kernels.cu: asynchronous on `s`; check with
 * cudaGetLastError().  Arguments as the public kernels of cuda.h. */
void dtf_cu_transpose(cudaStream_t s, int rows, int cols, const float *in,
		      float *out);
void dtf_cu_relu_grad(cudaStream_t s, size_t n, const float *dy,
		      const float *y, float *dx);
void dtf_cu_bias_add(cudaStream_t s, size_t rows, int c, const float *x,
		     const float *bias, float *y);
/* db (c) = column sums of dy (rows, c); part holds
 * dtf_cuda_bias_add_grad_scratch(rows, c) floats. */
void dtf_cu_bias_add_grad(cudaStream_t s, size_t rows, int c,
			  const float *dy, float *part, float *db);
void dtf_cu_add(cudaStream_t s, size_t n, const float *a, const float *b,
		float *y);
void dtf_cu_fill(cudaStream_t s, float *p, size_t n, float v);
void dtf_cu_layer_norm(cudaStream_t s, size_t rows, int c, const float *x,
		       const float *gamma, const float *beta, float eps,
		       float *y);
void dtf_cu_layer_norm_grad_input(cudaStream_t s, size_t rows, int c,
				  const float *x, const float *gamma,
				  const float *dy, float eps, float *dx);
/* stats holds dtf_cuda_layer_norm_grad_gamma_scratch(rows) floats */
void dtf_cu_layer_norm_grad_gamma(cudaStream_t s, size_t rows, int c,
				  const float *x, const float *dy, float eps,
				  double *stats, float *dgamma);
void dtf_cu_gelu(cudaStream_t s, size_t n, int approximate, const float *x,
		 float *y);
void dtf_cu_gelu_grad(cudaStream_t s, size_t n, int approximate,
		      const float *dy, const float *x, float *dx);
void dtf_cu_embedding(cudaStream_t s, size_t n, int vocab, int dim,
		      const int32_t *ids, const float *table, float *y);
void dtf_cu_embedding_grad(cudaStream_t s, size_t n, int vocab, int dim,
			   const float *dy, const int32_t *ids, float *dtable);
void dtf_cu_causal_self_attention(cudaStream_t s, int b, int t, int c,
				  int heads, const float *qkv, float *y);
/* stats: 3 * b * heads * t floats */
void dtf_cu_causal_self_attention_grad(cudaStream_t s, int b, int t, int c,
				       int heads, const float *qkv,
				       const float *dy, float *stats,
				       float *dqkv);
void dtf_cu_dropout(cudaStream_t s, size_t rows, size_t cols, float rate,
		    float scale, uint32_t k0, uint32_t k1,
		    const uint64_t *example_id, uint32_t salt, const float *x,
		    float *y);
/* Geometry passed flat: n h w c kh kw stride_h stride_w dil_h dil_w
 * pad_top pad_left oh ow. */
void dtf_cu_max_pool(cudaStream_t s, const int *geom14, const float *x,
		     float *y);
void dtf_cu_max_pool_grad(cudaStream_t s, const int *geom14, const float *x,
			  const float *dy, float *dx);
void dtf_cu_xent(cudaStream_t s, size_t rows, int classes,
		 const float *logits, const int32_t *labels, size_t valid,
		 int per, float scale, float *loss, float *sum_f,
		 double *sum_acc);
void dtf_cu_xent_grad(cudaStream_t s, size_t rows, int classes,
		      const float *logits, const int32_t *labels, size_t valid,
		      float scale, float *dlogits);
void dtf_cu_count_correct(cudaStream_t s, size_t rows, int classes,
			  const float *logits, const int32_t *labels,
			  size_t valid, int per, float *count_f,
			  double *count_acc);
void dtf_cu_sgd(cudaStream_t s, size_t n, float *p, const float *g,
		float *v, float lr, float momentum, int nesterov);
void dtf_cu_adam(cudaStream_t s, size_t n, float *p, const float *g,
		 float *m, float *v, float step, float b1, float b2,
		 float eps);

#ifdef __cplusplus
}
#endif

#endif
