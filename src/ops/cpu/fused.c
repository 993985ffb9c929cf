/*
 * fused.c - threaded dense layers and fused elementwise passes: bias +
 * relu, relu gradient + bias gradient, max pooling and the fused backward
 * of relu -> max pool (MaxPoolGrad, ReluGrad and BiasAddGrad in one pass),
 * and dropout (Philox blocks 16 or 8 at a time in AVX-512 or AVX2 lanes
 * where the CPU has them, the reference's scalar loop otherwise).
 *
 * Design: rows (or images) are split across the pool's threads; each pass
 * reads and writes every element once.  Column sums for bias gradients use
 * the reference's scheme (float sums over runs of RUN rows, runs added in
 * double) per thread, and the threads' sums are added in thread order.
 */
#include "ops/cpu/fast.h"

#include <cblas.h>
#include <string.h>

#include "ops/cpu/gemm_tile.h"
#include "ops/cpu/simd.h"

#if defined(DTF_T512)
#include <immintrin.h>
#endif

#define RUN 64
/* Channels per pass of the pooling and relu-gradient kernels (bounds
 * stack arrays). */
#define CH 64

/* ---- matmul ------------------------------------------------------------------ */

struct mm_job {
	int m, n, k, ta, tb;
	const float *a, *b;
	float *c;
	int split_n;
};

static void mm_task(void *arg, int tid, int nt)
{
	const struct mm_job *j = arg;
	size_t lo, hi;
	if (j->split_n) {
		dtf_pool_split((size_t)j->n, 16, tid, nt, &lo, &hi);
		if (hi <= lo)
			return;
		const float *b = j->tb ? j->b + lo * j->k : j->b + lo;
		cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
			    j->tb ? CblasTrans : CblasNoTrans, j->m,
			    (int)(hi - lo), j->k, 1.0f, j->a, j->ta ? j->m : j->k,
			    b, j->tb ? j->k : j->n, 0.0f, j->c + lo, j->n);
	} else {
		dtf_pool_split((size_t)j->m, 16, tid, nt, &lo, &hi);
		if (hi <= lo)
			return;
		const float *a = j->ta ? j->a + lo : j->a + lo * j->k;
		cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
			    j->tb ? CblasTrans : CblasNoTrans, (int)(hi - lo),
			    j->n, j->k, 1.0f, a, j->ta ? j->m : j->k, j->b,
			    j->tb ? j->k : j->n, 0.0f, j->c + lo * j->n, j->n);
	}
}

/* The register-tile product (gemm_tile.h), on AVX-512 and AVX2, takes a
 * dense layer's three products (on AVX2 the last two; own_kind) when the
 * batch is at most SMALL_BATCH rows:
 *  - the forward x w: x broadcast from the L2 cache against slices of w
 *    (bench_kernels, 1 thread, batch 64, 3136 x 1024: 138 against
 *    OpenBLAS's 115 GFLOP/s);
 *  - the input gradient dy w^T, as dx^T = w dy^T: the weights streamed
 *    once, as broadcasts, against dy^T (a copy of at most SMALL_BATCH x n
 *    floats) in the L2 cache (bench_kernels, 1 thread, batch 64,
 *    3136 x 1024: 156 against OpenBLAS's 110 GFLOP/s);
 *  - the kernel gradient x^T dy (k = batch): each output written once,
 *    where OpenBLAS first zeroes the whole (3136 x 1024) result and packs
 *    both operands (training with 2 ranks x 1 thread at global batch 128:
 *    2440 -> 2680 samples/s, 3 alternating runs each).
 * OpenBLAS packs the whole weight matrix on every call; that is what these
 * save. */
#define SMALL_BATCH 256
/* The forward also takes the tile on AVX-512 for up to NN_ROWS rows while
 * x (m, k) stays within NN_A_FLOATS (2 MB, the L2 cache of a core or two):
 * the GPT's dense layers over [batch x time] rows (384 or 768 rows, k 128
 * or 512; one thread, best of 200: 108-114 against OpenBLAS's 95-105
 * GFLOP/s, and the 2-rank GPT's forward 9.0-9.4 -> 8.0-8.5 ms per step).
 * The gradients stay with OpenBLAS there: the input gradient's transposed
 * copy of dy and the kernel gradient's row broadcasts were as slow or
 * slower than its packing at those row counts. */
