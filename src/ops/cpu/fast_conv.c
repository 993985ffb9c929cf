/*
 * fast_conv.c - conv2d forward, backprop-input and backprop-filter split
 * over a thread pool, with bias and relu fused into the forward pass.
 *
 * Four kinds of kernel, chosen by geometry and CPU:
 *  - Winograd F(m x m, r x r) on 6 x 6 or 8 x 8 tiles (winograd.c) for
 *    stride-1 square 3x3, 4x4 and 5x5 filters with c and o multiples of 16
 *    where dtf_cpu_isa() is AVX-512, AVX2 or NEON: 4 to 6 times fewer
 *    multiplications than any direct sum; the other kernels below handle everything else.
 *  - direct register tiles (where dtf_cpu_isa() is AVX-512 or AVX2, or
 *    NEON on AArch64; use_fwd_vec/use_bwf_vec/use_bwi_vec; one source,
 *    fast_conv_isa.h, compiled for 16- and 8-float vectors, the same bits
 *    on both, and for NEON's 4 floats with AVX2's tiles): each
 *    image is copied into a zero-padded buffer and the sums run in
 *    register tiles, inputs broadcast from memory: forward 14 pixels x 32
 *    outputs on AVX-512, 6 x 16 on AVX2 (any c); filter gradient 12 (AVX2:
 *    6) input channels of one filter position (wide filters) or 13 (6)
 *    taps anywhere in the window (narrow ones) x 32 (16) outputs, summed
 *    over the image's pixels; input gradient (stride 1, c % 32 == 0) in
 *    gather form, 14 (6) pixels x 32 (16) input channels over a
 *    zero-padded dy and a transposed filter, written once.  Nothing is unrolled into memory, and these reach about the
 *    sgemm rate without im2col's extra traffic.
 *  - generic direct (other CPUs, narrow filters: few input channels, e.g.
 *    5x5x1 -> 32, where the im2col matrix has K = 25 columns and sgemm
 *    cannot reach its speed): the same walk in plain C over a register
 *    tile of 4 pixels x 32 outputs, the filter gradient 4 taps x 32.
 *  - im2col + sgemm (the rest): per thread, blocks of a few images (sized
 *    to stay in the L2 cache) are unrolled into (pixels, kh*kw*c) and
 *    multiplied with a single-threaded sgemm; bias and relu run on the
 *    block's output while it is still in cache.
 * Images are split across threads; the filter gradient is summed into one
 * partial per thread and the partials are added at the end.  Two fusions
 * save a pass over memory: a tiling max pool runs on each image right
 * after the forward wrote it (dtf_fast_conv2d_pool), and the max pool
 * gradient of a first layer is formed image by image right before the
 * filter gradient that consumes it (dtf_fast_pool_grad_conv2d_filter).
 * This file allows the compiler to contract a*b+c into FMA (the
 * register-tile kernels use FMA throughout), so results differ from the reference by
 * rounding only.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "ops/cpu/fast.h"

#include <cblas.h>
#include <string.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/winograd.h"


/* Floats per im2col block per thread: about 1 MiB, half a typical L2. */
#define BLOCK_FLOATS ((size_t)256 << 10)
/* Output channels per register tile of the direct kernels. */
#define OB 32
/* Pixels (forward) or taps (filter gradient) per register tile. */
#define PB 4

static size_t kwidth(const struct dtf_window_geom *g)
{
	return (size_t)g->kh * g->kw * g->c;
}

static int use_direct(const struct dtf_window_geom *g)
{
	return kwidth(g) <= 64 && g->o % OB == 0;
}

/* Padded image extent: rows/cols of input the windows touch, from
 * -pad_top/-pad_left. */
static int pad_h(const struct dtf_window_geom *g)
{
	return (g->oh - 1) * g->stride_h + (g->kh - 1) * g->dilation_h + 1;
}

static int pad_w(const struct dtf_window_geom *g)
{
	return (g->ow - 1) * g->stride_w + (g->kw - 1) * g->dilation_w + 1;
}

