/*
 * mock_cuda.c - the CUDA backend's interface (ops/cuda/cuda.h) on the CPU,
 * for testing what sits above it (the CUDA executor, the trainer's GPU
 * path) on machines without a GPU.  "Device memory" is host memory, copies
 * are memcpy, streams and events are no-ops, and every kernel is the CPU
 * reference kernel, so a run through the GPU path must give exactly the
 * CPU path's numbers.  Plans allocate their CPU workspace; kernels do not.
 * This checks the orchestration (pointer translation, staging sets,
 * read-ahead, statistics, optimizer, parameter transfers, evaluation), not
 * CUDA: nothing here runs on a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "ops/cuda/cuda.h"

struct dtf_cuda_conv {
	struct dtf_window_geom g;
	float *ws;
	struct dtf_cuda_conv *next;
};

struct dtf_cuda_pool {
	struct dtf_window_geom g;
	struct dtf_cuda_pool *next;
};

struct dtf_cuda_ctx {
	struct dtf_cuda_conv *convs;
	struct dtf_cuda_pool *pools;
	unsigned long kernels;
};

/* kernel calls over all contexts, for the test to see the GPU path ran */
static unsigned long total_kernels;
unsigned long dtf_mock_cuda_kernels(void);
unsigned long dtf_mock_cuda_kernels(void)
{
	return total_kernels;
}

int dtf_cuda_built(void) { return 1; }

int dtf_cuda_device_count(char *why, size_t why_size)
{
	(void)why;
	(void)why_size;
	return 1;
}

int dtf_cuda_ctx_new(int device, enum dtf_cuda_math math,
		     struct dtf_cuda_ctx **out)
{
	(void)math;
	if (device != 0)
		return dtf_error(DTF_ERR_RUNTIME, "mock: no device %d", device);
	*out = dtf_calloc(1, sizeof(**out));
	return *out ? 0 : dtf_error(DTF_ERR_NOMEM, "out of memory");
}

void dtf_cuda_ctx_free(struct dtf_cuda_ctx *ctx)
{
	if (!ctx)
		return;
	for (struct dtf_cuda_conv *p = ctx->convs, *n; p; p = n) {
		n = p->next;
		dtf_free(p->ws);
		dtf_free(p);
	}
	for (struct dtf_cuda_pool *p = ctx->pools, *n; p; p = n) {
		n = p->next;
		dtf_free(p);
	}
	dtf_free(ctx);
}

const char *dtf_cuda_ctx_describe(const struct dtf_cuda_ctx *ctx)
{
	(void)ctx;
	return "mock CUDA device (CPU kernels)";
}

void dtf_cuda_ctx_need(struct dtf_cuda_ctx *c, size_t a, size_t b, size_t d)
{
	(void)c, (void)a, (void)b, (void)d;
}
int dtf_cuda_ctx_reserve(struct dtf_cuda_ctx *c) { (void)c; return 0; }
size_t dtf_cuda_ctx_scratch_bytes(const struct dtf_cuda_ctx *c) { (void)c; return 0; }

int dtf_cuda_malloc(struct dtf_cuda_ctx *c, size_t bytes, void **p)
{
	(void)c;
	*p = dtf_alloc_aligned(bytes ? bytes : 1);
	return *p ? 0 : dtf_error(DTF_ERR_NOMEM, "out of memory");
}
void dtf_cuda_free(struct dtf_cuda_ctx *c, void *p) { (void)c; dtf_free(p); }
int dtf_cuda_host_alloc(struct dtf_cuda_ctx *c, size_t bytes, void **p)
{
	return dtf_cuda_malloc(c, bytes, p);
}
void dtf_cuda_host_free(struct dtf_cuda_ctx *c, void *p) { dtf_cuda_free(c, p); }
int dtf_cuda_host_register(struct dtf_cuda_ctx *c, void *p, size_t b) { (void)c, (void)p, (void)b; return 0; }
void dtf_cuda_host_unregister(struct dtf_cuda_ctx *c, void *p) { (void)c, (void)p; }
int dtf_cuda_upload(struct dtf_cuda_ctx *c, void *d, const void *s, size_t b) { (void)c; memcpy(d, s, b); return 0; }
int dtf_cuda_download(struct dtf_cuda_ctx *c, void *d, const void *s, size_t b) { (void)c; memcpy(d, s, b); return 0; }
void dtf_cuda_copy_async(struct dtf_cuda_ctx *c, enum dtf_cuda_stream st, void *d, const void *s, size_t b) { (void)c, (void)st; memmove(d, s, b); }
void dtf_cuda_event_record(struct dtf_cuda_ctx *c, enum dtf_cuda_stream s, int e) { (void)c, (void)s, (void)e; }
void dtf_cuda_stream_wait(struct dtf_cuda_ctx *c, enum dtf_cuda_stream s, int e) { (void)c, (void)s, (void)e; }
int dtf_cuda_event_sync(struct dtf_cuda_ctx *c, int e) { (void)c, (void)e; return 0; }
int dtf_cuda_sync(struct dtf_cuda_ctx *c) { (void)c; return 0; }