#define NN_ROWS 1024
#define NN_A_FLOATS ((size_t)1 << 19)

enum { OWN_NONE, OWN_NN, OWN_NT, OWN_TN };

static int own_kind(int m, int n, int k, int ta, int tb)
{
	const enum dtf_cpu_isa isa = dtf_cpu_isa();
	if (k <= 0 || isa < DTF_ISA_AVX2)
		return OWN_NONE;
	if (!ta && tb && m % 16 == 0 && m <= SMALL_BATCH)
		return OWN_NT;
	if (ta && !tb && n % 16 == 0 && k <= SMALL_BATCH)
		return OWN_TN;
	/* The forward on AVX2 stays with OpenBLAS: its Haswell sgemm is
	 * ahead of the 6 x 16 tile there, the other two products behind it
	 * (tests/bench/kernels.c's shapes, 3136 x 1024 at batch 64, 1
	 * thread, best of 15 in process CPU time, OPENBLAS_CORETYPE=Haswell:
	 * forward 6.2 against 7.0 ms; kernel gradient 6.4 against 5.8 and
	 * input gradient 7.1 against 5.5 for the tile). */
	if (!ta && !tb && n % 16 == 0 && isa == DTF_ISA_AVX512 &&
	    (m <= SMALL_BATCH ||
	     (m <= NN_ROWS && (size_t)m * (size_t)k <= NN_A_FLOATS)))
		return OWN_NN;
	return OWN_NONE;
}

size_t dtf_fast_matmul_workspace(int m, int n, int k, int trans_a,
				 int trans_b)
{
	/* a^T for the input gradient's transposed product */
	return own_kind(m, n, k, trans_a, trans_b) == OWN_NT
		       ? (size_t)m * (size_t)k
		       : 0;
}

struct own_job {
	int m, n, k;
	const float *a, *b;
	float *c, *ws;
};

/* ws (k, m) = a (m, k)^T, rows of ws split across threads */
static void transpose_task(void *arg, int tid, int nt)
{
	const struct own_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->k, 1, tid, nt, &lo, &hi);
	for (size_t r = lo; r < hi; r++)
		for (int i = 0; i < j->m; i++)
			j->ws[r * (size_t)j->m + (size_t)i] = j->a[(size_t)i * j->k + r];
}

/* c (m, n) = a^T b with a (k, m): rows of c split across threads */
static void own_tn_task(void *arg, int tid, int nt)
{
	const struct own_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->m, 16, tid, nt, &lo, &hi);
	if (hi > lo)
		dtf_mm_tile((int)(hi - lo), j->k, j->n, j->a + lo, 1, (size_t)j->m,
			  j->b, (size_t)j->n, j->c + lo * (size_t)j->n, (size_t)j->n, 0, 0);
}

/* c (m, n) = a b: columns of c split across threads */
static void own_nn_task(void *arg, int tid, int nt)
{
	const struct own_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->n, 64, tid, nt, &lo, &hi);
	if (hi > lo)
		dtf_mm_tile(j->m, j->k, (int)(hi - lo), j->a, (size_t)j->k, 1,
			  j->b + lo, (size_t)j->n, j->c + lo, (size_t)j->n, 0, 0);
}

/* c^T (n, m) = b (n, k) a^T (k, m), stored transposed into c (m, n) */
static void own_nt_task(void *arg, int tid, int nt)
{
	const struct own_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->n, 16, tid, nt, &lo, &hi);
	if (hi > lo)
		dtf_mm_tile((int)(hi - lo), j->k, j->m, j->b + lo * (size_t)j->k,
			  (size_t)j->k, 1, j->ws, (size_t)j->m, j->c + lo,
			  (size_t)j->n, 0, 1);
}

