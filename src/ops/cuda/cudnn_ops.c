/*
 * cudnn_ops.c - conv2d (forward, backward data, backward filter), max
 * pooling and relu through cuDNN, NHWC float32.
 *
 * Design: a plan per geometry holds the descriptors and the algorithm of
 * each direction, chosen once by cuDNN's heuristics
 * (cudnnGet*Algorithm_v7, ordered by expected speed): the first one that
 * succeeds, fits the workspace limit and respects the precision, preferring
 * a deterministic one (backward-filter algorithms 0 and 3 sum with atomics).
 * Plans are cached in the context by geometry and live as long as it.
 * Filters are TF's HWIO, which cuDNN has no layout for; each call transposes
 * the filter (or the filter gradient) to/from KRSC, cuDNN's NHWC filter
 * layout, in the context's filter scratch (small: kh*kw*c*o floats), as
 * TensorFlow transposes filters for cuDNN.  cuDNN pads symmetrically, so a
 * geometry whose TF padding is not (even kernel or stride with "same") is
 * refused at planning time with DTF_ERR_CONFIG; pooling falls back to an own
 * kernel instead.
 */
#include "ops/cuda/internal.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#define WS_LIMIT ((size_t)1 << 30) /* bytes of cuDNN workspace per call */
#define STREAM(ctx) ((ctx)->stream[DTF_CUDA_COMPUTE])

static const float one = 1.0f, zero = 0.0f;

/* cuDNN's output size with symmetric padding pad on both sides */
static int sym_out(int in, int k, int dil, int stride, int pad)
{
	int ek = (k - 1) * dil + 1;
	int span = in + 2 * pad - ek;
	return span < 0 ? 0 : span / stride + 1;
}

static int symmetric(const struct dtf_window_geom *g)
{
	return sym_out(g->h, g->kh, g->dilation_h, g->stride_h, g->pad_top) ==
		       g->oh &&
	       sym_out(g->w, g->kw, g->dilation_w, g->stride_w, g->pad_left) ==
		       g->ow;
}

#define DNN_TRY(call)                                                       \
	do {                                                                \
		cudnnStatus_t s_ = (call);                                  \
		if (s_ != CUDNN_STATUS_SUCCESS) {                           \
			rc = dtf_error(DTF_ERR_RUNTIME, "%s: %s", #call,     \
				       cudnnGetErrorString(s_));            \
			goto fail;                                          \
		}                                                           \
	} while (0)

/* Index of the algorithm to use in perf[0..n), or -1.  `status`,
 * `memory`, `determinism`, `mathType` are members of every perf struct. */
#define PICK(perf, n, math, best)                                            \
	do {                                                                 \
		best = -1;                                                   \
		for (int i_ = 0; i_ < (n); i_++) {                           \
			if ((perf)[i_].status != CUDNN_STATUS_SUCCESS ||     \
			    (perf)[i_].memory > WS_LIMIT)                    \
				continue;                                    \
			if ((math) == DTF_CUDA_FP32 &&                       \
			    (perf)[i_].mathType == CUDNN_TENSOR_OP_MATH)     \
				continue;                                    \
			if (best < 0)                                        \
				best = i_;                                   \
			if ((perf)[i_].determinism == CUDNN_DETERMINISTIC) { \
				best = i_;                                   \
				break;                                       \
			}                                                    \
		}                                                            \
	} while (0)

static int conv_desc(struct dtf_cuda_ctx *ctx, const struct dtf_window_geom *g,
		     cudnnConvolutionDescriptor_t *d)
{
	int rc = 0;
	DNN_TRY(cudnnCreateConvolutionDescriptor(d));
	DNN_TRY(cudnnSetConvolution2dDescriptor(
		*d, g->pad_top, g->pad_left, g->stride_h, g->stride_w,
		g->dilation_h, g->dilation_w, CUDNN_CROSS_CORRELATION,
		CUDNN_DATA_FLOAT));
	/* FP32: FMA kernels only (cuDNN's default math allows TF32 on
	 * Ampere and newer). */
	DNN_TRY(cudnnSetConvolutionMathType(
		*d, ctx->math == DTF_CUDA_TF32 ? CUDNN_TENSOR_OP_MATH
					       : CUDNN_FMA_MATH));
fail:
	return rc;
}

