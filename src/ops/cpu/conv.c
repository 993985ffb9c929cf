/*
 * conv.c - conv2d forward/backward (the window geometry is graph/window.c),
 * float32 NHWC, filter HWIO.
 *
 * Design: im2col + OpenBLAS sgemm.  The im2col matrix of a *block* of images
 * is built at once, (nb*oh*ow, kh*kw*c) row-major, so one sgemm sees a large
 * M and OpenBLAS can split it across its threads; its column order (ki, kj,
 * ci) is the filter's own (kh, kw, c) order, so the filter is the (K, o)
 * right-hand matrix as stored.  The block size is a pure function of the
 * geometry (block_images), bounded so the workspace stays at most
 * WS_CAP_FLOATS; dtf_cpu_conv2d_workspace() and the three kernels agree on
 * it.  A 1x1 kernel with stride 1 needs no im2col: x itself is the matrix.
 *
 *   forward:          y  (M, o) = col (M, K) * w (K, o)
 *   backprop_input:   col (M, K) = dy (M, o) * w^T, then col2im (accumulate)
 *   backprop_filter:  dw (K, o) += col^T (K, M) * dy (M, o) over blocks
 */
#include "ops/cpu/kernels.h"

#include <cblas.h>
#include <string.h>

#include "ops/backend.h"

/* Upper bound on the im2col block, floats (4 MiB).  Measured on the target
 * model (OpenBLAS, 1 thread): blocks that stay near cache size (conv1: the
 * whole batch of 32; conv2: 6 images, M = 1176 rows) run as fast as or
 * faster than one 16-20 MiB block, and M is still large enough for
 * OpenBLAS to split across threads.  A single image whose matrix exceeds
 * the cap still runs (block of one). */
#define WS_CAP_FLOATS ((size_t)1 << 20)

static size_t col_width(const struct dtf_window_geom *g)
{
	return (size_t)g->kh * g->kw * g->c;
}

/* x is already the im2col matrix: every output pixel reads exactly its own
 * input pixel's c channels. */
static int is_pointwise(const struct dtf_window_geom *g)
{
	return g->kh == 1 && g->kw == 1 && g->stride_h == 1 &&
	       g->stride_w == 1 && g->pad_top == 0 && g->pad_left == 0 &&
	       g->oh == g->h && g->ow == g->w;
}

/* Images per im2col block: as many as fit WS_CAP_FLOATS, at least 1. */
static int block_images(const struct dtf_window_geom *g)
{
	size_t per = (size_t)g->oh * g->ow * col_width(g);
	if (per == 0 || g->n <= 0)
		return 1;
	size_t nb = WS_CAP_FLOATS / per;
	if (nb < 1)
		nb = 1;
	if (nb > (size_t)g->n)
		nb = (size_t)g->n;
	return (int)nb;
}

size_t dtf_cpu_conv2d_workspace(const struct dtf_window_geom *g)
{
	if (is_pointwise(g) || g->n <= 0)
		return 0;
	return (size_t)block_images(g) * g->oh * g->ow * col_width(g);
}

/* col (nb*oh*ow, kh*kw*c) from images x (nb, h, w, c); padding reads 0. */
static void im2col(const struct dtf_window_geom *g, int nb,
		   const float *restrict x, float *restrict col)
{
	const int h = g->h, w = g->w, c = g->c, kh = g->kh, kw = g->kw;
	const int dh = g->dilation_h, dw = g->dilation_w;
	const size_t rowlen = (size_t)kw * c;
	float *restrict dst = col;
	for (int b = 0; b < nb; b++) {
		const float *img = x + (size_t)b * h * w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			int iy0 = oy * g->stride_h - g->pad_top;
			for (int ox = 0; ox < g->ow; ox++) {
				int ix0 = ox * g->stride_w - g->pad_left;
				/* Whole window row inside horizontally and
				 * contiguous: one copy of kw*c floats per ki. */
				int inside = dw == 1 && ix0 >= 0 && ix0 + kw <= w;
				for (int ki = 0; ki < kh; ki++, dst += rowlen) {
					int iy = iy0 + ki * dh;
					if (iy < 0 || iy >= h) {
						memset(dst, 0, rowlen * sizeof *dst);
						continue;
					}
					const float *src = img + ((size_t)iy * w) * c;
					if (inside) {
						memcpy(dst, src + (size_t)ix0 * c,
						       rowlen * sizeof *dst);
						continue;
					}
					for (int kj = 0; kj < kw; kj++) {
						int ix = ix0 + kj * dw;
						float *d = dst + (size_t)kj * c;
						if (ix < 0 || ix >= w)
							memset(d, 0, c * sizeof *d);
						else
							memcpy(d, src + (size_t)ix * c,
							       c * sizeof *d);
					}
				}
			}
		}
	}
}

/* dx (nb, h, w, c) += scatter of col (nb*oh*ow, kh*kw*c); padded cells are
 * dropped.  The adjoint of im2col. */