void dtf_fast_matmul(struct dtf_pool *p, int m, int n, int k, const float *a,
		     int trans_a, const float *b, int trans_b, float *c,
		     float *ws)
{
	if (m <= 0 || n <= 0)
		return;
	struct own_job oj = {m, n, k, a, b, c, ws};
	switch (own_kind(m, n, k, trans_a, trans_b)) {
	case OWN_TN:
		dtf_pool_run(p, own_tn_task, &oj);
		return;
	case OWN_NN:
		dtf_pool_run(p, own_nn_task, &oj);
		return;
	case OWN_NT:
		dtf_pool_run(p, transpose_task, &oj);
		dtf_pool_run(p, own_nt_task, &oj);
		return;
	default:
		break;
	}
	if (k <= 0 || dtf_pool_size(p) == 1) {
		dtf_cpu_matmul(m, n, k, a, trans_a, b, trans_b, c);
		return;
	}
	struct mm_job j = {m, n, k, trans_a, trans_b, a, b, c, n >= m};
	dtf_pool_run(p, mm_task, &j);
}

/* ---- batch matmul: one sgemm per matrix, matrices split across threads --- */

struct bmm_job {
	int batch, m, n, k, trans_a, trans_b;
	float alpha;
	const float *a, *b;
	float *c;
};

static void bmm_task(void *arg, int tid, int nt)
{
	const struct bmm_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((size_t)j->batch, 1, tid, nt, &lo, &hi);
	size_t sa = (size_t)j->m * j->k, sb = (size_t)j->k * j->n,
	       sc = (size_t)j->m * j->n;
	for (size_t i = lo; i < hi; i++)
		cblas_sgemm(CblasRowMajor, j->trans_a ? CblasTrans : CblasNoTrans,
			    j->trans_b ? CblasTrans : CblasNoTrans, j->m, j->n,
			    j->k, j->alpha, j->a + i * sa,
			    j->trans_a ? j->m : j->k, j->b + i * sb,
			    j->trans_b ? j->k : j->n, 0.0f, j->c + i * sc, j->n);
}

void dtf_fast_batch_matmul(struct dtf_pool *p, int batch, int m, int n, int k,
			   const float *a, int trans_a, const float *b,
			   int trans_b, float alpha, float *c)
{
	if (batch <= 0 || m <= 0 || n <= 0)
		return;
	if (k <= 0) {
		memset(c, 0, (size_t)batch * m * n * sizeof(float));
		return;
	}
	struct bmm_job j = {batch, m, n, k, trans_a, trans_b, alpha, a, b, c};
	dtf_pool_run(p, bmm_task, &j);
}

/* ---- bias + relu ------------------------------------------------------------- */

static inline DTF_BODY void bias_act_body(size_t rows, int c,
					  const float *x, const float *bias,
					  int relu, float *y)
{
	/* not restrict: y == x allowed; element i reads only index i */
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * c;
		float *yr = y + r * c;
		if (bias && relu) {
			for (int j = 0; j < c; j++) {
				float v = xr[j] + bias[j];
				yr[j] = v > 0.0f ? v : 0.0f;
			}
		} else if (bias) {
			for (int j = 0; j < c; j++)
				yr[j] = xr[j] + bias[j];
		} else if (relu) {
			for (int j = 0; j < c; j++)
				yr[j] = xr[j] > 0.0f ? xr[j] : 0.0f;
		} else if (xr != yr) {
			memmove(yr, xr, (size_t)c * sizeof *yr);
		}
	}
}
DTF_ISA_FN(bias_act,
	   (size_t rows, int c, const float *x, const float *bias, int relu,
	    float *y),
	   (rows, c, x, bias, relu, y))

struct ew_job {
	size_t rows;
	int c, relu;
	const float *x, *bias, *dy, *y;
	float *out, *db, *ws;
	const struct dtf_window_geom *g;
};

static void bias_act_task(void *arg, int tid, int nt)
{
	const struct ew_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->rows, 1, tid, nt, &lo, &hi);
	if (hi > lo)
		bias_act(hi - lo, j->c, j->x + lo * j->c, j->bias, j->relu,
			 j->out + lo * j->c);
}

void dtf_fast_bias_act(struct dtf_pool *p, size_t rows, int c, const float *x,
		       const float *bias, int relu, float *y)
{
	struct ew_job j = {.rows = rows, .c = c, .relu = relu, .x = x,
			   .bias = bias, .out = y};
	if (rows * (size_t)c < 16384)
		p = NULL; /* not worth a wake-up */
	dtf_pool_run(p, bias_act_task, &j);
}

