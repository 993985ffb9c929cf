/*
 * winograd.c - conv2d by Winograd's minimal filtering: F(4x4, 3x3) and
 * F(3x3, 4x4) on 6 x 6 tiles, F(4x4, 5x5) on 8 x 8 tiles, for the forward
 * pass, the input gradient and the filter gradient, 16 channels per vector
 * on AVX-512, 8 on AVX2 + FMA and 4 on AArch64 NEON: one source for the
 * transforms (winograd_isa.h) and the products (gemm_tile.h), compiled
 * for each width, doing the same float operations per channel on the x86
 * widths, so both give the same bits.
 *
 * Source: A. Lavin and S. Gray, "Fast Algorithms for Convolutional Neural
 * Networks", CVPR 2016.  Per m x m output tile and r x r filter, on an
 * n x n input tile d (n = m + r - 1):
 *
 *     Y = A^T [ (G g G^T) .* (B^T d B) ] A
 *
 * The matrices come from Toom-Cook interpolation at the points p = 0, 1,
 * -1, 2, -2 and infinity (n = 6) or 0, 1, -1, 2, -2, 1/2, -1/2 and
 * infinity (n = 8), so B^T depends on n only (for n = 6 it is the usual
 * F(4x4, 3x3) one).  With s_j = 1 / prod over l != j of (p_j - p_l), over
 * the finite points, (1/4, -1/6, -1/6, 1/24, 1/24) for n = 6:
 *
 *     G[j][k]   = s_j p_j^k,   G[n-1][k]   = [k == r - 1]
 *     A^T[i][j] = p_j^i,       A^T[i][n-1] = [i == m - 1]
 *
 * (j < n - 1).  5x5 filters take the 8-point tiles: 64 / 16 = 4
 * multiplications per output and channel pair instead of 25 (36 / 4 = 9
 * on 6 x 6 tiles), at about twice the rounding error, still about 1e-5
 * of the outputs' magnitude (measured 2-3e-5 of their rms, tests/test_fast.c).
 *
 * The products over input channels become n^2 independent matrix products,
 * one per point xi of the n x n transformed tile:
 *     forward      M[xi] (tiles, o) = V[xi] (tiles, c) U[xi] (c, o)
 * and n^2 / m^2 multiplications per output and channel pair replace r^2
 * (4 instead of 25 for 5x5, 2.25 instead of 9 for 3x3).  The gradients
 * are the exact adjoints of that computation:
 *     filter       dU[xi] = sum over tiles of V[xi]^T (A dY A^T)[xi],
 *                  dg = G^T dU G
 *     input        a Winograd forward pass of dy with the filter rotated
 *                  by 180 degrees and its channels swapped, padding
 *                  r - 1 - pad (stride 1).
 * Rounding differs from the direct sums (the transforms add and scale
 * inputs before multiplying); tests/test_fast.c checks every geometry
 * against the reference kernels.
 *
 * Work: images are split across threads (a static split, so a thread
 * count always gives the same bits).  Per image: pad, transform every
 * tile (V, n^2 x tiles x c), multiply per xi in register tiles
 * (gemm_tile.h), transform back with bias and relu; about
 * 0.4 MB per image for a 14 x 14 x 32 -> 64 layer, in the L2 cache.  The
 * filter gradient sums into one partial dU per thread; the partials are
 * added and transformed back once.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "ops/cpu/winograd.h"

#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/gemm_tile.h"

#if defined(DTF_VEC_TILES)

/* Tiling of one (forward-like) geometry. */
struct wgeo {
	int r, m;         /* filter size, output tile size */
	int n, nx;        /* tile points per side (m + r - 1: 6 or 8), n^2 */
	int th, tw, T;    /* tiles down, across, per image */
	int hp, wp;       /* padded input extent */
	int pt, pl;       /* padding before */
	int h, w, c, o, oh, ow;
	size_t vs, ms;    /* floats between the points of V and of M (dM) */
};

