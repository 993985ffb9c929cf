/*
 * pool.c - 2-D max pooling and its gradient, float32 NHWC, TF semantics.
 *
 * Design: one pass per output pixel with channels innermost, so the compare
 * loop runs over contiguous memory and vectorizes.  Padded cells are never
 * visited (they never win, as in TF's MaxPool).  The gradient recomputes the
 * argmax from x rather than storing indices, so the forward pass keeps no
 * state; a window's gradient goes to its first maximum in row-major window
 * order (TF's MaxPoolGrad), found with a strict '>' scan.
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