/* ---- relu gradient + bias gradient ------------------------------------------- */

size_t dtf_fast_bias_grad_workspace(int c, int nthreads)
{
	return (size_t)(c + 15) / 16 * 16 * (size_t)(nthreads > 1 ? nthreads : 1);
}

/* dx = dy * (y > 0); sum (c) of dx over the rows, float within runs of RUN
 * rows, double across runs. */
static inline DTF_BODY void relu_grad_sum_body(size_t rows, int c,
					       const float *dy, const float *y,
					       float *dx, float *sum)
{
	for (int c0 = 0; c0 < c; c0 += CH) {
		int cn = c - c0 < CH ? c - c0 : CH;
		double acc[CH];
		float part[CH];
		for (int t = 0; t < cn; t++)
			acc[t] = 0.0;
		for (size_t r0 = 0; r0 < rows; r0 += RUN) {
			size_t r1 = rows - r0 < RUN ? rows : r0 + RUN;
			for (int t = 0; t < cn; t++)
				part[t] = 0.0f;
			for (size_t r = r0; r < r1; r++) {
				const float *dr = dy + r * c + c0;
				const float *yr = y + r * c + c0;
				float *xr = dx + r * c + c0;
				for (int t = 0; t < cn; t++) {
					float v = yr[t] > 0.0f ? dr[t] : 0.0f;
					xr[t] = v;
					part[t] += v;
				}
			}
			for (int t = 0; t < cn; t++)
				acc[t] += part[t];
		}
		if (sum)
			for (int t = 0; t < cn; t++)
				sum[c0 + t] = (float)acc[t];
	}
}
DTF_ISA_FN(relu_grad_sum,
	   (size_t rows, int c, const float *dy, const float *y, float *dx,
	    float *sum),
	   (rows, c, dy, y, dx, sum))

static size_t cpad(int c) { return (size_t)(c + 15) / 16 * 16; }

static void relu_grad_task(void *arg, int tid, int nt)
{
	const struct ew_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->rows, 1, tid, nt, &lo, &hi);
	float *sum = j->db ? j->ws + (size_t)tid * cpad(j->c) : NULL;
	if (sum && hi <= lo)
		memset(sum, 0, (size_t)j->c * sizeof *sum);
	if (hi > lo)
		relu_grad_sum(hi - lo, j->c, j->dy + lo * j->c,
			      j->y + lo * j->c, j->out + lo * j->c, sum);
}

/* db = sum over threads of the partial sums in ws (thread order). */
static void reduce_partials(const float *ws, int nt, int c, float *db)
{
	for (int k = 0; k < c; k++) {
		double s = 0.0;
		for (int t = 0; t < nt; t++)
			s += ws[(size_t)t * cpad(c) + k];
		db[k] = (float)s;
	}
}

void dtf_fast_relu_grad_bias(struct dtf_pool *p, size_t rows, int c,
			     const float *dy, const float *y, float *dx,
			     float *db, float *ws)
{
	struct ew_job j = {.rows = rows, .c = c, .dy = dy, .y = y, .out = dx,
			   .db = db, .ws = ws};
	dtf_pool_run(p, relu_grad_task, &j);
	if (db)
		reduce_partials(ws, dtf_pool_size(p), c, db);
}

/* ---- pooling ------------------------------------------------------------------- */

int dtf_fast_pool_tiles(const struct dtf_window_geom *g)
{
	return g->kh == g->stride_h && g->kw == g->stride_w &&
	       g->dilation_h == 1 && g->dilation_w == 1 && g->pad_top == 0 &&
	       g->pad_left == 0 && g->h == g->oh * g->kh &&
	       g->w == g->ow * g->kw;
}

