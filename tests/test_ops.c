/*
 * test_ops.c - the CPU kernels (src/ops/cpu) against independent references.
 *
 * Forward passes are compared with naive loops written here (direct 7-loop
 * convolution, direct pooling, triple-loop matmul, all accumulated in double)
 * and with small cases computed by hand.  Every op with a backward is
 * checked by central finite differences of the scalar L = sum(y * r) for a
 * fixed random r, evaluated in double from the float kernel outputs.
 *
 * Finite-difference tolerances (|num - analytic| <= atol + rtol * |num|):
 *   linear / piecewise-linear ops (conv2d, matmul, bias_add, max_pool2d,
 *   relu, dropout): eps 1e-2, atol 1e-3, rtol 1e-3.  These ops are linear
 *   in the perturbed input (or piecewise linear with no kink within eps:
 *   pooling inputs are distinct by >= 0.05, relu inputs are >= 0.1 from 0),
 *   so the only error is float rounding of y: ~1e-7 * |y| * sqrt(#y) / 2eps,
 *   about 1e-4 at these sizes.
 *   softmax cross-entropy: eps 1e-3, atol 1e-3, rtol 1e-3 (smooth; loss is
 *   accumulated in double inside the kernel; truncation error ~eps^2).
 * Reference comparisons: atol 1e-4, rtol 1e-4 for sgemm-based results
 * (float sums of up to ~800 products of values in [-1, 1]); exact (0) for
 * pooling, relu, dropout, which do no arithmetic beyond one multiply.
 *
 * Outputs and workspaces are poisoned with NaN before each call, so a kernel
 * that reads its output or depends on workspace contents fails; buffers are
 * allocated at their exact size, so the sanitizer build catches overruns.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/kernels.h"

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

static void poison(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
}

static float *fcopy(const float *src, size_t n)
{
	float *p = tu_falloc(n);
	memcpy(p, src, n * sizeof *p);
	return p;
}

static double dot(const float *a, const float *b, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

static void assert_close(const char *what, const float *got,
			 const double *want, size_t n, double atol,
			 double rtol)
{
	for (size_t i = 0; i < n; i++) {
		double err = fabs(got[i] - want[i]);
		ck_assert_msg(err <= atol + rtol * fabs(want[i]),
			      "%s[%zu]: got %.9g want %.9g (err %.3g)", what, i,
			      got[i], want[i], err);
	}
}

static void assert_close_f(const char *what, const float *got,
			   const float *want, size_t n, double atol,
			   double rtol)
{
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - want[i]);
		ck_assert_msg(err <= atol + rtol * fabs(want[i]),
			      "%s[%zu]: got %.9g want %.9g", what, i, got[i],
			      want[i]);
	}
}

/* Central differences of f() w.r.t. each param[i], compared with grad[i]. */
typedef double (*loss_fn)(void *ctx);

static void fd_check(const char *what, float *param, size_t n,
		     const float *grad, loss_fn f, void *ctx, float eps,
		     double atol, double rtol)
{
	for (size_t i = 0; i < n; i++) {
		float old = param[i];
		float up = old + eps, dn = old - eps;
		param[i] = up;
		double lp = f(ctx);
		param[i] = dn;
		double lm = f(ctx);
		param[i] = old;
		/* Divide by the step actually taken in float. */
		double num = (lp - lm) / ((double)up - (double)dn);
		double err = fabs(num - grad[i]);
		ck_assert_msg(err <= atol + rtol * fabs(num),
			      "%s: d/d[%zu] numeric %.7g analytic %.7g", what,
			      i, num, grad[i]);
	}
}

static struct dtf_window_geom geom(int n, int h, int w, int c, int kh, int kw,
				   int o, int sh, int sw, int dh, int dw,
				   enum dtf_padding pad)
{
	struct dtf_window_geom g = {.n = n, .h = h, .w = w, .c = c, .kh = kh,
				    .kw = kw, .o = o, .stride_h = sh,
				    .stride_w = sw, .dilation_h = dh,
				    .dilation_w = dw};
	ck_assert_int_eq(dtf_window_geom_finish(&g, pad), 0);
	return g;
}

static size_t in_size(const struct dtf_window_geom *g)
{
	return (size_t)g->n * g->h * g->w * g->c;
}

static size_t filt_size(const struct dtf_window_geom *g)
{
	return (size_t)g->kh * g->kw * g->c * g->o;
}

static size_t out_size(const struct dtf_window_geom *g, int ch)
{
	return (size_t)g->n * g->oh * g->ow * ch;
}

/* ---- naive references --------------------------------------------------- */

/* Input pixel of output (oy, ox), tap (ky, kx); -1 when it is padding. */
static long in_index(const struct dtf_window_geom *g, int b, int oy, int ox,
		     int ky, int kx)
{
	int iy = oy * g->stride_h - g->pad_top + ky * g->dilation_h;
	int ix = ox * g->stride_w - g->pad_left + kx * g->dilation_w;
	if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
		return -1;
	return (((long)b * g->h + iy) * g->w + ix) * g->c;
}

/* y (n, oh, ow, o) in double; direct 7-loop convolution. */
static void ref_conv(const struct dtf_window_geom *g, const float *x,
		     const float *w, double *y)
{
	for (int b = 0; b < g->n; b++)
	for (int oy = 0; oy < g->oh; oy++)
	for (int ox = 0; ox < g->ow; ox++)
	for (int o = 0; o < g->o; o++) {
		double s = 0.0;
		for (int ky = 0; ky < g->kh; ky++)
		for (int kx = 0; kx < g->kw; kx++) {
			long xi = in_index(g, b, oy, ox, ky, kx);
			if (xi < 0)
				continue;
			for (int c = 0; c < g->c; c++)
				s += (double)x[xi + c] *
				     w[((ky * g->kw + kx) * g->c + c) * g->o + o];
		}
		y[(((size_t)b * g->oh + oy) * g->ow + ox) * g->o + o] = s;
	}
}

/* dx and dw of L = sum(y * dy), by the same loops. */
static void ref_conv_grads(const struct dtf_window_geom *g, const float *x,
			   const float *w, const float *dy, double *dx,
			   double *dw)
{
	memset(dx, 0, in_size(g) * sizeof *dx);
	memset(dw, 0, filt_size(g) * sizeof *dw);
	for (int b = 0; b < g->n; b++)
	for (int oy = 0; oy < g->oh; oy++)
	for (int ox = 0; ox < g->ow; ox++)
	for (int o = 0; o < g->o; o++) {
		double d = dy[(((size_t)b * g->oh + oy) * g->ow + ox) * g->o + o];
		for (int ky = 0; ky < g->kh; ky++)
		for (int kx = 0; kx < g->kw; kx++) {
			long xi = in_index(g, b, oy, ox, ky, kx);
			if (xi < 0)
				continue;
			for (int c = 0; c < g->c; c++) {
				size_t wi = ((ky * g->kw + kx) * g->c + c) * g->o + o;
				dx[xi + c] += d * w[wi];
				dw[wi] += d * x[xi + c];
			}
		}
	}
}

/* Max pool with first-max argmax; dx of L = sum(y * dy) when dy != NULL. */
static void ref_pool(const struct dtf_window_geom *g, const float *x,
		     double *y, const float *dy, double *dx)
{
	if (dx)
		memset(dx, 0, in_size(g) * sizeof *dx);
	for (int b = 0; b < g->n; b++)
	for (int oy = 0; oy < g->oh; oy++)
	for (int ox = 0; ox < g->ow; ox++)
	for (int c = 0; c < g->c; c++) {
		long arg = -1;
		for (int ky = 0; ky < g->kh; ky++)
		for (int kx = 0; kx < g->kw; kx++) {
			long xi = in_index(g, b, oy, ox, ky, kx);
			if (xi >= 0 && (arg < 0 || x[xi + c] > x[arg]))
				arg = xi + c;
		}
		ck_assert(arg >= 0);
		size_t yi = (((size_t)b * g->oh + oy) * g->ow + ox) * g->c + c;
		if (y)
			y[yi] = x[arg];
		if (dx)
			dx[arg] += dy[yi];
	}
}

static void ref_matmul(int m, int n, int k, const float *a, int ta,
		       const float *b, int tb, double *c)
{
	for (int i = 0; i < m; i++)
	for (int j = 0; j < n; j++) {
		double s = 0.0;
		for (int p = 0; p < k; p++)
			s += (double)(ta ? a[p * m + i] : a[i * k + p]) *
			     (tb ? b[j * k + p] : b[p * n + j]);
		c[i * n + j] = s;
	}
}

/* ---- geometry ----------------------------------------------------------- */

START_TEST(test_geom_tf_sizes)
{
	/* in, k, stride, dilation, padding -> out, pad_before (TF values). */
	static const struct {
		int in, k, s, d, pad, out, before;
	} t[] = {
		{28, 5, 1, 1, DTF_PAD_SAME, 28, 2},
		{7, 3, 2, 1, DTF_PAD_SAME, 4, 1},   /* pad_total 2 */
		{8, 3, 2, 1, DTF_PAD_SAME, 4, 0},   /* pad_total 1: after */
		{28, 5, 1, 1, DTF_PAD_VALID, 24, 0},
		{28, 2, 2, 1, DTF_PAD_SAME, 14, 0}, /* the target's pooling */
		{14, 2, 2, 1, DTF_PAD_SAME, 7, 0},
		{7, 2, 2, 1, DTF_PAD_SAME, 4, 0},   /* pad_total 1 */
		{7, 2, 2, 1, DTF_PAD_VALID, 3, 0},
		{5, 3, 1, 2, DTF_PAD_SAME, 5, 2},   /* eff. window 5 */
		{9, 3, 1, 2, DTF_PAD_VALID, 5, 0},
		{10, 4, 3, 1, DTF_PAD_SAME, 4, 1},  /* pad_total 3 */
		{4, 5, 1, 1, DTF_PAD_SAME, 4, 2},   /* window > input */
		{5, 5, 1, 1, DTF_PAD_VALID, 1, 0},
		{1, 1, 1, 1, DTF_PAD_SAME, 1, 0},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct dtf_window_geom g = {.n = 1, .h = t[i].in, .w = t[i].in,
					    .c = 1, .kh = t[i].k, .kw = t[i].k,
					    .o = 1, .stride_h = t[i].s,
					    .stride_w = t[i].s,
					    .dilation_h = t[i].d,
					    .dilation_w = t[i].d};
		ck_assert_int_eq(dtf_window_geom_finish(&g, t[i].pad), 0);
		ck_assert_msg(g.oh == t[i].out && g.ow == t[i].out &&
				      g.pad_top == t[i].before &&
				      g.pad_left == t[i].before,
			      "case %zu: oh %d pad %d, want %d %d", i, g.oh,
			      g.pad_top, t[i].out, t[i].before);
	}
	/* Rows and columns are independent. */
	struct dtf_window_geom g = {.n = 1, .h = 7, .w = 8, .c = 1, .kh = 3,
				    .kw = 3, .o = 1, .stride_h = 2,
				    .stride_w = 2, .dilation_h = 1,
				    .dilation_w = 1};
	ck_assert_int_eq(dtf_window_geom_finish(&g, DTF_PAD_SAME), 0);
	ck_assert_int_eq(g.pad_top, 1);
	ck_assert_int_eq(g.pad_left, 0);
	/* Empty output with valid padding; nonsense strides. */
	g.h = 2;
	ck_assert_int_eq(dtf_window_geom_finish(&g, DTF_PAD_VALID), -1);
	g.h = 7;
	g.stride_h = 0;
	ck_assert_int_eq(dtf_window_geom_finish(&g, DTF_PAD_SAME), -1);
}
END_TEST

/* ---- conv2d ------------------------------------------------------------- */

