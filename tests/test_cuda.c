/*
 * test_cuda.c - every CUDA op against the CPU reference kernels, and
 * training on the GPU against training on the CPU.  Needs a GPU: exits 77
 * (meson's SKIP) when dtf_cuda_device_count() is 0, which is also the case
 * in a build without CUDA.
 *
 * Tolerances, |gpu - cpu| <= atol + rtol * |cpu| (inputs in [-1, 1]):
 *   conv2d (all three directions), matmul: atol 1e-4, rtol 1e-4: FP32 FMA
 *     arithmetic in a different summation order than im2col + OpenBLAS,
 *     sums of up to 800 products (as test_ops' reference comparisons);
 *   bias_add_grad: atol 1e-3, rtol 1e-4: column sums of up to 1e5 rows
 *     (the CPU sums in row order, the GPU in blocks);
 *   gelu (erf and tanh forms) and its gradient: atol 1e-7, rtol 1e-6 (the
 *     CPU's double formula, CUDA's erf/tanh/exp within 2 ulp of glibc's);
 *   layer_norm and its gradients: atol 1e-6, rtol 1e-6 (the CPU's double
 *     arithmetic in the CPU's order; equal bits expected);
 *   softmax cross-entropy: loss sum rtol 1e-6 (double per row on both, the
 *     sums in different orders); gradient atol 1e-6, rtol 1e-5 (double
 *     exp/log of two libraries, rounded to float);
 *   exact (bit for bit): bias_add, relu, relu_grad, add, embedding and its
 *     gradient (a scatter-add in the CPU's order), max_pool2d and its
 *     gradient (ties included), dropout and its gradient (the same Philox
 *     stream), count_correct, SGD/momentum/Nesterov/Adam updates (the same
 *     float formula, no fused multiply-add on either side);
 *   training, 20 steps with SGD + momentum and dropout: parameters within
 *     1e-3 relative (to max(|cpu|, 1e-2)) of the CPU run, for 1 rank and
 *     for 2 ranks sharing the GPU (host-staged allreduce); the same for a
 *     token model (embedding, layer_norm, gelu) with Adam.
 * The GPU runs in FP32 mode here (precision: fp32); TF32 is only timed, by
 * tests/bench/device-check.sh.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "distribute/comm.h"
#include "ops/cpu/kernels.h"
#include "ops/cuda/cuda.h"
#include "train/optimizer.h"
#include "train/train.h"

#include "testutil.h"

static struct dtf_cuda_ctx *ctx;

/* ---- helpers ------------------------------------------------------------ */

static float *halloc(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));
	ck_assert_ptr_nonnull(p);
	return p;
}

static void *dup_dev(const void *h, size_t bytes)
{
	void *d = NULL;
	ck_assert_int_eq(dtf_cuda_malloc(ctx, bytes ? bytes : 4, &d), 0);
	if (bytes)
		ck_assert_msg(dtf_cuda_upload(ctx, d, h, bytes) == 0, "%s",
			      dtf_error_msg());
	return d;
}

/* device buffer of n floats filled with NaN, so unwritten outputs show */
static float *dev_nan(size_t n)
{
	float *h = halloc(n);
	for (size_t i = 0; i < n; i++)
		h[i] = NAN;
	float *d = dup_dev(h, n * sizeof(float));
	free(h);
	return d;
}

static float *fetch(const float *d, size_t n)
{
	float *h = halloc(n);
	ck_assert_msg(dtf_cuda_sync(ctx) == 0, "%s", dtf_error_msg());
	ck_assert_msg(dtf_cuda_download(ctx, h, d, n * sizeof(float)) == 0,
		      "%s", dtf_error_msg());
	return h;
}

static void assert_close(const char *what, const float *got,
			 const float *want, size_t n, double atol, double rtol)
{
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - want[i]);
		ck_assert_msg(d <= atol + rtol * fabs((double)want[i]),
			      "%s[%zu]: gpu %.9g, cpu %.9g", what, i,
			      (double)got[i], (double)want[i]);
	}
}

static void assert_exact(const char *what, const float *got,
			 const float *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
			      "%s[%zu]: gpu %.9g, cpu %.9g (must be equal)",
			      what, i, (double)got[i], (double)want[i]);
}

static struct dtf_window_geom geom(int n, int h, int w, int c, int kh, int kw,
				   int o, int stride, int dil,
				   enum dtf_padding pad)
{
	struct dtf_window_geom g = {.n = n, .h = h, .w = w, .c = c, .kh = kh,
				    .kw = kw, .o = o, .stride_h = stride,
				    .stride_w = stride, .dilation_h = dil,
				    .dilation_w = dil};
	ck_assert_int_eq(dtf_window_geom_finish(&g, pad), 0);
	return g;
}

/* ---- conv2d ------------------------------------------------------------- */