/* Tiling windows: y (nb, oh, ow, c) = max over each kh x kw tile. */
static inline DTF_BODY void pool_tiles_body(const struct dtf_window_geom *g,
					    size_t nb, const float *restrict x,
					    float *restrict y)
{
	const int c = g->c, w = g->w;
	for (size_t b = 0; b < nb; b++) {
		const float *img = x + b * g->h * w * c;
		for (int oy = 0; oy < g->oh; oy++) {
			for (int ox = 0; ox < g->ow; ox++) {
				float *out = y + ((b * g->oh + oy) * g->ow + ox) * c;
				const float *in0 = img + ((size_t)oy * g->kh * w + (size_t)ox * g->kw) * c;
				memcpy(out, in0, (size_t)c * sizeof *out);
				for (int ky = 0; ky < g->kh; ky++)
					for (int kx = 0; kx < g->kw; kx++) {
						const float *in = in0 + ((size_t)ky * w + kx) * c;
						for (int t = 0; t < c; t++)
							out[t] = in[t] > out[t] ? in[t] : out[t];
					}
			}
		}
	}
}
DTF_ISA_FN(pool_tiles,
	   (const struct dtf_window_geom *g, size_t nb, const float *restrict x,
	    float *restrict y),
	   (g, nb, x, y))

void dtf_fast_max_pool2d_images(const struct dtf_window_geom *g, size_t nb,
				const float *x, float *y)
{
	pool_tiles(g, nb, x, y);
}

static void pool_task(void *arg, int tid, int nt)
{
	const struct ew_job *j = arg;
	const struct dtf_window_geom *g = j->g;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	if (hi <= lo)
		return;
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_img = (size_t)g->oh * g->ow * g->c;
	if (dtf_fast_pool_tiles(g)) {
		pool_tiles(g, hi - lo, j->x + lo * in_img, j->out + lo * out_img);
	} else {
		struct dtf_window_geom sub = *g;
		sub.n = (int)(hi - lo);
		dtf_cpu_max_pool2d(&sub, j->x + lo * in_img, j->out + lo * out_img);
	}
}

void dtf_fast_max_pool2d(struct dtf_pool *p, const struct dtf_window_geom *g,
			 const float *x, float *y)
{
	struct ew_job j = {.g = g, .x = x, .out = y};
	dtf_pool_run(p, pool_task, &j);
}

/*
 * Tiling windows: dx (nb, h, w, c): each tile's first maximum (row-major,
 * strict '>') gets dy, masked to 0 when relu and the maximum is <= 0; every
 * other cell gets 0.  part[c] accumulates the values written.  One window,
 * channels [c0, c0 + cn); cn is a literal 16 on the fast path, so the
 * loops become single vector operations.
 */
static inline DTF_BODY void pool_grad_chunk(const float *restrict img,
					    float *restrict dimg,
					    const float *restrict gy,
					    size_t base, int w, int c, int kh,
					    int kw, int relu, float *restrict part,
					    const int cn)
{
	float best[CH], val[CH];
	int arg[CH];
	for (int t = 0; t < cn; t++) {
		best[t] = img[base + t];
		arg[t] = 0;
	}
	for (int q = 1; q < kh * kw; q++) {
		size_t off = base + ((size_t)(q / kw) * w + (size_t)(q % kw)) * c;
		for (int t = 0; t < cn; t++) {
			int gt = img[off + t] > best[t];
			best[t] = gt ? img[off + t] : best[t];
			arg[t] = gt ? q : arg[t];
		}
	}
	for (int t = 0; t < cn; t++) {
		val[t] = relu && !(best[t] > 0.0f) ? 0.0f : gy[t];
		part[t] += val[t];
	}
	for (int q = 0; q < kh * kw; q++) {
		size_t off = base + ((size_t)(q / kw) * w + (size_t)(q % kw)) * c;
		for (int t = 0; t < cn; t++)
			dimg[off + t] = arg[t] == q ? val[t] : 0.0f;
	}
}

/* The same for a 2x2 window and 16 channels, in GCC vector types (16
 * lanes; narrower ISAs get them split): compares give all-ones masks and
 * every choice is a bitwise select, so the bits are those of the general
 * version (same strict '>' comparisons, same order). */
typedef float v16f __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));

/* Macros rather than functions: a vector return type would change the
 * ABI of the baseline build's copy (GCC's -Wpsabi). */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v16f))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(v16f))
#define VSEL(m, a, b) ((v16f)(((v16i)(a) & (m)) | ((v16i)(b) & ~(m))))