START_TEST(test_conv2d_hand)
{
	/* x 3x3 = 1..9, w 2x2 = [[1, 2], [3, 4]]. */
	float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 2, 3, 4};
	float y[9], ws[64];
	struct dtf_window_geom g = geom(1, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1,
					DTF_PAD_VALID);
	ck_assert_uint_le(dtf_cpu_conv2d_workspace(&g), 64);
	dtf_cpu_conv2d(&g, x, w, y, ws);
	const float valid[4] = {37, 47, 67, 77};
	assert_close_f("valid", y, valid, 4, 0, 0);

	/* Same: pad_total 1 goes after, so the last row/column see zeros. */
	g = geom(1, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, DTF_PAD_SAME);
	ck_assert_int_eq(g.pad_top, 0);
	ck_assert_uint_le(dtf_cpu_conv2d_workspace(&g), 64);
	dtf_cpu_conv2d(&g, x, w, y, ws);
	const float same[9] = {37, 47, 21, 67, 77, 33, 23, 26, 9};
	assert_close_f("same", y, same, 9, 0, 0);

	/* Backprop input of dy = 1 everywhere (valid): dx counts the filter
	 * taps each input pixel meets. */
	g = geom(1, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, DTF_PAD_VALID);
	float dy[4] = {1, 1, 1, 1}, dx[9], dw[4];
	dtf_cpu_conv2d_backprop_input(&g, dy, w, dx, ws);
	const float dxw[9] = {1, 3, 2, 4, 10, 6, 3, 7, 4};
	assert_close_f("dx", dx, dxw, 9, 0, 0);
	dtf_cpu_conv2d_backprop_filter(&g, x, dy, dw, ws);
	const float dww[4] = {12, 16, 24, 28}; /* window sums */
	assert_close_f("dw", dw, dww, 4, 0, 0);
}
END_TEST

struct conv_case {
	int n, h, w, c, kh, kw, o, sh, sw, dh, dw;
	enum dtf_padding pad;
};

static void conv_geom_vs_reference(struct dtf_window_geom g);

static void conv_vs_reference(const struct conv_case *k)
{
	conv_geom_vs_reference(geom(k->n, k->h, k->w, k->c, k->kh, k->kw,
				    k->o, k->sh, k->sw, k->dh, k->dw, k->pad));
}

static void conv_geom_vs_reference(struct dtf_window_geom g)
{
	size_t nx = in_size(&g), nw = filt_size(&g), ny = out_size(&g, g.o);
	size_t nws = dtf_cpu_conv2d_workspace(&g);
	float *x = tu_frandom(nx, -1, 1), *w = tu_frandom(nw, -1, 1);
	float *dy = tu_frandom(ny, -1, 1);
	float *y = tu_falloc(ny), *dx = tu_falloc(nx), *dw = tu_falloc(nw);
	float *ws = nws ? tu_falloc(nws) : NULL;
	double *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx);
	double *rdw = malloc(nw * sizeof *rdw);
	ck_assert(ry && rdx && rdw);

	poison(y, ny);
	if (ws)
		poison(ws, nws);
	dtf_cpu_conv2d(&g, x, w, y, ws);
	ref_conv(&g, x, w, ry);
	assert_close("conv2d y", y, ry, ny, 1e-4, 1e-4);

	ref_conv_grads(&g, x, w, dy, rdx, rdw);
	poison(dx, nx);
	if (ws)
		poison(ws, nws);
	dtf_cpu_conv2d_backprop_input(&g, dy, w, dx, ws);
	assert_close("conv2d dx", dx, rdx, nx, 1e-4, 1e-4);
	poison(dw, nw);
	if (ws)
		poison(ws, nws);
	dtf_cpu_conv2d_backprop_filter(&g, x, dy, dw, ws);
	/* dw sums n*oh*ow products: scale the absolute tolerance with it. */
	assert_close("conv2d dw", dw, rdw, nw,
		     1e-5 * sqrt((double)g.n * g.oh * g.ow) + 1e-4, 1e-4);

	free(x), free(w), free(dy), free(y), free(dx), free(dw), free(ws);
	free(ry), free(rdx), free(rdw);
}

static const struct conv_case conv_cases[] = {
	/* n  h   w   c  kh kw  o sh sw dh dw pad */
	{1, 5, 5, 1, 3, 3, 1, 1, 1, 1, 1, DTF_PAD_SAME},
	{3, 7, 6, 2, 3, 2, 4, 2, 2, 1, 1, DTF_PAD_SAME},
	{2, 8, 9, 3, 3, 3, 5, 2, 1, 1, 1, DTF_PAD_VALID},
	{1, 9, 7, 2, 3, 3, 3, 1, 1, 2, 2, DTF_PAD_SAME},
	{3, 11, 10, 3, 2, 3, 2, 2, 2, 2, 1, DTF_PAD_VALID},
	{2, 6, 6, 4, 1, 1, 3, 1, 1, 1, 1, DTF_PAD_SAME},  /* pointwise */
	{2, 7, 7, 3, 1, 1, 2, 2, 2, 1, 1, DTF_PAD_VALID}, /* 1x1, stride 2 */
	{1, 4, 4, 2, 5, 5, 3, 1, 1, 1, 1, DTF_PAD_SAME},  /* window > input */
	{3, 5, 5, 3, 5, 5, 2, 1, 1, 1, 1, DTF_PAD_VALID}, /* 1x1 output */
	{2, 13, 13, 5, 4, 4, 6, 3, 3, 1, 1, DTF_PAD_SAME},
	{1, 8, 8, 3, 3, 3, 4, 2, 2, 1, 1, DTF_PAD_SAME},  /* pad after only */
	{3, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1, DTF_PAD_SAME}, /* target conv1 */
};

START_TEST(test_conv2d_reference)
{
	tu_rng_seed(101);
	for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
		conv_vs_reference(&conv_cases[i]);
}
END_TEST

START_TEST(test_conv2d_blocks)
{
	/* Target conv2 with enough images that the im2col runs in several
	 * blocks, the last one short. */
	struct conv_case k = {0, 14, 14, 32, 5, 5, 64, 1, 1, 1, 1,
			      DTF_PAD_SAME};
	struct dtf_window_geom g = geom(1, 14, 14, 32, 5, 5, 64, 1, 1, 1, 1,
					DTF_PAD_SAME);
	size_t per = dtf_cpu_conv2d_workspace(&g); /* one image's matrix */
	g.n = 64;
	size_t nb = dtf_cpu_conv2d_workspace(&g) / per;
	ck_assert_uint_ge(nb, 1);
	ck_assert_uint_lt(nb, 64);
	k.n = (int)nb + 1 + (nb > 2); /* two blocks, the second short */
	tu_rng_seed(202);
	conv_vs_reference(&k);
}
END_TEST

struct conv_ctx {
	struct dtf_window_geom g;
	float *x, *w, *y, *r, *ws;
};

static double conv_loss(void *p)
{
	struct conv_ctx *c = p;
	dtf_cpu_conv2d(&c->g, c->x, c->w, c->y, c->ws);
	return dot(c->y, c->r, out_size(&c->g, c->g.o));
}

START_TEST(test_conv2d_fd)
{
	static const struct conv_case cases[] = {
		{2, 5, 5, 2, 3, 3, 3, 1, 1, 1, 1, DTF_PAD_SAME},
		{2, 5, 6, 2, 3, 3, 2, 1, 1, 1, 1, DTF_PAD_VALID},
		{2, 7, 7, 2, 3, 3, 2, 2, 2, 1, 1, DTF_PAD_SAME},
		{1, 6, 7, 2, 3, 2, 2, 2, 2, 1, 1, DTF_PAD_VALID},
		{1, 7, 7, 2, 3, 3, 2, 1, 1, 2, 2, DTF_PAD_SAME},
		{2, 4, 4, 3, 1, 1, 2, 1, 1, 1, 1, DTF_PAD_SAME},
	};
	tu_rng_seed(303);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct conv_case *k = &cases[i];
		struct conv_ctx c;
		c.g = geom(k->n, k->h, k->w, k->c, k->kh, k->kw, k->o, k->sh,
			   k->sw, k->dh, k->dw, k->pad);
		size_t nx = in_size(&c.g), nw = filt_size(&c.g);
		size_t ny = out_size(&c.g, c.g.o);
		size_t nws = dtf_cpu_conv2d_workspace(&c.g);
		c.x = tu_frandom(nx, -1, 1);
		c.w = tu_frandom(nw, -1, 1);
		c.r = tu_frandom(ny, -1, 1);
		c.y = tu_falloc(ny);
		c.ws = tu_falloc(nws);
		float *dx = tu_falloc(nx), *dw = tu_falloc(nw);
		dtf_cpu_conv2d_backprop_input(&c.g, c.r, c.w, dx, c.ws);
		dtf_cpu_conv2d_backprop_filter(&c.g, c.x, c.r, dw, c.ws);
		char what[64];
		snprintf(what, sizeof what, "conv case %zu dx", i);
		fd_check(what, c.x, nx, dx, conv_loss, &c, 1e-2f, 1e-3, 1e-3);
		snprintf(what, sizeof what, "conv case %zu dw", i);
		fd_check(what, c.w, nw, dw, conv_loss, &c, 1e-2f, 1e-3, 1e-3);
		free(c.x), free(c.w), free(c.r), free(c.y), free(c.ws);
		free(dx), free(dw);
	}
}
END_TEST

/* ---- max_pool2d --------------------------------------------------------- */