static void conv_case(struct dtf_window_geom g)
{
	size_t nx = (size_t)g.n * g.h * g.w * g.c;
	size_t nw = (size_t)g.kh * g.kw * g.c * g.o;
	size_t ny = (size_t)g.n * g.oh * g.ow * g.o;
	float *x = tu_frandom(nx, -1, 1), *w = tu_frandom(nw, -1, 1);
	float *dy = tu_frandom(ny, -1, 1);
	float *ws = halloc(dtf_cpu_conv2d_workspace(&g));
	float *y = halloc(ny), *dx = halloc(nx), *dw = halloc(nw);
	dtf_cpu_conv2d(&g, x, w, y, ws);
	dtf_cpu_conv2d_backprop_input(&g, dy, w, dx, ws);
	dtf_cpu_conv2d_backprop_filter(&g, x, dy, dw, ws);

	const struct dtf_cuda_conv *p;
	ck_assert_msg(dtf_cuda_conv2d_plan(ctx, &g, &p) == 0, "%s",
		      dtf_error_msg());
	const struct dtf_cuda_conv *again;
	ck_assert_int_eq(dtf_cuda_conv2d_plan(ctx, &g, &again), 0);
	ck_assert_ptr_eq(p, again); /* cached per shape */
	ck_assert_msg(dtf_cuda_ctx_reserve(ctx) == 0, "%s", dtf_error_msg());
	float *d_x = dup_dev(x, nx * 4), *d_w = dup_dev(w, nw * 4);
	float *d_dy = dup_dev(dy, ny * 4);
	float *d_y = dev_nan(ny), *d_dx = dev_nan(nx), *d_dw = dev_nan(nw);
	dtf_cuda_conv2d(ctx, p, d_x, d_w, d_y);
	dtf_cuda_conv2d_backprop_input(ctx, p, d_dy, d_w, d_dx);
	dtf_cuda_conv2d_backprop_filter(ctx, p, d_x, d_dy, d_dw);
	float *gy = fetch(d_y, ny), *gdx = fetch(d_dx, nx), *gdw = fetch(d_dw, nw);
	char what[128];
	snprintf(what, sizeof(what), "conv2d %dx%dx%dx%d k%dx%d o%d s%d d%d y",
		 g.n, g.h, g.w, g.c, g.kh, g.kw, g.o, g.stride_h, g.dilation_h);
	assert_close(what, gy, y, ny, 1e-4, 1e-4);
	what[strlen(what) - 1] = 0;
	strcat(what, "dx");
	assert_close(what, gdx, dx, nx, 1e-4, 1e-4);
	what[strlen(what) - 2] = 0;
	strcat(what, "dw");
	assert_close(what, gdw, dw, nw, 1e-4, 1e-4);
	dtf_cuda_free(ctx, d_x);
	dtf_cuda_free(ctx, d_w);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dx);
	dtf_cuda_free(ctx, d_dw);
	free(x), free(w), free(dy), free(ws), free(y), free(dx), free(dw);
	free(gy), free(gdx), free(gdw);
}

START_TEST(conv2d_vs_cpu)
{
	conv_case(geom(2, 7, 6, 3, 3, 3, 4, 1, 1, DTF_PAD_SAME));
	conv_case(geom(2, 9, 9, 2, 3, 3, 5, 2, 1, DTF_PAD_VALID));
	conv_case(geom(1, 8, 8, 3, 3, 3, 2, 1, 2, DTF_PAD_VALID));
	conv_case(geom(3, 5, 5, 4, 1, 1, 3, 1, 1, DTF_PAD_VALID));
	conv_case(geom(2, 9, 9, 3, 3, 3, 4, 2, 1, DTF_PAD_SAME)); /* pad 1/1 */
	/* the Fashion-MNIST CNN's layers */
	conv_case(geom(4, 28, 28, 1, 5, 5, 32, 1, 1, DTF_PAD_SAME));
	conv_case(geom(4, 14, 14, 32, 5, 5, 64, 1, 1, DTF_PAD_SAME));
}
END_TEST

START_TEST(conv2d_asymmetric_padding_refused)
{
	const struct dtf_cuda_conv *p = NULL;
	struct dtf_window_geom g = geom(1, 6, 6, 1, 4, 4, 1, 1, 1, DTF_PAD_SAME);
	ck_assert_int_eq(dtf_cuda_conv2d_plan(ctx, &g, &p), -DTF_ERR_CONFIG);
	ck_assert_str_eq(dtf_error_msg(),
			 "conv2d of a (1, 6, 6, 1) input with a 4x4 kernel and stride 1x1: its padding is asymmetric (top 1, bottom 2, left 1, right 2), which cuDNN cannot express");
	g = geom(1, 28, 28, 1, 3, 3, 1, 2, 1, DTF_PAD_SAME);
	ck_assert_int_eq(dtf_cuda_conv2d_plan(ctx, &g, &p), -DTF_ERR_CONFIG);
}
END_TEST