static int block_images(const struct dtf_window_geom *g)
{
	size_t per = (size_t)g->oh * g->ow * kwidth(g);
	size_t nb = per ? BLOCK_FLOATS / per : 1;
	return nb < 1 ? 1 : (int)nb;
}

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static int use_bwi_vec(const struct dtf_window_geom *g);
static int bwi_h(const struct dtf_window_geom *g);
static int bwi_w(const struct dtf_window_geom *g);

/* Floats of one thread's workspace, 16-float aligned: a work area (padded
 * image, im2col block or padded dy), then the partial filter gradient. */
static size_t thread_ws(const struct dtf_window_geom *g)
{
	size_t pad = (size_t)pad_h(g) * pad_w(g) * g->c;
	size_t col = (size_t)block_images(g) * g->oh * g->ow * kwidth(g);
	size_t part = kwidth(g) * g->o;
	size_t work = pad > col ? pad : col;
	if (use_bwi_vec(g)) {
		size_t dyp = (size_t)bwi_h(g) * bwi_w(g) * g->o;
		work = dyp > work ? dyp : work;
	}
	return round16(work) + round16(part);
}

size_t dtf_fast_conv2d_workspace(const struct dtf_window_geom *g,
				 int nthreads)
{
	/* after the threads' areas: the transposed filter of the direct
	 * input gradient */
	if (dtf_wino_applies(g))
		return dtf_wino_workspace(g, nthreads);
	return thread_ws(g) * (size_t)(nthreads > 1 ? nthreads : 1) +
	       (use_bwi_vec(g) ? round16(kwidth(g) * g->o) : 0);
}

/* xp (ph, pw, c) = image x (h, w, c) placed at (pad_top, pad_left), zeros
 * around it (and cropped where the windows do not reach). */
static void pad_image(const struct dtf_window_geom *g, const float *x,
		      float *xp)
{
	const int ph = pad_h(g), pw = pad_w(g), c = g->c;
	for (int py = 0; py < ph; py++) {
		int iy = py - g->pad_top;
		float *dst = xp + (size_t)py * pw * c;
		if (iy < 0 || iy >= g->h) {
			memset(dst, 0, (size_t)pw * c * sizeof *dst);
			continue;
		}
		int x0 = g->pad_left;         /* first padded column with input */
		int x1 = g->pad_left + g->w;  /* one past the last */
		if (x1 > pw)
			x1 = pw;
		if (x0 > 0)
			memset(dst, 0, (size_t)x0 * c * sizeof *dst);
		if (x1 > x0)
			memcpy(dst + (size_t)x0 * c, x + (size_t)iy * g->w * c,
			       (size_t)(x1 - x0) * c * sizeof *dst);
		if (x1 < pw)
			memset(dst + (size_t)x1 * c, 0,
			       (size_t)(pw - x1) * c * sizeof *dst);
	}
}

/* ---- direct forward -------------------------------------------------------- */