static size_t r16(size_t n) { return (n + 15) / 16 * 16; }

/* The stride between the nx point matrices of V (T x c) or M (T x o):
 * rows x cols rounded up to 16 floats (64 bytes, one cache line), plus
 * a line when that is an even number of lines.  The transforms write
 * every point of a tile: at a power-of-two stride (T = 16 tiles of a
 * 14 x 14 image, c = 32: 2 KB) the 64 points fall into 2 of the L1
 * cache's 64 sets and evict each other on every store; an odd number of
 * lines spreads them over all sets. */
static size_t point_stride(int rows, int cols)
{
	size_t s = r16((size_t)rows * (size_t)cols);
	return (s / 16) % 2 == 0 ? s + 16 : s;
}

static void wgeo_init(struct wgeo *q, const struct dtf_window_geom *g)
{
	q->r = g->kh;
	q->m = g->kh == 5 ? 4 : 7 - g->kh;
	q->n = q->m + q->r - 1;
	q->nx = q->n * q->n;
	q->th = (g->oh + q->m - 1) / q->m;
	q->tw = (g->ow + q->m - 1) / q->m;
	q->T = q->th * q->tw;
	q->hp = q->th * q->m + q->r - 1;
	q->wp = q->tw * q->m + q->r - 1;
	q->pt = g->pad_top;
	q->pl = g->pad_left;
	q->h = g->h;
	q->w = g->w;
	q->c = g->c;
	q->o = g->o;
	q->oh = g->oh;
	q->ow = g->ow;
	q->vs = point_stride(q->T, q->c);
	q->ms = point_stride(q->T, q->o);
}

/* The input gradient's geometry: a stride-1 conv of dy (oh, ow, o) giving
 * dx (h, w, c) with the rotated filter and padding r - 1 - pad. */
static void wgeo_bwi(struct wgeo *q, const struct dtf_window_geom *g)
{
	struct dtf_window_geom b = *g;
	b.h = g->oh;
	b.w = g->ow;
	b.c = g->o;
	b.o = g->c;
	b.oh = g->h;
	b.ow = g->w;
	b.pad_top = g->kh - 1 - g->pad_top;
	b.pad_left = g->kw - 1 - g->pad_left;
	wgeo_init(q, &b);
}

/* Floats of the exact-zero masks (bytes): padded pixels, then outputs. */
static size_t zmask_floats(const struct wgeo *q)
{
	return r16(((size_t)q->hp * q->wp + (size_t)q->oh * q->ow + 3) / 4);
}

/* Floats of one thread's area for geometry q: padded image, V, M (or dM),
 * the exact-zero masks. */
static size_t area(const struct wgeo *q)
{
	return r16((size_t)q->hp * q->wp * q->c) +
	       (size_t)q->nx * q->vs + (size_t)q->nx * q->ms +
	       zmask_floats(q);
}

static size_t thread_floats(const struct dtf_window_geom *g)
{
	struct wgeo f, b;
	wgeo_init(&f, g);
	wgeo_bwi(&b, g);
	size_t a = area(&f) > area(&b) ? area(&f) : area(&b);
	return a + r16((size_t)f.nx * g->c * g->o); /* + the partial dU */
}

/*
 * A^T, A, G and G^T for both tile sides N, from the points: p_0 = 0, then
 * the pairs +-a_q (a = 1, 2, and 1/2 for N = 8) at indices 1 + 2q and
 * 2 + 2q, and infinity at N - 1; the scales s_j of G's rows (equal within
 * a pair).  N is a literal at every call once inlined, so the tables and
 * the powers fold into constants.
 */
static inline __attribute__((always_inline)) float pair_point(int q)
{
	return q == 0 ? 1.0f : q == 1 ? 2.0f : 0.5f;
}

