/*
 * cuda.h - the CUDA backend: a device context and kernels on device memory.
 *
 * The same contract as the CPU kernels (ops/cpu/kernels.h): float32, NHWC,
 * TF's HWIO filters, outputs written (not accumulated into), the same
 * argument order, and kernels that never allocate, print or fail.  Every
 * pointer a kernel takes is device memory (or, where said, pinned host
 * memory); every kernel is asynchronous on the context's compute stream.
 * A failure the GPU reports (a launch error, a cuDNN/cuBLAS status) is kept
 * in the context, first one wins, and returned by the next dtf_cuda_sync().
 *
 * What runs where:
 *   conv2d, its input and filter gradients: cuDNN (legacy convolution API),
 *     NHWC tensors, filters transposed HWIO <-> KRSC (cuDNN's NHWC filter
 *     layout) into a scratch buffer, as TensorFlow does for cuDNN; the
 *     algorithm of each direction is cuDNN's heuristic choice
 *     (cudnnGet*Algorithm_v7), preferring deterministic ones, once per
 *     geometry (plans are cached per shape in the context);
 *   max_pool2d: cuDNN pooling where the padding is symmetric, else an own
 *     kernel; its gradient: an own kernel (the graph's gradient op takes x,
 *     not y, and routes ties to the first maximum as TF does);
 *   relu: cuDNN activation; relu_grad, bias_add, add, dropout, softmax
 *     cross-entropy, count_correct, embedding and its gradient, layer_norm
 *     and its gradients, gelu and its gradient, the optimizer updates: own
 *     kernels;
 *   matmul: cuBLAS sgemm.
 * Precision: DTF_CUDA_FP32 restricts cuDNN to FMA kernels and cuBLAS to its
 * default (no TF32) math, so results differ from the CPU only by summation
 * order; DTF_CUDA_TF32 lets both use TF32 tensor cores (10-bit mantissa
 * products, FP32 accumulation), as TF's allow_tensor_float_32_execution.
 * The own kernels are compiled without FMA contraction (-fmad=false), so the
 * elementwise ones (dropout, relu_grad, bias_add, add, optimizer updates)
 * give the CPU's bits for the same inputs.
 *
 * Memory: all device and pinned memory is allocated at setup (planning);
 * scratch the kernels need (cuDNN workspace, transposed filters, cuBLAS
 * workspace, the ones vector) is declared while planning with
 * dtf_cuda_ctx_need() and allocated once by dtf_cuda_ctx_reserve().
 *
 * Without the backend (built with -Dcuda=disabled, or the toolkit missing),
 * dtf_cuda_device_count() returns 0 and every constructor returns
 * DTF_ERR_RUNTIME saying so; nothing else may be called.
 */
#ifndef DTF_OPS_CUDA_CUDA_H
#define DTF_OPS_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "ops/cuda/colsum.h"
#include "ops/cpu/kernels.h"

struct dtf_cuda_ctx;
struct dtf_cuda_conv;
struct dtf_cuda_pool;

enum dtf_cuda_math {
	DTF_CUDA_FP32 = 0, /* IEEE float32 FMA arithmetic (default) */
	DTF_CUDA_TF32 = 1, /* TF32 tensor cores for conv2d and matmul */
};

/* 1 when this build has the CUDA backend. */
int dtf_cuda_built(void);

/*
 * Number of CUDA devices this process may use (cudaGetDeviceCount, which
 * honours CUDA_VISIBLE_DEVICES).  0 when built without CUDA, when no driver
 * is installed, or when no device is visible; then `why` (may be NULL)
 * receives the reason.  Never fails, never aborts.
 */
int dtf_cuda_device_count(char *why, size_t why_size);

/*
 * Open device `device`: make it current for this thread, create the compute
 * and copy streams, events, the cuBLAS and cuDNN handles.
 * Errors: DTF_ERR_RUNTIME (no such device, driver failure, not built).
 */
int dtf_cuda_ctx_new(int device, enum dtf_cuda_math math,
		     struct dtf_cuda_ctx **out);
/* Free the context, its plans and its scratch.  NULL is a no-op. */
void dtf_cuda_ctx_free(struct dtf_cuda_ctx *ctx);

/* "NVIDIA H200 (device 0, 139.8 GiB, sm_90)". */
const char *dtf_cuda_ctx_describe(const struct dtf_cuda_ctx *ctx);

/* Raise the scratch the kernels will need: cuDNN workspace (bytes),
 * transposed-filter scratch (floats), partial sums of bias_add_grad
 * (floats, dtf_cuda_bias_add_grad_scratch()).  The conv planner calls it
 * itself. */
void dtf_cuda_ctx_need(struct dtf_cuda_ctx *ctx, size_t workspace_bytes,
		       size_t filter_floats, size_t reduce_floats);