/* One image: y (oh, ow, o) from the padded image xp. */
static inline DTF_BODY void direct_fwd_body(const struct dtf_window_geom *g,
					    const float *restrict xp,
					    const float *restrict w,
					    const float *restrict bias,
					    int relu, float *restrict y)
{
	const int pw = pad_w(g), c = g->c, O = g->o, kw = g->kw;
	const int sh = g->stride_h, sw = g->stride_w;
	const int dh = g->dilation_h, dw = g->dilation_w;
	for (int oy = 0; oy < g->oh; oy++) {
		for (int ox0 = 0; ox0 < g->ow; ox0 += PB) {
			int np = g->ow - ox0 < PB ? g->ow - ox0 : PB;
			for (int o0 = 0; o0 < O; o0 += OB) {
				float acc[PB][OB];
				for (int p = 0; p < PB; p++)
					for (int j = 0; j < OB; j++)
						acc[p][j] = bias ? bias[o0 + j] : 0.0f;
				for (int ki = 0; ki < g->kh; ki++) {
					const float *row = xp + ((size_t)(oy * sh + ki * dh) * pw) * c;
					for (int kj = 0; kj < kw; kj++) {
						for (int ci = 0; ci < c; ci++) {
							const float *wr = w + (((size_t)ki * kw + kj) * c + ci) * O + o0;
							const float *xr = row + ((size_t)ox0 * sw + kj * dw) * c + ci;
							if (np == PB) {
								for (int p = 0; p < PB; p++) {
									float xv = xr[(size_t)p * sw * c];
									for (int j = 0; j < OB; j++)
										acc[p][j] += xv * wr[j];
								}
							} else {
								for (int p = 0; p < np; p++) {
									float xv = xr[(size_t)p * sw * c];
									for (int j = 0; j < OB; j++)
										acc[p][j] += xv * wr[j];
								}
							}
						}
					}
				}
				for (int p = 0; p < np; p++) {
					float *yr = y + ((size_t)oy * g->ow + ox0 + p) * O + o0;
					for (int j = 0; j < OB; j++)
						yr[j] = relu && acc[p][j] < 0.0f ? 0.0f : acc[p][j];
				}
			}
		}
	}
}
DTF_ISA_FN(direct_fwd,
	   (const struct dtf_window_geom *g, const float *restrict xp,
	    const float *restrict w, const float *restrict bias, int relu,
	    float *restrict y),
	   (g, xp, w, bias, relu, y))

/* ---- direct kernels in register tiles, per vector width: fast_conv_isa.h ---- */

#if defined(DTF_VEC_TILES)
#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/fast_conv_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/fast_conv_isa.h"
#else
#define DTF_VW 4
#include "ops/cpu/vec.h"
#include "ops/cpu/fast_conv_isa.h"
#endif

/* ---- direct input gradient (stride 1): the padded dy ---- */

/* The zero-padded dy of the input gradient: dy (oh, ow, o) placed at
 * ((kh-1)*dh, (kw-1)*dw) in a (bwi_h, bwi_w, o) buffer, so that every
 * input pixel reads kh x kw whole dy pixels without bounds checks. */
static int bwi_h(const struct dtf_window_geom *g)
{
	int a = g->h + g->pad_top, b = g->oh;
	return (a > b ? a : b) + (g->kh - 1) * g->dilation_h;
}

static int bwi_w(const struct dtf_window_geom *g)
{
	int a = g->w + g->pad_left, b = g->ow;
	return (a > b ? a : b) + (g->kw - 1) * g->dilation_w;
}

static void pad_dy(const struct dtf_window_geom *g, const float *dy,
		   float *dyp)
{
	const int Hp = bwi_h(g), Wp = bwi_w(g), O = g->o;
	const int y0 = (g->kh - 1) * g->dilation_h, x0 = (g->kw - 1) * g->dilation_w;
	memset(dyp, 0, (size_t)Hp * Wp * O * sizeof *dyp);
	for (int oy = 0; oy < g->oh; oy++)
		memcpy(dyp + ((size_t)(oy + y0) * Wp + x0) * O,
		       dy + (size_t)oy * g->ow * O,
		       (size_t)g->ow * O * sizeof *dyp);
}

/* Each kernel for the vector width of dtf_cpu_isa() (simd.h:
 * DTF_VEC_CALL; have_vec() holds). */

/* One image: y (oh, ow, o) = act(conv(xp, w) + bias), o % 32 == 0. */
static void conv_fwd_vec(const struct dtf_window_geom *g, const float *xp,
			 const float *w, const float *bias, int relu, float *y)
{
	DTF_VEC_CALL(conv_fwd, (g, xp, w, bias, relu, y));
}

/* dw (K, o) += the filter gradient of one padded image, o % 32 == 0:
 * tiles along c (wide filters) or across the window (narrow ones) */
static void conv_bwf_vec(const struct dtf_window_geom *g, const float *xp,
			 const float *dy, float *dw, int narrow)
{
	if (narrow)
		DTF_VEC_CALL(conv_bwfn, (g, xp, dy, dw));
	else
		DTF_VEC_CALL(conv_bwf, (g, xp, dy, dw));
}