static inline __attribute__((always_inline)) float
pair_scale(const int N, int q) /* s of pair q; q = -1: s_0 */
{
	static const float s6[3] = {0.25f, -1.0f / 6.0f, 1.0f / 24.0f};
	static const float s8[4] = {-1.0f, -2.0f / 9.0f, 1.0f / 90.0f,
				    32.0f / 45.0f};
	return N == 8 ? s8[q + 1] : s6[q + 1];
}

/* a^i, exactly (a is 1, 2 or 1/2) */
static inline __attribute__((always_inline)) float pw(float a, int i)
{
	float p = 1.0f;
	for (int k = 0; k < i; k++)
		p *= a;
	return p;
}

/* ---- tile transforms ------------------------------------------------------------ */

/* xp (hp, wp, c) = the image at (pt, pl), zeros elsewhere. */
static void pad_in(const struct wgeo *q, const float *x, float *xp)
{
	const size_t row = (size_t)q->wp * q->c;
	for (int i = 0; i < q->hp; i++) {
		float *d = xp + (size_t)i * row;
		int si = i - q->pt;
		if (si < 0 || si >= q->h) {
			memset(d, 0, row * sizeof *d);
			continue;
		}
		int j0 = q->pl > 0 ? q->pl : 0;           /* first column with data */
		int s0 = j0 - q->pl;                       /* its source column */
		int n = q->w - s0;
		if (n > q->wp - j0)
			n = q->wp - j0;
		if (n < 0)
			n = 0;
		memset(d, 0, (size_t)j0 * q->c * sizeof *d);
		memcpy(d + (size_t)j0 * q->c, x + ((size_t)si * q->w + s0) * q->c,
		       (size_t)n * q->c * sizeof *d);
		memset(d + (size_t)(j0 + n) * q->c, 0,
		       (size_t)(q->wp - j0 - n) * q->c * sizeof *d);
	}
}

/*
 * Exact zeros.  Winograd's transforms mix the whole n x n input tile into
 * every output of the tile, so an output whose own window holds only
 * zeros comes out as the bias plus rounding noise (about 1e-9 of the
 * tile's other values) instead of the bias exactly, as a direct sum gives.
 * Where that bias is 0 (freshly initialised layers) a following relu then
 * lets the gradient through where TF's ReluGrad blocks it (y > 0), and a
 * max pool breaks ties elsewhere: zero backgrounds (padding, MNIST-like
 * images, dead relu maps) would train differently.  So the forward pass
 * marks the outputs whose window is all zeros (every channel of every
 * pixel) and writes the bias there exactly.
 *
 * wz (oh, ow) = 1 where output (oy, ox)'s r x r window in padded image xp
 * is all zeros; pz (hp, wp) is scratch.  Returns the number of such
 * outputs (0: wz need not be read).
 */
static size_t zero_windows(const struct wgeo *q, const float *xp,
			   unsigned char *pz, unsigned char *wz)
{
	const int C = q->c, r = q->r;
	size_t zeros = 0, found = 0;
	for (size_t p = 0; p < (size_t)q->hp * q->wp; p++) {
		const float *v = xp + p * C;
		int z = 1;
		for (int c = 0; c < C && z; c++)
			z = v[c] == 0.0f;
		pz[p] = (unsigned char)z;
		zeros += (size_t)z;
	}
	/* padding alone is never a whole window (pad < r) */
	if (zeros == (size_t)q->hp * q->wp - (size_t)q->h * q->w)
		return 0;
	/* rows of r pixels, in place (each row's first wp - r + 1 entries),
	 * then columns of r rows */
	for (int i = 0; i < q->hp; i++) {
		unsigned char *row = pz + (size_t)i * q->wp;
		for (int j = 0; j + r <= q->wp; j++) {
			unsigned char z = 1;
			for (int b = 0; b < r; b++)
				z &= row[j + b];
			row[j] = z;
		}
	}
	for (int oy = 0; oy < q->oh; oy++)
		for (int ox = 0; ox < q->ow; ox++) {
			unsigned char z = 1;
			for (int a = 0; a < r; a++)
				z &= pz[(size_t)(oy + a) * q->wp + ox];
			wz[(size_t)oy * q->ow + ox] = z;
			found += z;
		}
	return found;
}