START_TEST(test_pool_hand)
{
	float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	float y[9], dx[16];
	struct dtf_window_geom g = geom(1, 4, 4, 1, 2, 2, 0, 2, 2, 1, 1,
					DTF_PAD_VALID);
	dtf_cpu_max_pool2d(&g, x, y);
	const float want[4] = {6, 8, 14, 16};
	assert_close_f("pool", y, want, 4, 0, 0);

	/* Padded cells never win, even against negative inputs. */
	float neg[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
	g = geom(1, 3, 3, 1, 2, 2, 0, 2, 2, 1, 1, DTF_PAD_SAME);
	dtf_cpu_max_pool2d(&g, neg, y);
	const float wneg[4] = {-1, -3, -7, -9};
	assert_close_f("pool neg", y, wneg, 4, 0, 0);

	/* Ties: the gradient goes to the first maximum in row-major order. */
	float tie[4] = {1, 3, 3, 2}, d1 = 5;
	g = geom(1, 2, 2, 1, 2, 2, 0, 2, 2, 1, 1, DTF_PAD_VALID);
	dtf_cpu_max_pool2d_grad(&g, tie, &d1, dx);
	const float wtie[4] = {0, 5, 0, 0};
	assert_close_f("pool tie", dx, wtie, 4, 0, 0);
	float flat[4] = {7, 7, 7, 7};
	dtf_cpu_max_pool2d_grad(&g, flat, &d1, dx);
	const float wflat[4] = {5, 0, 0, 0};
	assert_close_f("pool flat", dx, wflat, 4, 0, 0);

	/* Overlapping windows (3x3 stride 1 on 3x4) accumulate at a shared
	 * maximum. */
	float ov[12] = {0, 1, 2, 3, 4, 9, 5, 6, 7, 8, 1, 2};
	float dov[2] = {1, 10};
	g = geom(1, 3, 4, 1, 3, 3, 0, 1, 1, 1, 1, DTF_PAD_VALID);
	dtf_cpu_max_pool2d_grad(&g, ov, dov, dx);
	const float wov[12] = {0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0};
	assert_close_f("pool overlap", dx, wov, 12, 0, 0);
}
END_TEST

struct pool_case {
	int n, h, w, c, kh, kw, sh, sw, dil;
	enum dtf_padding pad;
};

static const struct pool_case pool_cases[] = {
	{2, 6, 6, 3, 2, 2, 2, 2, 1, DTF_PAD_VALID},
	{1, 7, 7, 2, 3, 3, 2, 2, 1, DTF_PAD_SAME},
	{3, 5, 8, 1, 2, 2, 2, 2, 1, DTF_PAD_SAME},
	{2, 9, 7, 4, 3, 2, 1, 2, 1, DTF_PAD_SAME},
	{2, 5, 5, 70, 3, 3, 2, 2, 1, DTF_PAD_SAME}, /* > one channel chunk */
	{1, 7, 7, 2, 2, 2, 1, 1, 2, DTF_PAD_VALID}, /* dilated window */
	{2, 28, 28, 32, 2, 2, 2, 2, 1, DTF_PAD_SAME}, /* target pool1 */
	{2, 7, 7, 64, 2, 2, 2, 2, 1, DTF_PAD_SAME},
};

/* Distinct values (steps of 0.05) in random order: no ties, and a
 * perturbation of 1e-2 never changes an argmax. */
static float *distinct(size_t n)
{
	float *p = tu_falloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((double)i * 0.05 - (double)n * 0.025);
	for (size_t i = n; i > 1; i--) {
		size_t j = tu_next_u64() % i;
		float t = p[i - 1];
		p[i - 1] = p[j];
		p[j] = t;
	}
	return p;
}

START_TEST(test_pool_reference)
{
	tu_rng_seed(404);
	for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
		const struct pool_case *k = &pool_cases[i];
		struct dtf_window_geom g = geom(k->n, k->h, k->w, k->c, k->kh,
						k->kw, 0, k->sh, k->sw, k->dil,
						k->dil, k->pad);
		size_t nx = in_size(&g), ny = out_size(&g, g.c);
		/* Coarse values (multiples of 1/4 in [-2, 2]) make ties
		 * common, exercising first-max routing. */
		float *x = tu_falloc(nx), *y = tu_falloc(ny), *dx = tu_falloc(nx);
		for (size_t j = 0; j < nx; j++)
			x[j] = (float)(tu_next_u64() % 17) * 0.25f - 2.0f;
		float *dy = tu_frandom(ny, -1, 1);
		double *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx);
		ck_assert(ry && rdx);
		ref_pool(&g, x, ry, dy, rdx);
		poison(y, ny);
		dtf_cpu_max_pool2d(&g, x, y);
		assert_close("pool y", y, ry, ny, 0, 0);
		poison(dx, nx);
		dtf_cpu_max_pool2d_grad(&g, x, dy, dx);
		assert_close("pool dx", dx, rdx, nx, 1e-6, 1e-6);
		free(x), free(y), free(dx), free(dy), free(ry), free(rdx);
	}
}
END_TEST

struct pool_ctx {
	struct dtf_window_geom g;
	float *x, *y, *r;
};

static double pool_loss(void *p)
{
	struct pool_ctx *c = p;
	dtf_cpu_max_pool2d(&c->g, c->x, c->y);
	return dot(c->y, c->r, out_size(&c->g, c->g.c));
}

START_TEST(test_pool_fd)
{
	tu_rng_seed(505);
	for (size_t i = 0; i < 6; i++) {
		const struct pool_case *k = &pool_cases[i];
		struct pool_ctx c;
		c.g = geom(k->n, k->h, k->w, k->c, k->kh, k->kw, 0, k->sh,
			   k->sw, k->dil, k->dil, k->pad);
		size_t nx = in_size(&c.g), ny = out_size(&c.g, c.g.c);
		c.x = distinct(nx);
		c.y = tu_falloc(ny);
		c.r = tu_frandom(ny, -1, 1);
		float *dx = tu_falloc(nx);
		dtf_cpu_max_pool2d_grad(&c.g, c.x, c.r, dx);
		fd_check("pool dx", c.x, nx, dx, pool_loss, &c, 1e-2f, 1e-3,
			 1e-3);
		free(c.x), free(c.y), free(c.r), free(dx);
	}
}
END_TEST

/* ---- matmul ------------------------------------------------------------- */

START_TEST(test_matmul_reference)
{
	static const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33},
					{64, 10, 1024}, {2, 31, 1}};
	tu_rng_seed(606);
	/* Hand case: [[1, 2], [3, 4]] * [[5, 6], [7, 8]]. */
	float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c2[4];
	dtf_cpu_matmul(2, 2, 2, a, 0, b, 0, c2);
	const float want[4] = {19, 22, 43, 50};
	assert_close_f("matmul hand", c2, want, 4, 0, 0);
	dtf_cpu_matmul(2, 2, 2, a, 1, b, 1, c2); /* a^T b^T = (b a)^T */
	const float wantt[4] = {23, 31, 34, 46};
	assert_close_f("matmul hand tt", c2, wantt, 4, 0, 0);

	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
	for (int ta = 0; ta < 2; ta++)
	for (int tb = 0; tb < 2; tb++) {
		int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		float *pa = tu_frandom((size_t)m * k, -1, 1);
		float *pb = tu_frandom((size_t)k * n, -1, 1);
		float *c = tu_falloc((size_t)m * n);
		double *rc = malloc((size_t)m * n * sizeof *rc);
		ck_assert_ptr_nonnull(rc);
		poison(c, (size_t)m * n);
		dtf_cpu_matmul(m, n, k, pa, ta, pb, tb, c);
		ref_matmul(m, n, k, pa, ta, pb, tb, rc);
		assert_close("matmul", c, rc, (size_t)m * n, 1e-4, 1e-4);
		free(pa), free(pb), free(c), free(rc);
	}
}
END_TEST

struct mm_ctx {
	int m, n, k, ta, tb;
	float *a, *b, *c, *r;
};

static double mm_loss(void *p)
{
	struct mm_ctx *x = p;
	dtf_cpu_matmul(x->m, x->n, x->k, x->a, x->ta, x->b, x->tb, x->c);
	return dot(x->c, x->r, (size_t)x->m * x->n);
}

START_TEST(test_matmul_fd)
{
	tu_rng_seed(707);
	for (int ta = 0; ta < 2; ta++)
	for (int tb = 0; tb < 2; tb++) {
		struct mm_ctx x = {.m = 3, .n = 4, .k = 5, .ta = ta, .tb = tb};
		int m = x.m, n = x.n, k = x.k;
		x.a = tu_frandom((size_t)m * k, -1, 1);
		x.b = tu_frandom((size_t)k * n, -1, 1);
		x.r = tu_frandom((size_t)m * n, -1, 1);
		x.c = tu_falloc((size_t)m * n);
		float *da = tu_falloc((size_t)m * k), *db = tu_falloc((size_t)k * n);
		/* The gradients as autodiff would emit them, with matmul:
		 * d op(a) = dc op(b)^T, d op(b) = op(a)^T dc. */
		if (!ta)
			dtf_cpu_matmul(m, k, n, x.r, 0, x.b, !tb, da);
		else
			dtf_cpu_matmul(k, m, n, x.b, tb, x.r, 1, da);
		if (!tb)
			dtf_cpu_matmul(k, n, m, x.a, !ta, x.r, 0, db);
		else
			dtf_cpu_matmul(n, k, m, x.r, 1, x.a, ta, db);
		fd_check("matmul da", x.a, (size_t)m * k, da, mm_loss, &x,
			 1e-2f, 1e-3, 1e-3);
		fd_check("matmul db", x.b, (size_t)k * n, db, mm_loss, &x,
			 1e-2f, 1e-3, 1e-3);
		free(x.a), free(x.b), free(x.r), free(x.c), free(da), free(db);
	}
}
END_TEST

/* ---- bias_add ----------------------------------------------------------- */

struct bias_ctx {
	size_t rows;
	int c;
	float *x, *b, *y, *r;
};

static double bias_loss(void *p)
{
	struct bias_ctx *k = p;
	dtf_cpu_bias_add(k->rows, k->c, k->x, k->b, k->y);
	return dot(k->y, k->r, k->rows * k->c);
}