/* ---- pooling ------------------------------------------------------------ */

static void pool_case(struct dtf_window_geom g)
{
	size_t nx = (size_t)g.n * g.h * g.w * g.c;
	size_t ny = (size_t)g.n * g.oh * g.ow * g.c;
	float *x = halloc(nx), *dy = tu_frandom(ny, -1, 1);
	for (size_t i = 0; i < nx; i++) /* a few levels: many ties */
		x[i] = (float)(int)tu_frand(0, 4) * 0.25f;
	float *y = halloc(ny), *dx = halloc(nx);
	dtf_cpu_max_pool2d(&g, x, y);
	dtf_cpu_max_pool2d_grad(&g, x, dy, dx);
	const struct dtf_cuda_pool *p;
	ck_assert_int_eq(dtf_cuda_pool_plan(ctx, &g, &p), 0);
	float *d_x = dup_dev(x, nx * 4), *d_dy = dup_dev(dy, ny * 4);
	float *d_y = dev_nan(ny), *d_dx = dev_nan(nx);
	dtf_cuda_max_pool2d(ctx, p, d_x, d_y);
	dtf_cuda_max_pool2d_grad(ctx, p, d_x, d_dy, d_dx);
	float *gy = fetch(d_y, ny), *gdx = fetch(d_dx, nx);
	assert_exact("max_pool2d y", gy, y, ny);
	assert_exact("max_pool2d dx", gdx, dx, nx);
	dtf_cuda_free(ctx, d_x);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dx);
	free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
}

START_TEST(max_pool2d_vs_cpu)
{
	pool_case(geom(2, 8, 8, 5, 2, 2, 0, 2, 1, DTF_PAD_VALID)); /* cuDNN */
	pool_case(geom(2, 7, 7, 3, 3, 3, 0, 2, 1, DTF_PAD_SAME));  /* own */
	pool_case(geom(1, 9, 9, 2, 3, 3, 0, 1, 1, DTF_PAD_VALID)); /* overlap */
	pool_case(geom(4, 28, 28, 32, 2, 2, 0, 2, 1, DTF_PAD_VALID));
}
END_TEST

/* ---- dense, elementwise --------------------------------------------------- */

START_TEST(matmul_vs_cpu)
{
	const int m = 37, n = 29, k = 53;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			float *a = tu_frandom((size_t)m * k, -1, 1);
			float *b = tu_frandom((size_t)k * n, -1, 1);
			float *c = halloc((size_t)m * n);
			dtf_cpu_matmul(m, n, k, a, ta, b, tb, c);
			float *d_a = dup_dev(a, (size_t)m * k * 4);
			float *d_b = dup_dev(b, (size_t)k * n * 4);
			float *d_c = dev_nan((size_t)m * n);
			dtf_cuda_matmul(ctx, m, n, k, d_a, ta, d_b, tb, d_c);
			float *gc = fetch(d_c, (size_t)m * n);
			char what[64];
			snprintf(what, sizeof(what), "matmul ta=%d tb=%d", ta, tb);
			assert_close(what, gc, c, (size_t)m * n, 1e-4, 1e-4);
			dtf_cuda_free(ctx, d_a);
			dtf_cuda_free(ctx, d_b);
			dtf_cuda_free(ctx, d_c);
			free(a), free(b), free(c), free(gc);
		}
}
END_TEST

START_TEST(bias_add_and_grad_vs_cpu)
{
	static const struct { size_t rows; int c; } cases[] = {
		{7, 3}, {512, 1024}, {100000, 32}, {1000, 10}};
	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
		size_t rows = cases[t].rows, n = rows * (size_t)cases[t].c;
		int c = cases[t].c;
		float *x = tu_frandom(n, -1, 1), *b = tu_frandom((size_t)c, -1, 1);
		float *y = halloc(n), *db = halloc((size_t)c);
		dtf_cpu_bias_add(rows, c, x, b, y);
		dtf_cpu_bias_add_grad(rows, c, x, db);
		dtf_cuda_ctx_need(ctx, 0, 0, dtf_cuda_bias_add_grad_scratch(rows, c));
		ck_assert_int_eq(dtf_cuda_ctx_reserve(ctx), 0);
		float *d_x = dup_dev(x, n * 4), *d_b = dup_dev(b, (size_t)c * 4);
		float *d_y = dev_nan(n), *d_db = dev_nan((size_t)c);
		dtf_cuda_bias_add(ctx, rows, c, d_x, d_b, d_y);
		dtf_cuda_bias_add_grad(ctx, rows, c, d_x, d_db);
		float *gy = fetch(d_y, n), *gdb = fetch(d_db, (size_t)c);
		assert_exact("bias_add", gy, y, n);
		assert_close("bias_add_grad", gdb, db, (size_t)c, 1e-3, 1e-4);
		dtf_cuda_bias_add(ctx, rows, c, d_x, d_b, d_x); /* in place */
		float *gx = fetch(d_x, n);
		assert_exact("bias_add in place", gx, y, n);
		dtf_cuda_free(ctx, d_x);
		dtf_cuda_free(ctx, d_b);
		dtf_cuda_free(ctx, d_y);
		dtf_cuda_free(ctx, d_db);
		free(x), free(b), free(y), free(db), free(gy), free(gdb), free(gx);
	}
}
END_TEST

