/*
 * test_fast.c - the fast CPU paths (ops/cpu/fast.h, ops/cpu/fast_exec.h)
 * against the reference kernels (ops/cpu/kernels.h), op by op, forward and
 * backward, on 1 and 3 threads, on every vector ISA the CPU has (each test
 * runs once per ISA of ops/cpu/isa.h: generic, AVX2, AVX-512, capped with
 * dtf_cpu_isa_set(); an ISA the CPU lacks is skipped with a note), and
 * whole graphs (fused plan vs reference
 * executor: loss, logits and every variable's gradient).  The reference
 * kernels' own gradient checks are in test_ops.c and test_graph.c; the
 * fused graph is checked against the reference executor rather than by
 * finite differences, which in float32 cannot resolve a CNN this size
 * (a +-eps step crosses relu and max-pool kinks for most first-layer
 * weights, in the reference executor as much as in this one).
 *
 * Tolerances: |fast - ref| <= 1e-4 + 1e-4 * |ref| for results of sums
 * (conv2d, matmul, bias gradients: the fast kernels add in a different
 * order and may use FMA; with inputs in [-1, 1] and up to ~1600 terms the
 * rounding differences are of order sqrt(K) u |sum| ~ 1e-6 to 1e-5 of
 * the values, while one wrong, missing or doubled term moves a result by
 * ~0.1: the tolerance sits between the two, and holds for every ISA since
 * each ISA's kernels round the same way up to the order of the terms);
 * bit equality between AVX2 and AVX-512 for every kernel written once
 * over the vector width (vec.h: the tile product, Winograd, the direct
 * conv tiles, the 2x2 pool gradient), which do the same float operations
 * per output in the same order on both; the tile product against double
 * sums with the FMA chain's own error bound (gemm_tile_matches_double_sums); exact equality for pooling, relu, dropout and
 * the Adam update, which do the same float operations on the same values.  Whole
 * graphs: 1e-4 relative on the gradient vector (the sums of several layers
 * compound).  Outputs are poisoned with NaN first, so an element the fast
 * path forgets to write fails.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "ops/cpu/exec.h"
#include "ops/cpu/fast_exec.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/gemm_tile.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/winograd.h"
#include "train/optimizer.h"

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

/* Values on a coarse grid, so pooling windows hold ties. */
static float *fgrid(size_t n)
{
	float *p = tu_fnan(n);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((int)(tu_next_u64() % 7) - 3) * 0.25f;
	return p;
}

static void close_enough(const char *what, const float *ref,
			 const float *got, size_t n, double tol)
{
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)ref[i] - got[i]);
		ck_assert_msg(!isnan(got[i]) && d <= tol + tol * fabs(ref[i]),
			      "%s[%zu]: reference %.8g, fast %.8g", what, i,
			      ref[i], got[i]);
	}
}

/* Norm-wise: every |got - ref| <= tol * (1 + rms of ref).  For kernels
 * whose rounding is not elementwise-small (Winograd's transforms add and
 * scale inputs before multiplying, so an output that cancels to near zero
 * keeps an error of the size of its terms). */
static void close_scaled(const char *what, const float *ref, const float *got,
			 size_t n, double tol)
{
	double ss = 0.0;
	for (size_t i = 0; i < n; i++)
		ss += (double)ref[i] * ref[i];
	double lim = tol * (1.0 + (n ? sqrt(ss / (double)n) : 0.0));
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)ref[i] - got[i]);
		ck_assert_msg(!isnan(got[i]) && d <= lim,
			      "%s[%zu]: reference %.8g, fast %.8g (limit %.3g)",
			      what, i, ref[i], got[i], lim);
	}
}

static void exactly(const char *what, const float *ref, const float *got,
		    size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(memcmp(&ref[i], &got[i], sizeof(float)) == 0,
			      "%s[%zu]: reference %.9g, fast %.9g", what, i,
			      ref[i], got[i]);
}

static struct dtf_window_geom geom(int n, int h, int w, int c, int kh,
				   int kw, int o, int s, int d,
				   enum dtf_padding pad)
{
	struct dtf_window_geom g = {.n = n, .h = h, .w = w, .c = c, .kh = kh,
				    .kw = kw, .o = o, .stride_h = s,
				    .stride_w = s, .dilation_h = d,
				    .dilation_w = d};
	ck_assert_int_eq(dtf_window_geom_finish(&g, pad), 0);
	return g;
}

static const int thread_counts[] = {1, 3};

/* Run the fast kernels on ISA `isa` (a loop test's _i): 1, or 0 with a
 * note where the CPU lacks it (the test then checks nothing). */
static int on_isa(int isa)
{
	if (isa > (int)dtf_cpu_isa_max()) {
		fprintf(stderr, "test_fast: no %s on this CPU: skipped\n",
			dtf_cpu_isa_name((enum dtf_cpu_isa)isa));
		return 0;
	}
	ck_assert_int_eq(dtf_cpu_isa_set((enum dtf_cpu_isa)isa), isa);
	return 1;
}
/* 1 when the test runs AVX2 on a CPU with AVX-512: then the AVX2 kernels
 * written over the vector width (vec.h) must also give the AVX-512
 * kernels' bits, since both do the same float operations per output in
 * the same order. */
static int avx2_beside_avx512(int isa)
{
	return isa == DTF_ISA_AVX2 && dtf_cpu_isa_max() == DTF_ISA_AVX512;
}

#define ON_ISA() \
	do {                       \
		if (!on_isa(_i))   \
			return;    \
	} while (0)

/* ---- thread pool --------------------------------------------------------- */

struct count_job {
	int hits[8];
	size_t covered[1000];
};

