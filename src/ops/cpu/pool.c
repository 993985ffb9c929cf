/*
 * pool.c - 2-D max and average pooling, global average pooling, and their
 * gradients, float32 NHWC, TF semantics.
 *
 * Design: one pass per output pixel with channels innermost, so the compare
 * loop runs over contiguous memory and vectorizes.  Padded cells are never
 * visited (they never win, as in TF's MaxPool).  The gradient recomputes the
 * argmax from x rather than storing indices, so the forward pass keeps no
 * state; a window's gradient goes to its first maximum in row-major window
 * order (TF's MaxPoolGrad), found with a strict '>' scan.  Average pooling
 * divides by the number of window cells inside the input (TF excludes
 * padding from the count), using the same clipped window.
 */
#include "ops/cpu/kernels.h"

#include <string.h>

/* Channels handled per argmax pass; bounds the stack arrays. */
#define CHUNK 64

/* The window of output (oy, ox), clipped to the input: taps ky in
 * [k0y, k1y) and kx in [k0x, k1x) land inside; the rest are padding. */
struct window {
	int iy0, ix0;       /* window origin in input coordinates (may be < 0) */
	int k0y, k1y, k0x, k1x; /* window taps inside the input */
};

static struct window clip(const struct dtf_window_geom *g, int oy, int ox)
{
	struct window win;
	const int dh = g->dilation_h, dw = g->dilation_w;
	win.iy0 = oy * g->stride_h - g->pad_top;
	win.ix0 = ox * g->stride_w - g->pad_left;
	win.k0y = win.iy0 < 0 ? (-win.iy0 + dh - 1) / dh : 0;
	win.k0x = win.ix0 < 0 ? (-win.ix0 + dw - 1) / dw : 0;
	win.k1y = g->kh;
	while (win.k1y > win.k0y && win.iy0 + (win.k1y - 1) * dh >= g->h)
		win.k1y--;
	win.k1x = g->kw;
	while (win.k1x > win.k0x && win.ix0 + (win.k1x - 1) * dw >= g->w)
		win.k1x--;
	return win;
}

void dtf_cpu_max_pool2d(const struct dtf_window_geom *g, const float *x,
			float *y)
{
	/* x (n, h, w, c); y (n, oh, ow, c) */
	const int c = g->c;
	for (int b = 0; b < g->n; b++) {
		const float *img = x + (size_t)b * g->h * g->w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			for (int ox = 0; ox < g->ow; ox++) {
				float *restrict out =
					y + (((size_t)b * g->oh + oy) * g->ow + ox) * c;
				struct window win = clip(g, oy, ox);
				int first = 1;
				for (int ky = win.k0y; ky < win.k1y; ky++) {
					int iy = win.iy0 + ky * g->dilation_h;
					for (int kx = win.k0x; kx < win.k1x; kx++) {
						int ix = win.ix0 + kx * g->dilation_w;
						const float *restrict in =
							img + ((size_t)iy * g->w + ix) * c;
						if (first) {
							memcpy(out, in, c * sizeof *out);
							first = 0;
							continue;
						}
						for (int t = 0; t < c; t++)
							out[t] = in[t] > out[t] ? in[t] : out[t];
					}
				}
				/* A window with no input cell (cannot happen with
				 * TF's padding rule) yields 0 rather than garbage. */
				if (first)
					memset(out, 0, c * sizeof *out);
			}
		}
	}
}

void dtf_cpu_max_pool2d_grad(const struct dtf_window_geom *g, const float *x,
			     const float *dy, float *dx)
{
	/* x (n, h, w, c); dy (n, oh, ow, c); dx (n, h, w, c) */
	const int c = g->c;
	const size_t img_sz = (size_t)g->h * g->w * c;
	memset(dx, 0, (size_t)g->n * img_sz * sizeof *dx);
	for (int b = 0; b < g->n; b++) {
		const float *img = x + (size_t)b * img_sz;
		float *dimg = dx + (size_t)b * img_sz;
		for (int oy = 0; oy < g->oh; oy++) {
			for (int ox = 0; ox < g->ow; ox++) {
				const float *gout =
					dy + (((size_t)b * g->oh + oy) * g->ow + ox) * c;
				struct window win = clip(g, oy, ox);
				if (win.k0y >= win.k1y || win.k0x >= win.k1x)
					continue;
				for (int c0 = 0; c0 < c; c0 += CHUNK) {
					int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
					float best[CHUNK];
					int arg[CHUNK]; /* input pixel index iy*w+ix */
					int iy = win.iy0 + win.k0y * g->dilation_h;
					int ix = win.ix0 + win.k0x * g->dilation_w;
					int p0 = iy * g->w + ix;
					const float *in0 = img + (size_t)p0 * c + c0;
					for (int t = 0; t < cn; t++) {
						best[t] = in0[t];
						arg[t] = p0;
					}
					for (int ky = win.k0y; ky < win.k1y; ky++) {
						iy = win.iy0 + ky * g->dilation_h;
						for (int kx = win.k0x; kx < win.k1x; kx++) {
							ix = win.ix0 + kx * g->dilation_w;
							int p = iy * g->w + ix;
							const float *in =
								img + (size_t)p * c + c0;
							/* Strict '>': ties keep the earlier cell. */
							for (int t = 0; t < cn; t++) {
								int gt = in[t] > best[t];
								best[t] = gt ? in[t] : best[t];
								arg[t] = gt ? p : arg[t];
							}
						}
					}
					for (int t = 0; t < cn; t++)
						dimg[(size_t)arg[t] * c + c0 + t] +=
							gout[c0 + t];
				}
			}
		}
	}
}