/* Allocate the scratch declared so far (once, after planning).
 * Errors: DTF_ERR_NOMEM (device memory), DTF_ERR_RUNTIME. */
int dtf_cuda_ctx_reserve(struct dtf_cuda_ctx *ctx);
/* Device bytes the context's scratch holds (after reserve). */
size_t dtf_cuda_ctx_scratch_bytes(const struct dtf_cuda_ctx *ctx);

/* ---- memory (setup time only) ------------------------------------------ */

/* Device memory, zeroed, 256-byte aligned.  Errors: DTF_ERR_NOMEM. */
int dtf_cuda_malloc(struct dtf_cuda_ctx *ctx, size_t bytes, void **dptr);
void dtf_cuda_free(struct dtf_cuda_ctx *ctx, void *dptr);
/* Pinned (page-locked) host memory, zeroed.  Errors: DTF_ERR_NOMEM. */
int dtf_cuda_host_alloc(struct dtf_cuda_ctx *ctx, size_t bytes, void **hptr);
void dtf_cuda_host_free(struct dtf_cuda_ctx *ctx, void *hptr);
/* Pin existing host memory (cudaHostRegister) so asynchronous copies to and
 * from it overlap; unregister before freeing it.  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_host_register(struct dtf_cuda_ctx *ctx, void *p, size_t bytes);
void dtf_cuda_host_unregister(struct dtf_cuda_ctx *ctx, void *p);

/* ---- copies, streams, events ---------------------------------------------- */

enum dtf_cuda_stream { DTF_CUDA_COMPUTE = 0, DTF_CUDA_COPY = 1 };
#define DTF_CUDA_NEVENTS 4

/* Synchronous copies (setup, tests): wait for the compute stream first.
 * Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_upload(struct dtf_cuda_ctx *ctx, void *dst, const void *src,
		    size_t bytes);
int dtf_cuda_download(struct dtf_cuda_ctx *ctx, void *dst, const void *src,
		      size_t bytes);
/* Asynchronous copy in any direction on stream s (pinned host memory for
 * overlap).  A failure is kept for the next sync. */
void dtf_cuda_copy_async(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			 void *dst, const void *src, size_t bytes);
/* Record event e (0..DTF_CUDA_NEVENTS-1) on stream s; make stream s wait
 * for event e; block the host until event e has happened. */
void dtf_cuda_event_record(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			   int e);
void dtf_cuda_stream_wait(struct dtf_cuda_ctx *ctx, enum dtf_cuda_stream s,
			  int e);
int dtf_cuda_event_sync(struct dtf_cuda_ctx *ctx, int e);
/* Wait for both streams; return the first failure since the last sync
 * (DTF_ERR_RUNTIME naming the call and the CUDA/cuDNN/cuBLAS status). */
int dtf_cuda_sync(struct dtf_cuda_ctx *ctx);

/* ---- conv2d (cuDNN) ------------------------------------------------------ */

/*
 * Plan the forward, backward-data and backward-filter convolutions of one
 * geometry: descriptors, each direction's algorithm (cuDNN heuristics,
 * deterministic preferred, FMA-only under DTF_CUDA_FP32) and its workspace.
 * Cached: the same geometry returns the same plan, owned by the context.
 * Errors: DTF_ERR_CONFIG when cuDNN cannot do the geometry: padding larger
 * at the bottom/right than at the top/left (TF "same" padding with even
 * kernels or strides > 1, or explicit asymmetric padding: cuDNN pads
 * symmetrically), or no algorithm; DTF_ERR_RUNTIME for cuDNN failures.
 */
int dtf_cuda_conv2d_plan(struct dtf_cuda_ctx *ctx,
			 const struct dtf_window_geom *g,
			 const struct dtf_cuda_conv **out);
/* As the CPU's: y (n, oh, ow, o) = x (n, h, w, c) conv w (kh, kw, c, o). */
void dtf_cuda_conv2d(struct dtf_cuda_ctx *ctx, const struct dtf_cuda_conv *p,
		     const float *x, const float *w, float *y);
/* dx (n, h, w, c) from dy (n, oh, ow, o) and w (kh, kw, c, o). */
void dtf_cuda_conv2d_backprop_input(struct dtf_cuda_ctx *ctx,
				    const struct dtf_cuda_conv *p,
				    const float *dy, const float *w, float *dx);
/* dw (kh, kw, c, o) from x and dy. */
void dtf_cuda_conv2d_backprop_filter(struct dtf_cuda_ctx *ctx,
				     const struct dtf_cuda_conv *p,
				     const float *x, const float *dy, float *dw);

/* ---- pooling, activations ------------------------------------------------ */

/* Plan max pooling of one geometry (cuDNN descriptors where the padding is
 * symmetric).  Cached like conv plans.  Errors: DTF_ERR_RUNTIME. */