START_TEST(relu_add_vs_cpu)
{
	const size_t n = 100003;
	float *x = tu_frandom(n, -1, 1), *dy = tu_frandom(n, -1, 1);
	float *y = halloc(n), *dx = halloc(n), *s = halloc(n);
	dtf_cpu_relu(n, x, y);
	dtf_cpu_relu_grad(n, dy, y, dx);
	memcpy(s, x, n * 4);
	dtf_cpu_add_inplace(n, dy, s);
	float *d_x = dup_dev(x, n * 4), *d_dy = dup_dev(dy, n * 4);
	float *d_y = dev_nan(n), *d_dx = dev_nan(n), *d_s = dev_nan(n);
	dtf_cuda_relu(ctx, n, d_x, d_y);
	dtf_cuda_relu_grad(ctx, n, d_dy, d_y, d_dx);
	dtf_cuda_add(ctx, n, d_x, d_dy, d_s);
	float *gy = fetch(d_y, n), *gdx = fetch(d_dx, n), *gs = fetch(d_s, n);
	assert_exact("relu", gy, y, n);
	assert_exact("relu_grad", gdx, dx, n);
	assert_exact("add", gs, s, n);
	dtf_cuda_relu(ctx, n, d_x, d_x); /* in place */
	float *gx = fetch(d_x, n);
	assert_exact("relu in place", gx, y, n);
	dtf_cuda_free(ctx, d_x);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dx);
	dtf_cuda_free(ctx, d_s);
	free(x), free(dy), free(y), free(dx), free(s), free(gy), free(gdx);
	free(gs), free(gx);
}
END_TEST

/* layer_norm and its gradients: the CPU's double arithmetic in the same
 * order, one thread per row (per column for gamma); expected equal, checked
 * within 1e-6 (double sqrt and division are correctly rounded on both
 * sides, the rest is +, -, * without contraction). */
START_TEST(layer_norm_vs_cpu)
{
	const size_t rows = 2053;
	const int c = 96;
	const float eps = 1e-5f;
	size_t nx = rows * (size_t)c;
	float *x = tu_frandom(nx, -2, 3), *dy = tu_frandom(nx, -1, 1);
	float *gm = tu_frandom((size_t)c, 0.5f, 1.5f), *bt = tu_frandom((size_t)c, -1, 1);
	float *y = halloc(nx), *dx = halloc(nx), *dg = halloc((size_t)c);
	dtf_cpu_layer_norm(rows, c, x, gm, bt, eps, y);
	dtf_cpu_layer_norm_grad_input(rows, c, x, gm, dy, eps, dx);
	dtf_cpu_layer_norm_grad_gamma(rows, c, x, dy, eps, dg);
	dtf_cuda_ctx_need(ctx, 0, 0, dtf_cuda_layer_norm_grad_gamma_scratch(rows));
	ck_assert_msg(dtf_cuda_ctx_reserve(ctx) == 0, "%s", dtf_error_msg());
	float *d_x = dup_dev(x, nx * 4), *d_dy = dup_dev(dy, nx * 4);
	float *d_g = dup_dev(gm, (size_t)c * 4), *d_b = dup_dev(bt, (size_t)c * 4);
	float *d_y = dev_nan(nx), *d_dx = dev_nan(nx), *d_dg = dev_nan((size_t)c);
	dtf_cuda_layer_norm(ctx, rows, c, d_x, d_g, d_b, eps, d_y);
	dtf_cuda_layer_norm_grad_input(ctx, rows, c, d_x, d_g, d_dy, eps, d_dx);
	dtf_cuda_layer_norm_grad_gamma(ctx, rows, c, d_x, d_dy, eps, d_dg);
	float *gy = fetch(d_y, nx), *gdx = fetch(d_dx, nx), *gdg = fetch(d_dg, (size_t)c);
	assert_close("layer_norm", gy, y, nx, 1e-6, 1e-6);
	assert_close("layer_norm_grad_input", gdx, dx, nx, 1e-6, 1e-6);
	assert_close("layer_norm_grad_gamma", gdg, dg, (size_t)c, 1e-6, 1e-6);
	dtf_cuda_free(ctx, d_x);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_g);
	dtf_cuda_free(ctx, d_b);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dx);
	dtf_cuda_free(ctx, d_dg);
	free(x), free(dy), free(gm), free(bt), free(y), free(dx), free(dg);
	free(gy), free(gdx), free(gdg);
}
END_TEST