/* ---- the transforms, per vector width: winograd_isa.h --------------------- */

#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/winograd_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/winograd_isa.h"
#else
#define DTF_VW 4
#include "ops/cpu/vec.h"
#include "ops/cpu/winograd_isa.h"
#endif

/* each transform for the vector width of dtf_cpu_isa() (simd.h:
 * DTF_VEC_CALL; dtf_wino_applies() holds) */

static void in_transform(const struct wgeo *q, const float *xp, float *V)
{
	DTF_VEC_CALL(in_transform, (q, xp, V));
}

static void out_transform(const struct wgeo *q, const float *M,
			  const float *bias, int relu, const unsigned char *wz,
			  float *y)
{
	DTF_VEC_CALL(out_transform, (q, M, bias, relu, wz, y));
}

static void dy_transform(const struct wgeo *q, const float *dy, float *dM)
{
	DTF_VEC_CALL(dy_transform, (q, dy, dM));
}

static void filter_transform(const float *w, int r, int C, int O, int c_lo,
			     int c_hi, float *U)
{
	DTF_VEC_CALL(filter_transform, (w, r, C, O, c_lo, c_hi, U));
}

static void filter_inverse(const float *part, size_t pstride, int nparts,
			   int r, int C, int O, int c_lo, int c_hi, float *dw)
{
	DTF_VEC_CALL(filter_inverse, (part, pstride, nparts, r, C, O, c_lo, c_hi, dw));
}

/* ---- the products in the transformed domain: gemm_tile.h ---- */

#define mm(rows, K, O, a, ars, aks, b, ldb, c, ldc, add) \
	dtf_mm_tile(rows, K, O, a, ars, aks, b, ldb, c, ldc, add, 0)

/* ---- drivers ------------------------------------------------------------------- */

struct wjob {
	const struct dtf_window_geom *g;
	struct wgeo q;              /* the geometry the images run in */
	const float *x, *w, *bias;  /* forward input (x or dy), filter */
	float *y;                   /* forward output (y or dx) */
	const struct dtf_window_geom *pg;
	float *q_out;               /* fused max pool output */
	const float *dy;            /* filter gradient */
	float *dw;
	float *ws, *U;              /* per-thread areas; transformed filter */
	size_t tstride;             /* floats per thread area */
	int relu;
	int exact_zeros;            /* forward: all-zero windows give the bias */
};

/* the filter transform, input channels split across threads */
static void filter_task(void *arg, int tid, int nt)
{
	const struct wjob *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->q.c, 1, tid, nt, &lo, &hi);
	filter_transform(j->w, j->q.r, j->q.c, j->q.o, (int)lo, (int)hi, j->U);
}

static void fwd_task(void *arg, int tid, int nt)
{
	const struct wjob *j = arg;
	const struct wgeo *q = &j->q;
	const size_t in_img = (size_t)q->h * q->w * q->c;
	const size_t out_img = (size_t)q->oh * q->ow * q->o;
	float *xp = j->ws + (size_t)tid * j->tstride;
	float *V = xp + r16((size_t)q->hp * q->wp * q->c);
	float *M = V + (size_t)q->nx * q->vs;
	unsigned char *pz = (unsigned char *)(M + (size_t)q->nx * q->ms);
	unsigned char *wz = pz + (size_t)q->hp * q->wp;
	size_t lo, hi;
	dtf_pool_split((size_t)j->g->n, 1, tid, nt, &lo, &hi);
	for (size_t b = lo; b < hi; b++) {
		pad_in(q, j->x + b * in_img, xp);
		size_t zw = j->exact_zeros ? zero_windows(q, xp, pz, wz) : 0;
		in_transform(q, xp, V);
		for (int xi = 0; xi < q->nx; xi++)
			mm(q->T, q->c, q->o, V + (size_t)xi * q->vs, (size_t)q->c, 1,
			   j->U + (size_t)xi * q->c * q->o, (size_t)q->o,
			   M + (size_t)xi * q->ms, (size_t)q->o, 0);
		out_transform(q, M, j->bias, j->relu, zw ? wz : NULL,
			      j->y + b * out_img);
		if (j->pg) {
			const struct dtf_window_geom *pg = j->pg;
			dtf_fast_max_pool2d_images(pg, 1, j->y + b * out_img,
						   j->q_out + b * (size_t)pg->oh * pg->ow * pg->c);
		}
	}
}