static void count_task(void *arg, int tid, int nt)
{
	struct count_job *j = arg;
	j->hits[tid]++;
	size_t lo, hi;
	dtf_pool_split(1000, 16, tid, nt, &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		j->covered[i]++;
}

START_TEST(pool_runs_every_thread_once)
{
	for (int nt = 1; nt <= 4; nt++) {
		struct dtf_pool *p;
		ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
		ck_assert_int_eq(dtf_pool_size(p), nt);
		for (int rep = 0; rep < 200; rep++) {
			struct count_job j;
			memset(&j, 0, sizeof j);
			dtf_pool_run(p, count_task, &j);
			for (int t = 0; t < 8; t++)
				ck_assert_int_eq(j.hits[t], t < nt);
			for (int i = 0; i < 1000; i++)
				ck_assert_uint_eq(j.covered[i], 1);
		}
		dtf_pool_free(p);
	}
	struct count_job j;
	memset(&j, 0, sizeof j);
	dtf_pool_run(NULL, count_task, &j);
	ck_assert_int_eq(j.hits[0], 1);
	dtf_pool_free(NULL);
	/* split boundaries are multiples of the alignment */
	size_t lo, hi;
	dtf_pool_split(100, 16, 1, 3, &lo, &hi);
	ck_assert_uint_eq(lo, 48);
	ck_assert_uint_eq(hi, 80);
	dtf_pool_split(100, 16, 2, 3, &lo, &hi);
	ck_assert_uint_eq(lo, 80);
	ck_assert_uint_eq(hi, 100);
}
END_TEST

/* ---- conv2d ---------------------------------------------------------------- */

/* Geometries: the direct kernel (few input channels, o multiple of 32),
 * im2col + sgemm and the register-tile direct kernels (AVX-512, AVX2), with same/valid padding,
 * stride 2, dilation 2. */
static struct dtf_window_geom conv_case(int i)
{
	switch (i) {
	case 0: return geom(5, 12, 12, 1, 5, 5, 32, 1, 1, DTF_PAD_SAME);
	case 1: return geom(3, 9, 7, 2, 3, 3, 64, 2, 1, DTF_PAD_SAME);
	case 2: return geom(4, 10, 10, 1, 3, 3, 32, 1, 2, DTF_PAD_VALID);
	case 3: return geom(5, 14, 14, 8, 5, 5, 16, 1, 1, DTF_PAD_SAME);
	case 4: return geom(3, 9, 11, 6, 3, 3, 20, 2, 1, DTF_PAD_SAME);
	case 5: return geom(2, 8, 8, 12, 1, 1, 8, 1, 1, DTF_PAD_VALID);
	/* the register-tile direct kernels (AVX-512, AVX2): o a multiple
	 * of 32 with a wide filter; c a multiple of 32 and stride 1 for the
	 * input gradient; row tiles of 14 pixels with tails, channel tiles
	 * of 12 with tails, stride 2, dilation 2, uneven SAME padding */
	case 6: return geom(7, 7, 7, 32, 5, 5, 64, 1, 1, DTF_PAD_SAME);
	case 7: return geom(3, 9, 11, 8, 3, 3, 32, 2, 1, DTF_PAD_SAME);
	case 8: return geom(2, 10, 12, 32, 3, 3, 32, 1, 2, DTF_PAD_VALID);
	case 9: return geom(2, 5, 31, 32, 3, 3, 64, 1, 1, DTF_PAD_SAME);
	case 10: return geom(2, 6, 7, 32, 4, 4, 32, 1, 1, DTF_PAD_SAME);
	/* Winograd (stride 1, 3x3/4x4/5x5, c and o multiples of 16, AVX-512
	 * or AVX2;
	 * cases 6, 9 and 10 as well): the Fashion-MNIST conv2, output tiles
	 * cut by the edge, o a multiple of 16 but not 32 (one-vector tiles),
	 * valid padding, uneven same padding, 48 channels (tiles of 6 rows
	 * with tails) */
	case 11: return geom(3, 14, 14, 32, 5, 5, 64, 1, 1, DTF_PAD_SAME);
	case 12: return geom(2, 9, 13, 16, 3, 3, 48, 1, 1, DTF_PAD_VALID);
	case 13: return geom(2, 7, 10, 48, 4, 4, 16, 1, 1, DTF_PAD_SAME);
	default: return geom(3, 11, 5, 16, 5, 5, 32, 1, 1, DTF_PAD_VALID);
	}
}
#define NCONV 15

/* Conv geometries the Winograd kernels take (on AVX-512 and AVX2):
 * compared norm-wise (close_scaled), the others elementwise. */
static void conv_check(const struct dtf_window_geom *g, const char *what,
		       const float *ref, const float *got, size_t n)
{
	if (dtf_wino_applies(g))
		close_scaled(what, ref, got, n, 1e-4);
	else
		close_enough(what, ref, got, n, 1e-4);
}

/* which = 0: y = conv2d + bias + relu; 1: dx; 2: dw; run on AVX-512 (with
 * its own workspace), then back to AVX2 */
static float *conv_on_avx512(struct dtf_pool *p, const struct dtf_window_geom *g,
			     int which, const float *x, const float *w,
			     const float *b, const float *dy, size_t n)
{
	dtf_cpu_isa_set(DTF_ISA_AVX512);
	float *ws = tu_fnan(dtf_fast_conv2d_workspace(g, dtf_pool_size(p)));
	float *out = tu_fnan(n);
	if (which == 0)
		dtf_fast_conv2d(p, g, x, w, b, 1, out, ws);
	else if (which == 1)
		dtf_fast_conv2d_backprop_input(p, g, dy, w, out, ws);
	else
		dtf_fast_conv2d_backprop_filter(p, g, x, dy, out, ws);
	free(ws);
	dtf_cpu_isa_set(DTF_ISA_AVX2);
	return out;
}

START_TEST(conv2d_forward_matches_reference)
{
	ON_ISA();
	int pooled = 0;
	for (int ci = 0; ci < NCONV; ci++) {
		struct dtf_window_geom g = conv_case(ci);
		size_t nx = (size_t)g.n * g.h * g.w * g.c;
		size_t nw = (size_t)g.kh * g.kw * g.c * g.o;
		size_t ny = (size_t)g.n * g.oh * g.ow * g.o;
		float *x = tu_frandom(nx, -1, 1), *w = tu_frandom(nw, -1, 1);
		float *b = tu_frandom((size_t)g.o, -0.5f, 0.5f);
		float *ref = tu_fnan(ny), *ws = tu_fnan(dtf_cpu_conv2d_workspace(&g));
		dtf_cpu_conv2d(&g, x, w, ref, ws);
		float *refb = tu_fnan(ny), *refr = tu_fnan(ny);
		dtf_cpu_bias_add(ny / (size_t)g.o, g.o, ref, b, refb);
		dtf_cpu_relu(ny, refb, refr);
		for (int ti = 0; ti < 2; ti++) {
			int nt = thread_counts[ti];
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
			float *fws = tu_fnan(dtf_fast_conv2d_workspace(&g, nt));
			float *y = tu_fnan(ny);
			dtf_fast_conv2d(p, &g, x, w, NULL, 0, y, fws);
			conv_check(&g, "conv2d", ref, y, ny);
			dtf_fast_conv2d(p, &g, x, w, b, 0, y, fws);
			conv_check(&g, "conv2d+bias", refb, y, ny);
			dtf_fast_conv2d(p, &g, x, w, b, 1, y, fws);
			conv_check(&g, "conv2d+bias+relu", refr, y, ny);
			if (avx2_beside_avx512(_i)) {
				float *y5 = conv_on_avx512(p, &g, 0, x, w, b, NULL, ny);
				exactly("conv2d+bias+relu, AVX2 against AVX-512", y5, y, ny);
				free(y5);
			}
			/* with the pooling fused: 2x2 tiles where they fit */
			if (g.oh % 2 == 0 && g.ow % 2 == 0) {
				struct dtf_window_geom pg = geom(g.n, g.oh, g.ow, g.o, 2, 2,
								 0, 2, 1, DTF_PAD_VALID);
				size_t nq = ny / 4;
				float *q = tu_falloc(nq), *rq = tu_falloc(nq);
				memset(y, 0xff, ny * sizeof *y);
				dtf_fast_conv2d_pool(p, &g, x, w, b, 1, y, &pg, q, fws);
				conv_check(&g, "conv2d+bias+relu, pooled", refr, y, ny);
				dtf_cpu_max_pool2d(&pg, y, rq);
				exactly("max_pool2d fused", rq, q, nq);
				free(q); free(rq);
				pooled++;
			}
			free(y);
			free(fws);
			dtf_pool_free(p);
		}
		free(x); free(w); free(b); free(ref); free(refb); free(refr);
		free(ws);
	}
	ck_assert_int_ge(pooled, 5); /* register-tile/direct and im2col geometries */
	/* the Winograd cases above do reach it (wherever it is built: a
	 * vector ISA, isa.h) */
	if (dtf_cpu_isa() > DTF_ISA_GENERIC) {
		int wino = 0;
		for (int ci = 0; ci < NCONV; ci++) {
			struct dtf_window_geom g = conv_case(ci);
			wino += dtf_wino_applies(&g);
		}
		ck_assert_int_eq(wino, 7);
	}
}
END_TEST

/* An output whose window holds only zeros is the bias exactly, as in a
 * direct sum, also where the Winograd kernels run (they would otherwise
 * leave rounding noise there, which a relu or a max pool turns into a
 * different gradient): half of every image zero, zero and random biases,
 * relu on and off, 3x3, 4x4 and 5x5 filters. */
START_TEST(conv2d_keeps_exact_zeros)
{
	ON_ISA();
	for (int k = 3; k <= 5; k++) {
		struct dtf_window_geom g = geom(3, 12, 13, 16, k, k, 32, 1, 1,
						DTF_PAD_SAME);
		size_t nx = (size_t)g.n * g.h * g.w * g.c;
		size_t nw = (size_t)g.kh * g.kw * g.c * g.o;
		size_t ny = (size_t)g.n * g.oh * g.ow * g.o;
		float *x = tu_frandom(nx, -1, 1), *w = tu_frandom(nw, -1, 1);
		for (size_t i = 0; i < nx; i++) /* columns 6.. are zero */
			if ((i / (size_t)g.c) % (size_t)g.w >= 6)
				x[i] = 0.0f;
		float *zb = tu_falloc((size_t)g.o), *rb = tu_frandom((size_t)g.o, -0.5f, 0.5f);
		memset(zb, 0, (size_t)g.o * sizeof *zb);
		float *ref = tu_fnan(ny), *rws = tu_fnan(dtf_cpu_conv2d_workspace(&g));
		float *y = tu_fnan(ny), *fws = tu_fnan(dtf_fast_conv2d_workspace(&g, 2));
		struct dtf_pool *p;
		ck_assert_int_eq(dtf_pool_new(2, &p), 0);
		dtf_cpu_conv2d(&g, x, w, ref, rws);
		int exact = 0;
		for (int bi = 0; bi < 2; bi++) {
			const float *b = bi ? rb : zb;
			for (int relu = 0; relu < 2; relu++) {
				dtf_fast_conv2d(p, &g, x, w, b, relu, y, fws);
				for (size_t i = 0; i < ny; i++) {
					int ox = (int)((i / (size_t)g.o) % (size_t)g.ow);
					/* window columns ox-pad .. ox-pad+k-1 all >= 6 */
					if (ox - g.pad_left < 6)
						continue;
					float want = ref[i] + b[i % (size_t)g.o];
					if (relu && want < 0.0f)
						want = 0.0f;
					ck_assert_msg(memcmp(&want, &y[i], sizeof want) == 0,
						      "k %d bias %d relu %d [%zu]: %.9g, want %.9g",
						      k, bi, relu, i, y[i], want);
					exact++;
				}
			}
		}
		ck_assert_int_gt(exact, 0);
		dtf_pool_free(p);
		free(x); free(w); free(zb); free(rb); free(ref); free(rws);
		free(y); free(fws);
	}
}
END_TEST

START_TEST(conv2d_backward_matches_reference)
{
	ON_ISA();
	for (int ci = 0; ci < NCONV; ci++) {
		struct dtf_window_geom g = conv_case(ci);
		size_t nx = (size_t)g.n * g.h * g.w * g.c;
		size_t nw = (size_t)g.kh * g.kw * g.c * g.o;
		size_t ny = (size_t)g.n * g.oh * g.ow * g.o;
		float *x = tu_frandom(nx, -1, 1), *w = tu_frandom(nw, -1, 1);
		float *dy = tu_frandom(ny, -1, 1);
		float *ws = tu_fnan(dtf_cpu_conv2d_workspace(&g));
		float *dx = tu_fnan(nx), *dw = tu_fnan(nw);
		dtf_cpu_conv2d_backprop_input(&g, dy, w, dx, ws);
		dtf_cpu_conv2d_backprop_filter(&g, x, dy, dw, ws);
		for (int ti = 0; ti < 2; ti++) {
			int nt = thread_counts[ti];
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
			float *fws = tu_fnan(dtf_fast_conv2d_workspace(&g, nt));
			float *fdx = tu_fnan(nx), *fdw = tu_fnan(nw);
			dtf_fast_conv2d_backprop_input(p, &g, dy, w, fdx, fws);
			conv_check(&g, "backprop_input", dx, fdx, nx);
			dtf_fast_conv2d_backprop_filter(p, &g, x, dy, fdw, fws);
			/* sums over n*oh*ow ~ 1000 products */
			conv_check(&g, "backprop_filter", dw, fdw, nw);
			if (avx2_beside_avx512(_i)) {
				float *dx5 = conv_on_avx512(p, &g, 1, x, w, NULL, dy, nx);
				float *dw5 = conv_on_avx512(p, &g, 2, x, w, NULL, dy, nw);
				exactly("backprop_input, AVX2 against AVX-512", dx5, fdx, nx);
				exactly("backprop_filter, AVX2 against AVX-512", dw5, fdw, nw);
				free(dx5);
				free(dw5);
			}
			free(fdx); free(fdw); free(fws);
			dtf_pool_free(p);
		}
		free(x); free(w); free(dy); free(ws); free(dx); free(dw);
	}
}
END_TEST

/* ---- dense ------------------------------------------------------------------- */

START_TEST(matmul_matches_reference)
{
	ON_ISA();
	/* the last six take the register-tile product (gemm_tile.h) on
	 * AVX-512 in every transposition it serves (on AVX2 in the two
	 * with one operand transposed): widths of
	 * 64, 32 and 16 columns, row tiles with tails, batch up to 256,
	 * (the tenth) slices of b copied to consecutive rows, K in three
	 * slices, and (the last) the forward of a GPT dense layer over 390
	 * rows of [batch x time] */
	const int shapes[][3] = {{5, 70, 33}, {70, 5, 33}, {40, 40, 1},
				 {17, 130, 64}, {1, 3, 2}, {64, 200, 96},
				 {32, 48, 20}, {16, 7, 16}, {256, 64, 256},
				 {50, 192, 300}, {390, 144, 128}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		for (int tr = 0; tr < 4; tr++) {
			int ta = tr & 1, tb = tr >> 1;
			float *a = tu_frandom((size_t)m * k, -1, 1);
			float *b = tu_frandom((size_t)k * n, -1, 1);
			float *ref = tu_fnan((size_t)m * n);
			dtf_cpu_matmul(m, n, k, a, ta, b, tb, ref);
			for (int ti = 0; ti < 2; ti++) {
				struct dtf_pool *p;
				ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
				float *c = tu_fnan((size_t)m * n);
				size_t nws = dtf_fast_matmul_workspace(m, n, k, ta, tb);
				float *ws = nws ? tu_fnan(nws) : NULL;
				dtf_fast_matmul(p, m, n, k, a, ta, b, tb, c, ws);
				close_enough("matmul", ref, c, (size_t)m * n, 1e-4);
				free(c);
				free(ws);
				dtf_pool_free(p);
			}
			free(a); free(b); free(ref);
		}
	}
}
END_TEST

/* batch_matmul's fast kernel (an sgemm per matrix, matrices split over
 * the threads) against the reference's plain double sums: every adjoint
 * pair, alpha, 1 and 3 threads, more matrices than threads and fewer. */
START_TEST(batch_matmul_matches_reference)
{
	ON_ISA();
	const int shapes[][4] = {{7, 9, 11, 13}, {2, 64, 64, 32}, {1, 3, 1, 5}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int nb = shapes[s][0], m = shapes[s][1], n = shapes[s][2],
		    k = shapes[s][3];
		for (int tr = 0; tr < 4; tr++) {
			int ta = tr & 1, tb = tr >> 1;
			float *a = tu_frandom((size_t)nb * m * k, -1, 1);
			float *b = tu_frandom((size_t)nb * k * n, -1, 1);
			float *ref = tu_fnan((size_t)nb * m * n);
			dtf_cpu_batch_matmul(nb, m, n, k, a, ta, b, tb, 0.125f, ref);
			for (int ti = 0; ti < 2; ti++) {
				struct dtf_pool *p;
				ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
				float *c = tu_fnan((size_t)nb * m * n);
				dtf_fast_batch_matmul(p, nb, m, n, k, a, ta, b, tb,
						      0.125f, c);
				close_enough("batch_matmul", ref, c,
					     (size_t)nb * m * n, 1e-5);
				free(c);
				dtf_pool_free(p);
			}
			free(a); free(b); free(ref);
		}
	}
}
END_TEST

/* The register-tile product itself (gemm_tile.h), on each ISA that has
 * it, in every mode (a or a^T through its strides, b's rows further apart
 * than the tile is wide, c added to, c stored transposed), widths of 16
 * to 128 columns, row tiles with tails, K = 0 and K over several slices
 * of k, against sums in double.  Tolerance from the arithmetic: each
 * output is a float FMA chain over k (with, for K > 128, a float add per
 * further slice, and one more where c is added to), so its error is at
 * most about (K + 2) u sum_k |a_ik b_kj| + u |c| with u = 2^-24 (Higham,
 * Accuracy and Stability of Numerical Algorithms, 3.1); a wrong, missing
 * or doubled term is of the size of one |a b| ~ 0.25, far above that.
 * On AVX2 beside AVX-512 the bits must be AVX-512's as well. */
START_TEST(gemm_tile_matches_double_sums)
{
	ON_ISA();
	if (!dtf_mm_tile_usable()) {
		fprintf(stderr, "test_fast: no register-tile product on %s\n",
			dtf_cpu_isa_name(dtf_cpu_isa()));
		return;
	}
	const int shapes[][3] = {{1, 1, 16}, {5, 7, 32}, {13, 130, 48},
				 {49, 300, 64}, {12, 0, 16}, {7, 600, 128},
				 {30, 64, 80}};
	const double u = 0x1p-24;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const int R = shapes[s][0], K = shapes[s][1], O = shapes[s][2];
		for (int mode = 0; mode < 16; mode++) {
			const int at = mode & 1, wide_b = mode >> 1 & 1;
			const int add = mode >> 2 & 1, ct = mode >> 3 & 1;
			const size_t ldb = (size_t)O + (wide_b ? 24 : 0);
			const size_t ldc = ct ? (size_t)R + 3 : (size_t)O + 5;
			const size_t ars = at ? 1 : (size_t)K, aks = at ? (size_t)R : 1;
			const size_t nc = ct ? (size_t)O * ldc : (size_t)R * ldc;
			float *a = tu_frandom((size_t)R * (K ? K : 1), -1, 1);
			float *b = tu_frandom((size_t)(K ? K : 1) * ldb, -1, 1);
			float *c0 = tu_frandom(nc, -1, 1), *c = tu_falloc(nc);
			memcpy(c, c0, nc * sizeof *c);
			dtf_mm_tile(R, K, O, a, ars, aks, b, ldb, c, ldc, add, ct);
			for (int i = 0; i < R; i++)
				for (int j = 0; j < O; j++) {
					size_t at_c = ct ? (size_t)j * ldc + i : (size_t)i * ldc + j;
					double sum = add ? c0[at_c] : 0.0, mag = 0.0;
					for (int k = 0; k < K; k++) {
						double t = (double)a[i * ars + k * aks] * b[(size_t)k * ldb + j];
						sum += t;
						mag += fabs(t);
					}
					double lim = (K + 2) * u * mag + u * fabs(c0[at_c]) + 1e-30;
					ck_assert_msg(fabs(c[at_c] - sum) <= lim,
						      "%dx%dx%d mode %d (%d, %d): %.9g, double %.9g (limit %.3g)",
						      R, K, O, mode, i, j, c[at_c], sum, lim);
				}
			/* what lies between c's rows is not written */
			if (!ct)
				for (int i = 0; i < R; i++)
					exactly("c's row padding", c0 + (size_t)i * ldc + O,
						c + (size_t)i * ldc + O, ldc - (size_t)O);
			if (avx2_beside_avx512(_i)) {
				float *c5 = tu_falloc(nc);
				memcpy(c5, c0, nc * sizeof *c5);
				dtf_cpu_isa_set(DTF_ISA_AVX512);
				dtf_mm_tile(R, K, O, a, ars, aks, b, ldb, c5, ldc, add, ct);
				dtf_cpu_isa_set(DTF_ISA_AVX2);
				exactly("tile product, AVX2 against AVX-512", c5, c, nc);
				free(c5);
			}
			free(a); free(b); free(c0); free(c);
		}
	}
}
END_TEST