START_TEST(test_bias_add)
{
	tu_rng_seed(808);
	float x[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
	dtf_cpu_bias_add(2, 3, x, b, y);
	const float want[6] = {11, 22, 33, 14, 25, 36};
	assert_close_f("bias_add", y, want, 6, 0, 0);
	dtf_cpu_bias_add(2, 3, x, b, x); /* in place */
	assert_close_f("bias_add in place", x, want, 6, 0, 0);
	float db[3];
	dtf_cpu_bias_add_grad(2, 3, want, db);
	const float wdb[3] = {25, 47, 69};
	assert_close_f("bias_add_grad", db, wdb, 3, 0, 0);

	struct bias_ctx k = {.rows = 7, .c = 5};
	size_t n = k.rows * k.c;
	k.x = tu_frandom(n, -1, 1);
	k.b = tu_frandom(k.c, -1, 1);
	k.r = tu_frandom(n, -1, 1);
	k.y = tu_falloc(n);
	float *dx = fcopy(k.r, n), *dbias = tu_falloc(k.c);
	dtf_cpu_bias_add_grad(k.rows, k.c, k.r, dbias);
	fd_check("bias_add dx", k.x, n, dx, bias_loss, &k, 1e-2f, 1e-3, 1e-3);
	fd_check("bias_add db", k.b, k.c, dbias, bias_loss, &k, 1e-2f, 1e-3,
		 1e-3);
	free(k.x), free(k.b), free(k.r), free(k.y), free(dx), free(dbias);
}
END_TEST

START_TEST(test_bias_add_grad_large)
{
	/* A conv layer's worth of rows (64 * 28 * 28) and a width that is not
	 * a multiple of the kernel's column chunk: the sum must match a
	 * double reference to float precision, without drift. */
	tu_rng_seed(909);
	size_t rows = 64 * 28 * 28;
	int c = 300;
	float *dy = tu_frandom(rows * c, 0.5f, 1.5f), *db = tu_falloc(c);
	double *ref = calloc(c, sizeof *ref);
	ck_assert_ptr_nonnull(ref);
	for (size_t r = 0; r < rows; r++)
		for (int j = 0; j < c; j++)
			ref[j] += dy[r * c + j];
	poison(db, c);
	dtf_cpu_bias_add_grad(rows, c, dy, db);
	assert_close("bias_add_grad large", db, ref, c, 0, 2e-7);
	free(dy), free(db), free(ref);
}
END_TEST

/* ---- relu --------------------------------------------------------------- */

struct relu_ctx {
	size_t n;
	float *x, *y, *r;
};

static double relu_loss(void *p)
{
	struct relu_ctx *k = p;
	dtf_cpu_relu(k->n, k->x, k->y);
	return dot(k->y, k->r, k->n);
}

START_TEST(test_relu)
{
	float x[5] = {-2, -0.0f, 0, 0.5f, 3}, y[5], dx[5];
	dtf_cpu_relu(5, x, y);
	const float want[5] = {0, 0, 0, 0.5f, 3};
	assert_close_f("relu", y, want, 5, 0, 0);
	const float dy[5] = {1, 2, 3, 4, 5};
	dtf_cpu_relu_grad(5, dy, y, dx);
	const float wdx[5] = {0, 0, 0, 4, 5};
	assert_close_f("relu_grad", dx, wdx, 5, 0, 0);
	dtf_cpu_relu(5, x, x); /* in place */
	assert_close_f("relu in place", x, want, 5, 0, 0);

	tu_rng_seed(1010);
	struct relu_ctx k = {.n = 200};
	k.x = tu_falloc(k.n);
	for (size_t i = 0; i < k.n; i++) /* |x| >= 0.1: no kink within eps */
		k.x[i] = (tu_next_u64() & 1 ? 1 : -1) * tu_frand(0.1f, 1.0f);
	k.y = tu_falloc(k.n);
	k.r = tu_frandom(k.n, -1, 1);
	float *g = tu_falloc(k.n);
	dtf_cpu_relu(k.n, k.x, k.y);
	dtf_cpu_relu_grad(k.n, k.r, k.y, g);
	fd_check("relu dx", k.x, k.n, g, relu_loss, &k, 1e-2f, 1e-3, 1e-3);
	free(k.x), free(k.y), free(k.r), free(g);
}
END_TEST

/* ---- dropout ------------------------------------------------------------ */

struct drop_ctx {
	size_t rows, cols;
	float rate;
	struct dtf_philox_key key;
	const uint64_t *ids;
	float *x, *y, *r;
};

static double drop_loss(void *p)
{
	struct drop_ctx *k = p;
	dtf_cpu_dropout(k->rows, k->cols, k->rate, k->key, k->ids, 7, k->x,
			k->y);
	return dot(k->y, k->r, k->rows * k->cols);
}

START_TEST(test_dropout_spec)
{
	/* Element j of row r is kept iff u01(word j%4 of block j/4 of the
	 * stream (key, id, id >> 32, salt)) >= rate, and scaled by
	 * 1 / (1 - rate). */
	struct dtf_philox_key key = dtf_philox_make_key(42, DTF_RNG_DROPOUT);
	const uint64_t ids[2] = {5, 0x100000003ull};
	const size_t cols = 11;
	const float rate = 0.4f;
	float x[22], y[22];
	for (int i = 0; i < 22; i++)
		x[i] = (float)(i + 1);
	dtf_cpu_dropout(2, cols, rate, key, ids, 99, x, y);
	int kept = 0;
	for (size_t r = 0; r < 2; r++)
	for (size_t j = 0; j < cols; j++) {
		uint32_t ctr[4] = {(uint32_t)(j / 4), (uint32_t)ids[r],
				   (uint32_t)(ids[r] >> 32), 99};
		uint32_t w[4];
		dtf_philox4x32(key, ctr, w);
		float want = dtf_rng_u01(w[j % 4]) >= rate
				     ? x[r * cols + j] * (1.0f / (1.0f - rate))
				     : 0.0f;
		kept += want != 0;
		ck_assert_msg(y[r * cols + j] == want, "r %zu j %zu: %g vs %g",
			      r, j, y[r * cols + j], want);
	}
	ck_assert_int_gt(kept, 0);
	ck_assert_int_lt(kept, 22);

	/* rate 0 is an exact copy; in place works. */
	dtf_cpu_dropout(2, cols, 0.0f, key, ids, 99, x, y);
	assert_close_f("rate 0", y, x, 22, 0, 0);
	float z[22];
	memcpy(z, x, sizeof z);
	dtf_cpu_dropout(2, cols, rate, key, ids, 99, x, y);
	dtf_cpu_dropout(2, cols, rate, key, ids, 99, z, z);
	assert_close_f("in place", z, y, 22, 0, 0);
}
END_TEST

START_TEST(test_dropout_masks)
{
	struct dtf_philox_key key = dtf_philox_make_key(7, DTF_RNG_DROPOUT);
	const size_t rows = 256, cols = 4096;
	const float rate = 0.4f;
	uint64_t *ids = malloc(rows * sizeof *ids);
	float *x = tu_falloc(rows * cols), *y = tu_falloc(rows * cols);
	float *y2 = tu_falloc(rows * cols);
	ck_assert_ptr_nonnull(ids);
	for (size_t r = 0; r < rows; r++)
		ids[r] = 1000 + r;
	for (size_t i = 0; i < rows * cols; i++)
		x[i] = 1.0f;

	/* Fraction kept ~ 1 - rate: 1M Bernoulli draws, sd ~5e-4. */
	dtf_cpu_dropout(rows, cols, rate, key, ids, 3, x, y);
	size_t kept = 0;
	for (size_t i = 0; i < rows * cols; i++)
		kept += y[i] != 0;
	double frac = (double)kept / (rows * cols);
	ck_assert_msg(fabs(frac - 0.6) < 5e-3, "kept fraction %g", frac);

	/* Same ids: same mask. */
	dtf_cpu_dropout(rows, cols, rate, key, ids, 3, x, y2);
	ck_assert(memcmp(y, y2, rows * cols * sizeof *y) == 0);

	/* A row's mask follows its id, not its position: reverse the batch. */
	uint64_t *rev = malloc(rows * sizeof *rev);
	ck_assert_ptr_nonnull(rev);
	for (size_t r = 0; r < rows; r++)
		rev[r] = ids[rows - 1 - r];
	dtf_cpu_dropout(rows, cols, rate, key, rev, 3, x, y2);
	for (size_t r = 0; r < rows; r++)
		ck_assert(memcmp(y + r * cols, y2 + (rows - 1 - r) * cols,
				 cols * sizeof *y) == 0);

	/* A lone row (batch of 1) gets the same mask as inside the batch. */
	dtf_cpu_dropout(1, cols, rate, key, &ids[17], 3, x, y2);
	ck_assert(memcmp(y + 17 * cols, y2, cols * sizeof *y) == 0);

	/* Different ids, salt or key: different masks. */
	for (size_t r = 0; r < rows; r++)
		rev[r] = ids[r] + rows;
	dtf_cpu_dropout(rows, cols, rate, key, rev, 3, x, y2);
	for (size_t r = 0; r < rows; r++)
		ck_assert(memcmp(y + r * cols, y2 + r * cols,
				 cols * sizeof *y) != 0);
	dtf_cpu_dropout(rows, cols, rate, key, ids, 4, x, y2);
	ck_assert(memcmp(y, y2, cols * sizeof *y) != 0);
	/* Ids that differ only in the high 32 bits differ too. */
	uint64_t hi[2] = {5, 5 + (1ull << 32)};
	dtf_cpu_dropout(2, cols, rate, key, hi, 3, x, y2);
	ck_assert(memcmp(y2, y2 + cols, cols * sizeof *y) != 0);
	free(ids), free(rev), free(x), free(y), free(y2);
}
END_TEST

START_TEST(test_dropout_fd)
{
	tu_rng_seed(1111);
	static const uint64_t ids[3] = {11, 12, 1u << 31};
	struct drop_ctx k = {.rows = 3, .cols = 13, .rate = 0.3f, .ids = ids};
	size_t n = k.rows * k.cols;
	k.key = dtf_philox_make_key(1, DTF_RNG_DROPOUT);
	k.x = tu_frandom(n, -1, 1);
	k.y = tu_falloc(n);
	k.r = tu_frandom(n, -1, 1);
	float *dx = tu_falloc(n);
	dtf_cpu_dropout_grad(k.rows, k.cols, k.rate, k.key, ids, 7, k.r, dx);
	fd_check("dropout dx", k.x, n, dx, drop_loss, &k, 1e-2f, 1e-3, 1e-3);
	/* The gradient's zeros are exactly the forward's. */
	dtf_cpu_dropout(k.rows, k.cols, k.rate, k.key, ids, 7, k.x, k.y);
	for (size_t i = 0; i < n; i++)
		ck_assert((k.y[i] == 0) == (dx[i] == 0));
	free(k.x), free(k.y), free(k.r), free(dx);
}
END_TEST

/* ---- softmax cross-entropy ---------------------------------------------- */

struct xent_ctx {
	size_t rows, valid;
	int classes;
	float *logits;
	const int32_t *labels;
};

static double xent_loss(void *p)
{
	struct xent_ctx *k = p;
	return dtf_cpu_sparse_softmax_xent(k->rows, k->classes, k->logits,
					   k->labels, k->valid, NULL);
}

START_TEST(test_xent_hand)
{
	/* Row 0: logits 1, 2, 3, label 2: log(e + e^2 + e^3) - 3.
	 * Row 1: same logits, label 0: log(e + e^2 + e^3) - 1.
	 * Row 2 is past `valid` and is ignored. */
	float l[9] = {1, 2, 3, 1, 2, 3, 100, 0, 0}, loss[3];
	int32_t lab[3] = {2, 0, 1};
	double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
	double tot = dtf_cpu_sparse_softmax_xent(3, 3, l, lab, 2, loss);
	ck_assert_double_eq_tol(tot, (lse - 3) + (lse - 1), 1e-12);
	ck_assert_float_eq_tol(loss[0], lse - 3, 1e-6);
	ck_assert_float_eq_tol(loss[1], lse - 1, 1e-6);
	ck_assert_float_eq(loss[2], 0);

	float d[9];
	poison(d, 9);
	dtf_cpu_sparse_softmax_xent_grad(3, 3, l, lab, 2, 0.5f, d);
	for (int j = 0; j < 3; j++) {
		double p = exp(j + 1.0 - lse);
		ck_assert_float_eq_tol(d[j], 0.5 * (p - (j == 2)), 1e-7);
		ck_assert_float_eq_tol(d[3 + j], 0.5 * (p - (j == 0)), 1e-7);
		ck_assert_float_eq(d[6 + j], 0);
	}

	/* Huge logits: max-subtracted, finite and exact. */
	float big[6] = {1e4f, -1e4f, 0, 1e4f, 1e4f, -1e4f};
	int32_t bl[2] = {1, 0};
	tot = dtf_cpu_sparse_softmax_xent(2, 3, big, bl, 2, loss);
	ck_assert(isfinite(tot));
	ck_assert_float_eq_tol(loss[0], 2e4, 1e-2);
	ck_assert_float_eq_tol(loss[1], log(2.0), 1e-6);
	dtf_cpu_sparse_softmax_xent_grad(2, 3, big, bl, 2, 1.0f, d);
	for (int j = 0; j < 6; j++)
		ck_assert(isfinite(d[j]));
	ck_assert_float_eq_tol(d[0], 1.0f, 1e-6);
	ck_assert_float_eq_tol(d[1], -1.0f, 1e-6);
	ck_assert_float_eq_tol(d[3], -0.5f, 1e-6);
	ck_assert_float_eq_tol(d[4], 0.5f, 1e-6);

	/* A label out of range poisons the sum rather than passing silently. */
	int32_t badl[1] = {3};
	ck_assert(isnan(dtf_cpu_sparse_softmax_xent(1, 3, l, badl, 1, NULL)));
}
END_TEST

START_TEST(test_xent_fd)
{
	tu_rng_seed(1212);
	const size_t rows = 5;
	const int classes = 10;
	int32_t lab[5];
	for (size_t r = 0; r < rows; r++)
		lab[r] = (int32_t)(tu_next_u64() % classes);
	struct xent_ctx k = {.rows = rows, .valid = 4, .classes = classes,
			     .labels = lab};
	k.logits = tu_frandom(rows * classes, -3, 3);
	float *d = tu_falloc(rows * classes);
	dtf_cpu_sparse_softmax_xent_grad(rows, classes, k.logits, lab, 4, 1.0f,
					 d);
	fd_check("xent dlogits", k.logits, rows * classes, d, xent_loss, &k,
		 1e-3f, 1e-3, 1e-3);
	/* Each valid row of the gradient sums to 0 (softmax - onehot). */
	for (size_t r = 0; r < 4; r++) {
		double s = 0;
		for (int j = 0; j < classes; j++)
			s += d[r * classes + j];
		ck_assert_double_eq_tol(s, 0.0, 1e-6);
	}
	free(k.logits), free(d);
}
END_TEST

START_TEST(test_count_correct)
{
	float l[12] = {0.1f, 0.9f, 0.0f,  /* argmax 1 */
		       0.5f, 0.5f, 0.2f,  /* tie: first max, 0 */
		       0.0f, 0.0f, 3.0f,  /* argmax 2 */
		       9.0f, 0.0f, 0.0f}; /* argmax 0, past valid */
	int32_t lab[4] = {1, 1, 2, 0};
	ck_assert_uint_eq(dtf_cpu_count_correct(4, 3, l, lab, 3), 2);
	lab[1] = 0;
	ck_assert_uint_eq(dtf_cpu_count_correct(4, 3, l, lab, 3), 3);
	ck_assert_uint_eq(dtf_cpu_count_correct(4, 3, l, lab, 4), 4);
	ck_assert_uint_eq(dtf_cpu_count_correct(4, 3, l, lab, 0), 0);
	ck_assert_uint_eq(dtf_cpu_count_correct(4, 3, l, lab, 99), 4);
}
END_TEST

START_TEST(test_add_inplace)
{
	float x[5] = {1, 2, 3, 4, 5}, y[5] = {10, 20, 30, 40, 50};
	dtf_cpu_add_inplace(5, x, y);
	const float want[5] = {11, 22, 33, 44, 55};
	assert_close_f("add_inplace", y, want, 5, 0, 0);
}
END_TEST

/* ---- the wider op set ----------------------------------------------------
 * Tolerances, |num - analytic| <= atol + rtol * |num| unless said:
 *   linear ops (conv2d with explicit padding, depthwise conv2d, avg_pool2d,
 *   global_avg_pool, multiply, concat): eps 1e-2, atol 1e-3, rtol 1e-3 as
 *   above (only float rounding of y).
 *   smooth nonlinear ops (batch_norm, layer_norm, elu, gelu, tanh, sigmoid,
 *   softmax, the dense losses): eps 1e-3 on inputs of size ~1, atol 2e-3,
 *   rtol 2e-3: truncation error ~eps^2 * |f'''| ~ 1e-6 and float rounding of
 *   y (~1e-7 * |y| * sqrt(#y) / 2eps ~ 1e-4 at these sizes).  batch_norm's
 *   dx is a difference of three terms of size ~1/sqrt(var): inputs are
 *   kept at unit spread so it stays O(1).
 *   leaky_relu: piecewise linear, inputs >= 0.1 from the kink: as linear.
 * Forward references are written here in double from the defining
 * formulas; tolerance 1e-5 absolute + 1e-5 relative (float transcendental
 * functions), exact for data movement (concat, slice, global pool of one
 * pixel).
 */

/* Window geometry with explicit padding, set before finishing. */
static struct dtf_window_geom geom_explicit(int n, int h, int w, int c, int kh,
					    int kw, int o, int sh, int sw,
					    int dh, int dw, int pt, int pb,
					    int pl, int pr)
{
	struct dtf_window_geom g = {.n = n, .h = h, .w = w, .c = c, .kh = kh,
				    .kw = kw, .o = o, .stride_h = sh,
				    .stride_w = sw, .dilation_h = dh,
				    .dilation_w = dw, .pad_top = pt,
				    .pad_bottom = pb, .pad_left = pl,
				    .pad_right = pr};
	ck_assert_int_eq(dtf_window_geom_finish(&g, DTF_PAD_EXPLICIT), 0);
	return g;
}

START_TEST(test_geom_explicit)
{
	/* (5 + 1 + 2 - 3) / 2 + 1 = 3 rows; (6 + 0 + 3 - 3*2+1... */
	struct dtf_window_geom g = geom_explicit(1, 5, 6, 1, 3, 3, 1, 2, 1, 1,
						 2, 1, 2, 0, 3);
	ck_assert_int_eq(g.oh, 3);
	/* width: effective window (3-1)*2+1 = 5; 6 + 0 + 3 - 5 + 1 = 5 */
	ck_assert_int_eq(g.ow, 5);
	ck_assert_int_eq(g.pad_top, 1);
	ck_assert_int_eq(g.pad_right, 3);
	/* negative padding and a window larger than the padded input fail */
	struct dtf_window_geom bad = {.n = 1, .h = 4, .w = 4, .c = 1, .kh = 3,
				      .kw = 3, .stride_h = 1, .stride_w = 1,
				      .dilation_h = 1, .dilation_w = 1,
				      .pad_top = -1};
	ck_assert_int_eq(dtf_window_geom_finish(&bad, DTF_PAD_EXPLICIT), -1);
	bad.pad_top = 0;
	bad.h = 1;
	ck_assert_int_eq(dtf_window_geom_finish(&bad, DTF_PAD_EXPLICIT), -1);
	bad.pad_bottom = 2; /* 1 + 2 = 3 rows: exactly one output row */
	ck_assert_int_eq(dtf_window_geom_finish(&bad, DTF_PAD_EXPLICIT), 0);
	ck_assert_int_eq(bad.oh, 1);
	/* same padding reports its padding after: the odd row goes there */
	g = geom(1, 8, 8, 1, 3, 3, 1, 2, 2, 1, 1, DTF_PAD_SAME);
	ck_assert_int_eq(g.pad_top, 0);
	ck_assert_int_eq(g.pad_bottom, 1);
}
END_TEST

START_TEST(test_conv2d_explicit)
{
	/* asymmetric explicit padding and dilation against the 7-loop
	 * reference (forward, dx, dw), then finite differences */
	tu_rng_seed(404);
	conv_geom_vs_reference(geom_explicit(2, 6, 7, 2, 3, 3, 3, 1, 2, 1, 1,
					     0, 2, 1, 0));
	conv_geom_vs_reference(geom_explicit(1, 9, 8, 3, 3, 2, 2, 2, 1, 2, 3,
					     3, 1, 2, 2));
	conv_geom_vs_reference(geom_explicit(2, 4, 4, 2, 1, 1, 3, 1, 1, 1, 1,
					     1, 1, 1, 1)); /* 1x1, padded */
	struct conv_ctx c;
	c.g = geom_explicit(2, 5, 5, 2, 3, 3, 2, 2, 1, 2, 1, 2, 1, 0, 2);
	size_t nx = in_size(&c.g), nw = filt_size(&c.g);
	size_t ny = out_size(&c.g, c.g.o);
	size_t nws = dtf_cpu_conv2d_workspace(&c.g);
	c.x = tu_frandom(nx, -1, 1);
	c.w = tu_frandom(nw, -1, 1);
	c.r = tu_frandom(ny, -1, 1);
	c.y = tu_falloc(ny);
	c.ws = tu_falloc(nws);
	float *dx = tu_falloc(nx), *dw = tu_falloc(nw);
	dtf_cpu_conv2d_backprop_input(&c.g, c.r, c.w, dx, c.ws);
	dtf_cpu_conv2d_backprop_filter(&c.g, c.x, c.r, dw, c.ws);
	fd_check("explicit conv dx", c.x, nx, dx, conv_loss, &c, 1e-2f, 1e-3, 1e-3);
	fd_check("explicit conv dw", c.w, nw, dw, conv_loss, &c, 1e-2f, 1e-3, 1e-3);
	free(c.x), free(c.w), free(c.r), free(c.y), free(c.ws);
	free(dx), free(dw);
}
END_TEST

/* ---- depthwise conv2d ---------------------------------------------------- */

/* y (n, oh, ow, c*m), dx, dw of L = sum(y * dy), direct loops in double. */
static void ref_depthwise(const struct dtf_window_geom *g, const float *x,
			  const float *w, const float *dy, double *y,
			  double *dx, double *dw)
{
	const int m = g->o / g->c;
	memset(dx, 0, in_size(g) * sizeof *dx);
	memset(dw, 0, (size_t)g->kh * g->kw * g->o * sizeof *dw);
	for (int b = 0; b < g->n; b++)
	for (int oy = 0; oy < g->oh; oy++)
	for (int ox = 0; ox < g->ow; ox++)
	for (int ci = 0; ci < g->c; ci++)
	for (int q = 0; q < m; q++) {
		size_t yi = (((size_t)b * g->oh + oy) * g->ow + ox) * g->o + ci * m + q;
		double s = 0.0;
		for (int ky = 0; ky < g->kh; ky++)
		for (int kx = 0; kx < g->kw; kx++) {
			long xi = in_index(g, b, oy, ox, ky, kx);
			if (xi < 0)
				continue;
			size_t wi = ((size_t)(ky * g->kw + kx) * g->c + ci) * m + q;
			s += (double)x[xi + ci] * w[wi];
			dx[xi + ci] += (double)dy[yi] * w[wi];
			dw[wi] += (double)dy[yi] * x[xi + ci];
		}
		y[yi] = s;
	}
}

struct dw_ctx {
	struct dtf_window_geom g;
	float *x, *w, *y, *r;
};

static double dw_loss(void *p)
{
	struct dw_ctx *c = p;
	dtf_cpu_depthwise_conv2d(&c->g, c->x, c->w, c->y);
	return dot(c->y, c->r, out_size(&c->g, c->g.o));
}

START_TEST(test_depthwise)
{
	struct dtf_window_geom cases[] = {
		geom(2, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1, DTF_PAD_SAME),   /* m 1 */
		geom(1, 7, 6, 2, 3, 2, 4, 2, 2, 1, 1, DTF_PAD_SAME),   /* m 2 */
		geom(2, 8, 7, 2, 3, 3, 6, 1, 2, 2, 1, DTF_PAD_VALID),  /* m 3 */
		geom_explicit(1, 5, 6, 3, 2, 3, 6, 2, 1, 1, 2, 1, 0, 2, 1),
	};
	tu_rng_seed(505);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct dw_ctx c = {.g = cases[i]};
		size_t nx = in_size(&c.g), nw = (size_t)c.g.kh * c.g.kw * c.g.o;
		size_t ny = out_size(&c.g, c.g.o);
		c.x = tu_frandom(nx, -1, 1);
		c.w = tu_frandom(nw, -1, 1);
		c.r = tu_frandom(ny, -1, 1);
		c.y = tu_falloc(ny);
		float *dx = tu_falloc(nx), *dw = tu_falloc(nw);
		double *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx);
		double *rdw = malloc(nw * sizeof *rdw);
		ref_depthwise(&c.g, c.x, c.w, c.r, ry, rdx, rdw);
		poison(c.y, ny);
		poison(dx, nx);
		poison(dw, nw);
		dtf_cpu_depthwise_conv2d(&c.g, c.x, c.w, c.y);
		dtf_cpu_depthwise_conv2d_backprop_input(&c.g, c.r, c.w, dx);
		dtf_cpu_depthwise_conv2d_backprop_filter(&c.g, c.x, c.r, dw);
		assert_close("depthwise y", c.y, ry, ny, 1e-5, 1e-5);
		assert_close("depthwise dx", dx, rdx, nx, 1e-5, 1e-5);
		assert_close("depthwise dw", dw, rdw, nw, 1e-4, 1e-5);
		fd_check("depthwise dx", c.x, nx, dx, dw_loss, &c, 1e-2f, 1e-3, 1e-3);
		fd_check("depthwise dw", c.w, nw, dw, dw_loss, &c, 1e-2f, 1e-3, 1e-3);
		free(c.x), free(c.w), free(c.r), free(c.y), free(dx), free(dw);
		free(ry), free(rdx), free(rdw);
	}
}
END_TEST