/* gelu, both forms, and its gradient: the CPU's double formula with
 * CUDA's erf, tanh and exp; atol 1e-7, rtol 1e-6 (the float results differ
 * at most where the double lies next to a rounding boundary). */
START_TEST(gelu_vs_cpu)
{
	const size_t n = 100003;
	float *x = tu_frandom(n, -6, 6), *dy = tu_frandom(n, -1, 1);
	float *y = halloc(n), *dx = halloc(n);
	float *d_x = dup_dev(x, n * 4), *d_dy = dup_dev(dy, n * 4);
	float *d_y = dev_nan(n), *d_dx = dev_nan(n);
	for (int approx = 0; approx < 2; approx++) {
		dtf_cpu_gelu(n, approx, x, y);
		dtf_cpu_gelu_grad(n, approx, dy, x, dx);
		dtf_cuda_gelu(ctx, n, approx, d_x, d_y);
		dtf_cuda_gelu_grad(ctx, n, approx, d_dy, d_x, d_dx);
		float *gy = fetch(d_y, n), *gdx = fetch(d_dx, n);
		assert_close(approx ? "gelu tanh" : "gelu erf", gy, y, n, 1e-7, 1e-6);
		assert_close(approx ? "gelu_grad tanh" : "gelu_grad erf", gdx, dx,
			     n, 1e-7, 1e-6);
		free(gy), free(gdx);
	}
	dtf_cuda_free(ctx, d_x);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dx);
	free(x), free(dy), free(y), free(dx);
}
END_TEST

/* embedding and its scatter-add gradient: bit for bit (a copy, and sums in
 * the CPU's position order); a byte vocabulary, ids repeated thousands of
 * times, two out of range. */
START_TEST(embedding_vs_cpu)
{
	const size_t n = 4099;
	const int vocab = 84, dim = 96;
	int32_t *ids = calloc(n, sizeof(int32_t));
	ck_assert_ptr_nonnull(ids);
	for (size_t p = 0; p < n; p++)
		ids[p] = (int32_t)((p * 37 + p / 11) % (size_t)vocab);
	ids[5] = -3, ids[700] = vocab;
	float *table = tu_frandom((size_t)vocab * dim, -1, 1);
	float *dy = tu_frandom(n * dim, -1, 1);
	float *y = halloc(n * dim), *dt = halloc((size_t)vocab * dim);
	dtf_cpu_embedding(n, vocab, dim, ids, table, y);
	dtf_cpu_embedding_grad(n, vocab, dim, dy, ids, dt);
	int32_t *d_ids = dup_dev(ids, n * sizeof(int32_t));
	float *d_t = dup_dev(table, (size_t)vocab * dim * 4);
	float *d_dy = dup_dev(dy, n * dim * 4);
	float *d_y = dev_nan(n * dim), *d_dt = dev_nan((size_t)vocab * dim);
	dtf_cuda_embedding(ctx, n, vocab, dim, d_ids, d_t, d_y);
	dtf_cuda_embedding_grad(ctx, n, vocab, dim, d_dy, d_ids, d_dt);
	float *gy = fetch(d_y, n * dim), *gdt = fetch(d_dt, (size_t)vocab * dim);
	for (size_t i = 0; i < n * dim; i++) /* NaN rows compare as NaN */
		ck_assert_msg(isnan(y[i]) ? isnan(gy[i])
					  : memcmp(&gy[i], &y[i], 4) == 0,
			      "embedding[%zu]: gpu %g, cpu %g", i, gy[i], y[i]);
	assert_exact("embedding_grad", gdt, dt, (size_t)vocab * dim);
	dtf_cuda_free(ctx, d_ids);
	dtf_cuda_free(ctx, d_t);
	dtf_cuda_free(ctx, d_dy);
	dtf_cuda_free(ctx, d_y);
	dtf_cuda_free(ctx, d_dt);
	free(ids), free(table), free(dy), free(y), free(dt), free(gy), free(gdt);
}
END_TEST