START_TEST(bias_act_and_relu_grad_match_reference)
{
	ON_ISA();
	const int shapes[][2] = {{300, 64}, {7, 1030}, {100000, 3}, {1, 1}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		size_t rows = (size_t)shapes[s][0];
		int c = shapes[s][1];
		size_t n = rows * (size_t)c;
		float *x = tu_frandom(n, -1, 1), *b = tu_frandom((size_t)c, -1, 1);
		float *dy = tu_frandom(n, -1, 1);
		float *rb = tu_fnan(n), *rr = tu_fnan(n), *rg = tu_fnan(n);
		float *rdb = tu_fnan((size_t)c);
		dtf_cpu_bias_add(rows, c, x, b, rb);
		dtf_cpu_relu(n, rb, rr);
		dtf_cpu_relu_grad(n, dy, rr, rg);
		dtf_cpu_bias_add_grad(rows, c, rg, rdb);
		for (int ti = 0; ti < 2; ti++) {
			int nt = thread_counts[ti];
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
			float *y = tu_fnan(n), *db = tu_fnan((size_t)c);
			float *ws = tu_fnan(dtf_fast_bias_grad_workspace(c, nt));
			dtf_fast_bias_act(p, rows, c, x, b, 0, y);
			exactly("bias_add", rb, y, n);
			dtf_fast_bias_act(p, rows, c, x, b, 1, y);
			exactly("bias_add+relu", rr, y, n);
			memcpy(y, rb, n * sizeof *y);
			dtf_fast_bias_act(p, rows, c, y, NULL, 1, y); /* in place */
			exactly("relu in place", rr, y, n);
			dtf_fast_relu_grad_bias(p, rows, c, dy, rr, y, db, ws);
			exactly("relu_grad", rg, y, n);
			close_enough("bias_add_grad", rdb, db, (size_t)c, 1e-5);
			free(y); free(db); free(ws);
			dtf_pool_free(p);
		}
		free(x); free(b); free(dy); free(rb); free(rr); free(rg);
		free(rdb);
	}
}
END_TEST