/* ---- avg_pool2d, global_avg_pool ----------------------------------------- */

START_TEST(test_avg_pool_tf_padding)
{
	/* 3x3 input, 2x2 window, stride 2, same: oh = 2, one padded row and
	 * column after (TF).  TF divides by the cells inside the input. */
	float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4], dx[9];
	struct dtf_window_geom g = geom(1, 3, 3, 1, 2, 2, 0, 2, 2, 1, 1,
					DTF_PAD_SAME);
	ck_assert_int_eq(g.oh, 2);
	ck_assert_int_eq(g.pad_top, 0);
	dtf_cpu_avg_pool2d(&g, x, y);
	const float want[4] = {(1 + 2 + 4 + 5) / 4.0f, (3 + 6) / 2.0f,
			       (7 + 8) / 2.0f, 9};
	assert_close_f("avg same 2x2/2", y, want, 4, 1e-6, 0);
	/* 3x3 window, stride 1, same: the corner averages 4 cells, the edge
	 * 6, the centre 9 */
	float y9[9];
	g = geom(1, 3, 3, 1, 3, 3, 0, 1, 1, 1, 1, DTF_PAD_SAME);
	dtf_cpu_avg_pool2d(&g, x, y9);
	ck_assert_float_eq_tol(y9[0], (1 + 2 + 4 + 5) / 4.0f, 1e-6);
	ck_assert_float_eq_tol(y9[1], (1 + 2 + 3 + 4 + 5 + 6) / 6.0f, 1e-6);
	ck_assert_float_eq_tol(y9[4], 5.0f, 1e-6);
	/* gradient: each output spreads 1/count over its cells */
	float dy9[9] = {1, 0, 0, 0, 0, 0, 0, 0, 0};
	dtf_cpu_avg_pool2d_grad(&g, dy9, dx);
	const float dxw[9] = {0.25f, 0.25f, 0, 0.25f, 0.25f, 0, 0, 0, 0};
	assert_close_f("avg grad", dx, dxw, 9, 1e-7, 0);
}
END_TEST