/* dx (h, w, c) of one image from its padded dy, c % 32 == 0. */
static void conv_bwi_vec(const struct dtf_window_geom *g, const float *dyp,
			 const float *wt, float *dx)
{
	DTF_VEC_CALL(conv_bwi, (g, dyp, wt, dx));
}

static int have_vec(void)
{
	return dtf_cpu_isa() > DTF_ISA_GENERIC;
}
#else
/* The zero-padded dy of the input gradient: dy (oh, ow, o) placed at
 * ((kh-1)*dh, (kw-1)*dw) in a (bwi_h, bwi_w, o) buffer, so that every
 * input pixel reads kh x kw whole dy pixels without bounds checks. */
static int bwi_h(const struct dtf_window_geom *g)
{
	int a = g->h + g->pad_top, b = g->oh;
	return (a > b ? a : b) + (g->kh - 1) * g->dilation_h;
}

static int bwi_w(const struct dtf_window_geom *g)
{
	int a = g->w + g->pad_left, b = g->ow;
	return (a > b ? a : b) + (g->kw - 1) * g->dilation_w;
}

static int have_vec(void) { return 0; }
#endif

/* Where the direct register-tile kernels (AVX-512, AVX2, NEON) run: the
 * forward whenever o is a multiple of 32 (narrow filters too: its tile
 * does not depend on c); the filter gradient when o is a multiple of 32
 * (tiles along c for wide filters, across the window for narrow ones);
 * the input gradient when c is a multiple of 32 and strides are 1. */
#if defined(DTF_VEC_TILES)
static int use_fwd_vec(const struct dtf_window_geom *g)
{
	return g->o % 32 == 0 && have_vec();
}
#endif

static int use_bwf_vec(const struct dtf_window_geom *g)
{
	return g->o % 32 == 0 && have_vec();
}

static int use_bwi_vec(const struct dtf_window_geom *g)
{
	return g->c % 32 == 0 && g->stride_h == 1 && g->stride_w == 1 &&
	       have_vec();
}

/* ---- direct filter gradient ------------------------------------------------ */

/* dw (K, o) += over the pixels of one image, from padded xp and dy. */
static inline DTF_BODY void direct_bwf_body(const struct dtf_window_geom *g,
					    const float *restrict xp,
					    const float *restrict dy,
					    float *restrict dw)
{
	const int pw = pad_w(g), c = g->c, O = g->o, kw = g->kw;
	const int K = g->kh * kw * c;
	const int sh = g->stride_h, sw = g->stride_w;
	for (int t0 = 0; t0 < K; t0 += PB) {
		int nt = K - t0 < PB ? K - t0 : PB;
		size_t toff[PB];
		for (int t = 0; t < PB; t++) {
			int tap = t0 + (t < nt ? t : 0);
			int ci = tap % c, kj = (tap / c) % kw, ki = tap / c / kw;
			toff[t] = ((size_t)ki * g->dilation_h * pw +
				   (size_t)kj * g->dilation_w) * c + ci;
		}
		for (int o0 = 0; o0 < O; o0 += OB) {
			float acc[PB][OB];
			for (int t = 0; t < PB; t++)
				for (int j = 0; j < OB; j++)
					acc[t][j] = 0.0f;
			for (int oy = 0; oy < g->oh; oy++) {
				const float *xrow = xp + (size_t)oy * sh * pw * c;
				const float *dyrow = dy + (size_t)oy * g->ow * O + o0;
				for (int ox = 0; ox < g->ow; ox++) {
					const float *xpix = xrow + (size_t)ox * sw * c;
					const float *d = dyrow + (size_t)ox * O;
					for (int t = 0; t < PB; t++) {
						float xv = xpix[toff[t]];
						for (int j = 0; j < OB; j++)
							acc[t][j] += xv * d[j];
					}
				}
			}
			for (int t = 0; t < nt; t++)
				for (int j = 0; j < OB; j++)
					dw[(size_t)(t0 + t) * O + o0 + j] += acc[t][j];
		}
	}
}
DTF_ISA_FN(direct_bwf,
	   (const struct dtf_window_geom *g, const float *restrict xp,
	    const float *restrict dy, float *restrict dw),
	   (g, xp, dy, dw))