/* ---- pooling ------------------------------------------------------------------ */

START_TEST(max_pool_matches_reference)
{
	ON_ISA();
	struct dtf_window_geom cases[] = {
		geom(3, 8, 6, 32, 2, 2, 0, 2, 1, DTF_PAD_VALID),  /* tiles */
		geom(2, 9, 9, 70, 3, 3, 0, 3, 1, DTF_PAD_VALID),  /* tiles, c > 64 */
		geom(2, 7, 7, 5, 3, 3, 0, 2, 1, DTF_PAD_SAME),    /* overlapping */
		geom(2, 7, 5, 4, 2, 2, 0, 2, 1, DTF_PAD_SAME),    /* padded */
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		struct dtf_window_geom g = cases[k];
		size_t nx = (size_t)g.n * g.h * g.w * g.c;
		size_t ny = (size_t)g.n * g.oh * g.ow * g.c;
		/* x as a relu output: a coarse grid clipped at 0, so tiles
		 * hold ties and all-zero windows */
		float *x = fgrid(nx), *dy = tu_frandom(ny, -1, 1);
		dtf_cpu_relu(nx, x, x);
		float *ry = tu_fnan(ny), *rpg = tu_fnan(nx), *rrg = tu_fnan(nx);
		float *rdb = tu_fnan((size_t)g.c);
		dtf_cpu_max_pool2d(&g, x, ry);
		dtf_cpu_max_pool2d_grad(&g, x, dy, rpg);
		dtf_cpu_relu_grad(nx, rpg, x, rrg);
		dtf_cpu_bias_add_grad(nx / (size_t)g.c, g.c, rrg, rdb);
		float *rdb0 = tu_fnan((size_t)g.c);
		dtf_cpu_bias_add_grad(nx / (size_t)g.c, g.c, rpg, rdb0);
		for (int ti = 0; ti < 2; ti++) {
			int nt = thread_counts[ti];
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
			float *y = tu_fnan(ny);
			dtf_fast_max_pool2d(p, &g, x, y);
			exactly("max_pool2d", ry, y, ny);
			free(y);
			if (dtf_fast_pool_tiles(&g)) {
				float *dx = tu_fnan(nx), *db = tu_fnan((size_t)g.c);
				float *ws = tu_fnan(dtf_fast_bias_grad_workspace(g.c, nt));
				dtf_fast_max_pool2d_grad(p, &g, x, dy, 0, dx, NULL, ws);
				exactly("max_pool2d_grad", rpg, dx, nx);
				dtf_fast_max_pool2d_grad(p, &g, x, dy, 0, dx, db, ws);
				close_enough("pool grad bias", rdb0, db, (size_t)g.c, 1e-5);
				dtf_fast_max_pool2d_grad(p, &g, x, dy, 1, dx, db, ws);
				exactly("max_pool2d_grad+relu_grad", rrg, dx, nx);
				close_enough("pool+relu grad bias", rdb, db, (size_t)g.c, 1e-5);
				free(dx); free(db); free(ws);
			}
			dtf_pool_free(p);
		}
		ck_assert_int_eq(dtf_fast_pool_tiles(&g), k < 2);
		free(x); free(dy); free(ry); free(rpg); free(rrg); free(rdb);
		free(rdb0);
	}
}
END_TEST

/* The backward of conv2d -> relu -> max pool, with the pool gradient
 * formed per image for the filter gradient only, against the reference
 * chain MaxPoolGrad -> ReluGrad -> BiasAddGrad, Conv2DBackpropFilter. */