static inline DTF_BODY void pool_grad_2x2_16(const float *restrict img,
					     float *restrict dimg,
					     const float *restrict gy,
					     size_t base, int w, int c, int relu,
					     float *restrict part)
{
	const float *x0 = img + base, *x1 = x0 + c;
	const float *x2 = x0 + (size_t)w * c, *x3 = x2 + c;
	float *d0 = dimg + base, *d1 = d0 + c;
	float *d2 = d0 + (size_t)w * c, *d3 = d2 + c;
	const v16f zero = {0};
	const v16i ones = ~(v16i){0};
	v16f a1, a2, a3, best, gv, p, o;
	VLOAD(a1, x1);
	VLOAD(a2, x2);
	VLOAD(a3, x3);
	VLOAD(best, x0);
	VLOAD(gv, gy);
	VLOAD(p, part);
	v16i m1 = a1 > best;
	best = VSEL(m1, a1, best);
	v16i m2 = a2 > best;
	best = VSEL(m2, a2, best);
	v16i m3 = a3 > best;
	best = VSEL(m3, a3, best);
	/* one-hot masks of the winner: the last cell that beat the best */
	v16i w3 = m3, w2 = m2 & ~m3, w1 = m1 & ~m2 & ~m3;
	v16i w0 = ~(m1 | m2 | m3);
	v16i keep = relu ? (best > zero) : ones;
	v16f val = VSEL(keep, gv, zero);
	p += val;
	VSTORE(part, p);
	o = VSEL(w0, val, zero);
	VSTORE(d0, o);
	o = VSEL(w1, val, zero);
	VSTORE(d1, o);
	o = VSEL(w2, val, zero);
	VSTORE(d2, o);
	o = VSEL(w3, val, zero);
	VSTORE(d3, o);
}

#if defined(DTF_T512)
/* pool_grad_2x2_16 in intrinsics, one source for both widths
 * (pool_grad_isa.h): the same comparisons in the same order, so the same
 * bits (GCC's code for the generic vector types builds the masks lane by
 * lane, about 4x slower). */
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/pool_grad_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/pool_grad_isa.h"
#elif defined(DTF_NEON)
/* the same on AArch64, 4 floats per NEON vector */
#define DTF_VW 4
#include "ops/cpu/vec.h"
#include "ops/cpu/pool_grad_isa.h"
#endif
#if defined(DTF_VEC_TILES)
#undef VLOAD
#undef VSTORE
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v16f))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(v16f))
#endif

/* Channels a window pass keeps partial sums for on the stack. */
#define CMAX 1024

/* The pass over windows; isa (a literal: 2 AVX-512, 1 AVX2 or NEON, 0
 * neither) picks the intrinsics for 2x2 windows, in the copy for that ISA
 * only. */