int dtf_cuda_conv2d_plan(struct dtf_cuda_ctx *ctx, const struct dtf_window_geom *g,
			 const struct dtf_cuda_conv **out)
{
	/* the test's stand-in for a geometry cuDNN cannot do */
	if (getenv("DTF_MOCK_REFUSE_CONV"))
		return dtf_error(DTF_ERR_CONFIG, "mock: conv2d refused");
	for (struct dtf_cuda_conv *p = ctx->convs; p; p = p->next)
		if (memcmp(&p->g, g, sizeof(*g)) == 0) {
			*out = p;
			return 0;
		}
	struct dtf_cuda_conv *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->g = *g;
	p->ws = dtf_alloc_aligned(dtf_cpu_conv2d_workspace(g) * sizeof(float) + 4);
	p->next = ctx->convs;
	ctx->convs = p;
	*out = p;
	return 0;
}
void dtf_cuda_conv2d(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *x, const float *w, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_conv2d(&p->g, x, w, y, p->ws); }
void dtf_cuda_conv2d_backprop_input(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *dy, const float *w, float *dx)
{ c->kernels++, total_kernels++; dtf_cpu_conv2d_backprop_input(&p->g, dy, w, dx, p->ws); }
void dtf_cuda_conv2d_backprop_filter(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *x, const float *dy, float *dw)
{ c->kernels++, total_kernels++; dtf_cpu_conv2d_backprop_filter(&p->g, x, dy, dw, p->ws); }