START_TEST(pool_grad_conv_filter_matches_reference)
{
	ON_ISA();
	struct {
		struct dtf_window_geom cg, pg;
	} cases[] = {
		/* direct kernel (5x5x1 -> 32), 2x2 pooling */
		{geom(5, 12, 12, 1, 5, 5, 32, 1, 1, DTF_PAD_SAME),
		 geom(5, 12, 12, 32, 2, 2, 0, 2, 1, DTF_PAD_VALID)},
		/* im2col + sgemm (3x3x6 -> 20, stride 2), 3x3 pooling */
		{geom(4, 11, 11, 6, 3, 3, 20, 2, 1, DTF_PAD_SAME),
		 geom(4, 6, 6, 20, 3, 3, 0, 3, 1, DTF_PAD_VALID)},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		struct dtf_window_geom cg = cases[k].cg, pg = cases[k].pg;
		ck_assert(dtf_fast_pool_tiles(&pg));
		ck_assert(cg.oh == pg.h && cg.ow == pg.w && cg.o == pg.c);
		size_t ncx = (size_t)cg.n * cg.h * cg.w * cg.c;
		size_t nx = (size_t)pg.n * pg.h * pg.w * pg.c;
		size_t ny = (size_t)pg.n * pg.oh * pg.ow * pg.c;
		size_t nw = (size_t)cg.kh * cg.kw * cg.c * cg.o;
		float *cx = tu_frandom(ncx, -1, 1), *x = fgrid(nx);
		float *dy = tu_frandom(ny, -1, 1);
		dtf_cpu_relu(nx, x, x);
		float *rpg = tu_falloc(nx), *rrg = tu_falloc(nx), *rdb = tu_falloc((size_t)pg.c);
		float *rdw = tu_falloc(nw), *rws = tu_falloc(dtf_cpu_conv2d_workspace(&cg));
		for (int relu = 0; relu < 2; relu++) {
			dtf_cpu_max_pool2d_grad(&pg, x, dy, rpg);
			if (relu)
				dtf_cpu_relu_grad(nx, rpg, x, rrg);
			else
				memcpy(rrg, rpg, nx * sizeof *rrg);
			dtf_cpu_bias_add_grad(nx / (size_t)pg.c, pg.c, rrg, rdb);
			dtf_cpu_conv2d_backprop_filter(&cg, cx, rrg, rdw, rws);
			for (int ti = 0; ti < 2; ti++) {
				int nt = thread_counts[ti];
				struct dtf_pool *p;
				ck_assert_int_eq(dtf_pool_new(nt, &p), 0);
				float *ws = tu_falloc(dtf_fast_pool_grad_conv2d_filter_workspace(
					&pg, &cg, nt));
				float *dw = tu_falloc(nw), *db = tu_falloc((size_t)pg.c);
				dtf_fast_pool_grad_conv2d_filter(p, &pg, x, dy, relu, db,
								 &cg, cx, dw, ws);
				close_enough("filter gradient", rdw, dw, nw, 1e-4);
				close_enough("bias gradient", rdb, db, (size_t)pg.c, 1e-5);
				if (avx2_beside_avx512(_i)) {
					dtf_cpu_isa_set(DTF_ISA_AVX512);
					float *ws5 = tu_falloc(dtf_fast_pool_grad_conv2d_filter_workspace(
						&pg, &cg, nt));
					float *dw5 = tu_falloc(nw), *db5 = tu_falloc((size_t)pg.c);
					dtf_fast_pool_grad_conv2d_filter(p, &pg, x, dy, relu, db5,
									 &cg, cx, dw5, ws5);
					dtf_cpu_isa_set(DTF_ISA_AVX2);
					exactly("filter gradient, AVX2 against AVX-512", dw5, dw, nw);
					exactly("bias gradient, AVX2 against AVX-512", db5, db,
						(size_t)pg.c);
					free(ws5); free(dw5); free(db5);
				}
				/* without the bias gradient */
				float *dw2 = tu_falloc(nw);
				dtf_fast_pool_grad_conv2d_filter(p, &pg, x, dy, relu, NULL,
								 &cg, cx, dw2, ws);
				exactly("filter gradient, no bias", dw, dw2, nw);
				free(ws); free(dw); free(db); free(dw2);
				dtf_pool_free(p);
			}
		}
		free(cx); free(x); free(dy); free(rpg); free(rrg); free(rdb);
		free(rdw); free(rws);
	}
}
END_TEST

/* ---- dropout ------------------------------------------------------------------ */

START_TEST(dropout_is_bit_identical)
{
	ON_ISA();
	/* 1007 columns: full vector steps (64 elements on AVX-512, 32 on
	 * AVX2), then a tail with a partial Philox block; big enough to be
	 * split over threads */
	const size_t rows = 300, cols = 1007, n = rows * cols;
	const float rates[] = {0.4f, 0.0f, 1.0f};
	uint64_t *ids = malloc(rows * sizeof *ids);
	for (size_t r = 0; r < rows; r++)
		ids[r] = tu_next_u64(); /* both 32-bit halves in play */
	struct dtf_philox_key key = dtf_philox_make_key(7, DTF_RNG_DROPOUT);
	float *x = tu_frandom(n, -1, 1), *ref = tu_falloc(n), *got = tu_falloc(n);
	for (size_t ri = 0; ri < 3; ri++) {
		dtf_cpu_dropout(rows, cols, rates[ri], key, ids, 1234, x, ref);
		size_t kept = 0;
		for (size_t i = 0; i < n; i++)
			kept += ref[i] != 0.0f;
		if (ri == 0) /* the mask is not trivial */
			ck_assert(kept > n / 2 && kept < n * 7 / 10);
		for (int ti = 0; ti < 2; ti++) {
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
			memset(got, 0xff, n * sizeof *got);
			dtf_fast_dropout(p, rows, cols, rates[ri], key, ids, 1234,
					 x, got);
			exactly("dropout", ref, got, n);
			/* in place, as dropout_grad may run */
			memcpy(got, x, n * sizeof *got);
			dtf_fast_dropout(p, rows, cols, rates[ri], key, ids, 1234,
					 got, got);
			exactly("dropout in place", ref, got, n);
			/* a few rows: one thread, no pool */
			memset(got, 0xff, n * sizeof *got);
			dtf_fast_dropout(p, 3, cols, rates[ri], key, ids, 1234, x,
					 got);
			exactly("dropout 3 rows", ref, got, 3 * cols);
			dtf_pool_free(p);
		}
	}
	free(ids); free(x); free(ref); free(got);
}
END_TEST

/* ---- gelu ------------------------------------------------------------------------ */

/* The fast GELU and its gradient against the reference (tanh form in
 * double): within 1e-5 relative plus 1e-6 absolute (the vector exp is
 * within a few float ulp; where x (1 + tanh u) / 2 is tiny the reference's
 * value is below float's absolute resolution near 1 anyway); the erf form
 * is the reference itself.  On AVX2 beside AVX-512 the bits of AVX-512. */