static inline __attribute__((always_inline)) void
pool_grad_walk(const struct dtf_window_geom *g, size_t nb,
	       const float *restrict x, const float *restrict dy, int relu,
	       float *restrict dx, float *sum, const int isa)
{
	const int c = g->c, w = g->w, kh = g->kh, kw = g->kw;
	/* windows outer, channels inner: x and dx are walked once, in
	 * order; channels beyond CMAX take further passes */
	for (int c0 = 0; c0 < c; c0 += CMAX) {
		const int cw = c - c0 < CMAX ? c - c0 : CMAX;
		double acc[CMAX];
		float part[CMAX];
		for (int t = 0; t < cw; t++) {
			acc[t] = 0.0;
			part[t] = 0.0f;
		}
		size_t in_run = 0;
		for (size_t b = 0; b < nb; b++) {
			const float *img = x + b * g->h * w * c;
			float *dimg = dx + b * g->h * w * c;
			for (int oy = 0; oy < g->oh; oy++) {
				for (int ox = 0; ox < g->ow; ox++) {
					size_t base = ((size_t)oy * kh * w + (size_t)ox * kw) * c;
					const float *gy = dy + ((b * g->oh + oy) * g->ow + ox) * c;
					int t0 = c0;
					if (kh == 2 && kw == 2)
						for (; t0 + 16 <= c0 + cw; t0 += 16) {
#if defined(DTF_T512)
							if (isa == 2) {
								pool_grad_2x2_16_512(img, dimg, gy + t0, base + t0, w,
										     c, relu, part + (t0 - c0));
								continue;
							}
							if (isa == 1) {
								pool_grad_2x2_16_256(img, dimg, gy + t0, base + t0, w,
										     c, relu, part + (t0 - c0));
								continue;
							}
#elif defined(DTF_NEON)
							if (isa == 1) {
								pool_grad_2x2_16_128(img, dimg, gy + t0, base + t0, w,
										     c, relu, part + (t0 - c0));
								continue;
							}
#endif
							pool_grad_2x2_16(img, dimg, gy + t0, base + t0, w,
									 c, relu, part + (t0 - c0));
						}
					for (; t0 + 16 <= c0 + cw; t0 += 16)
						pool_grad_chunk(img, dimg, gy + t0, base + t0, w, c,
								kh, kw, relu, part + (t0 - c0), 16);
					if (t0 < c0 + cw)
						pool_grad_chunk(img, dimg, gy + t0, base + t0, w, c,
								kh, kw, relu, part + (t0 - c0),
								c0 + cw - t0);
					if (++in_run == RUN) {
						for (int t = 0; t < cw; t++) {
							acc[t] += part[t];
							part[t] = 0.0f;
						}
						in_run = 0;
					}
				}
			}
		}
		if (sum)
			for (int t = 0; t < cw; t++)
				sum[c0 + t] = (float)(acc[t] + part[t]);
	}
}

static inline DTF_BODY void pool_grad_body(const struct dtf_window_geom *g,
					   size_t nb, const float *restrict x,
					   const float *restrict dy, int relu,
					   float *restrict dx, float *sum)
{
	pool_grad_walk(g, nb, x, dy, relu, dx, sum, 0);
}

#if defined(DTF_T512)
/* The AVX-512 and AVX2 copies: intrinsics for 2x2 windows. */
DTF_T512 static void pool_grad_512(const struct dtf_window_geom *g, size_t nb,
				   const float *restrict x,
				   const float *restrict dy, int relu,
				   float *restrict dx, float *sum)
{
	pool_grad_walk(g, nb, x, dy, relu, dx, sum, 2);
}

DTF_T256 static void pool_grad_256(const struct dtf_window_geom *g, size_t nb,
				   const float *restrict x,
				   const float *restrict dy, int relu,
				   float *restrict dx, float *sum)
{
	pool_grad_walk(g, nb, x, dy, relu, dx, sum, 1);
}
#elif defined(DTF_NEON)
/* The NEON copy: intrinsics for 2x2 windows. */
static void pool_grad_128(const struct dtf_window_geom *g, size_t nb,
			  const float *restrict x, const float *restrict dy,
			  int relu, float *restrict dx, float *sum)
{
	pool_grad_walk(g, nb, x, dy, relu, dx, sum, 1);
}
#endif

static void pool_grad(const struct dtf_window_geom *g, size_t nb,
		      const float *restrict x, const float *restrict dy,
		      int relu, float *restrict dx, float *sum)
{
#if defined(DTF_T512)
	if (dtf_cpu_isa() == DTF_ISA_AVX512) {
		pool_grad_512(g, nb, x, dy, relu, dx, sum);
		return;
	}
	if (dtf_cpu_isa() == DTF_ISA_AVX2) {
		pool_grad_256(g, nb, x, dy, relu, dx, sum);
		return;
	}
#elif defined(DTF_NEON)
	if (dtf_cpu_isa() == DTF_ISA_NEON) {
		pool_grad_128(g, nb, x, dy, relu, dx, sum);
		return;
	}
#endif
	pool_grad_body(g, nb, x, dy, relu, dx, sum);
}

void dtf_fast_max_pool2d_grad_images(const struct dtf_window_geom *g,
				     size_t nb, const float *x,
				     const float *dy, int relu, float *dx,
				     float *sum)
{
	pool_grad(g, nb, x, dy, relu, dx, sum);
}