START_TEST(dropout_same_stream_as_cpu)
{
	const size_t rows = 33, cols = 1027, n = rows * cols;
	uint64_t ids[33];
	for (size_t r = 0; r < rows; r++)
		ids[r] = tu_next_u64();
	struct dtf_philox_key key = dtf_philox_make_key(42, DTF_RNG_DROPOUT);
	const float rates[] = {0.4f, 0.0f, 1.0f, 0.9f};
	uint64_t *d_ids = dup_dev(ids, sizeof(ids));
	float *x = tu_frandom(n, -1, 1);
	float *d_x = dup_dev(x, n * 4);
	for (int t = 0; t < 4; t++) {
		uint32_t salt = 0x1234u + (uint32_t)t;
		float *y = halloc(n), *dx = halloc(n);
		dtf_cpu_dropout(rows, cols, rates[t], key, ids, salt, x, y);
		dtf_cpu_dropout_grad(rows, cols, rates[t], key, ids, salt, x, dx);
		float *d_y = dev_nan(n), *d_dx = dev_nan(n);
		dtf_cuda_dropout(ctx, rows, cols, rates[t], key, d_ids, salt,
				 d_x, d_y);
		dtf_cuda_dropout_grad(ctx, rows, cols, rates[t], key, d_ids,
				      salt, d_x, d_dx);
		float *gy = fetch(d_y, n), *gdx = fetch(d_dx, n);
		assert_exact("dropout", gy, y, n);
		assert_exact("dropout_grad", gdx, dx, n);
		dtf_cuda_free(ctx, d_y);
		dtf_cuda_free(ctx, d_dx);
		free(y), free(dx), free(gy), free(gdx);
	}
	dtf_cuda_free(ctx, d_ids);
	dtf_cuda_free(ctx, d_x);
	free(x);
}
END_TEST

/* ---- loss --------------------------------------------------------------- */

START_TEST(xent_and_count_correct_vs_cpu)
{
	const size_t rows = 50, valid = 45;
	const int classes = 10;
	const float scale = 1.0f / 64;
	float *logits = tu_frandom(rows * classes, -4, 4);
	int32_t labels[50];
	for (size_t r = 0; r < rows; r++)
		labels[r] = (int32_t)(tu_next_u64() % classes);
	double sum = dtf_cpu_sparse_softmax_xent(rows, classes, logits, labels,
						 valid, NULL);
	float *dl = halloc(rows * classes);
	dtf_cpu_sparse_softmax_xent_grad(rows, classes, logits, labels, valid,
					 scale, dl);
	size_t correct = dtf_cpu_count_correct(rows, classes, logits, labels,
					       valid);
	float *d_l = dup_dev(logits, rows * classes * 4);
	int32_t *d_lab = dup_dev(labels, sizeof(labels));
	float *d_out = dev_nan(4), *d_dl = dev_nan(rows * classes);
	double zeros[2] = {0.5, 2.0}; /* accumulate onto these */
	double *d_acc = dup_dev(zeros, sizeof(zeros));
	dtf_cuda_sparse_softmax_xent(ctx, rows, classes, d_l, d_lab, valid, 1,
				     scale, d_out, d_out + 1, d_acc);
	dtf_cuda_sparse_softmax_xent_grad(ctx, rows, classes, d_l, d_lab, valid,
					  scale, d_dl);
	dtf_cuda_count_correct(ctx, rows, classes, d_l, d_lab, valid, 1,
			       d_out + 2, d_acc + 1);
	float *out = fetch(d_out, 3), *gdl = fetch(d_dl, rows * classes);
	double acc[2];
	ck_assert_int_eq(dtf_cuda_download(ctx, acc, d_acc, sizeof(acc)), 0);
	ck_assert_msg(fabs(out[0] - sum * scale) <= 1e-6 * fabs(sum * scale),
		      "loss %.9g vs %.9g", (double)out[0], sum * scale);
	ck_assert_msg(fabs(out[1] - sum) <= 1e-6 * fabs(sum), "sum %.9g vs %.9g",
		      (double)out[1], sum);
	ck_assert_msg(fabs(acc[0] - 0.5 - sum) <= 1e-9 * fabs(sum),
		      "accumulated %.17g vs %.17g", acc[0] - 0.5, sum);
	assert_close("xent_grad", gdl, dl, rows * classes, 1e-6, 1e-5);
	ck_assert_msg(out[2] == (float)correct, "correct %g vs %zu",
		      (double)out[2], correct);
	ck_assert_msg(acc[1] == 2.0 + (double)correct, "correct acc %g vs %zu",
		      acc[1] - 2.0, correct);
	dtf_cuda_free(ctx, d_l);
	dtf_cuda_free(ctx, d_lab);
	dtf_cuda_free(ctx, d_out);
	dtf_cuda_free(ctx, d_dl);
	dtf_cuda_free(ctx, d_acc);
	free(logits), free(dl), free(out), free(gdl);
}
END_TEST

/* ---- optimizers --------------------------------------------------------- */