int dtf_cuda_pool_plan(struct dtf_cuda_ctx *ctx,
		       const struct dtf_window_geom *g,
		       const struct dtf_cuda_pool **out);
void dtf_cuda_max_pool2d(struct dtf_cuda_ctx *ctx,
			 const struct dtf_cuda_pool *p, const float *x,
			 float *y);
/* dx = dy routed to the first maximum of each window of x (TF). */
void dtf_cuda_max_pool2d_grad(struct dtf_cuda_ctx *ctx,
			      const struct dtf_cuda_pool *p, const float *x,
			      const float *dy, float *dx);

/* y = max(x, 0); in place allowed. */
void dtf_cuda_relu(struct dtf_cuda_ctx *ctx, size_t n, const float *x,
		   float *y);
/* dx = dy where y > 0, else 0. */
void dtf_cuda_relu_grad(struct dtf_cuda_ctx *ctx, size_t n, const float *dy,
			const float *y, float *dx);

/* ---- dense ------------------------------------------------------------- */

/* c (m, n) = op(a) op(b), row-major, as dtf_cpu_matmul (cuBLAS sgemm). */
void dtf_cuda_matmul(struct dtf_cuda_ctx *ctx, int m, int n, int k,
		     const float *a, int trans_a, const float *b, int trans_b,
		     float *c);
/* y (rows, c) = x + bias (c); in place allowed. */
void dtf_cuda_bias_add(struct dtf_cuda_ctx *ctx, size_t rows, int c,
		       const float *x, const float *bias, float *y);
/* db (c) = column sums of dy (rows, c), deterministic (fixed blocks of
 * rows, then the blocks' sums in order).  Needs the scratch of
 * dtf_cuda_bias_add_grad_scratch(rows, c) reserved. */
void dtf_cuda_bias_add_grad(struct dtf_cuda_ctx *ctx, size_t rows, int c,
			    const float *dy, float *db);
/* y = a + b, n elements; y may alias a or b. */
void dtf_cuda_add(struct dtf_cuda_ctx *ctx, size_t n, const float *a,
		  const float *b, float *y);
/* y (outer, len) = x (outer, inner)[:, begin:begin+len] and its gradient
 * dx (outer, inner) = zeros with dy (outer, len) at begin, as the CPU's
 * dtf_cpu_slice_inner / dtf_cpu_slice_grad: 2-D copies of 4-byte
 * elements (cudaMemcpy2DAsync; int32 tensors too), no arithmetic. */
void dtf_cuda_slice(struct dtf_cuda_ctx *ctx, size_t outer, size_t inner,
		    size_t begin, size_t len, const float *x, float *y);
void dtf_cuda_slice_grad(struct dtf_cuda_ctx *ctx, size_t outer, size_t inner,
			 size_t begin, size_t len, const float *dy, float *dx);
/* p[0..n) = v. */
void dtf_cuda_fill(struct dtf_cuda_ctx *ctx, float *p, size_t n, float v);

/* ---- layer normalization (norm.c's arithmetic) --------------------------- */

/*
 * As dtf_cpu_layer_norm and its two gradients: one thread per row (per
 * column for gamma), the statistics in double in the CPU's order, so the
 * results are the CPU's up to the last bit of double sqrt and division
 * (both correctly rounded on either side).  The gamma gradient needs the
 * scratch of dtf_cuda_layer_norm_grad_gamma_scratch(rows) reserved (the
 * row statistics, computed first).  dbeta is dtf_cuda_bias_add_grad.
 */
void dtf_cuda_layer_norm(struct dtf_cuda_ctx *ctx, size_t rows, int c,
			 const float *x, const float *gamma, const float *beta,
			 float eps, float *y);
void dtf_cuda_layer_norm_grad_input(struct dtf_cuda_ctx *ctx, size_t rows,
				    int c, const float *x, const float *gamma,
				    const float *dy, float eps, float *dx);
void dtf_cuda_layer_norm_grad_gamma(struct dtf_cuda_ctx *ctx, size_t rows,
				    int c, const float *x, const float *dy,
				    float eps, float *dgamma);

/* ---- gelu (activation.c's arithmetic) ------------------------------------ */

/* As dtf_cpu_gelu and dtf_cpu_gelu_grad (approximate != 0: the tanh form
 * of GPT-2), in double with CUDA's erf, tanh and exp (within 2 ulp in
 * double, so the float results are the CPU's but for the rare value next
 * to a rounding boundary).  In place allowed for the forward. */
void dtf_cuda_gelu(struct dtf_cuda_ctx *ctx, size_t n, int approximate,
		   const float *x, float *y);
void dtf_cuda_gelu_grad(struct dtf_cuda_ctx *ctx, size_t n, int approximate,
			const float *dy, const float *x, float *dx);

/* ---- embedding: the CPU's gather and scatter-add, bit for bit ------------ */