/* ---- im2col ---------------------------------------------------------------- */

/* col (nb*oh*ow, K) from images x (nb, h, w, c); padding reads 0. */
static void im2col(const struct dtf_window_geom *g, int nb, const float *x,
		   float *restrict col)
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
				int inside = dw == 1 && ix0 >= 0 && ix0 + kw <= w;
				for (int ki = 0; ki < kh; ki++, dst += rowlen) {
					int iy = iy0 + ki * dh;
					if (iy < 0 || iy >= h) {
						memset(dst, 0, rowlen * sizeof *dst);
						continue;
					}
					const float *src = img + (size_t)iy * w * c;
					if (inside) {
						memcpy(dst, src + (size_t)ix0 * c,
						       rowlen * sizeof *dst);
						continue;
					}
					for (int kj = 0; kj < kw; kj++) {
						int ix = ix0 + kj * dw;
						float *d = dst + (size_t)kj * c;
						if (ix < 0 || ix >= w)
							memset(d, 0, (size_t)c * sizeof *d);
						else
							memcpy(d, src + (size_t)ix * c,
							       (size_t)c * sizeof *d);
					}
				}
			}
		}
	}
}

/* dx (nb, h, w, c) += scatter of col; the adjoint of im2col. */
static inline DTF_BODY void col2im_add_body(const struct dtf_window_geom *g,
					    int nb, const float *restrict col,
					    float *restrict dx)
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
					float *restrict d = img + (size_t)iy * w * c;
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
DTF_ISA_FN(col2im_add,
	   (const struct dtf_window_geom *g, int nb, const float *restrict col,
	    float *restrict dx),
	   (g, nb, col, dx))

/* y (rows, c) = act(y + bias), in place. */
static inline DTF_BODY void bias_act_rows_body(size_t rows, int c,
					       float *restrict y,
					       const float *restrict bias,
					       int relu)
{
	for (size_t r = 0; r < rows; r++) {
		float *yr = y + r * c;
		if (bias)
			for (int j = 0; j < c; j++)
				yr[j] += bias[j];
		if (relu)
			for (int j = 0; j < c; j++)
				yr[j] = yr[j] > 0.0f ? yr[j] : 0.0f;
	}
}
DTF_ISA_FN(bias_act_rows,
	   (size_t rows, int c, float *restrict y, const float *restrict bias,
	    int relu),
	   (rows, c, y, bias, relu))

/* ---- the three ops ---------------------------------------------------------- */

struct conv_job {
	const struct dtf_window_geom *g;
	const float *x, *w, *bias, *dy;
	const float *wt; /* the transposed filter (conv_bwi_vec) */
	const struct dtf_window_geom *pg; /* pooling after the forward, or NULL */
	float *q;                         /* its output */
	float *y, *dx, *dw, *ws;
	int relu;
};

static float *my_ws(const struct conv_job *j, int tid)
{
	return j->ws + (size_t)tid * thread_ws(j->g);
}

/* The fused pooling of images [b, b + cnt) of y, right after they were
 * written. */
static void pool_after(const struct conv_job *j, size_t b, size_t cnt)
{
	if (!j->pg)
		return;
	const struct dtf_window_geom *pg = j->pg;
	const size_t in = (size_t)pg->h * pg->w * pg->c;
	const size_t out = (size_t)pg->oh * pg->ow * pg->c;
	dtf_fast_max_pool2d_images(pg, cnt, j->y + b * in, j->q + b * out);
}