static void pool_grad_task(void *arg, int tid, int nt)
{
	const struct ew_job *j = arg;
	const struct dtf_window_geom *g = j->g;
	size_t lo, hi;
	dtf_pool_split((size_t)g->n, 1, tid, nt, &lo, &hi);
	const size_t in_img = (size_t)g->h * g->w * g->c;
	const size_t out_img = (size_t)g->oh * g->ow * g->c;
	float *sum = j->db ? j->ws + (size_t)tid * cpad(g->c) : NULL;
	if (sum)
		memset(sum, 0, (size_t)g->c * sizeof *sum);
	if (hi > lo)
		pool_grad(g, hi - lo, j->x + lo * in_img, j->dy + lo * out_img,
			  j->relu, j->out + lo * in_img, sum);
}

void dtf_fast_max_pool2d_grad(struct dtf_pool *p,
			      const struct dtf_window_geom *g, const float *x,
			      const float *dy, int relu, float *dx, float *db,
			      float *ws)
{
	struct ew_job j = {.g = g, .x = x, .dy = dy, .relu = relu, .out = dx,
			   .db = db, .ws = ws};
	dtf_pool_run(p, pool_grad_task, &j);
	if (db)
		reduce_partials(ws, dtf_pool_size(p), g->c, db);
}

/* ---- dropout -------------------------------------------------------------------- */

#if defined(DTF_T512)
/* The row in 16 (AVX-512) or 8 (AVX2) Philox blocks per iteration, one
 * source for both widths (dropout_isa.h); the reference's bits. */
#undef DTF_VW
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/dropout_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/dropout_isa.h"
#undef VLOAD
#undef VSTORE
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v16f))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(v16f))
#endif

struct drop_job {
	size_t rows, cols;
	float rate;
	struct dtf_philox_key key;
	const uint64_t *ids;
	uint32_t salt;
	const float *x;
	float *y;
};

static void dropout_task(void *arg, int tid, int nt)
{
	const struct drop_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->rows, 1, tid, nt, &lo, &hi);
	const float scale = 1.0f / (1.0f - j->rate);
	for (size_t r = lo; r < hi; r++) {
		const float *x = j->x + r * j->cols;
		float *y = j->y + r * j->cols;
#if defined(DTF_T512)
		if (dtf_cpu_isa() == DTF_ISA_AVX512) {
			dropout_row_512(j->cols, j->ids[r], j->rate, scale,
					j->key, j->salt, x, y);
			continue;
		}
		if (dtf_cpu_isa() == DTF_ISA_AVX2) {
			dropout_row_256(j->cols, j->ids[r], j->rate, scale,
					j->key, j->salt, x, y);
			continue;
		}
#endif
		dtf_cpu_dropout_span(0, j->cols, j->ids[r], j->rate, scale, j->key,
			       j->salt, x, y);
	}
}

void dtf_fast_dropout(struct dtf_pool *p, size_t rows, size_t cols,
		      float rate, struct dtf_philox_key key,
		      const uint64_t *example_id, uint32_t salt,
		      const float *x, float *y)
{
	if (rate <= 0.0f || rate >= 1.0f) {
		/* identity or all dropped: the reference's special cases */
		dtf_cpu_dropout(rows, cols, rate, key, example_id, salt, x, y);
		return;
	}
	struct drop_job j = {rows, cols, rate, key, example_id, salt, x, y};
	if (rows * cols < ((size_t)1 << 18))
		p = NULL; /* ~50 us on one thread: not worth a wake-up */
	dtf_pool_run(p, dropout_task, &j);
}

/* ---- add ------------------------------------------------------------------------ */

static inline DTF_BODY void add_vec_body(size_t n, const float *restrict x,
				     float *restrict y)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}
DTF_ISA_FN(add_vec, (size_t n, const float *restrict x, float *restrict y),
	   (n, x, y))

static void add_task(void *arg, int tid, int nt)
{
	const struct ew_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->rows, 16, tid, nt, &lo, &hi);
	if (hi > lo)
		add_vec(hi - lo, j->x + lo, j->out + lo);
}

void dtf_fast_add_inplace(struct dtf_pool *p, size_t n, const float *x,
			  float *y)
{
	struct ew_job j = {.rows = n, .x = x, .out = y};
	dtf_pool_run(p, add_task, &j);
}