static void destroy_conv(struct dtf_cuda_conv *p)
{
	if (p->x)
		cudnnDestroyTensorDescriptor(p->x);
	if (p->y)
		cudnnDestroyTensorDescriptor(p->y);
	if (p->w)
		cudnnDestroyFilterDescriptor(p->w);
	if (p->conv_fwd)
		cudnnDestroyConvolutionDescriptor(p->conv_fwd);
	if (p->conv_bwd_data)
		cudnnDestroyConvolutionDescriptor(p->conv_bwd_data);
	if (p->conv_bwd_filter)
		cudnnDestroyConvolutionDescriptor(p->conv_bwd_filter);
	dtf_free(p);
}

static int no_algorithm(const struct dtf_window_geom *g, const char *dir)
{
	/* CONFIG: the backend lacks this shape; device: auto falls back */
	return dtf_error(DTF_ERR_CONFIG,
			 "cuDNN offers no %s algorithm for conv2d of a (%d, %d, %d, %d) input with a %dx%dx%d filter, stride %dx%d",
			 dir, g->n, g->h, g->w, g->c, g->kh, g->kw, g->o,
			 g->stride_h, g->stride_w);
}

int dtf_cuda_conv2d_plan(struct dtf_cuda_ctx *ctx,
			 const struct dtf_window_geom *g,
			 const struct dtf_cuda_conv **out)
{
	for (struct dtf_cuda_conv *p = ctx->convs; p; p = p->next)
		if (memcmp(&p->g, g, sizeof(*g)) == 0) {
			*out = p;
			return 0;
		}
	if (!symmetric(g)) {
		int pb = (g->oh - 1) * g->stride_h +
			 (g->kh - 1) * g->dilation_h + 1 - g->h - g->pad_top;
		int pr = (g->ow - 1) * g->stride_w +
			 (g->kw - 1) * g->dilation_w + 1 - g->w - g->pad_left;
		return dtf_error(DTF_ERR_CONFIG,
				 "conv2d of a (%d, %d, %d, %d) input with a %dx%d kernel and stride %dx%d: its padding is asymmetric (top %d, bottom %d, left %d, right %d), which cuDNN cannot express",
				 g->n, g->h, g->w, g->c, g->kh, g->kw,
				 g->stride_h, g->stride_w, g->pad_top, pb,
				 g->pad_left, pr);
	}
	int rc = 0;
	struct dtf_cuda_conv *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->g = *g;
	/* link first so dtf_cuda_ctx_free releases what was created */
	p->next = ctx->convs;
	ctx->convs = p;
	DNN_TRY(cudnnCreateTensorDescriptor(&p->x));
	DNN_TRY(cudnnCreateTensorDescriptor(&p->y));
	DNN_TRY(cudnnCreateFilterDescriptor(&p->w));
	DNN_TRY(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC,
					   CUDNN_DATA_FLOAT, g->n, g->c, g->h,
					   g->w));
	DNN_TRY(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC,
					   CUDNN_DATA_FLOAT, g->n, g->o, g->oh,
					   g->ow));
	DNN_TRY(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT,
					   CUDNN_TENSOR_NHWC, g->o, g->c, g->kh,
					   g->kw));
	if ((rc = conv_desc(ctx, g, &p->conv_fwd)) < 0 ||
	    (rc = conv_desc(ctx, g, &p->conv_bwd_data)) < 0 ||
	    (rc = conv_desc(ctx, g, &p->conv_bwd_filter)) < 0)
		goto fail;
	int dn, dc, dh, dw;
	DNN_TRY(cudnnGetConvolution2dForwardOutputDim(p->conv_fwd, p->x, p->w,
						      &dn, &dc, &dh, &dw));
	if (dn != g->n || dc != g->o || dh != g->oh || dw != g->ow) {
		rc = dtf_error(DTF_ERR_RUNTIME,
			       "cuDNN computes a (%d, %d, %d, %d) conv2d output where TF's is (%d, %d, %d, %d)",
			       dn, dh, dw, dc, g->n, g->oh, g->ow, g->o);
		goto fail;
	}
	int got = 0, best;
	size_t ws = 0;

	cudnnConvolutionFwdAlgoPerf_t fperf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
	DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
		ctx->dnn, p->x, p->w, p->conv_fwd, p->y,
		CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fperf));
	PICK(fperf, got, ctx->math, best);
	if (best < 0) {
		rc = no_algorithm(g, "forward");
		goto fail;
	}
	p->fwd = fperf[best].algo;
	if (ctx->math == DTF_CUDA_TF32)
		DNN_TRY(cudnnSetConvolutionMathType(p->conv_fwd,
						    fperf[best].mathType));
	ws = fperf[best].memory;

	cudnnConvolutionBwdDataAlgoPerf_t dperf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
	DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
		ctx->dnn, p->w, p->y, p->conv_bwd_data, p->x,
		CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, dperf));
	PICK(dperf, got, ctx->math, best);
	if (best < 0) {
		rc = no_algorithm(g, "backward-data");
		goto fail;
	}
	p->bwd_data = dperf[best].algo;
	if (ctx->math == DTF_CUDA_TF32)
		DNN_TRY(cudnnSetConvolutionMathType(p->conv_bwd_data,
						    dperf[best].mathType));
	ws = dperf[best].memory > ws ? dperf[best].memory : ws;

	cudnnConvolutionBwdFilterAlgoPerf_t wperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
	DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
		ctx->dnn, p->x, p->y, p->conv_bwd_filter, p->w,
		CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, wperf));
	PICK(wperf, got, ctx->math, best);
	if (best < 0) {
		rc = no_algorithm(g, "backward-filter");
		goto fail;
	}
	p->bwd_filter = wperf[best].algo;
	if (ctx->math == DTF_CUDA_TF32)
		DNN_TRY(cudnnSetConvolutionMathType(p->conv_bwd_filter,
						    wperf[best].mathType));
	ws = wperf[best].memory > ws ? wperf[best].memory : ws;

	p->ws_bytes = ws;
	dtf_cuda_ctx_need(ctx, ws, (size_t)g->kh * g->kw * g->c * g->o, 0);
	*out = p;
	return 0;