/* ---- average pooling ---------------------------------------------------- */

/* Cells of the clipped window: TF's AvgPool divisor (padding excluded). */
static int window_count(const struct window *win)
{
	int ny = win->k1y - win->k0y, nx = win->k1x - win->k0x;
	return ny > 0 && nx > 0 ? ny * nx : 0;
}

void dtf_cpu_avg_pool2d(const struct dtf_window_geom *g, const float *x,
			float *y)
{
	/* x (n, h, w, c); y (n, oh, ow, c) */
	const int c = g->c;
	for (int b = 0; b < g->n; b++) {
		const float *img = x + (size_t)b * g->h * g->w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			for (int ox = 0; ox < g->ow; ox++) {
				float *restrict out =
					y + (((size_t)b * g->oh + oy) * g->ow + ox) * c;
				struct window win = clip(g, oy, ox);
				int cnt = window_count(&win);
				memset(out, 0, c * sizeof *out);
				if (cnt == 0)
					continue; /* all padding: 0, as max pool */
				for (int ky = win.k0y; ky < win.k1y; ky++) {
					int iy = win.iy0 + ky * g->dilation_h;
					for (int kx = win.k0x; kx < win.k1x; kx++) {
						int ix = win.ix0 + kx * g->dilation_w;
						const float *restrict in =
							img + ((size_t)iy * g->w + ix) * c;
						for (int t = 0; t < c; t++)
							out[t] += in[t];
					}
				}
				const float inv = 1.0f / (float)cnt;
				for (int t = 0; t < c; t++)
					out[t] *= inv;
			}
		}
	}
}

void dtf_cpu_avg_pool2d_grad(const struct dtf_window_geom *g, const float *dy,
			     float *dx)
{
	/* dy (n, oh, ow, c); dx (n, h, w, c) */
	const int c = g->c;
	const size_t img_sz = (size_t)g->h * g->w * c;
	memset(dx, 0, (size_t)g->n * img_sz * sizeof *dx);
	for (int b = 0; b < g->n; b++) {
		float *dimg = dx + (size_t)b * img_sz;
		for (int oy = 0; oy < g->oh; oy++) {
			for (int ox = 0; ox < g->ow; ox++) {
				const float *gout =
					dy + (((size_t)b * g->oh + oy) * g->ow + ox) * c;
				struct window win = clip(g, oy, ox);
				int cnt = window_count(&win);
				if (cnt == 0)
					continue;
				const float inv = 1.0f / (float)cnt;
				for (int ky = win.k0y; ky < win.k1y; ky++) {
					int iy = win.iy0 + ky * g->dilation_h;
					for (int kx = win.k0x; kx < win.k1x; kx++) {
						int ix = win.ix0 + kx * g->dilation_w;
						float *restrict d =
							dimg + ((size_t)iy * g->w + ix) * c;
						for (int t = 0; t < c; t++)
							d[t] += gout[t] * inv;
					}
				}
			}
		}
	}
}

void dtf_cpu_global_avg_pool(size_t n, size_t hw, int c, const float *x,
			     float *y)
{
	/* x (n, hw, c); y (n, c) */
	for (size_t b = 0; b < n; b++) {
		const float *img = x + b * hw * (size_t)c;
		float *out = y + b * (size_t)c;
		for (int c0 = 0; c0 < c; c0 += CHUNK) {
			int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
			double acc[CHUNK] = {0};
			for (size_t p = 0; p < hw; p++) {
				const float *in = img + p * (size_t)c + c0;
				for (int t = 0; t < cn; t++)
					acc[t] += in[t];
			}
			for (int t = 0; t < cn; t++)
				out[c0 + t] = hw ? (float)(acc[t] / (double)hw) : 0.0f;
		}
	}
}

void dtf_cpu_global_avg_pool_grad(size_t n, size_t hw, int c,
				  const float *dy, float *dx)
{
	/* dy (n, c); dx (n, hw, c) */
	const float inv = hw ? 1.0f / (float)hw : 0.0f;
	for (size_t b = 0; b < n; b++) {
		const float *g = dy + b * (size_t)c;
		float *d = dx + b * hw * (size_t)c;
		for (size_t p = 0; p < hw; p++)
			for (int t = 0; t < c; t++)
				d[p * (size_t)c + t] = g[t] * inv;
	}
}