START_TEST(gelu_matches_reference)
{
	ON_ISA();
	const size_t n = 100003; /* several chunks, a vector tail */
	float *x = tu_frandom(n, -12, 12), *dy = tu_frandom(n, -2, 2);
	const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f,
				 30.0f, -30.0f, 100.0f, -100.0f, 3.0e38f, -3.0e38f};
	memcpy(x, special, sizeof special);
	float *ref = tu_falloc(n), *got = tu_falloc(n), *wide = tu_falloc(n);
	for (int approximate = 1; approximate >= 0; approximate--) {
		for (int grad = 0; grad < 2; grad++) {
			if (grad)
				dtf_cpu_gelu_grad(n, approximate, dy, x, ref);
			else
				dtf_cpu_gelu(n, approximate, x, ref);
			for (int ti = 0; ti < 2; ti++) {
				struct dtf_pool *p;
				ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
				memset(got, 0xff, n * sizeof *got);
				if (grad)
					dtf_fast_gelu_grad(p, n, approximate, dy, x, got);
				else
					dtf_fast_gelu(p, n, approximate, x, got);
				for (size_t i = 0; i < n; i++) {
					double e = fabs((double)got[i] - ref[i]);
					double tol = 1e-5 * fabs(ref[i]) +
						     1e-6 * (grad ? fabs(dy[i]) : 1.0);
					ck_assert_msg(e <= tol,
						      "gelu%s (approximate %d) at x = %.9g: fast %.9g, reference %.9g",
						      grad ? "_grad" : "", approximate,
						      x[i], got[i], ref[i]);
				}
				/* in place: y over x, dx over dy */
				float *io = grad ? dy : x, *keep = tu_falloc(n);
				memcpy(keep, io, n * sizeof *keep);
				if (grad)
					dtf_fast_gelu_grad(p, n, approximate, io, x, io);
				else
					dtf_fast_gelu(p, n, approximate, io, io);
				exactly("gelu in place", got, io, n);
				memcpy(io, keep, n * sizeof *keep);
				free(keep);
				/* a short run: one thread, tail only */
				memset(got, 0xff, n * sizeof *got);
				if (grad)
					dtf_fast_gelu_grad(p, 13, approximate, dy, x, got);
				else
					dtf_fast_gelu(p, 13, approximate, x, got);
				for (size_t i = 0; i < 13; i++)
					ck_assert(fabs((double)got[i] - ref[i]) <=
						  1e-5 * fabs(ref[i]) + 1e-6 * (grad ? fabs(dy[i]) : 1.0));
				dtf_pool_free(p);
			}
			if (avx2_beside_avx512(_i) && approximate) {
				if (grad)
					dtf_fast_gelu_grad(NULL, n, 1, dy, x, got);
				else
					dtf_fast_gelu(NULL, n, 1, x, got);
				dtf_cpu_isa_set(DTF_ISA_AVX512);
				if (grad)
					dtf_fast_gelu_grad(NULL, n, 1, dy, x, wide);
				else
					dtf_fast_gelu(NULL, n, 1, x, wide);
				dtf_cpu_isa_set(DTF_ISA_AVX2);
				exactly("gelu AVX2 against AVX-512", wide, got, n);
			}
		}
	}
	free(x); free(dy); free(ref); free(got); free(wide);
}
END_TEST

/* ---- optimizer ----------------------------------------------------------------- */

START_TEST(adam_is_bit_identical)
{
	ON_ISA();
	size_t n = 1000 + 7; /* a vector tail */
	struct dtf_optimizer ref = {.kind = DTF_OPT_ADAM, .beta_1 = 0.9,
				    .beta_2 = 0.999, .epsilon = 1e-7, .n = n};
	struct dtf_optimizer fast = ref;
	ref.slots = calloc(2 * n, sizeof(float));
	fast.slots = calloc(2 * n, sizeof(float));
	float *p1 = tu_frandom(n, -1, 1), *p2 = malloc(n * sizeof(float));
	memcpy(p2, p1, n * sizeof(float));
	struct dtf_pool *pool;
	ck_assert_int_eq(dtf_pool_new(3, &pool), 0);
	dtf_optimizer_set_pool(&fast, pool);
	for (int step = 0; step < 5; step++) {
		float *g = tu_frandom(n, -1e-2f, 1e-2f);
		dtf_optimizer_apply(&ref, p1, g, 1e-3);
		dtf_optimizer_apply(&fast, p2, g, 1e-3);
		free(g);
	}
	exactly("adam params", p1, p2, n);
	exactly("adam slots", ref.slots, fast.slots, 2 * n);
	dtf_pool_free(pool);
	free(ref.slots); free(fast.slots); free(p1); free(p2);
}
END_TEST

START_TEST(nonfinite_finds_every_nan_and_inf)
{
	ON_ISA();
	const size_t n = 200003; /* split over threads, with a vector tail */
	float *x = tu_frandom(n, -1e30f, 1e30f);
	x[17] = 3.4e38f; /* the largest finites are fine */
	x[18] = -3.4e38f;
	const size_t where[] = {0, 5, 65535, 65536, 100000, n - 17, n - 1};
	const float bad[] = {NAN, INFINITY, -INFINITY};
	for (int ti = 0; ti < 2; ti++) {
		struct dtf_pool *p;
		ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
		ck_assert_int_eq(dtf_fast_nonfinite(p, n, x), 0);
		for (size_t w = 0; w < sizeof where / sizeof where[0]; w++)
			for (int b = 0; b < 3; b++) {
				float keep = x[where[w]];
				x[where[w]] = bad[b];
				ck_assert_msg(dtf_fast_nonfinite(p, n, x) == 1,
					      "%g at %zu missed", bad[b], where[w]);
				/* a short vector: one thread */
				if (where[w] < 1000)
					ck_assert_int_eq(dtf_fast_nonfinite(p, 1000, x), 1);
				x[where[w]] = keep;
			}
		ck_assert_int_eq(dtf_fast_nonfinite(p, 0, x), 0);
		dtf_pool_free(p);
	}
	free(x);
}
END_TEST

/* ---- whole graphs -------------------------------------------------------------- */

static const char *cnn_job =
	"name: small-cnn\n"
	"data:\n"
	"  train: {files: 'x-*.tfrecord'}\n"
	"  features:\n"
	"    image: {type: float, shape: [12, 12, 1]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 32, kernel: 5, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - {conv2d: {filters: 20, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 3, strides: 2, padding: same}}\n"
	"    - {conv2d: {filters: 8, kernel: 2, padding: valid}}\n"
	"    - relu\n"
	"    - flatten\n"
	"    - {dense: {units: 24, activation: relu}}\n"
	"    - {dropout: {rate: 0.3}}\n"
	"    - {dense: {units: 5, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 6}\n";

#define GB 6

static void model_build(struct tu_model *m, const char *text)
{
	struct dtf_job *job = NULL;
	int rc = dtf_job_load_string("small.yaml", text, NULL, 0, &job);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	tu_model_build(m, job, GB, DTF_PLANNER_LIVENESS, 500, 3, 2);
	tu_model_randomize(m, 0.2f, 3, 5);
}

/* The fused plan gives the reference's loss, logits and gradient vector,
 * and actually fuses (conv+bias+relu, pool+relu+bias grads, ...). */
START_TEST(fused_graph_matches_reference)
{
	ON_ISA();
	struct tu_model m;
	model_build(&m, cnn_job);
	size_t np = m.g.nparams;
	dtf_exec_forward(&m.g, &m.ctx);
	dtf_exec_backward(&m.g, &m.ctx);
	double ref_loss = m.ctx.loss_sum;
	const struct dtf_node *lg = &m.g.nodes[m.g.logits];
	size_t nl = (size_t)dtf_shape_numel(&lg->shape);
	float *ref_logits = malloc(nl * sizeof(float));
	memcpy(ref_logits, lg->data, nl * sizeof(float));
	float *ref_grads = malloc(np * sizeof(float));
	memcpy(ref_grads, m.grads, np * sizeof(float));
	for (int ti = 0; ti < 2; ti++) {
		struct dtf_pool *p;
		ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
		struct dtf_fast_plan fp;
		ck_assert_int_eq(dtf_fast_plan_init(&fp, &m.g, p), 0);
		/* conv1: bias_add, relu; conv2: bias_add, relu; pool1 grad
		 * absorbs relu_grad and bias grad; dense1: bias_add, relu;
		 * logits: bias_add; ... */
		ck_assert_int_ge(fp.fused, 10);
		/* conv1 pools each image as it is written (pool1 tiles; the
		 * second pooling does not), and conv1's filter gradient is
		 * formed by pool1's gradient, image by image */
		int pool_next = 0, filter_next = 0;
		for (int i = 0; i < m.g.nnodes; i++) {
			if (fp.next[i] < 0)
				continue;
			int a = m.g.nodes[i].op, b = m.g.nodes[fp.next[i]].op;
			pool_next += a == DTF_OP_CONV2D && b == DTF_OP_MAX_POOL2D;
			filter_next += a == DTF_OP_MAX_POOL2D_GRAD &&
				       b == DTF_OP_CONV2D_BACKPROP_FILTER;
		}
		ck_assert_int_eq(pool_next, 1);
		ck_assert_int_eq(filter_next, 1);
		for (size_t i = 0; i < np; i++)
			m.grads[i] = NAN;
		for (int i = 0; i < m.g.nnodes; i++)
			if (m.g.nodes[i].op != DTF_OP_VARIABLE &&
			    m.g.nodes[i].op != DTF_OP_INPUT && m.g.nodes[i].data &&
			    m.g.nodes[i].dtype == DTF_FLOAT32)
				memset(m.g.nodes[i].data, 0xff,
				       (size_t)dtf_shape_numel(&m.g.nodes[i].shape) * 4);
		m.ctx.fast = &fp;
		dtf_exec_forward(&m.g, &m.ctx);
		dtf_exec_backward(&m.g, &m.ctx);
		m.ctx.fast = NULL;
		ck_assert_msg(fabs(m.ctx.loss_sum - ref_loss) <= 1e-5 * fabs(ref_loss),
			      "loss %.9g vs %.9g", m.ctx.loss_sum, ref_loss);
		close_enough("logits", ref_logits, lg->data, nl, 1e-5);
		double worst = 0;
		for (int v = 0; v < m.g.nforward; v++) {
			const struct dtf_node *n = &m.g.nodes[v];
			if (n->op != DTF_OP_VARIABLE)
				continue;
			size_t o = n->a.var.offset;
			size_t cnt = (size_t)dtf_shape_numel(&n->shape);
			for (size_t i = o; i < o + cnt; i++) {
				double d = fabs((double)ref_grads[i] - m.grads[i]) /
					   fmax(fabs(ref_grads[i]), 1e-3);
				ck_assert_msg(!isnan(m.grads[i]),
					      "%s: gradient %zu not written",
					      n->name, i - o);
				worst = d > worst ? d : worst;
			}
		}
		ck_assert_msg(worst <= 1e-4, "gradient max relative difference %g", worst);
		dtf_fast_plan_deinit(&fp);
		dtf_pool_free(p);
	}
	free(ref_logits);
	free(ref_grads);
	tu_model_free(&m);
}
END_TEST

