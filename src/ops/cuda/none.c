/*
 * none.c - the CUDA backend's interface in a build without CUDA.
 *
 * No device is ever found and no context can be made, so nothing past
 * dtf_cuda_ctx_new() is reachable; those entry points exist only so that
 * the executor and the tests link, and abort as bugs if called.
 */
#include <stdio.h>

#include "core/error.h"
#include "ops/cuda/cuda.h"

int dtf_cuda_built(void)
{
	return 0;
}

int dtf_cuda_device_count(char *why, size_t why_size)
{
	if (why && why_size)
		snprintf(why, why_size,
			 "this dtf-train was built without CUDA (meson setup -Dcuda=enabled builds the backend)");
	return 0;
}

int dtf_cuda_ctx_new(int device, enum dtf_cuda_math math,
		     struct dtf_cuda_ctx **out)
{
	(void)device;
	(void)math;
	*out = NULL;
	return dtf_error(DTF_ERR_RUNTIME,
			 "this dtf-train was built without CUDA\nHINT: rebuild with meson setup -Dcuda=enabled, or use device: cpu");
}

void dtf_cuda_ctx_free(struct dtf_cuda_ctx *ctx)
{
	DTF_ASSERT(!ctx);
}

#define UNREACHABLE DTF_ASSERT(!"CUDA backend called in a build without CUDA")