static void fwd_task(void *arg, int tid, int nt)
{
	const struct conv_job *j = arg;
	const struct dtf_window_geom *g = j->g;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	const int K = (int)kwidth(g), O = g->o;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	float *ws = my_ws(j, tid);
#if defined(DTF_VEC_TILES)
	if (use_fwd_vec(g)) {
		for (size_t b = lo; b < hi; b++) {
			pad_image(g, j->x + b * in_img, ws);
			conv_fwd_vec(g, ws, j->w, j->bias, j->relu,
				       j->y + b * out_pix * O);
			pool_after(j, b, 1);
		}
		return;
	}
#endif
	if (use_direct(g)) {
		for (size_t b = lo; b < hi; b++) {
			pad_image(g, j->x + b * in_img, ws);
			direct_fwd(g, ws, j->w, j->bias, j->relu,
				   j->y + b * out_pix * O);
			pool_after(j, b, 1);
		}
		return;
	}
	const int nb = block_images(g);
	for (size_t b = lo; b < hi; b += (size_t)nb) {
		int cnt = hi - b < (size_t)nb ? (int)(hi - b) : nb;
		float *y = j->y + b * out_pix * O;
		im2col(g, cnt, j->x + b * in_img, ws);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    (int)(cnt * out_pix), O, K, 1.0f, ws, K, j->w, O,
			    0.0f, y, O);
		if (j->bias || j->relu)
			bias_act_rows((size_t)cnt * out_pix, O, y, j->bias,
				      j->relu);
		pool_after(j, b, (size_t)cnt);
	}
}

void dtf_fast_conv2d(struct dtf_pool *p, const struct dtf_window_geom *g,
		     const float *x, const float *w, const float *bias,
		     int relu, float *y, float *ws)
{
	if (g->n <= 0)
		return;
	if (dtf_wino_applies(g)) {
		dtf_wino_conv2d(p, g, x, w, bias, relu, y, NULL, NULL, ws);
		return;
	}
	struct conv_job j = {.g = g, .x = x, .w = w, .bias = bias, .y = y,
			     .ws = ws, .relu = relu};
	dtf_pool_run(p, fwd_task, &j);
}

void dtf_fast_conv2d_pool(struct dtf_pool *p, const struct dtf_window_geom *g,
			  const float *x, const float *w, const float *bias,
			  int relu, float *y, const struct dtf_window_geom *pg,
			  float *q, float *ws)
{
	if (g->n <= 0)
		return;
	if (dtf_wino_applies(g)) {
		dtf_wino_conv2d(p, g, x, w, bias, relu, y, pg, q, ws);
		return;
	}
	struct conv_job j = {.g = g, .x = x, .w = w, .bias = bias, .y = y,
			     .ws = ws, .relu = relu, .pg = pg, .q = q};
	dtf_pool_run(p, fwd_task, &j);
}

static void bwi_task(void *arg, int tid, int nt)
{
	const struct conv_job *j = arg;
	const struct dtf_window_geom *g = j->g;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	const int K = (int)kwidth(g), O = g->o;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	if (hi <= lo)
		return;
	float *ws = my_ws(j, tid);
#if defined(DTF_VEC_TILES)
	if (use_bwi_vec(g)) {
		for (size_t b = lo; b < hi; b++) {
			pad_dy(g, j->dy + b * out_pix * O, ws);
			conv_bwi_vec(g, ws, j->wt, j->dx + b * in_img);
		}
		return;
	}
#endif
	memset(j->dx + lo * in_img, 0, (hi - lo) * in_img * sizeof(float));
	const int nb = block_images(g);
	for (size_t b = lo; b < hi; b += (size_t)nb) {
		int cnt = hi - b < (size_t)nb ? (int)(hi - b) : nb;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)(cnt * out_pix), K, O, 1.0f,
			    j->dy + b * out_pix * O, O, j->w, O, 0.0f, ws, K);
		col2im_add(g, cnt, ws, j->dx + b * in_img);
	}
}