static void optimizer_case(enum dtf_optimizer_kind kind, double momentum,
			   int nesterov)
{
	const size_t n = 10007;
	struct dtf_job job;
	memset(&job, 0, sizeof(job));
	job.train.optimizer = kind;
	job.train.momentum = momentum;
	job.train.nesterov = nesterov;
	job.train.beta_1 = 0.9;
	job.train.beta_2 = 0.999;
	job.train.epsilon = 1e-7;
	struct dtf_optimizer cpu;
	ck_assert_int_eq(dtf_optimizer_init(&cpu, &job, n), 0);
	float *p = tu_frandom(n, -1, 1);
	float *d_p = dup_dev(p, n * 4);
	size_t nslots = kind == DTF_OPT_ADAM ? 2 * n : momentum != 0 ? n : 0;
	float *zeros = halloc(nslots ? nslots : 1);
	float *d_s = dup_dev(zeros, (nslots ? nslots : 1) * 4);
	int64_t t = 0;
	for (int step = 0; step < 3; step++) {
		float *g = tu_frandom(n, -1e-2f, 1e-2f);
		float *d_g = dup_dev(g, n * 4);
		dtf_optimizer_apply(&cpu, p, g, 0.01);
		t++;
		if (kind == DTF_OPT_ADAM) {
			float st = (float)(0.01 * sqrt(1.0 - pow(0.999, (double)t)) /
					   (1.0 - pow(0.9, (double)t)));
			dtf_cuda_adam(ctx, n, d_p, d_g, d_s, d_s + n, st, 0.9f,
				      0.999f, 1e-7f);
		} else {
			dtf_cuda_sgd(ctx, n, d_p, d_g, nslots ? d_s : NULL, 0.01f,
				     (float)momentum, nesterov);
		}
		dtf_cuda_free(ctx, d_g);
		free(g);
	}
	float *gp = fetch(d_p, n);
	char what[64];
	snprintf(what, sizeof(what), "%s momentum %g nesterov %d",
		 kind == DTF_OPT_ADAM ? "adam" : "sgd", momentum, nesterov);
	assert_exact(what, gp, p, n);
	dtf_cuda_free(ctx, d_p);
	dtf_cuda_free(ctx, d_s);
	dtf_optimizer_deinit(&cpu);
	free(p), free(zeros), free(gp);
}

START_TEST(optimizers_vs_cpu)
{
	optimizer_case(DTF_OPT_SGD, 0.0, 0);
	optimizer_case(DTF_OPT_SGD, 0.9, 0);
	optimizer_case(DTF_OPT_SGD, 0.9, 1);
	optimizer_case(DTF_OPT_ADAM, 0.0, 0);
}
END_TEST

/* ---- training ------------------------------------------------------------ */

static char tmpdir[256];

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, shape: [12, 12, 1], scale: 0.00392156862745098}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 8, kernel: 5, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - {conv2d: {filters: 6, kernel: 3, padding: valid, activation: relu}}\n"
	"    - flatten\n"
	"    - {dense: {units: 32, activation: relu}}\n"
	"    - {dropout: {rate: 0.25}}\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"  metrics: [accuracy]\n"
	"train:\n"
	"  batch_size: 32\n"
	"  max_steps: 20\n"
	"  optimizer: {sgd: {learning_rate: 0.05, momentum: 0.9}}\n"
	"logging: {every_steps: 10}\n";

static void setup_data(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-cuda-test");
	tu_synth(tmpdir, "train", 960, 2, "12,12,1", 1);
	tu_synth(tmpdir, "test", 200, 1, "12,12,1", 2);
	tu_write_file(tmpdir, "job.yaml", job_text, tmpdir, tmpdir);
}

static void teardown_data(void)
{
	tu_tmpdir_remove(tmpdir);
}

static void compare_runs(const char *what, const char *a_name,
			 const char *b_name)
{
	size_t na, moved;
	double worst = tu_vars_rel_diff(tmpdir, a_name, b_name, &na, &moved,
					NULL);
	printf("%s after 20 steps: %zu floats, max relative difference %.3g\n",
	       what, na, worst);
	ck_assert_msg(worst <= 1e-3, "%s: max relative difference %g", what,
		      worst);
	ck_assert_uint_gt(moved, na / 2);
}

START_TEST(train_20_steps_gpu_vs_cpu)
{
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cpu --export-variables %s/cpu.bin %s/job.yaml 2>%s/cpu.log",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cuda --export-variables %s/gpu.bin %s/job.yaml 2>%s/gpu.log",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	compare_runs("1 rank, GPU vs CPU", "gpu.bin", "cpu.bin");
}
END_TEST

/* A token model (the image bytes as int32 ids) through the executor on
 * the GPU: embedding, layer_norm (its gamma gradient's scratch planned),
 * tanh-form gelu; 20 steps against the CPU. */
static const char token_job_text[] =
	"name: cuda-tokens\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 128}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, dtype: int32, shape: [144]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  graph:\n"
	"    table: {variable: {shape: [256, 8]}}\n"
	"    emb: {embedding: {inputs: [image, table]}}\n"
	"    ln: {layer_norm: {inputs: [emb]}}\n"
	"    act: {gelu: {inputs: [ln], approximate: true}}\n"
	"    flat: {flatten: {inputs: [act]}}\n"
	"    w: {variable: {shape: [1152, 4]}}\n"
	"    logits: {matmul: {inputs: [flat, w]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 32, max_steps: 20, optimizer: {adam: {learning_rate: 0.01}}}\n";

