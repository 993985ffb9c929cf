/*
 * winograd.h - conv2d by Winograd's minimal filtering (winograd.c): the
 * fast path fast_conv.c takes for stride-1 square 3x3, 4x4 and 5x5 filters
 * where dtf_cpu_isa() (isa.h) is AVX-512 or AVX2 (x86) or NEON (AArch64).
 *
 * Same conventions as fast.h: float32, NHWC, filter HWIO, row-major,
 * caller-owned buffers, never allocate, never fail; images split across
 * the pool's threads, so a given thread count always gives the same bits.
 * Results equal the reference kernels' up to float rounding (Lavin and
 * Gray, CVPR 2016; tile sizes F(4x4, 3x3), F(3x3, 4x4), F(4x4, 5x5)).
 */
#ifndef DTF_OPS_CPU_WINOGRAD_H
#define DTF_OPS_CPU_WINOGRAD_H

#include <stddef.h>

#include "ops/cpu/fast.h"

/* 1 when the functions below handle conv geometry g (forward and both
 * gradients): kh == kw in 3..5, strides and dilations 1, c and o multiples
 * of 16, padding on every side smaller than the filter, and dtf_cpu_isa()
 * AVX-512 or AVX2; 0 otherwise (and always in a build without x86 vector
 * support). */
int dtf_wino_applies(const struct dtf_window_geom *g);

/* Floats of workspace the three functions need with `nthreads` threads:
 * per thread a padded image and its transformed tiles (36 or 64 points x
 * tiles x channels, about 0.4 MB for 14 x 14 x 32 -> 64) and a partial
 * filter gradient; shared, the transformed filter (36 or 64 x c x o) and a rotated copy
 * of the filter. */
size_t dtf_wino_workspace(const struct dtf_window_geom *g, int nthreads);

/* y (n, oh, ow, o) = act(conv(x, w) + bias) (bias may be NULL; relu != 0
 * applies max(., 0)); when pg is not NULL, q = max_pool2d(pg, y) image by
 * image as well (pg as for dtf_fast_conv2d_pool). */
void dtf_wino_conv2d(struct dtf_pool *p, const struct dtf_window_geom *g,
		     const float *x, const float *w, const float *bias,
		     int relu, float *y, const struct dtf_window_geom *pg,
		     float *q, float *ws);

/* dx (n, h, w, c) = Conv2DBackpropInput(dy (n, oh, ow, o), w). */
void dtf_wino_backprop_input(struct dtf_pool *p,
			     const struct dtf_window_geom *g, const float *dy,
			     const float *w, float *dx, float *ws);

/* dw (kh, kw, c, o) = Conv2DBackpropFilter(x, dy). */
void dtf_wino_backprop_filter(struct dtf_pool *p,
			      const struct dtf_window_geom *g, const float *x,
			      const float *dy, float *dw, float *ws);

#endif