int dtf_cuda_pool_plan(struct dtf_cuda_ctx *ctx, const struct dtf_window_geom *g,
		       const struct dtf_cuda_pool **out)
{
	struct dtf_cuda_pool *p = dtf_calloc(1, sizeof(*p));
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	p->g = *g;
	p->next = ctx->pools;
	ctx->pools = p;
	*out = p;
	return 0;
}
void dtf_cuda_max_pool2d(struct dtf_cuda_ctx *c, const struct dtf_cuda_pool *p, const float *x, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_max_pool2d(&p->g, x, y); }
void dtf_cuda_max_pool2d_grad(struct dtf_cuda_ctx *c, const struct dtf_cuda_pool *p, const float *x, const float *dy, float *dx)
{ c->kernels++, total_kernels++; dtf_cpu_max_pool2d_grad(&p->g, x, dy, dx); }
void dtf_cuda_relu(struct dtf_cuda_ctx *c, size_t n, const float *x, float *y) { c->kernels++, total_kernels++; dtf_cpu_relu(n, x, y); }
void dtf_cuda_relu_grad(struct dtf_cuda_ctx *c, size_t n, const float *dy, const float *y, float *dx) { c->kernels++, total_kernels++; dtf_cpu_relu_grad(n, dy, y, dx); }
void dtf_cuda_matmul(struct dtf_cuda_ctx *c, int m, int n, int k, const float *a, int ta, const float *b, int tb, float *o)
{ c->kernels++, total_kernels++; dtf_cpu_matmul(m, n, k, a, ta, b, tb, o); }
void dtf_cuda_bias_add(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *b, float *y) { c->kernels++, total_kernels++; dtf_cpu_bias_add(r, k, x, b, y); }
void dtf_cuda_bias_add_grad(struct dtf_cuda_ctx *c, size_t r, int k, const float *dy, float *db) { c->kernels++, total_kernels++; dtf_cpu_bias_add_grad(r, k, dy, db); }
void dtf_cuda_add(struct dtf_cuda_ctx *c, size_t n, const float *a, const float *b, float *y)
{
	/* exec.c's ADD: copy a, then add b in place */
	c->kernels++, total_kernels++;
	if (y != a)
		memmove(y, a, n * sizeof(float));
	dtf_cpu_add_inplace(n, b, y);
}
void dtf_cuda_slice(struct dtf_cuda_ctx *c, size_t o, size_t i, size_t b, size_t l, const float *x, float *y) { c->kernels++, total_kernels++; dtf_cpu_slice_inner(o, i, b, l, x, y); }
void dtf_cuda_slice_grad(struct dtf_cuda_ctx *c, size_t o, size_t i, size_t b, size_t l, const float *dy, float *dx) { c->kernels++, total_kernels++; dtf_cpu_slice_grad(o, i, b, l, dy, dx); }
void dtf_cuda_fill(struct dtf_cuda_ctx *c, float *p, size_t n, float v) { (void)c; for (size_t i = 0; i < n; i++) p[i] = v; }
void dtf_cuda_layer_norm(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *g, const float *b, float e, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_layer_norm(r, k, x, g, b, e, y); }
void dtf_cuda_layer_norm_grad_input(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *g, const float *dy, float e, float *dx)
{ c->kernels++, total_kernels++; dtf_cpu_layer_norm_grad_input(r, k, x, g, dy, e, dx); }
void dtf_cuda_layer_norm_grad_gamma(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *dy, float e, float *dg)
{ c->kernels++, total_kernels++; dtf_cpu_layer_norm_grad_gamma(r, k, x, dy, e, dg); }
void dtf_cuda_gelu(struct dtf_cuda_ctx *c, size_t n, int a, const float *x, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_gelu(n, a, x, y); }
void dtf_cuda_gelu_grad(struct dtf_cuda_ctx *c, size_t n, int a, const float *dy, const float *x, float *dx)
{ c->kernels++, total_kernels++; dtf_cpu_gelu_grad(n, a, dy, x, dx); }
void dtf_cuda_causal_self_attention(struct dtf_cuda_ctx *c, int b, int t, int ch, int h, const float *qkv, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_causal_self_attention(b, t, ch, h, qkv, y); }
void dtf_cuda_causal_self_attention_grad(struct dtf_cuda_ctx *c, int b, int t, int ch, int h, const float *qkv, const float *dy, float *dq)
{ c->kernels++, total_kernels++; dtf_cpu_causal_self_attention_grad(b, t, ch, h, qkv, dy, dq); }
void dtf_cuda_embedding(struct dtf_cuda_ctx *c, size_t n, int v, int d, const int32_t *ids, const float *t, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_embedding(n, v, d, ids, t, y); }
void dtf_cuda_embedding_grad(struct dtf_cuda_ctx *c, size_t n, int v, int d, const float *dy, const int32_t *ids, float *dt)
{ c->kernels++, total_kernels++; dtf_cpu_embedding_grad(n, v, d, dy, ids, dt); }
void dtf_cuda_dropout(struct dtf_cuda_ctx *c, size_t r, size_t k, float rate, struct dtf_philox_key key, const uint64_t *id, uint32_t s, const float *x, float *y)
{ c->kernels++, total_kernels++; dtf_cpu_dropout(r, k, rate, key, id, s, x, y); }
void dtf_cuda_dropout_grad(struct dtf_cuda_ctx *c, size_t r, size_t k, float rate, struct dtf_philox_key key, const uint64_t *id, uint32_t s, const float *dy, float *dx)
{ c->kernels++, total_kernels++; dtf_cpu_dropout_grad(r, k, rate, key, id, s, dy, dx); }
void dtf_cuda_sparse_softmax_xent(struct dtf_cuda_ctx *c, size_t rows, int classes, const float *l, const int32_t *y, size_t valid, int per, float scale, float *loss, float *sum_f, double *sum_acc)
{
	c->kernels++, total_kernels++;
	double sum = dtf_cpu_sparse_softmax_xent(rows, classes, l, y, valid, NULL) / per;
	if (loss)
		*loss = (float)(sum * scale);
	if (sum_f)
		*sum_f = (float)sum;
	if (sum_acc)
		*sum_acc += sum;
}
void dtf_cuda_sparse_softmax_xent_grad(struct dtf_cuda_ctx *c, size_t r, int k, const float *l, const int32_t *y, size_t v, float s, float *d)
{ c->kernels++, total_kernels++; dtf_cpu_sparse_softmax_xent_grad(r, k, l, y, v, s, d); }
void dtf_cuda_count_correct(struct dtf_cuda_ctx *c, size_t r, int k, const float *l, const int32_t *y, size_t v, int per, float *cf, double *ca)
{
	c->kernels++, total_kernels++;
	double n = (double)dtf_cpu_count_correct(r, k, l, y, v) / per;
	if (cf)
		*cf = (float)n;
	if (ca)
		*ca += n;
}
void dtf_cuda_sgd(struct dtf_cuda_ctx *c, size_t n, float *p, const float *g, float *v, float lr, float mu, int nest)
{
	c->kernels++, total_kernels++;
	for (size_t i = 0; i < n; i++) {
		if (!v) {
			p[i] -= lr * g[i];
			continue;
		}
		v[i] = mu * v[i] - lr * g[i];
		if (nest)
			p[i] += mu * v[i] - lr * g[i];
		else
			p[i] += v[i];
	}
}
void dtf_cuda_adam(struct dtf_cuda_ctx *c, size_t n, float *p, const float *g, float *m, float *v, float st, float b1, float b2, float eps)
{
	c->kernels++, total_kernels++;
	for (size_t i = 0; i < n; i++) {
		m[i] = b1 * m[i] + (1.0f - b1) * g[i];
		v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
		p[i] -= st * m[i] / (sqrtf(v[i]) + eps);
	}
}