static void col2im_add(const struct dtf_window_geom *g, int nb,
		       const float *restrict col, float *restrict dx)
{
	const int h = g->h, w = g->w, c = g->c, kh = g->kh, kw = g->kw;
	const int dh = g->dilation_h, dw = g->dilation_w;
	const size_t rowlen = (size_t)kw * c;
	const float *restrict s = col;
	for (int b = 0; b < nb; b++) {
		float *img = dx + (size_t)b * h * w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			int iy0 = oy * g->stride_h - g->pad_top;
			for (int ox = 0; ox < g->ow; ox++) {
				int ix0 = ox * g->stride_w - g->pad_left;
				int inside = dw == 1 && ix0 >= 0 && ix0 + kw <= w;
				for (int ki = 0; ki < kh; ki++, s += rowlen) {
					int iy = iy0 + ki * dh;
					if (iy < 0 || iy >= h)
						continue;
					float *restrict d = img + ((size_t)iy * w) * c;
					if (inside) {
						d += (size_t)ix0 * c;
						for (size_t t = 0; t < rowlen; t++)
							d[t] += s[t];
						continue;
					}
					for (int kj = 0; kj < kw; kj++) {
						int ix = ix0 + kj * dw;
						if (ix < 0 || ix >= w)
							continue;
						float *restrict dd = d + (size_t)ix * c;
						const float *ss = s + (size_t)kj * c;
						for (int t = 0; t < c; t++)
							dd[t] += ss[t];
					}
				}
			}
		}
	}
}

void dtf_cpu_conv2d(const struct dtf_window_geom *g, const float *x,
		    const float *w, float *y, float *ws)
{
	/* x (n, h, w, c); w (kh, kw, c, o); y (n, oh, ow, o); ws (see above) */
	const int K = (int)col_width(g), O = g->o;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	if (g->n <= 0)
		return;
	if (is_pointwise(g)) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    (int)((size_t)g->n * out_pix), O, K, 1.0f, x, K, w,
			    O, 0.0f, y, O);
		return;
	}
	const int nb = block_images(g);
	for (int n0 = 0; n0 < g->n; n0 += nb) {
		int cnt = g->n - n0 < nb ? g->n - n0 : nb;
		im2col(g, cnt, x + (size_t)n0 * in_img, ws);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    (int)(cnt * out_pix), O, K, 1.0f, ws, K, w, O, 0.0f,
			    y + (size_t)n0 * out_pix * O, O);
	}
}

void dtf_cpu_conv2d_backprop_input(const struct dtf_window_geom *g,
				   const float *dy, const float *w, float *dx,
				   float *ws)
{
	/* dy (n, oh, ow, o); w (kh, kw, c, o); dx (n, h, w, c) */
	const int K = (int)col_width(g), O = g->o;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	if (g->n <= 0)
		return;
	if (is_pointwise(g)) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)((size_t)g->n * out_pix), K, O, 1.0f, dy, O, w,
			    O, 0.0f, dx, K);
		return;
	}
	/* Overlapping windows accumulate into dx, and padded or skipped
	 * (stride > window) pixels get no contribution: start from zero. */
	memset(dx, 0, (size_t)g->n * in_img * sizeof *dx);
	const int nb = block_images(g);
	for (int n0 = 0; n0 < g->n; n0 += nb) {
		int cnt = g->n - n0 < nb ? g->n - n0 : nb;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)(cnt * out_pix), K, O, 1.0f,
			    dy + (size_t)n0 * out_pix * O, O, w, O, 0.0f, ws, K);
		col2im_add(g, cnt, ws, dx + (size_t)n0 * in_img);
	}
}

void dtf_cpu_conv2d_backprop_filter(const struct dtf_window_geom *g,
				    const float *x, const float *dy, float *dw,
				    float *ws)
{
	/* x (n, h, w, c); dy (n, oh, ow, o); dw (kh, kw, c, o) */
	const int K = (int)col_width(g), O = g->o;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	if (g->n <= 0) {
		memset(dw, 0, (size_t)K * O * sizeof *dw);
		return;
	}
	if (is_pointwise(g)) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, O,
			    (int)((size_t)g->n * out_pix), 1.0f, x, K, dy, O,
			    0.0f, dw, O);
		return;
	}
	const int nb = block_images(g);
	for (int n0 = 0; n0 < g->n; n0 += nb) {
		int cnt = g->n - n0 < nb ? g->n - n0 : nb;
		im2col(g, cnt, x + (size_t)n0 * in_img, ws);
		/* The first block writes dw, later ones accumulate. */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, O,
			    (int)(cnt * out_pix), 1.0f, ws, K,
			    dy + (size_t)n0 * out_pix * O, O,
			    n0 == 0 ? 0.0f : 1.0f, dw, O);
	}
}

/* ops/backend.h: here, beside the kernels whose scratch it sizes, so that
 * what plans a graph links without the executors. */
size_t dtf_backend_cpu_workspace(const struct dtf_graph *g)
{
	size_t ws = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op != DTF_OP_CONV2D)
			continue;
		size_t f = dtf_cpu_conv2d_workspace(&n->a.win.g);
		if (f > ws)
			ws = f;
	}
	return ws;
}