/* Average pool by the definition: the cells of the window inside x. */
static void ref_avg_pool(const struct dtf_window_geom *g, const float *x,
			 double *y)
{
	for (int b = 0; b < g->n; b++)
	for (int oy = 0; oy < g->oh; oy++)
	for (int ox = 0; ox < g->ow; ox++)
	for (int c = 0; c < g->c; c++) {
		double s = 0.0;
		int cnt = 0;
		for (int ky = 0; ky < g->kh; ky++)
		for (int kx = 0; kx < g->kw; kx++) {
			long xi = in_index(g, b, oy, ox, ky, kx);
			if (xi >= 0) {
				s += x[xi + c];
				cnt++;
			}
		}
		y[(((size_t)b * g->oh + oy) * g->ow + ox) * g->c + c] =
			cnt ? s / cnt : 0.0;
	}
}

struct avg_ctx {
	struct dtf_window_geom g;
	int global;
	float *x, *y, *r;
	size_t ny;
};

static double avg_loss(void *p)
{
	struct avg_ctx *c = p;
	if (c->global)
		dtf_cpu_global_avg_pool((size_t)c->g.n, (size_t)c->g.h * c->g.w,
					c->g.c, c->x, c->y);
	else
		dtf_cpu_avg_pool2d(&c->g, c->x, c->y);
	return dot(c->y, c->r, c->ny);
}

START_TEST(test_avg_pool_reference_fd)
{
	struct dtf_window_geom cases[] = {
		geom(2, 5, 5, 3, 2, 2, 0, 2, 2, 1, 1, DTF_PAD_SAME),
		geom(1, 7, 6, 2, 3, 3, 0, 2, 1, 1, 1, DTF_PAD_SAME),
		geom(2, 6, 6, 2, 3, 2, 0, 1, 2, 1, 1, DTF_PAD_VALID),
		geom_explicit(1, 4, 5, 2, 3, 3, 0, 1, 2, 1, 1, 2, 1, 0, 2),
	};
	tu_rng_seed(606);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct avg_ctx c = {.g = cases[i]};
		size_t nx = in_size(&c.g);
		c.ny = out_size(&c.g, c.g.c);
		c.x = tu_frandom(nx, -1, 1);
		c.r = tu_frandom(c.ny, -1, 1);
		c.y = tu_falloc(c.ny);
		double *ry = malloc(c.ny * sizeof *ry);
		float *dx = tu_falloc(nx);
		ref_avg_pool(&c.g, c.x, ry);
		poison(c.y, c.ny);
		dtf_cpu_avg_pool2d(&c.g, c.x, c.y);
		assert_close("avg_pool2d y", c.y, ry, c.ny, 1e-6, 1e-6);
		poison(dx, nx);
		dtf_cpu_avg_pool2d_grad(&c.g, c.r, dx);
		fd_check("avg_pool2d dx", c.x, nx, dx, avg_loss, &c, 1e-2f, 1e-3, 1e-3);
		free(c.x), free(c.r), free(c.y), free(ry), free(dx);
	}
	/* global: (2, 3, 4, 5) -> (2, 5) */
	struct avg_ctx c = {.g = {.n = 2, .h = 3, .w = 4, .c = 5}, .global = 1};
	size_t nx = 2 * 3 * 4 * 5;
	c.ny = 10;
	c.x = tu_frandom(nx, -1, 1);
	c.r = tu_frandom(c.ny, -1, 1);
	c.y = tu_falloc(c.ny);
	float *dx = tu_falloc(nx);
	double want[10] = {0};
	for (int b = 0; b < 2; b++)
		for (int p = 0; p < 12; p++)
			for (int ch = 0; ch < 5; ch++)
				want[b * 5 + ch] += c.x[(b * 12 + p) * 5 + ch] / 12.0;
	poison(c.y, c.ny);
	avg_loss(&c);
	assert_close("global_avg_pool y", c.y, want, 10, 1e-6, 1e-6);
	poison(dx, nx);
	dtf_cpu_global_avg_pool_grad(2, 12, 5, c.r, dx);
	fd_check("global_avg_pool dx", c.x, nx, dx, avg_loss, &c, 1e-2f, 1e-3, 1e-3);
	free(c.x), free(c.r), free(c.y), free(dx);
}
END_TEST

/* ---- batch_norm, layer_norm ---------------------------------------------- */

START_TEST(test_batch_norm_hand)
{
	/* 2 rows, 2 channels: channel 0 = {1, 3} (mean 2, biased var 1,
	 * unbiased 2), channel 1 = {5, 5} (var 0: y = beta exactly). */
	float x[4] = {1, 5, 3, 5}, gamma[2] = {2, 3}, beta[2] = {0.5f, -1};
	float mm[2] = {1, 1}, mv[2] = {4, 4}, y[4];
	float eps = 0.25f, mom = 0.9f;
	dtf_cpu_batch_norm_train(2, 2, x, gamma, beta, eps, mom, mm, mv, y);
	double s = 1.0 / sqrt(1.0 + 0.25);
	const double want[4] = {0.5 - 2 * s, -1, 0.5 + 2 * s, -1};
	assert_close("bn train y", y, want, 4, 1e-6, 1e-6);
	/* moving = moving * 0.9 + batch * 0.1, variance with Bessel's
	 * correction (FusedBatchNormV3's batch_variance) */
	const double mw[2] = {1 * 0.9 + 2 * 0.1, 1 * 0.9 + 5 * 0.1};
	const double vw[2] = {4 * 0.9 + 2 * 0.1, 4 * 0.9 + 0 * 0.1};
	assert_close("moving_mean", mm, mw, 2, 1e-6, 1e-6);
	assert_close("moving_var", mv, vw, 2, 1e-6, 1e-6);
	/* epsilon is added to the variance: a larger one shrinks y */
	dtf_cpu_batch_norm_train(2, 2, x, gamma, beta, 3.0f, mom, NULL, NULL, y);
	ck_assert_float_eq_tol(y[2], 0.5f + 2.0f / 2.0f, 1e-6); /* 1/sqrt(1+3) */
	/* inference uses the given statistics, not the batch's */
	float m[2] = {2, 4}, v[2] = {0.75f, 3.75f};
	dtf_cpu_batch_norm_infer(2, 2, x, gamma, beta, m, v, eps, y);
	const double wi[4] = {0.5 + 2 * (1 - 2) / 1.0, -1 + 3 * (5 - 4) / 2.0,
			      0.5 + 2 * (3 - 2) / 1.0, -1 + 3 * (5 - 4) / 2.0};
	assert_close("bn infer y", y, wi, 4, 1e-6, 1e-6);
}
END_TEST

struct norm_ctx {
	int layer;
	size_t rows;
	int c;
	float eps;
	float *x, *gamma, *beta, *y, *r;
};

static double norm_loss(void *p)
{
	struct norm_ctx *c = p;
	if (c->layer)
		dtf_cpu_layer_norm(c->rows, c->c, c->x, c->gamma, c->beta,
				   c->eps, c->y);
	else
		dtf_cpu_batch_norm_train(c->rows, c->c, c->x, c->gamma, c->beta,
					 c->eps, 0.99f, NULL, NULL, c->y);
	return dot(c->y, c->r, c->rows * (size_t)c->c);
}

/* y by the definition, statistics over rows (batch) or columns (layer). */
static void ref_norm(const struct norm_ctx *c, double *y)
{
	size_t R = c->rows;
	int C = c->c;
	size_t groups = c->layer ? R : (size_t)C, len = c->layer ? (size_t)C : R;
	for (size_t gi = 0; gi < groups; gi++) {
		double m = 0, v = 0;
		for (size_t k = 0; k < len; k++) {
			size_t i = c->layer ? gi * C + k : k * C + gi;
			m += c->x[i];
		}
		m /= len;
		for (size_t k = 0; k < len; k++) {
			size_t i = c->layer ? gi * C + k : k * C + gi;
			v += (c->x[i] - m) * (c->x[i] - m);
		}
		v /= len;
		for (size_t k = 0; k < len; k++) {
			size_t i = c->layer ? gi * C + k : k * C + gi;
			size_t ch = i % C;
			y[i] = c->gamma[ch] * (c->x[i] - m) / sqrt(v + c->eps) +
			       c->beta[ch];
		}
	}
}

static void norm_case(int layer, size_t rows, int ch, float eps)
{
	struct norm_ctx c = {.layer = layer, .rows = rows, .c = ch, .eps = eps};
	size_t n = rows * (size_t)ch;
	c.x = tu_frandom(n, -1, 1);
	for (size_t i = 0; i < n; i++)
		c.x[i] += (float)(i % (size_t)ch); /* per-channel offsets */
	c.gamma = tu_frandom((size_t)ch, 0.5f, 1.5f);
	c.beta = tu_frandom((size_t)ch, -0.5f, 0.5f);
	c.r = tu_frandom(n, -1, 1);
	c.y = tu_falloc(n);
	double *ry = malloc(n * sizeof *ry);
	ref_norm(&c, ry);
	poison(c.y, n);
	norm_loss(&c);
	assert_close(layer ? "layer_norm y" : "batch_norm y", c.y, ry, n, 1e-5, 1e-5);
	float *dx = tu_falloc(n), *dg = tu_falloc((size_t)ch), *db = tu_falloc((size_t)ch);
	poison(dx, n);
	poison(dg, (size_t)ch);
	if (layer) {
		dtf_cpu_layer_norm_grad_input(rows, ch, c.x, c.gamma, c.r, eps, dx);
		dtf_cpu_layer_norm_grad_gamma(rows, ch, c.x, c.r, eps, dg);
	} else {
		dtf_cpu_batch_norm_grad_input(rows, ch, c.x, c.gamma, c.r, eps, dx);
		dtf_cpu_batch_norm_grad_gamma(rows, ch, c.x, c.r, eps, dg);
	}
	dtf_cpu_bias_add_grad(rows, ch, c.r, db);
	const char *nm = layer ? "layer_norm" : "batch_norm";
	char what[64];
	snprintf(what, sizeof what, "%s dx", nm);
	fd_check(what, c.x, n, dx, norm_loss, &c, 1e-3f, 2e-3, 2e-3);
	snprintf(what, sizeof what, "%s dgamma", nm);
	fd_check(what, c.gamma, (size_t)ch, dg, norm_loss, &c, 1e-3f, 2e-3, 2e-3);
	snprintf(what, sizeof what, "%s dbeta", nm);
	fd_check(what, c.beta, (size_t)ch, db, norm_loss, &c, 1e-3f, 2e-3, 2e-3);
	free(c.x), free(c.gamma), free(c.beta), free(c.r), free(c.y), free(ry);
	free(dx), free(dg), free(db);
}