void dtf_fast_conv2d_backprop_input(struct dtf_pool *p,
				    const struct dtf_window_geom *g,
				    const float *dy, const float *w, float *dx,
				    float *ws)
{
	if (g->n <= 0)
		return;
	if (dtf_wino_applies(g)) {
		dtf_wino_backprop_input(p, g, dy, w, dx, ws);
		return;
	}
	struct conv_job j = {.g = g, .dy = dy, .w = w, .dx = dx, .ws = ws};
	if (use_bwi_vec(g)) {
		/* wt (kh, kw, o, c): each filter position's (c, o) transposed */
		float *wt = ws + thread_ws(g) * (size_t)dtf_pool_size(p);
		const int c = g->c, O = g->o;
		for (int k = 0; k < g->kh * g->kw; k++)
			for (int ci = 0; ci < c; ci++)
				for (int o = 0; o < O; o++)
					wt[((size_t)k * O + o) * c + ci] =
						w[((size_t)k * c + ci) * O + o];
		j.wt = wt;
	}
	dtf_pool_run(p, bwi_task, &j);
}

/* Each thread's partial filter gradient sits after its work area. */
static float *partial(const struct conv_job *j, int tid)
{
	return my_ws(j, tid) + thread_ws(j->g) - round16(kwidth(j->g) * j->g->o);
}

static void bwf_task(void *arg, int tid, int nt)
{
	const struct conv_job *j = arg;
	const struct dtf_window_geom *g = j->g;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	const int K = (int)kwidth(g), O = g->o;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	float *ws = my_ws(j, tid);
	float *part = partial(j, tid);
	memset(part, 0, (size_t)K * O * sizeof *part);
#if defined(DTF_VEC_TILES)
	if (use_bwf_vec(g)) {
		for (size_t b = lo; b < hi; b++) {
			pad_image(g, j->x + b * in_img, ws);
			conv_bwf_vec(g, ws, j->dy + b * out_pix * O, part,
				     use_direct(g));
		}
		return;
	}
#endif
	if (use_direct(g)) {
		for (size_t b = lo; b < hi; b++) {
			pad_image(g, j->x + b * in_img, ws);
			direct_bwf(g, ws, j->dy + b * out_pix * O, part);
		}
		return;
	}
	const int nb = block_images(g);
	for (size_t b = lo; b < hi; b += (size_t)nb) {
		int cnt = hi - b < (size_t)nb ? (int)(hi - b) : nb;
		im2col(g, cnt, j->x + b * in_img, ws);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, O,
			    (int)(cnt * out_pix), 1.0f, ws, K,
			    j->dy + b * out_pix * O, O, 1.0f, part, O);
	}
}

/* dw = sum of the partials, columns split across threads. */
static void bwf_reduce_task(void *arg, int tid, int nt)
{
	const struct conv_job *j = arg;
	size_t n = kwidth(j->g) * j->g->o, lo, hi;
	dtf_pool_split(n, 16, tid, nt, &lo, &hi);
	for (size_t i = lo; i < hi; i++) {
		float s = 0.0f;
		for (int t = 0; t < nt; t++)
			s += partial(j, t)[i];
		j->dw[i] = s;
	}
}

void dtf_fast_conv2d_backprop_filter(struct dtf_pool *p,
				     const struct dtf_window_geom *g,
				     const float *x, const float *dy, float *dw,
				     float *ws)
{
	if (dtf_wino_applies(g)) {
		dtf_wino_backprop_filter(p, g, x, dy, dw, ws);
		return;
	}
	struct conv_job j = {.g = g, .x = x, .dy = dy, .dw = dw, .ws = ws};
	dtf_pool_run(p, bwf_task, &j);
	dtf_pool_run(p, bwf_reduce_task, &j);
}

/* ---- max pool gradient -> filter gradient ------------------------------------ */

struct pool_bwf_job {
	struct conv_job c;               /* the filter gradient; c.ws */
	const struct dtf_window_geom *pg; /* the pooling */
	const float *px, *pdy;
	float *db, *ws2;                 /* ws2: the per-thread extras */
	int relu;
};

/* Per thread, after the conv workspaces: one image of dx, the image's
 * bias sums (float), the thread's bias sums (double). */