fail:
	/* not cached: a later call must not find a half-made plan */
	ctx->convs = p->next;
	destroy_conv(p);
	return rc;
}

/* HWIO (kh*kw*c, o) <-> KRSC (o, kh*kw*c) */
static void to_krsc(struct dtf_cuda_ctx *ctx, const struct dtf_window_geom *g,
		    const float *w)
{
	LAUNCHED(ctx, dtf_cu_transpose(STREAM(ctx), g->kh * g->kw * g->c, g->o,
				       w, ctx->filter));
}

void dtf_cuda_conv2d(struct dtf_cuda_ctx *ctx, const struct dtf_cuda_conv *p,
		     const float *x, const float *w, float *y)
{
	to_krsc(ctx, &p->g, w);
	CUDNN_KEEP(ctx, cudnnConvolutionForward(
				ctx->dnn, &one, p->x, x, p->w, ctx->filter,
				p->conv_fwd, p->fwd, ctx->ws, ctx->ws_bytes,
				&zero, p->y, y));
}

void dtf_cuda_conv2d_backprop_input(struct dtf_cuda_ctx *ctx,
				    const struct dtf_cuda_conv *p,
				    const float *dy, const float *w, float *dx)
{
	to_krsc(ctx, &p->g, w);
	CUDNN_KEEP(ctx, cudnnConvolutionBackwardData(
				ctx->dnn, &one, p->w, ctx->filter, p->y, dy,
				p->conv_bwd_data, p->bwd_data, ctx->ws,
				ctx->ws_bytes, &zero, p->x, dx));
}

void dtf_cuda_conv2d_backprop_filter(struct dtf_cuda_ctx *ctx,
				     const struct dtf_cuda_conv *p,
				     const float *x, const float *dy, float *dw)
{
	const struct dtf_window_geom *g = &p->g;
	CUDNN_KEEP(ctx, cudnnConvolutionBackwardFilter(
				ctx->dnn, &one, p->x, x, p->y, dy,
				p->conv_bwd_filter, p->bwd_filter, ctx->ws,
				ctx->ws_bytes, &zero, p->w, ctx->filter));
	LAUNCHED(ctx, dtf_cu_transpose(STREAM(ctx), g->o, g->kh * g->kw * g->c,
				       ctx->filter, dw));
}