START_TEST(test_batch_norm_reference_fd)
{
	tu_rng_seed(707);
	norm_case(0, 12, 3, 1e-3f);
	norm_case(0, 7, 70, 1e-2f); /* more channels than one chunk */
	norm_case(0, 3, 2, 0.5f);
}
END_TEST

START_TEST(test_layer_norm_reference_fd)
{
	tu_rng_seed(808);
	norm_case(1, 4, 6, 1e-3f);
	norm_case(1, 3, 70, 1e-2f);
}
END_TEST

/* ---- activations and multiply -------------------------------------------- */

enum act_kind { A_LEAKY, A_ELU, A_GELU, A_GELU_TANH, A_TANH, A_SIGMOID,
		A_SOFTMAX, A_MULTIPLY, A_COUNT };

struct act_ctx {
	enum act_kind k;
	float alpha;
	size_t rows;
	int c;
	float *x, *x2, *y, *r;
};

static size_t act_n(const struct act_ctx *c) { return c->rows * (size_t)c->c; }

static double act_loss(void *p)
{
	struct act_ctx *c = p;
	size_t n = act_n(c);
	switch (c->k) {
	case A_LEAKY: dtf_cpu_leaky_relu(n, c->alpha, c->x, c->y); break;
	case A_ELU: dtf_cpu_elu(n, c->alpha, c->x, c->y); break;
	case A_GELU: dtf_cpu_gelu(n, 0, c->x, c->y); break;
	case A_GELU_TANH: dtf_cpu_gelu(n, 1, c->x, c->y); break;
	case A_TANH: dtf_cpu_tanh(n, c->x, c->y); break;
	case A_SIGMOID: dtf_cpu_sigmoid(n, c->x, c->y); break;
	case A_SOFTMAX: dtf_cpu_softmax(c->rows, c->c, c->x, c->y); break;
	case A_MULTIPLY: dtf_cpu_multiply(n, c->x, c->x2, c->y); break;
	default: ck_abort();
	}
	return dot(c->y, c->r, n);
}

/* The defining formula in double. */
static double act_ref(const struct act_ctx *c, size_t i)
{
	double x = c->x[i];
	switch (c->k) {
	case A_LEAKY: return x > 0 ? x : c->alpha * x;
	case A_ELU: return x > 0 ? x : c->alpha * (exp(x) - 1);
	case A_GELU: return x * 0.5 * erfc(-x / sqrt(2.0));
	case A_GELU_TANH:
		return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case A_TANH: return tanh(x);
	case A_SIGMOID: return 1 / (1 + exp(-x));
	case A_SOFTMAX: {
		size_t r0 = i / (size_t)c->c * (size_t)c->c;
		double s = 0;
		for (int j = 0; j < c->c; j++)
			s += exp((double)c->x[r0 + j]);
		return exp(x) / s;
	}
	case A_MULTIPLY: return x * c->x2[i];
	default: ck_abort();
	}
	return 0;
}

START_TEST(test_activations)
{
	tu_rng_seed(909);
	for (int k = 0; k < A_COUNT; k++) {
		struct act_ctx c = {.k = (enum act_kind)k, .alpha = 0.2f,
				    .rows = 3, .c = 7};
		if (k == A_ELU)
			c.alpha = 1.3f;
		size_t n = act_n(&c);
		c.x = tu_frandom(n, -3, 3);
		/* keep clear of the kink at 0 for the piecewise ones */
		for (size_t i = 0; i < n; i++)
			if (fabsf(c.x[i]) < 0.1f)
				c.x[i] = c.x[i] < 0 ? -0.1f - c.x[i] : 0.1f + c.x[i];
		c.x2 = tu_frandom(n, -2, 2);
		c.r = tu_frandom(n, -1, 1);
		c.y = tu_falloc(n);
		double *ry = malloc(n * sizeof *ry);
		for (size_t i = 0; i < n; i++)
			ry[i] = act_ref(&c, i);
		poison(c.y, n);
		act_loss(&c);
		char what[48];
		snprintf(what, sizeof what, "activation %d y", k);
		assert_close(what, c.y, ry, n, 1e-6, 1e-5);
		/* gradient from the kernel, reading x or y as TF does */
		float *dx = tu_falloc(n), *dx2 = tu_falloc(n);
		poison(dx, n);
		switch (c.k) {
		case A_LEAKY: dtf_cpu_leaky_relu_grad(n, c.alpha, c.r, c.x, dx); break;
		case A_ELU: dtf_cpu_elu_grad(n, c.alpha, c.r, c.x, dx); break;
		case A_GELU: dtf_cpu_gelu_grad(n, 0, c.r, c.x, dx); break;
		case A_GELU_TANH: dtf_cpu_gelu_grad(n, 1, c.r, c.x, dx); break;
		case A_TANH: dtf_cpu_tanh_grad(n, c.r, c.y, dx); break;
		case A_SIGMOID: dtf_cpu_sigmoid_grad(n, c.r, c.y, dx); break;
		case A_SOFTMAX: dtf_cpu_softmax_grad(c.rows, c.c, c.r, c.y, dx); break;
		case A_MULTIPLY:
			dtf_cpu_multiply(n, c.r, c.x2, dx);
			dtf_cpu_multiply(n, c.r, c.x, dx2);
			break;
		default: ck_abort();
		}
		snprintf(what, sizeof what, "activation %d dx", k);
		float eps = k == A_LEAKY || k == A_MULTIPLY ? 1e-2f : 1e-3f;
		fd_check(what, c.x, n, dx, act_loss, &c, eps, 2e-3, 2e-3);
		if (k == A_MULTIPLY)
			fd_check("multiply db", c.x2, n, dx2, act_loss, &c, 1e-2f,
				 1e-3, 1e-3);
		free(c.x), free(c.x2), free(c.r), free(c.y), free(ry), free(dx),
			free(dx2);
	}
	/* sigmoid and softmax stay finite at extreme inputs */
	float big[4] = {-100, 100, -1e4f, 1e4f}, out[4];
	dtf_cpu_sigmoid(4, big, out);
	ck_assert(out[0] >= 0 && out[0] < 1e-40 && out[1] == 1.0f);
	ck_assert(out[2] == 0.0f && out[3] == 1.0f);
	dtf_cpu_softmax(1, 4, big, out);
	ck_assert_float_eq(out[3], 1.0f);
	ck_assert_float_eq(out[0], 0.0f);
	/* leaky_relu's default slope is tf.nn.leaky_relu's */
	ck_assert_float_eq(DTF_LEAKY_RELU_ALPHA, 0.2f);
}
END_TEST

/* ---- concat / slice ------------------------------------------------------- */

struct cat_ctx {
	size_t outer, ia, ib;
	float *a, *b, *y, *r;
};

static double cat_loss(void *p)
{
	struct cat_ctx *c = p;
	dtf_cpu_concat(c->outer, c->ia, c->ib, c->a, c->b, c->y);
	return dot(c->y, c->r, c->outer * (c->ia + c->ib));
}

/* slice along an axis and its gradient (zeros with dy at begin) against
 * plain index loops over a (3, 5, 2) tensor sliced on axis 1, [1, 4). */
START_TEST(test_slice_and_grad)
{
	float x[30], y[18], dx[30];
	for (int i = 0; i < 30; i++)
		x[i] = (float)i * 0.5f - 3.0f;
	poison(y, 18);
	dtf_cpu_slice_inner(3, 10, 1 * 2, 3 * 2, x, y);
	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 3; b++)
			for (int c = 0; c < 2; c++)
				ck_assert(y[(a * 3 + b) * 2 + c] ==
					  x[(a * 5 + b + 1) * 2 + c]);
	poison(dx, 30);
	dtf_cpu_slice_grad(3, 10, 1 * 2, 3 * 2, y, dx);
	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 5; b++)
			for (int c = 0; c < 2; c++) {
				float want = b >= 1 && b < 4 ? x[(a * 5 + b) * 2 + c] : 0.0f;
				ck_assert(dx[(a * 5 + b) * 2 + c] == want);
			}
	/* int32 bits go through unchanged (a copy, no arithmetic) */
	int32_t ids[4] = {7, -1, 0x7fc00001, 3}, out[2];
	float fi[4], fo[2];
	memcpy(fi, ids, sizeof(fi));
	dtf_cpu_slice_inner(1, 4, 1, 2, fi, fo);
	memcpy(out, fo, sizeof(out));
	ck_assert_int_eq(out[0], -1);
	ck_assert_int_eq(out[1], 0x7fc00001);
}
END_TEST

START_TEST(test_concat)
{
	/* NHWC channel concat of (2, 3, 2, 4) and (2, 3, 2, 1): outer 12 */
	tu_rng_seed(1010);
	struct cat_ctx c = {.outer = 12, .ia = 4, .ib = 1};
	size_t na = 48, nb = 12, ny = 60;
	c.a = tu_frandom(na, -1, 1);
	c.b = tu_frandom(nb, -1, 1);
	c.r = tu_frandom(ny, -1, 1);
	c.y = tu_falloc(ny);
	poison(c.y, ny);
	cat_loss(&c);
	for (size_t p = 0; p < 12; p++) {
		for (int ch = 0; ch < 4; ch++)
			ck_assert(c.y[p * 5 + ch] == c.a[p * 4 + ch]);
		ck_assert(c.y[p * 5 + 4] == c.b[p]);
	}
	/* the gradients are the two slices of dy */
	float *da = tu_falloc(na), *db = tu_falloc(nb);
	dtf_cpu_slice_inner(12, 5, 0, 4, c.r, da);
	dtf_cpu_slice_inner(12, 5, 4, 1, c.r, db);
	for (size_t p = 0; p < 12; p++)
		ck_assert(db[p] == c.r[p * 5 + 4]);
	fd_check("concat da", c.a, na, da, cat_loss, &c, 1e-2f, 1e-3, 1e-3);
	fd_check("concat db", c.b, nb, db, cat_loss, &c, 1e-2f, 1e-3, 1e-3);
	free(c.a), free(c.b), free(c.r), free(c.y), free(da), free(db);
}
END_TEST

/* ---- dense losses, top-k ------------------------------------------------- */