static size_t pool_bwf_thread(const struct dtf_window_geom *pg)
{
	size_t img = ((size_t)pg->h * pg->w * pg->c + 15) / 16 * 16;
	size_t cp = ((size_t)pg->c + 15) / 16 * 16;
	return img + cp + 2 * cp;
}

size_t dtf_fast_pool_grad_conv2d_filter_workspace(
	const struct dtf_window_geom *pg, const struct dtf_window_geom *cg,
	int nthreads)
{
	size_t nt = (size_t)(nthreads > 1 ? nthreads : 1);
	size_t cp = ((size_t)pg->c + 15) / 16 * 16;
	return dtf_fast_conv2d_workspace(cg, nthreads) +
	       nt * pool_bwf_thread(pg) + nt * cp;
}

static void pool_bwf_task(void *arg, int tid, int nt)
{
	const struct pool_bwf_job *pj = arg;
	const struct conv_job *j = &pj->c;
	const struct dtf_window_geom *g = j->g, *pg = pj->pg;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_pix = (size_t)g->oh * g->ow;
	const size_t pin = (size_t)pg->h * pg->w * pg->c;
	const size_t pout = (size_t)pg->oh * pg->ow * pg->c;
	const int K = (int)kwidth(g), O = g->o, C = pg->c;
	const size_t cp = ((size_t)C + 15) / 16 * 16;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	float *ws = my_ws(j, tid), *part = partial(j, tid);
	float *dxb = pj->ws2 + (size_t)tid * pool_bwf_thread(pg);
	float *isum = dxb + (pin + 15) / 16 * 16;
	double *tsum = (double *)(isum + cp);
	float *bpart = pj->ws2 + (size_t)nt * pool_bwf_thread(pg) + (size_t)tid * cp;
	memset(part, 0, (size_t)K * O * sizeof *part);
	for (int t = 0; t < C; t++)
		tsum[t] = 0.0;
	for (size_t b = lo; b < hi; b++) {
		dtf_fast_max_pool2d_grad_images(pg, 1, pj->px + b * pin,
						pj->pdy + b * pout, pj->relu, dxb,
						pj->db ? isum : NULL);
		if (pj->db)
			for (int t = 0; t < C; t++)
				tsum[t] += isum[t];
		if (use_bwf_vec(g)) {
#if defined(DTF_VEC_TILES)
			pad_image(g, j->x + b * in_img, ws);
			conv_bwf_vec(g, ws, dxb, part, use_direct(g));
#endif
		} else if (use_direct(g)) {
			pad_image(g, j->x + b * in_img, ws);
			direct_bwf(g, ws, dxb, part);
		} else {
			im2col(g, 1, j->x + b * in_img, ws);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, O,
				    (int)out_pix, 1.0f, ws, K, dxb, O, 1.0f, part,
				    O);
		}
	}
	for (int t = 0; t < C; t++)
		bpart[t] = (float)tsum[t];
}

void dtf_fast_pool_grad_conv2d_filter(struct dtf_pool *p,
				      const struct dtf_window_geom *pg,
				      const float *x, const float *dy, int relu,
				      float *db, const struct dtf_window_geom *cg,
				      const float *cx, float *dw, float *ws)
{
	int nt = dtf_pool_size(p);
	struct pool_bwf_job pj = {
		.c = {.g = cg, .x = cx, .dw = dw, .ws = ws},
		.pg = pg, .px = x, .pdy = dy, .db = db, .relu = relu,
		.ws2 = ws + dtf_fast_conv2d_workspace(cg, nt)};
	dtf_pool_run(p, pool_bwf_task, &pj);
	dtf_pool_run(p, bwf_reduce_task, &pj.c);
	if (db) {
		const size_t cp = ((size_t)pg->c + 15) / 16 * 16;
		const float *bp = pj.ws2 + (size_t)nt * pool_bwf_thread(pg);
		for (int k = 0; k < pg->c; k++) {
			double s = 0.0;
			for (int t = 0; t < nt; t++)
				s += bp[(size_t)t * cp + k];
			db[k] = (float)s;
		}
	}
}