const char *dtf_cuda_ctx_describe(const struct dtf_cuda_ctx *c) { (void)c; UNREACHABLE; return ""; }
void dtf_cuda_ctx_need(struct dtf_cuda_ctx *c, size_t a, size_t b, size_t d) { (void)c; (void)a; (void)b; (void)d; UNREACHABLE; }
int dtf_cuda_ctx_reserve(struct dtf_cuda_ctx *c) { (void)c; UNREACHABLE; return -1; }
size_t dtf_cuda_ctx_scratch_bytes(const struct dtf_cuda_ctx *c) { (void)c; UNREACHABLE; return 0; }
int dtf_cuda_malloc(struct dtf_cuda_ctx *c, size_t b, void **p) { (void)c; (void)b; (void)p; UNREACHABLE; return -1; }
void dtf_cuda_free(struct dtf_cuda_ctx *c, void *p) { (void)c; (void)p; UNREACHABLE; }
int dtf_cuda_host_alloc(struct dtf_cuda_ctx *c, size_t b, void **p) { (void)c; (void)b; (void)p; UNREACHABLE; return -1; }
void dtf_cuda_host_free(struct dtf_cuda_ctx *c, void *p) { (void)c; (void)p; UNREACHABLE; }
int dtf_cuda_host_register(struct dtf_cuda_ctx *c, void *p, size_t b) { (void)c; (void)p; (void)b; UNREACHABLE; return -1; }
void dtf_cuda_host_unregister(struct dtf_cuda_ctx *c, void *p) { (void)c; (void)p; UNREACHABLE; }
int dtf_cuda_upload(struct dtf_cuda_ctx *c, void *d, const void *s, size_t b) { (void)c; (void)d; (void)s; (void)b; UNREACHABLE; return -1; }
int dtf_cuda_download(struct dtf_cuda_ctx *c, void *d, const void *s, size_t b) { (void)c; (void)d; (void)s; (void)b; UNREACHABLE; return -1; }
void dtf_cuda_copy_async(struct dtf_cuda_ctx *c, enum dtf_cuda_stream st, void *d, const void *s, size_t b) { (void)c; (void)st; (void)d; (void)s; (void)b; UNREACHABLE; }
void dtf_cuda_event_record(struct dtf_cuda_ctx *c, enum dtf_cuda_stream s, int e) { (void)c; (void)s; (void)e; UNREACHABLE; }
void dtf_cuda_stream_wait(struct dtf_cuda_ctx *c, enum dtf_cuda_stream s, int e) { (void)c; (void)s; (void)e; UNREACHABLE; }
int dtf_cuda_event_sync(struct dtf_cuda_ctx *c, int e) { (void)c; (void)e; UNREACHABLE; return -1; }
int dtf_cuda_sync(struct dtf_cuda_ctx *c) { (void)c; UNREACHABLE; return -1; }
int dtf_cuda_conv2d_plan(struct dtf_cuda_ctx *c, const struct dtf_window_geom *g, const struct dtf_cuda_conv **o) { (void)c; (void)g; (void)o; UNREACHABLE; return -1; }
void dtf_cuda_conv2d(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *x, const float *w, float *y) { (void)c; (void)p; (void)x; (void)w; (void)y; UNREACHABLE; }
void dtf_cuda_conv2d_backprop_input(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *dy, const float *w, float *dx) { (void)c; (void)p; (void)dy; (void)w; (void)dx; UNREACHABLE; }
void dtf_cuda_conv2d_backprop_filter(struct dtf_cuda_ctx *c, const struct dtf_cuda_conv *p, const float *x, const float *dy, float *dw) { (void)c; (void)p; (void)x; (void)dy; (void)dw; UNREACHABLE; }
int dtf_cuda_pool_plan(struct dtf_cuda_ctx *c, const struct dtf_window_geom *g, const struct dtf_cuda_pool **o) { (void)c; (void)g; (void)o; UNREACHABLE; return -1; }
void dtf_cuda_max_pool2d(struct dtf_cuda_ctx *c, const struct dtf_cuda_pool *p, const float *x, float *y) { (void)c; (void)p; (void)x; (void)y; UNREACHABLE; }
void dtf_cuda_max_pool2d_grad(struct dtf_cuda_ctx *c, const struct dtf_cuda_pool *p, const float *x, const float *dy, float *dx) { (void)c; (void)p; (void)x; (void)dy; (void)dx; UNREACHABLE; }
void dtf_cuda_relu(struct dtf_cuda_ctx *c, size_t n, const float *x, float *y) { (void)c; (void)n; (void)x; (void)y; UNREACHABLE; }
void dtf_cuda_relu_grad(struct dtf_cuda_ctx *c, size_t n, const float *dy, const float *y, float *dx) { (void)c; (void)n; (void)dy; (void)y; (void)dx; UNREACHABLE; }
void dtf_cuda_matmul(struct dtf_cuda_ctx *c, int m, int n, int k, const float *a, int ta, const float *b, int tb, float *o) { (void)c; (void)m; (void)n; (void)k; (void)a; (void)ta; (void)b; (void)tb; (void)o; UNREACHABLE; }
void dtf_cuda_bias_add(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *b, float *y) { (void)c; (void)r; (void)k; (void)x; (void)b; (void)y; UNREACHABLE; }
void dtf_cuda_bias_add_grad(struct dtf_cuda_ctx *c, size_t r, int k, const float *dy, float *db) { (void)c; (void)r; (void)k; (void)dy; (void)db; UNREACHABLE; }
void dtf_cuda_add(struct dtf_cuda_ctx *c, size_t n, const float *a, const float *b, float *y) { (void)c; (void)n; (void)a; (void)b; (void)y; UNREACHABLE; }
void dtf_cuda_slice(struct dtf_cuda_ctx *c, size_t o, size_t i, size_t b, size_t l, const float *x, float *y) { (void)c; (void)o; (void)i; (void)b; (void)l; (void)x; (void)y; UNREACHABLE; }
void dtf_cuda_slice_grad(struct dtf_cuda_ctx *c, size_t o, size_t i, size_t b, size_t l, const float *dy, float *dx) { (void)c; (void)o; (void)i; (void)b; (void)l; (void)dy; (void)dx; UNREACHABLE; }
void dtf_cuda_fill(struct dtf_cuda_ctx *c, float *p, size_t n, float v) { (void)c; (void)p; (void)n; (void)v; UNREACHABLE; }
void dtf_cuda_layer_norm(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *g, const float *b, float e, float *y) { (void)c; (void)r; (void)k; (void)x; (void)g; (void)b; (void)e; (void)y; UNREACHABLE; }
void dtf_cuda_layer_norm_grad_input(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *g, const float *dy, float e, float *dx) { (void)c; (void)r; (void)k; (void)x; (void)g; (void)dy; (void)e; (void)dx; UNREACHABLE; }
void dtf_cuda_layer_norm_grad_gamma(struct dtf_cuda_ctx *c, size_t r, int k, const float *x, const float *dy, float e, float *dg) { (void)c; (void)r; (void)k; (void)x; (void)dy; (void)e; (void)dg; UNREACHABLE; }
void dtf_cuda_gelu(struct dtf_cuda_ctx *c, size_t n, int a, const float *x, float *y) { (void)c; (void)n; (void)a; (void)x; (void)y; UNREACHABLE; }
void dtf_cuda_gelu_grad(struct dtf_cuda_ctx *c, size_t n, int a, const float *dy, const float *x, float *dx) { (void)c; (void)n; (void)a; (void)dy; (void)x; (void)dx; UNREACHABLE; }
void dtf_cuda_causal_self_attention(struct dtf_cuda_ctx *c, int b, int t, int ch, int h, const float *qkv, float *y) { (void)c; (void)b; (void)t; (void)ch; (void)h; (void)qkv; (void)y; UNREACHABLE; }
void dtf_cuda_causal_self_attention_grad(struct dtf_cuda_ctx *c, int b, int t, int ch, int h, const float *qkv, const float *dy, float *dq) { (void)c; (void)b; (void)t; (void)ch; (void)h; (void)qkv; (void)dy; (void)dq; UNREACHABLE; }
void dtf_cuda_embedding(struct dtf_cuda_ctx *c, size_t n, int v, int d, const int32_t *ids, const float *t, float *y) { (void)c; (void)n; (void)v; (void)d; (void)ids; (void)t; (void)y; UNREACHABLE; }
void dtf_cuda_embedding_grad(struct dtf_cuda_ctx *c, size_t n, int v, int d, const float *dy, const int32_t *ids, float *dt) { (void)c; (void)n; (void)v; (void)d; (void)dy; (void)ids; (void)dt; UNREACHABLE; }
void dtf_cuda_dropout(struct dtf_cuda_ctx *c, size_t r, size_t k, float rate, struct dtf_philox_key key, const uint64_t *id, uint32_t s, const float *x, float *y) { (void)c; (void)r; (void)k; (void)rate; (void)key; (void)id; (void)s; (void)x; (void)y; UNREACHABLE; }
void dtf_cuda_dropout_grad(struct dtf_cuda_ctx *c, size_t r, size_t k, float rate, struct dtf_philox_key key, const uint64_t *id, uint32_t s, const float *dy, float *dx) { (void)c; (void)r; (void)k; (void)rate; (void)key; (void)id; (void)s; (void)dy; (void)dx; UNREACHABLE; }
void dtf_cuda_sparse_softmax_xent(struct dtf_cuda_ctx *c, size_t r, int k, const float *l, const int32_t *y, size_t v, int per, float s, float *loss, float *sf, double *sa) { (void)c; (void)r; (void)k; (void)l; (void)y; (void)v; (void)per; (void)s; (void)loss; (void)sf; (void)sa; UNREACHABLE; }
void dtf_cuda_sparse_softmax_xent_grad(struct dtf_cuda_ctx *c, size_t r, int k, const float *l, const int32_t *y, size_t v, float s, float *d) { (void)c; (void)r; (void)k; (void)l; (void)y; (void)v; (void)s; (void)d; UNREACHABLE; }
void dtf_cuda_count_correct(struct dtf_cuda_ctx *c, size_t r, int k, const float *l, const int32_t *y, size_t v, int per, float *cf, double *ca) { (void)c; (void)r; (void)k; (void)l; (void)y; (void)v; (void)per; (void)cf; (void)ca; UNREACHABLE; }
void dtf_cuda_sgd(struct dtf_cuda_ctx *c, size_t n, float *p, const float *g, float *v, float lr, float mu, int nest) { (void)c; (void)n; (void)p; (void)g; (void)v; (void)lr; (void)mu; (void)nest; UNREACHABLE; }
void dtf_cuda_adam(struct dtf_cuda_ctx *c, size_t n, float *p, const float *g, float *m, float *v, float st, float b1, float b2, float eps) { (void)c; (void)n; (void)p; (void)g; (void)m; (void)v; (void)st; (void)b1; (void)b2; (void)eps; UNREACHABLE; }