static void run_forward(struct dtf_pool *p, struct wjob *j)
{
	dtf_pool_run(p, filter_task, j);
	dtf_pool_run(p, fwd_task, j);
}

static float *shared_area(const struct dtf_window_geom *g, float *ws,
			  int nthreads)
{
	return ws + thread_floats(g) * (size_t)(nthreads > 1 ? nthreads : 1);
}

int dtf_wino_applies(const struct dtf_window_geom *g)
{
	return g->kh == g->kw && g->kh >= 3 && g->kh <= 5 &&
	       g->stride_h == 1 && g->stride_w == 1 && g->dilation_h == 1 &&
	       g->dilation_w == 1 && g->c % 16 == 0 && g->o % 16 == 0 &&
	       g->c > 0 && g->o > 0 && g->pad_top < g->kh &&
	       g->pad_left < g->kw && g->pad_bottom < g->kh &&
	       g->pad_right < g->kw && dtf_cpu_isa() > DTF_ISA_GENERIC;
}

size_t dtf_wino_workspace(const struct dtf_window_geom *g, int nthreads)
{
	size_t rr = (size_t)g->kh * g->kw;
	struct wgeo f;
	wgeo_init(&f, g);
	return thread_floats(g) * (size_t)(nthreads > 1 ? nthreads : 1) +
	       r16((size_t)f.nx * g->c * g->o) + r16(rr * g->c * g->o);
}

void dtf_wino_conv2d(struct dtf_pool *p, const struct dtf_window_geom *g,
		     const float *x, const float *w, const float *bias,
		     int relu, float *y, const struct dtf_window_geom *pg,
		     float *q, float *ws)
{
	struct wjob j = {.g = g, .x = x, .w = w, .bias = bias, .y = y,
			 .pg = pg, .q_out = q, .ws = ws, .relu = relu,
			 .exact_zeros = 1};
	wgeo_init(&j.q, g);
	j.tstride = thread_floats(g);
	j.U = shared_area(g, ws, dtf_pool_size(p));
	run_forward(p, &j);
}

/* wt (r, r, o, c) = w (r, r, c, o) rotated by 180 degrees, channels
 * swapped; rows of the output split across threads */
struct rot_job {
	const struct dtf_window_geom *g;
	const float *w;
	float *wt;
};

static void rot_task(void *arg, int tid, int nt)
{
	const struct rot_job *j = arg;
	const int r = j->g->kh, C = j->g->c, O = j->g->o;
	size_t lo, hi;
	dtf_pool_split((size_t)r * r * O, 1, tid, nt, &lo, &hi);
	for (size_t i = lo; i < hi; i++) {
		size_t ab = i / (size_t)O, o = i % (size_t)O;
		size_t src = (size_t)r * r - 1 - ab; /* (r-1-a, r-1-b) */
		const float *s = j->w + src * C * O + o;
		float *d = j->wt + i * C;
		for (int c = 0; c < C; c++)
			d[c] = s[(size_t)c * O];
	}
}

void dtf_wino_backprop_input(struct dtf_pool *p,
			     const struct dtf_window_geom *g, const float *dy,
			     const float *w, float *dx, float *ws)
{
	float *U = shared_area(g, ws, dtf_pool_size(p));
	struct wjob j = {.g = g, .x = dy, .y = dx, .ws = ws, .U = U};
	wgeo_bwi(&j.q, g);
	float *wt = U + r16((size_t)j.q.nx * g->c * g->o);
	struct rot_job rj = {.g = g, .w = w, .wt = wt};
	dtf_pool_run(p, rot_task, &rj);
	j.w = wt;
	j.tstride = thread_floats(g);
	run_forward(p, &j);
}