/* ---- causal self-attention ---------------------------------------------- */

/* The fast attention and its gradient against the reference on each ISA,
 * 1 and 3 threads: head sizes with and without vector tails (d = 3, 4,
 * 8, 24, 32, 64), t of 1, 4 (one block of four queries), below, at and
 * above whole vectors of keys, 64 and 130 (one block of ATTN_QB = 64
 * query rows in the gradient; two and a block of 2), more tasks than
 * threads and fewer.  |fast - ref| <= 1e-4 + 1e-4 |ref| (float sums of
 * up to ~260 terms and a polynomial exp against double sums; a missing or
 * doubled term moves a result by ~1e-2 or more); the two thread counts
 * give the same bits (each (example, head) is one thread's task). */
START_TEST(attention_matches_reference)
{
	ON_ISA();
	const int shapes[][4] = {{2, 5, 6, 2},   {1, 17, 48, 2}, {3, 16, 64, 2},
				 {2, 64, 128, 4}, {1, 33, 64, 1}, {1, 130, 128, 2},
				 {1, 1, 8, 2},    {2, 4, 8, 1}};
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		int b = shapes[si][0], t = shapes[si][1], c = shapes[si][2];
		int heads = shapes[si][3];
		size_t nq = (size_t)b * t * 3 * c, ny = (size_t)b * t * c;
		float *qkv = tu_frandom(nq, -1, 1), *dy = tu_frandom(ny, -1, 1);
		float *ref = tu_fnan(ny), *dref = tu_fnan(nq);
		dtf_cpu_causal_self_attention(b, t, c, heads, qkv, ref);
		dtf_cpu_causal_self_attention_grad(b, t, c, heads, qkv, dy, dref);
		float *first = NULL, *dfirst = NULL;
		for (int ti = 0; ti < 2; ti++) {
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
			float *ws = tu_fnan(dtf_fast_attention_workspace(
				t, c, heads, thread_counts[ti]));
			float *y = tu_fnan(ny), *dq = tu_fnan(nq);
			dtf_fast_causal_self_attention(p, b, t, c, heads, qkv, y, ws);
			dtf_fast_causal_self_attention_grad(p, b, t, c, heads, qkv,
							    dy, dq, ws);
			close_enough("attention", ref, y, ny, 1e-4);
			close_enough("attention grad", dref, dq, nq, 1e-4);
			if (!first) {
				first = y, dfirst = dq;
			} else {
				exactly("attention 3 threads", first, y, ny);
				exactly("attention grad 3 threads", dfirst, dq, nq);
				free(y), free(dq);
			}
			free(ws);
			dtf_pool_free(p);
		}
		free(first), free(dfirst);
		free(qkv), free(dy), free(ref), free(dref);
	}
}
END_TEST

/* The fused causal_self_attention equals the attention composed of graph
 * ops, as a GPT block writes it without the fused op: q, k, v sliced
 * from qkv, heads split by reshape and transpose [0, 2, 1, 3], scores
 * q k^T / sqrt(d) by batch_matmul (adj_y, alpha), causal softmax, p v,
 * heads merged back.  qkv = x w (6, 7, 36): 3 heads of 4 channels; a
 * dense head to (6, 7, 5) logits against int32 labels per position.
 * Both forms from one job text with the same variable names (so the same
 * initial values and parameter layout): the attention output, the loss
 * and every variable's gradient (w's is x^T dqkv) agree within
 * 1e-5 (relative to the largest magnitude of each) on the reference
 * executor and on the fast plan, 1 and 3 threads. */
static const char attn_head_fmt[] =
	"data:\n"
	"  train: {files: unused}\n"
	"  features:\n"
	"    x: {type: float, shape: [7, 6]}\n"
	"    y: {type: bytes, decode: uint8, dtype: int32, shape: [7]}\n"
	"model:\n"
	"  graph:\n"
	"    w: {variable: {shape: [6, 36]}}\n"
	"    qkv: {matmul: {inputs: [x, w]}}\n"
	"%s"
	"    wo: {variable: {shape: [12, 5]}}\n"
	"    logits: {matmul: {inputs: [attn, wo]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: y}}\n"
	"train: {batch_size: 6}\n";
static const char attn_fused[] =
	"    attn: {causal_self_attention: {inputs: [qkv], heads: 3}}\n";
static const char attn_composed[] =
	"    q: {slice: {inputs: [qkv], axis: 2, begin: 0, size: 12}}\n"
	"    k: {slice: {inputs: [qkv], axis: 2, begin: 12, size: 12}}\n"
	"    v: {slice: {inputs: [qkv], axis: 2, begin: 24, size: 12}}\n"
	"    qh: {reshape: {inputs: [q], shape: [7, 3, 4]}}\n"
	"    kh: {reshape: {inputs: [k], shape: [7, 3, 4]}}\n"
	"    vh: {reshape: {inputs: [v], shape: [7, 3, 4]}}\n"
	"    qt: {transpose: {inputs: [qh], perm: [0, 2, 1, 3]}}\n"
	"    kt: {transpose: {inputs: [kh], perm: [0, 2, 1, 3]}}\n"
	"    vt: {transpose: {inputs: [vh], perm: [0, 2, 1, 3]}}\n"
	"    scores: {batch_matmul: {inputs: [qt, kt], adj_y: true, alpha: 0.5}}\n"
	"    probs: {softmax: {inputs: [scores], causal: true}}\n"
	"    o: {batch_matmul: {inputs: [probs, vt]}}\n"
	"    ot: {transpose: {inputs: [o], perm: [0, 2, 1, 3]}}\n"
	"    attn: {reshape: {inputs: [ot], shape: [7, 12]}}\n";

