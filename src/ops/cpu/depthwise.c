/*
 * depthwise.c - depthwise conv2d forward and backward, float32 NHWC, filter
 * (kh, kw, c, m), TF's DepthwiseConv2dNative semantics.
 *
 * Design: direct loops over output pixels with the channel (and multiplier)
 * innermost, so every tap reads c contiguous inputs and writes c*m
 * contiguous outputs.  There is no im2col: a depthwise filter has kh*kw*m
 * weights per channel, too few for a matrix multiply to pay.  The window
 * is clipped to the input with the same rule as pooling, so padded taps are
 * never read; padding before is pad_top/pad_left, padding after is implied
 * by oh/ow, and all three padding kinds work unchanged.
 */
#include "ops/cpu/kernels.h"

#include <string.h>

/* Taps [k0, k1) of a window starting at input coordinate i0 (maybe < 0),
 * dilation d, size k, that land inside [0, size). */
static void taps(int i0, int d, int k, int size, int *k0, int *k1)
{
	int a = i0 < 0 ? (-i0 + d - 1) / d : 0;
	int b = k;
	while (b > a && i0 + (b - 1) * d >= size)
		b--;
	*k0 = a;
	*k1 = b;
}

void dtf_cpu_depthwise_conv2d(const struct dtf_window_geom *g, const float *x,
			      const float *w, float *y)
{
	/* x (n, h, w, c); w (kh, kw, c, m); y (n, oh, ow, c*m) */
	const int c = g->c, m = g->o / g->c, o = g->o;
	for (int b = 0; b < g->n; b++) {
		const float *img = x + (size_t)b * g->h * g->w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			int iy0 = oy * g->stride_h - g->pad_top, ky0, ky1;
			taps(iy0, g->dilation_h, g->kh, g->h, &ky0, &ky1);
			for (int ox = 0; ox < g->ow; ox++) {
				int ix0 = ox * g->stride_w - g->pad_left, kx0, kx1;
				taps(ix0, g->dilation_w, g->kw, g->w, &kx0, &kx1);
				float *restrict out =
					y + (((size_t)b * g->oh + oy) * g->ow + ox) * o;
				memset(out, 0, (size_t)o * sizeof *out);
				for (int ky = ky0; ky < ky1; ky++) {
					int iy = iy0 + ky * g->dilation_h;
					for (int kx = kx0; kx < kx1; kx++) {
						int ix = ix0 + kx * g->dilation_w;
						const float *restrict in =
							img + ((size_t)iy * g->w + ix) * c;
						const float *restrict f =
							w + ((size_t)ky * g->kw + kx) * o;
						for (int ci = 0; ci < c; ci++)
							for (int q = 0; q < m; q++)
								out[ci * m + q] +=
									in[ci] * f[ci * m + q];
					}
				}
			}
		}
	}
}

void dtf_cpu_depthwise_conv2d_backprop_input(const struct dtf_window_geom *g,
					     const float *dy, const float *w,
					     float *dx)
{
	/* dy (n, oh, ow, c*m); w (kh, kw, c, m); dx (n, h, w, c) */
	const int c = g->c, m = g->o / g->c, o = g->o;
	const size_t img_sz = (size_t)g->h * g->w * c;
	memset(dx, 0, (size_t)g->n * img_sz * sizeof *dx);
	for (int b = 0; b < g->n; b++) {
		float *dimg = dx + (size_t)b * img_sz;
		for (int oy = 0; oy < g->oh; oy++) {
			int iy0 = oy * g->stride_h - g->pad_top, ky0, ky1;
			taps(iy0, g->dilation_h, g->kh, g->h, &ky0, &ky1);
			for (int ox = 0; ox < g->ow; ox++) {
				int ix0 = ox * g->stride_w - g->pad_left, kx0, kx1;
				taps(ix0, g->dilation_w, g->kw, g->w, &kx0, &kx1);
				const float *restrict gout =
					dy + (((size_t)b * g->oh + oy) * g->ow + ox) * o;
				for (int ky = ky0; ky < ky1; ky++) {
					int iy = iy0 + ky * g->dilation_h;
					for (int kx = kx0; kx < kx1; kx++) {
						int ix = ix0 + kx * g->dilation_w;
						float *restrict d =
							dimg + ((size_t)iy * g->w + ix) * c;
						const float *restrict f =
							w + ((size_t)ky * g->kw + kx) * o;
						for (int ci = 0; ci < c; ci++) {
							float s = 0.0f;
							for (int q = 0; q < m; q++)
								s += gout[ci * m + q] *
								     f[ci * m + q];
							d[ci] += s;
						}
					}
				}
			}
		}
	}
}

void dtf_cpu_depthwise_conv2d_backprop_filter(const struct dtf_window_geom *g,
					      const float *x, const float *dy,
					      float *dw)
{
	/* x (n, h, w, c); dy (n, oh, ow, c*m); dw (kh, kw, c, m) */
	const int c = g->c, m = g->o / g->c, o = g->o;
	memset(dw, 0, (size_t)g->kh * g->kw * o * sizeof *dw);
	for (int b = 0; b < g->n; b++) {
		const float *img = x + (size_t)b * g->h * g->w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			int iy0 = oy * g->stride_h - g->pad_top, ky0, ky1;
			taps(iy0, g->dilation_h, g->kh, g->h, &ky0, &ky1);
			for (int ox = 0; ox < g->ow; ox++) {
				int ix0 = ox * g->stride_w - g->pad_left, kx0, kx1;
				taps(ix0, g->dilation_w, g->kw, g->w, &kx0, &kx1);
				const float *restrict gout =
					dy + (((size_t)b * g->oh + oy) * g->ow + ox) * o;
				for (int ky = ky0; ky < ky1; ky++) {
					int iy = iy0 + ky * g->dilation_h;
					for (int kx = kx0; kx < kx1; kx++) {
						int ix = ix0 + kx * g->dilation_w;
						const float *restrict in =
							img + ((size_t)iy * g->w + ix) * c;
						float *restrict f =
							dw + ((size_t)ky * g->kw + kx) * o;
						for (int ci = 0; ci < c; ci++)
							for (int q = 0; q < m; q++)
								f[ci * m + q] +=
									in[ci] * gout[ci * m + q];
					}
				}
			}
		}
	}
}