static float *part_of(const struct wjob *j, int tid)
{
	return j->ws + (size_t)tid * j->tstride + j->tstride -
	       r16((size_t)j->q.nx * j->q.c * j->q.o);
}

static void bwf_task(void *arg, int tid, int nt)
{
	const struct wjob *j = arg;
	const struct wgeo *q = &j->q;
	const size_t in_img = (size_t)q->h * q->w * q->c;
	const size_t out_img = (size_t)q->oh * q->ow * q->o;
	float *xp = j->ws + (size_t)tid * j->tstride;
	float *V = xp + r16((size_t)q->hp * q->wp * q->c);
	float *dM = V + (size_t)q->nx * q->vs;
	float *part = part_of(j, tid);
	memset(part, 0, (size_t)q->nx * q->c * q->o * sizeof *part);
	size_t lo, hi;
	dtf_pool_split((size_t)j->g->n, 1, tid, nt, &lo, &hi);
	for (size_t b = lo; b < hi; b++) {
		pad_in(q, j->x + b * in_img, xp);
		in_transform(q, xp, V);
		dy_transform(q, j->dy + b * out_img, dM);
		/* dU[xi] (c, o) += V[xi]^T (c, T) dM[xi] (T, o) */
		for (int xi = 0; xi < q->nx; xi++)
			mm(q->c, q->T, q->o, V + (size_t)xi * q->vs, 1, (size_t)q->c,
			   dM + (size_t)xi * q->ms, (size_t)q->o,
			   part + (size_t)xi * q->c * q->o, (size_t)q->o, 1);
	}
}

static void bwf_inverse_task(void *arg, int tid, int nt)
{
	const struct wjob *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->q.c, 1, tid, nt, &lo, &hi);
	filter_inverse(part_of(j, 0), j->tstride, nt, j->q.r, j->q.c, j->q.o,
		       (int)lo, (int)hi, j->dw);
}

void dtf_wino_backprop_filter(struct dtf_pool *p,
			      const struct dtf_window_geom *g, const float *x,
			      const float *dy, float *dw, float *ws)
{
	struct wjob j = {.g = g, .x = x, .dy = dy, .dw = dw, .ws = ws};
	wgeo_init(&j.q, g);
	j.tstride = thread_floats(g);
	dtf_pool_run(p, bwf_task, &j);
	dtf_pool_run(p, bwf_inverse_task, &j);
}

#else /* no vector build support (vec.h): never applies */

int dtf_wino_applies(const struct dtf_window_geom *g)
{
	(void)g;
	return 0;
}

size_t dtf_wino_workspace(const struct dtf_window_geom *g, int nthreads)
{
	(void)g;
	(void)nthreads;
	return 0;
}

void dtf_wino_conv2d(struct dtf_pool *p, const struct dtf_window_geom *g,
		     const float *x, const float *w, const float *bias,
		     int relu, float *y, const struct dtf_window_geom *pg,
		     float *q, float *ws)
{
	(void)p; (void)g; (void)x; (void)w; (void)bias; (void)relu; (void)y;
	(void)pg; (void)q; (void)ws;
}

void dtf_wino_backprop_input(struct dtf_pool *p,
			     const struct dtf_window_geom *g, const float *dy,
			     const float *w, float *dx, float *ws)
{
	(void)p; (void)g; (void)dy; (void)w; (void)dx; (void)ws;
}

void dtf_wino_backprop_filter(struct dtf_pool *p,
			      const struct dtf_window_geom *g, const float *x,
			      const float *dy, float *dw, float *ws)
{
	(void)p; (void)g; (void)x; (void)dy; (void)dw; (void)ws;
}

#endif