/* the model of attn_head_fmt with `attention`, inputs and labels filled */
static void attn_model(struct tu_model *m, const char *attention)
{
	char text[4096];
	snprintf(text, sizeof text, attn_head_fmt, attention);
	model_build(m, text);
	struct dtf_node *x = &m->g.nodes[dtf_graph_find(&m->g, "x")];
	struct dtf_node *y = &m->g.nodes[dtf_graph_find(&m->g, "y")];
	for (int64_t i = 0; i < dtf_shape_numel(&x->shape); i++)
		((float *)x->data)[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
	for (int64_t i = 0; i < dtf_shape_numel(&y->shape); i++)
		((int32_t *)y->data)[i] = (int32_t)((i * 3 + 1) % 5);
}

/* |a - b| <= tol * max |b| over n values (a: the fast or fused result, b:
 * what it must match) */
static void close_to_max(const char *what, const float *a, const float *b,
			 size_t n, double tol)
{
	/* a float maximum: GCC 12's aarch64 vectoriser fails (an internal
	 * compiler error) on a double fmax reduction over floats */
	float mx = 0;
	for (size_t i = 0; i < n; i++)
		mx = fmaxf(mx, fabsf(b[i]));
	ck_assert(mx > 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabs((double)a[i] - b[i]) <= tol * mx,
			      "%s[%zu]: %.9g, expected %.9g (max %.3g)", what, i,
			      a[i], b[i], mx);
}

/* forward and backward of m on the reference (nthreads 0) or the fast
 * plan */
static void attn_run(struct tu_model *m, int nthreads)
{
	struct dtf_pool *p = NULL;
	struct dtf_fast_plan fp;
	if (nthreads) {
		ck_assert_int_eq(dtf_pool_new(nthreads, &p), 0);
		ck_assert_int_eq(dtf_fast_plan_init(&fp, &m->g, p), 0);
		m->ctx.fast = &fp;
	}
	for (size_t i = 0; i < m->g.nparams; i++)
		m->grads[i] = NAN;
	dtf_exec_forward(&m->g, &m->ctx);
	dtf_exec_backward(&m->g, &m->ctx);
	if (nthreads) {
		m->ctx.fast = NULL;
		dtf_fast_plan_deinit(&fp);
		dtf_pool_free(p);
	}
}

START_TEST(attention_equals_composition)
{
	ON_ISA();
	struct tu_model f, c;
	attn_model(&f, attn_fused);
	attn_model(&c, attn_composed);
	ck_assert_int_eq(f.g.nodes[dtf_graph_find(&f.g, "attn")].op,
			 DTF_OP_CAUSAL_SELF_ATTENTION);
	ck_assert_uint_eq(f.g.nparams, c.g.nparams);
	ck_assert(memcmp(f.params, c.params, f.g.nparams * sizeof(float)) == 0);
	const struct dtf_node *fa = &f.g.nodes[dtf_graph_find(&f.g, "attn")];
	const struct dtf_node *ca = &c.g.nodes[dtf_graph_find(&c.g, "attn")];
	size_t na = (size_t)dtf_shape_numel(&fa->shape);
	ck_assert_uint_eq(na, (size_t)dtf_shape_numel(&ca->shape));
	for (int nt = 0; nt <= 3; nt += 3) {
		attn_run(&f, nt);
		attn_run(&c, nt);
		close_to_max("attention output", fa->data, ca->data, na, 1e-5);
		ck_assert_msg(fabs(f.ctx.loss_sum - c.ctx.loss_sum) <=
				      1e-5 * fabs(c.ctx.loss_sum),
			      "loss %.9g vs %.9g", f.ctx.loss_sum, c.ctx.loss_sum);
		for (int i = 0; i < f.g.nforward; i++) {
			const struct dtf_node *n = &f.g.nodes[i];
			if (n->op != DTF_OP_VARIABLE)
				continue;
			size_t o = n->a.var.offset, cnt = (size_t)dtf_shape_numel(&n->shape);
			close_to_max(n->name, f.grads + o, c.grads + o, cnt, 1e-5);
		}
	}
	tu_model_free(&f);
	tu_model_free(&c);
}
END_TEST

/* ---- layer_norm ----------------------------------------------------------------- */

/* The fast layer norm and its gradients against the reference (double
 * sums) on rows of 128 (whole vectors on every ISA), 40 (whole AVX2 and
 * NEON vectors, not AVX-512's: the reference there) and 13 channels, rows
 * offset from zero so that the variance is a small difference: within
 * 1e-5 of the largest value (float sums of up to 300 rows); in place (y
 * over x, dx over dy) the same bits. */
START_TEST(layer_norm_matches_reference)
{
	ON_ISA();
	const size_t rows = 300;
	const int cs[] = {128, 40, 13};
	for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
		int c = cs[ci];
		size_t n = rows * (size_t)c;
		float *x = tu_frandom(n, -1, 1), *dy = tu_frandom(n, -1, 1);
		float *gamma = tu_frandom((size_t)c, 0.5f, 1.5f);
		float *beta = tu_frandom((size_t)c, -0.5f, 0.5f);
		for (size_t r = 0; r < rows; r++)
			for (int j = 0; j < c; j++)
				x[r * (size_t)c + j] += (float)(r % 7) - 3.0f;
		float *ref = tu_falloc(n), *got = tu_falloc(n), *io = tu_falloc(n);
		float rg[128], gg[128];
		const float eps = 1e-5f;
		for (int ti = 0; ti < 2; ti++) {
			struct dtf_pool *p;
			ck_assert_int_eq(dtf_pool_new(thread_counts[ti], &p), 0);
			float *ws = tu_falloc(dtf_fast_layer_norm_workspace(c, thread_counts[ti]));

			dtf_cpu_layer_norm(rows, c, x, gamma, beta, eps, ref);
			dtf_fast_layer_norm(p, rows, c, x, gamma, beta, eps, got);
			close_to_max("layer_norm", got, ref, n, 1e-5);
			memcpy(io, x, n * sizeof *io);
			dtf_fast_layer_norm(p, rows, c, io, gamma, beta, eps, io);
			exactly("layer_norm in place", got, io, n);

			dtf_cpu_layer_norm_grad_input(rows, c, x, gamma, dy, eps, ref);
			dtf_fast_layer_norm_grad_input(p, rows, c, x, gamma, dy, eps, got);
			close_to_max("layer_norm_grad_input", got, ref, n, 1e-5);
			memcpy(io, dy, n * sizeof *io);
			dtf_fast_layer_norm_grad_input(p, rows, c, x, gamma, io, eps, io);
			exactly("layer_norm_grad_input in place", got, io, n);

			dtf_cpu_layer_norm_grad_gamma(rows, c, x, dy, eps, rg);
			dtf_fast_layer_norm_grad_gamma(p, rows, c, x, dy, eps, gg, ws);
			close_to_max("layer_norm_grad_gamma", gg, rg, (size_t)c, 1e-5);
			/* a few rows: one thread */
			dtf_cpu_layer_norm_grad_gamma(3, c, x, dy, eps, rg);
			dtf_fast_layer_norm_grad_gamma(p, 3, c, x, dy, eps, gg, ws);
			close_to_max("layer_norm_grad_gamma 3 rows", gg, rg, (size_t)c, 1e-5);
			free(ws);
			dtf_pool_free(p);
		}
		free(x); free(dy); free(gamma); free(beta); free(ref); free(got); free(io);
	}
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

static Suite *fast_suite(void)
{
	Suite *s = suite_create("fast");
	struct {
		const char *name;
		const TTest *tests[3];
	} cases[] = {
		{"pool", {pool_runs_every_thread_once}},
		{"conv2d", {conv2d_forward_matches_reference,
			    conv2d_backward_matches_reference,
			    conv2d_keeps_exact_zeros}},
		{"dense", {matmul_matches_reference,
			   bias_act_and_relu_grad_match_reference,
			   gemm_tile_matches_double_sums}},
		{"max_pool2d", {max_pool_matches_reference,
				pool_grad_conv_filter_matches_reference}},
		{"adam", {adam_is_bit_identical, nonfinite_finds_every_nan_and_inf}},
		{"dropout", {dropout_is_bit_identical}},
		{"gelu", {gelu_matches_reference}},
		{"layer_norm", {layer_norm_matches_reference}},
		{"attention", {attention_matches_reference,
			       attention_equals_composition}},
		{"graph", {fused_graph_matches_reference}},
		{"batch_matmul", {batch_matmul_matches_reference}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		TCase *tc = tcase_create(cases[i].name);
		tcase_set_timeout(tc, 300);
		for (size_t j = 0; j < 3 && cases[i].tests[j]; j++) {
			if (cases[i].tests[j] == pool_runs_every_thread_once)
				tcase_add_test(tc, cases[i].tests[j]);
			else /* _i: the ISA */
				tcase_add_loop_test(tc, cases[i].tests[j],
						    DTF_ISA_GENERIC,
						    DTF_ISA_AVX512 + 1);
		}
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	tu_rng_seed(0x5eed);
	return tu_run_suite(fast_suite(), 1);
}