/* As dtf_cpu_embedding: y (n, dim) = table rows of ids (device int32). */
void dtf_cuda_embedding(struct dtf_cuda_ctx *ctx, size_t n, int vocab,
			int dim, const int32_t *ids, const float *table,
			float *y);
/* As dtf_cpu_embedding_grad: one thread per table element sums the dy of
 * the positions with its id in position order (no atomics: the CPU's
 * bits).  Work is vocab * dim * n id comparisons, meant for small
 * (character, byte) vocabularies. */
void dtf_cuda_embedding_grad(struct dtf_cuda_ctx *ctx, size_t n, int vocab,
			     int dim, const float *dy, const int32_t *ids,
			     float *dtable);

/* ---- causal self-attention --------------------------------------------- */

/* As dtf_cpu_causal_self_attention (qkv (b, t, 3c) -> y (b, t, c)): one
 * thread per (example, head, query) row, two passes over its keys in
 * float (not the CPU's bits: float sums, CUDA's expf). */
void dtf_cuda_causal_self_attention(struct dtf_cuda_ctx *ctx, int b, int t,
				    int c, int heads, const float *qkv,
				    float *y);
/* As dtf_cpu_causal_self_attention_grad: one thread per query row (dq and
 * the row's softmax statistics, kept in the reduce scratch), then one per
 * key row (dk, dv over the queries that see it; no atomics, so
 * deterministic).  Needs dtf_cuda_attention_grad_scratch(b, t, heads)
 * floats of reduce scratch reserved (dtf_cuda_ctx_need). */
void dtf_cuda_causal_self_attention_grad(struct dtf_cuda_ctx *ctx, int b,
					 int t, int c, int heads,
					 const float *qkv, const float *dy,
					 float *dqkv);
static inline size_t dtf_cuda_attention_grad_scratch(int b, int t, int heads)
{
	return 3 * (size_t)b * (size_t)t * (size_t)heads;
}

/* ---- dropout: the CPU's Philox stream, bit for bit ---------------------- */

/* As dtf_cpu_dropout; example_id is a device array (rows). */
void dtf_cuda_dropout(struct dtf_cuda_ctx *ctx, size_t rows, size_t cols,
		      float rate, struct dtf_philox_key key,
		      const uint64_t *example_id, uint32_t salt,
		      const float *x, float *y);
void dtf_cuda_dropout_grad(struct dtf_cuda_ctx *ctx, size_t rows,
			   size_t cols, float rate, struct dtf_philox_key key,
			   const uint64_t *example_id, uint32_t salt,
			   const float *dy, float *dx);

/* ---- loss ---------------------------------------------------------------- */

/*
 * Sparse softmax cross-entropy over rows < valid (double arithmetic per
 * row, one deterministic block reduction), sum = the rows' total / per
 * (per: positions of one example, 1 for (batch, classes) logits; a
 * (batch, time, classes) loss is the mean over positions per example).
 * Writes, each when not NULL: *loss = (float)(sum * scale) (the loss
 * node), *sum_f = (float)sum (the statistics slot behind the gradients),
 * and *sum_acc += sum (double).  labels: device int32 (rows).
 */
void dtf_cuda_sparse_softmax_xent(struct dtf_cuda_ctx *ctx, size_t rows,
				  int classes, const float *logits,
				  const int32_t *labels, size_t valid,
				  int per, float scale, float *loss,
				  float *sum_f, double *sum_acc);
/* dlogits as dtf_cpu_sparse_softmax_xent_grad. */
void dtf_cuda_sparse_softmax_xent_grad(struct dtf_cuda_ctx *ctx, size_t rows,
				       int classes, const float *logits,
				       const int32_t *labels, size_t valid,
				       float scale, float *dlogits);
/* Rows < valid whose first argmax is the label, count = that / per (the
 * fraction of an example's positions): *count_f = (float)count and/or
 * *count_acc += count (either may be NULL). */
void dtf_cuda_count_correct(struct dtf_cuda_ctx *ctx, size_t rows,
			    int classes, const float *logits,
			    const int32_t *labels, size_t valid, int per,
			    float *count_f, double *count_acc);

/* ---- fused optimizer updates (optimizer.h formulas, float) -------------- */

/* SGD: v NULL means no momentum. */
void dtf_cuda_sgd(struct dtf_cuda_ctx *ctx, size_t n, float *p,
		  const float *g, float *v, float lr, float momentum,
		  int nesterov);
/* Adam with the bias-corrected step size computed by the caller:
 * step = lr * sqrt(1 - b2^t) / (1 - b1^t). */
void dtf_cuda_adam(struct dtf_cuda_ctx *ctx, size_t n, float *p,
		   const float *g, float *m, float *v, float step, float b1,
		   float b2, float eps);

#endif