/* ---- pooling --------------------------------------------------------------- */

static void flat(const struct dtf_window_geom *g, int out[14])
{
	int v[14] = {g->n, g->h, g->w, g->c, g->kh, g->kw, g->stride_h,
		     g->stride_w, g->dilation_h, g->dilation_w, g->pad_top,
		     g->pad_left, g->oh, g->ow};
	memcpy(out, v, sizeof(v));
}

int dtf_cuda_pool_plan(struct dtf_cuda_ctx *ctx,
		       const struct dtf_window_geom *g,
		       const struct dtf_cuda_pool **out)
{
	for (struct dtf_cuda_pool *p = ctx->pools; p; p = p->next)
		if (memcmp(&p->g, g, sizeof(*g)) == 0) {
			*out = p;
			return 0;
		}
	int rc = 0;
	struct dtf_cuda_pool *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->g = *g;
	p->next = ctx->pools;
	ctx->pools = p;
	/* cuDNN only without padding (what it puts in padded cells is not
	 * TF's "never wins") and without dilation */
	if (g->pad_top == 0 && g->pad_left == 0 && g->dilation_h == 1 &&
	    g->dilation_w == 1 && symmetric(g)) {
		p->use_cudnn = 1;
		DNN_TRY(cudnnCreateTensorDescriptor(&p->x));
		DNN_TRY(cudnnCreateTensorDescriptor(&p->y));
		DNN_TRY(cudnnCreatePoolingDescriptor(&p->pool));
		DNN_TRY(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC,
						   CUDNN_DATA_FLOAT, g->n, g->c,
						   g->h, g->w));
		DNN_TRY(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC,
						   CUDNN_DATA_FLOAT, g->n, g->c,
						   g->oh, g->ow));
		DNN_TRY(cudnnSetPooling2dDescriptor(
			p->pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN,
			g->kh, g->kw, 0, 0, g->stride_h, g->stride_w));
		int dn, dc, dh, dw;
		DNN_TRY(cudnnGetPooling2dForwardOutputDim(p->pool, p->x, &dn,
							  &dc, &dh, &dw));
		if (dh != g->oh || dw != g->ow)
			p->use_cudnn = 0;
	}
	*out = p;
	return 0;
fail:
	/* cuDNN refused the descriptors: the own kernel does it */
	(void)rc;
	p->use_cudnn = 0;
	*out = p;
	return 0;
}

void dtf_cuda_max_pool2d(struct dtf_cuda_ctx *ctx,
			 const struct dtf_cuda_pool *p, const float *x,
			 float *y)
{
	if (p->use_cudnn) {
		CUDNN_KEEP(ctx, cudnnPoolingForward(ctx->dnn, p->pool, &one,
						    p->x, x, &zero, p->y, y));
		return;
	}
	int g[14];
	flat(&p->g, g);
	LAUNCHED(ctx, dtf_cu_max_pool(STREAM(ctx), g, x, y));
}

void dtf_cuda_max_pool2d_grad(struct dtf_cuda_ctx *ctx,
			      const struct dtf_cuda_pool *p, const float *x,
			      const float *dy, float *dx)
{
	int g[14];
	flat(&p->g, g);
	LAUNCHED(ctx, dtf_cu_max_pool_grad(STREAM(ctx), g, x, dy, dx));
}

/* ---- relu ------------------------------------------------------------------- */

void dtf_cuda_relu(struct dtf_cuda_ctx *ctx, size_t n, const float *x,
		   float *y)
{
	/* one (1, 1, 1, len) tensor per chunk; setting a descriptor
	 * allocates nothing */
	const size_t chunk = (size_t)1 << 30;
	for (size_t i = 0; i < n; i += chunk) {
		int len = (int)(n - i < chunk ? n - i : chunk);
		CUDNN_KEEP(ctx, cudnnSetTensor4dDescriptor(
					ctx->act, CUDNN_TENSOR_NCHW,
					CUDNN_DATA_FLOAT, 1, 1, 1, len));
		CUDNN_KEEP(ctx, cudnnActivationForward(ctx->dnn, ctx->relu, &one,
						       ctx->act, x + i, &zero,
						       ctx->act, y + i));
	}
}