START_TEST(test_dense_losses_hand)
{
	/* label smoothing 0.3 over 3 classes: t = y * 0.7 + 0.1, so the
	 * one-hot (0, 1, 0) becomes (0.1, 0.8, 0.1).  Loss and gradient
	 * computed by hand (log-sum-exp of (2, 0, -1)). */
	float l[3] = {2, 0, -1}, t[3] = {0, 1, 0}, loss, d[3];
	double sum = dtf_cpu_softmax_xent(1, 3, l, t, 0.3f, 1, &loss);
	ck_assert_double_eq_tol(sum, 2.0698460195562856, 1e-6);
	ck_assert_float_eq_tol(loss, 2.0698460195562856f, 1e-6);
	dtf_cpu_softmax_xent_grad(1, 3, l, t, 0.3f, 1, 1.0f, d);
	const double dw[3] = {0.7437947344813395, -0.6858048006154056,
			      -0.05798993386593396};
	assert_close("smoothed dlogits", d, dw, 3, 1e-6, 1e-6);
	/* no smoothing: the same as the sparse loss */
	int32_t y1 = 1;
	ck_assert_double_eq_tol(dtf_cpu_softmax_xent(1, 3, l, t, 0, 1, NULL),
				dtf_cpu_sparse_softmax_xent(1, 3, l, &y1, 1, NULL),
				1e-9);
	/* sigmoid cross-entropy, stable at +-100 (a naive form gives inf)
	 * and averaged over the row's elements */
	float x[4] = {100, -100, 0, 2}, z[4] = {0, 1, 1, 0.25f}, ls[2];
	double s2 = dtf_cpu_sigmoid_xent(2, 2, x, z, 2, ls);
	ck_assert_float_eq_tol(ls[0], 100.0f, 1e-4);
	ck_assert_float_eq_tol(ls[1], (0.6931471805599453f + 1.6269280110429725f) / 2, 1e-6);
	ck_assert_double_eq_tol(s2, 100 + (0.6931471805599453 + 1.6269280110429725) / 2, 1e-4);
	/* valid rows only */
	ck_assert_double_eq_tol(dtf_cpu_sigmoid_xent(2, 2, x, z, 1, NULL), 100, 1e-4);
	/* mean squared error: mean over the row */
	float p[4] = {1, 2, 3, 4}, q[4] = {0, 0, 3, 6};
	ck_assert_double_eq_tol(dtf_cpu_mean_squared_error(2, 2, p, q, 2, NULL),
				(1 + 4) / 2.0 + (0 + 4) / 2.0, 1e-9);
	float dp[4];
	dtf_cpu_mean_squared_error_grad(2, 2, p, q, 1, 0.5f, dp);
	const float dpw[4] = {0.5f, 1.0f, 0, 0}; /* 0.5 * 2/2 * (p - q) */
	assert_close_f("mse grad", dp, dpw, 4, 1e-7, 0);
}
END_TEST

enum loss_kind { L_SOFTMAX, L_SIGMOID, L_MSE };

struct dloss_ctx {
	enum loss_kind k;
	size_t rows, cols;
	float ls;
	float *x, *t;
};

static double dloss(void *p)
{
	struct dloss_ctx *c = p;
	if (c->k == L_SOFTMAX)
		return dtf_cpu_softmax_xent(c->rows, (int)c->cols, c->x, c->t,
					    c->ls, c->rows - 1, NULL);
	if (c->k == L_SIGMOID)
		return dtf_cpu_sigmoid_xent(c->rows, c->cols, c->x, c->t,
					    c->rows - 1, NULL);
	return dtf_cpu_mean_squared_error(c->rows, c->cols, c->x, c->t,
					  c->rows - 1, NULL);
}

START_TEST(test_dense_losses_fd)
{
	tu_rng_seed(1111);
	for (int k = 0; k < 3; k++) {
		/* the last row is padding (valid = rows - 1): zero gradient */
		struct dloss_ctx c = {.k = (enum loss_kind)k, .rows = 4,
				      .cols = 5, .ls = k == 0 ? 0.1f : 0};
		size_t n = c.rows * c.cols;
		c.x = tu_frandom(n, -2, 2);
		c.t = tu_frandom(n, 0, 1);
		if (k == L_SOFTMAX) { /* one-hot rows */
			for (size_t i = 0; i < n; i++)
				c.t[i] = 0;
			for (size_t r = 0; r < c.rows; r++)
				c.t[r * c.cols + (r * 3) % c.cols] = 1;
		}
		float *d = tu_falloc(n);
		poison(d, n);
		if (k == L_SOFTMAX)
			dtf_cpu_softmax_xent_grad(c.rows, (int)c.cols, c.x, c.t,
						  c.ls, c.rows - 1, 1.0f, d);
		else if (k == L_SIGMOID)
			dtf_cpu_sigmoid_xent_grad(c.rows, c.cols, c.x, c.t,
						  c.rows - 1, 1.0f, d);
		else
			dtf_cpu_mean_squared_error_grad(c.rows, c.cols, c.x, c.t,
							c.rows - 1, 1.0f, d);
		for (size_t j = 0; j < c.cols; j++)
			ck_assert(d[(c.rows - 1) * c.cols + j] == 0.0f);
		char what[32];
		snprintf(what, sizeof what, "loss %d dlogits", k);
		fd_check(what, c.x, n, d, dloss, &c, 1e-3f, 2e-3, 2e-3);
		free(c.x), free(c.t), free(d);
	}
}
END_TEST

START_TEST(test_top_k_ties)
{
	const float l[3 * 5] = {
		1, 3, 3, 2, 0,    /* two classes tied for first */
		5, 4, 4, 4, 1,    /* three tied for second */
		NAN, 1, 2, 0, 0,  /* a NaN logit */
	};
	/* row 0: label 2 (tied first) is in the top 1; TF's in_top_k
	 * counts every class tied at the boundary */
	int32_t y[3] = {2, 3, 0};
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(3, 5, l, y, 3, 1), 1);
	/* row 1: label 3 has one logit above it: top 2 yes, top 1 no;
	 * row 2: the label's logit is NaN: never counted */
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(3, 5, l, y, 3, 2), 2);
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(3, 5, l, y, 3, 5), 2);
	/* label 3 of row 0 (logit 2) has 2 above: in top 3, not top 2 */
	int32_t y0[1] = {3};
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(1, 5, l, y0, 1, 2), 0);
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(1, 5, l, y0, 1, 3), 1);
	/* valid rows only, labels out of range never count */
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(3, 5, l, y, 1, 5), 1);
	int32_t bad[1] = {7};
	ck_assert_uint_eq(dtf_cpu_count_in_top_k(1, 5, l, bad, 1, 5), 0);
	/* accuracy (k = 1 by argmax) breaks the row-0 tie by the first
	 * maximum: class 1, so label 2 is wrong there */
	ck_assert_uint_eq(dtf_cpu_count_correct(1, 5, l, y, 1), 0);
	/* one-hot labels: same answers */
	float oh[3 * 5] = {0};
	for (int r = 0; r < 3; r++)
		oh[r * 5 + y[r]] = 1;
	ck_assert_uint_eq(dtf_cpu_count_in_top_k_onehot(3, 5, l, oh, 3, 1), 1);
	ck_assert_uint_eq(dtf_cpu_count_in_top_k_onehot(3, 5, l, oh, 3, 2), 2);
	ck_assert_uint_eq(dtf_cpu_count_correct_onehot(3, 5, l, oh, 3), 0);
	oh[2] = 0;
	oh[1] = 1; /* row 0 labelled class 1: the first maximum */
	ck_assert_uint_eq(dtf_cpu_count_correct_onehot(1, 5, l, oh, 1), 1);
	/* binary accuracy: logit > 0 against label > 0.5, mean per row */
	float bl[4] = {1, -1, 2, -3}, bz[4] = {1, 1, 0, 0};
	ck_assert_double_eq_tol(dtf_cpu_binary_accuracy_sum(2, 2, bl, bz, 2),
				0.5 + 0.5, 1e-12);
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

/* ---- embedding -------------------------------------------------------------
 * The forward is a copy: exact.  The gradient is linear in dy: checked
 * bit for bit against the sum written here in the documented order
 * (position order, from 0), within 1e-6 of a double sum, and by finite
 * differences of L = sum(y * r) w.r.t. the table (linear: eps 1e-2, atol
 * 1e-3, rtol 1e-3 as above).
 */
struct emb_ctx {
	size_t n;
	int vocab, dim;
	const int32_t *ids;
	float *table, *y, *r;
};

static double emb_loss(void *p)
{
	struct emb_ctx *c = p;
	dtf_cpu_embedding(c->n, c->vocab, c->dim, c->ids, c->table, c->y);
	return dot(c->y, c->r, c->n * (size_t)c->dim);
}

START_TEST(test_embedding)
{
	tu_rng_seed(4242);
	enum { N = 23, V = 7, D = 5 };
	int32_t ids[N];
	for (int p = 0; p < N; p++) /* every id, most of them repeated */
		ids[p] = (int32_t)((p * 5 + p / 7) % V);
	ids[3] = -1, ids[17] = V; /* out of range */
	float *table = tu_frandom((size_t)V * D, -1, 1);
	float *y = tu_falloc((size_t)N * D), *dy = tu_frandom((size_t)N * D, -1, 1);
	float *dt = tu_falloc((size_t)V * D), *want = tu_falloc((size_t)V * D);
	poison(y, (size_t)N * D);
	dtf_cpu_embedding(N, V, D, ids, table, y);
	for (int p = 0; p < N; p++)
		for (int j = 0; j < D; j++) {
			float v = y[p * D + j];
			if (p == 3 || p == 17)
				ck_assert_msg(isnan(v), "row %d of a bad id: %g", p, v);
			else
				ck_assert_msg(memcmp(&v, &table[ids[p] * D + j], 4) == 0,
					      "y[%d][%d] is not table row %d", p, j,
					      ids[p]);
		}
	poison(dt, (size_t)V * D);
	dtf_cpu_embedding_grad(N, V, D, dy, ids, dt);
	for (int v = 0; v < V; v++)
		for (int j = 0; j < D; j++) {
			float acc = 0.0f;
			double exact = 0.0;
			for (int p = 0; p < N; p++)
				if (ids[p] == v) {
					acc += dy[p * D + j];
					exact += dy[p * D + j];
				}
			want[v * D + j] = acc;
			ck_assert_msg(fabs(dt[v * D + j] - exact) <= 1e-6,
				      "dtable[%d][%d] %g, sum %g", v, j,
				      dt[v * D + j], exact);
		}
	ck_assert_msg(memcmp(dt, want, (size_t)V * D * 4) == 0,
		      "the scatter-add is not in position order");
	/* finite differences, every id in range */
	ids[3] = 2, ids[17] = 0;
	struct emb_ctx c = {N, V, D, ids, table, y, dy};
	dtf_cpu_embedding_grad(N, V, D, dy, ids, dt);
	fd_check("embedding table", table, (size_t)V * D, dt, emb_loss, &c,
		 1e-2f, 1e-3, 1e-3);
	free(table), free(y), free(dy), free(dt), free(want);
}
END_TEST

static Suite *ops_suite(void)
{
	Suite *s = suite_create("ops");
	struct {
		const char *name;
		const TTest *tests[6];
	} cases[] = {
		{"geom", {test_geom_tf_sizes}},
		{"conv2d", {test_conv2d_hand, test_conv2d_reference,
			    test_conv2d_blocks, test_conv2d_fd}},
		{"max_pool2d", {test_pool_hand, test_pool_reference,
				test_pool_fd}},
		{"matmul", {test_matmul_reference, test_matmul_fd}},
		{"bias_add", {test_bias_add, test_bias_add_grad_large}},
		{"relu", {test_relu}},
		{"dropout", {test_dropout_spec, test_dropout_masks,
			     test_dropout_fd}},
		{"sparse_softmax_xent", {test_xent_hand, test_xent_fd}},
		{"count_correct", {test_count_correct}},
		{"add_inplace", {test_add_inplace}},
		{"explicit_padding", {test_geom_explicit, test_conv2d_explicit}},
		{"depthwise_conv2d", {test_depthwise}},
		{"avg_pool2d", {test_avg_pool_tf_padding,
				test_avg_pool_reference_fd}},
		{"batch_norm", {test_batch_norm_hand,
				test_batch_norm_reference_fd}},
		{"layer_norm", {test_layer_norm_reference_fd}},
		{"activations", {test_activations}},
		{"concat", {test_concat}},
		{"slice", {test_slice_and_grad}},
		{"dense_losses", {test_dense_losses_hand, test_dense_losses_fd}},
		{"top_k", {test_top_k_ties}},
		{"embedding", {test_embedding}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		TCase *tc = tcase_create(cases[i].name);
		for (size_t j = 0; j < 6 && cases[i].tests[j]; j++)
			tcase_add_test(tc, cases[i].tests[j]);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	tu_rng_seed(0x1234567);
	return tu_run_suite(ops_suite(), 1);
}