START_TEST(train_tokens_gpu_vs_cpu)
{
	tu_write_file(tmpdir, "tokens.yaml", token_job_text, tmpdir);
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cpu --export-variables %s/tcpu.bin %s/tokens.yaml 2>%s/tcpu.log",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cuda --export-variables %s/tgpu.bin %s/tokens.yaml 2>%s/tgpu.log",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	compare_runs("tokens (embedding, layer_norm, gelu), GPU vs CPU",
		     "tgpu.bin", "tcpu.bin");
}
END_TEST

START_TEST(train_2_ranks_sharing_gpu_vs_cpu)
{
	/* two ranks on one GPU: the host-staged allreduce path */
	if (access(tmpdir, F_OK) != 0)
		ck_abort_msg("no data");
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cpu --export-variables %s/cpu1.bin %s/job.yaml 2>/dev/null",
				tu_build_root(), tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_run("mpirun -np 2 %s/dtf-train -q --set device=cuda --set allow_gpu_sharing=true "
				"--export-variables %s/gpu2.bin %s/job.yaml 2>%s/gpu2.log",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	compare_runs("2 ranks sharing the GPU vs 1 rank CPU", "gpu2.bin",
		     "cpu1.bin");
	/* without sharing: an error with the hint, exit 1 */
	char why[64];
	if (dtf_cuda_device_count(why, sizeof(why)) == 1)
		ck_assert_int_eq(tu_run("mpirun -np 2 %s/dtf-train -q --set device=cuda %s/job.yaml >/dev/null 2>&1",
					tu_build_root(), tmpdir), 1);
}
END_TEST

/* In process, last (MPI starts once): steps after the first allocate
 * nothing on the host, and the run learns. */
START_TEST(gpu_steps_allocate_nothing)
{
	struct dtf_comm *comm = NULL;
	ck_assert_int_eq(dtf_comm_init(NULL, NULL, &comm), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	const char *sets[] = {"train.max_steps=0", "train.epochs=3",
			      "device=cuda"};
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load(path, sets, 3, &job), 0);
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1};
	struct dtf_train_result res;
	int rc = dtf_train_run(job, comm, &opts, &res);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(res.steps, 3 * (960 / 32));
	ck_assert_uint_eq(res.step_allocations, 0);
	printf("GPU, 3 epochs: test accuracy %.3f, loss %.3f\n",
	       res.eval_accuracy, res.eval_loss);
	ck_assert(res.eval_accuracy > 0.6); /* chance is 0.25 */
	dtf_job_free(job);
	dtf_comm_finalize(comm);
}
END_TEST

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("ops_vs_cpu");
	tcase_add_test(tc, conv2d_vs_cpu);
	tcase_add_test(tc, conv2d_asymmetric_padding_refused);
	tcase_add_test(tc, max_pool2d_vs_cpu);
	tcase_add_test(tc, matmul_vs_cpu);
	tcase_add_test(tc, bias_add_and_grad_vs_cpu);
	tcase_add_test(tc, relu_add_vs_cpu);
	tcase_add_test(tc, embedding_vs_cpu);
	tcase_add_test(tc, layer_norm_vs_cpu);
	tcase_add_test(tc, gelu_vs_cpu);
	tcase_add_test(tc, dropout_same_stream_as_cpu);
	tcase_add_test(tc, xent_and_count_correct_vs_cpu);
	tcase_add_test(tc, optimizers_vs_cpu);
	suite_add_tcase(s, tc);
	tc = tcase_create("training");
	tcase_add_unchecked_fixture(tc, setup_data, teardown_data);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, train_20_steps_gpu_vs_cpu);
	tcase_add_test(tc, train_tokens_gpu_vs_cpu);
	tcase_add_test(tc, train_2_ranks_sharing_gpu_vs_cpu);
	tcase_add_test(tc, gpu_steps_allocate_nothing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char why[512];
	int n = dtf_cuda_device_count(why, sizeof(why));
	if (n == 0) {
		printf("SKIP: no CUDA device: %s\n", why);
		return 77;
	}
	if (dtf_cuda_ctx_new(0, DTF_CUDA_FP32, &ctx) < 0) {
		printf("cannot open CUDA device 0: %s\n", dtf_error_msg());
		return 1;
	}
	printf("%s\n", dtf_cuda_ctx_describe(ctx));
	SRunner *sr = srunner_create(cuda_suite());
	/* one process: the CUDA context and MPI start once */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	dtf_cuda_ctx_free(ctx);
	return failed ? 1 : 0;
}
