/*
 * kernels.c - per-kernel microbenchmark of the Fashion-MNIST CNN's ops
 * (graphs/fashion_mnist_cnn.yaml) and the sgemm ceiling.
 *
 *   bench_kernels sgemm [-t THREADS] [-r REPEATS] [-s SIZE]
 *       cblas_sgemm SIZE x SIZE x SIZE (default 1024) on THREADS OpenBLAS
 *       threads (default 1); prints "sgemm T threads: X GFLOP/s", the best
 *       of REPEATS (default 20) calls.  The ceiling tests/bench/
 *       cpu_vs_pytorch.sh divides dtf-train's achieved rate by.
 *   bench_kernels fma [-r REPEATS]
 *       the core's peak: independent vector FMA chains in registers, no
 *       memory, at the ISA the fast kernels use (DTF_CPU_ISA caps it);
 *       prints "fma peak 1 thread (ISA): X GFLOP/s", the best of REPEATS
 *       (default 5) runs of 0.1 s or so.  The hardware bound the
 *       benchmarks set the achieved rates beside (times the cores).
 *   bench_kernels ops [-t THREADS] [-r REPEATS] [-b BATCH]
 *       every op of one training step at BATCH (default 64), reference
 *       kernels (OpenBLAS on THREADS threads) beside the fast kernels (a
 *       pool of THREADS threads, OpenBLAS single-threaded in each): the
 *       best of REPEATS (default 10) runs of each, in milliseconds; then
 *       the fused kernels of dtf-train's plan against the fast kernels
 *       they replace.  DTF_CPU_ISA=avx2 (or generic) runs the fast
 *       kernels an AVX2-only (or pre-AVX2) CPU runs.
 *
 * Taking the minimum over repeats makes the numbers usable on a busy
 * machine; they are still single-process figures, not training speed.
 * GFLOP/s count the direct convolution's multiply-adds; the Winograd
 * kernels (conv2 on AVX-512 CPUs) do fewer, so theirs are effective rates.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *buf(size_t n, unsigned seed)
{
	float *p = dtf_alloc_aligned(n * sizeof(float));
	if (!p) {
		fprintf(stderr, "bench_kernels: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
	}
	return p;
}

#define BEST(var, reps, stmt)                                  \
	do {                                                   \
		var = 1e30;                                    \
		for (int r_ = 0; r_ < (reps); r_++) {          \
			double t0_ = now();                    \
			stmt;                                  \
			double t_ = now() - t0_;               \
			if (t_ < var)                          \
				var = t_;                      \
		}                                              \
	} while (0)

static int run_sgemm(int threads, int reps, int size)
{
	openblas_set_num_threads(threads);
	size_t n = (size_t)size * size;
	float *a = buf(n, 1), *b = buf(n, 2), *c = buf(n, 3);
	double best;
	BEST(best, reps,
	     cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size,
			 size, 1.0f, a, size, b, size, 0.0f, c, size));
	printf("sgemm %d threads: %.1f GFLOP/s (%dx%dx%d, best of %d, OpenBLAS %s)\n",
	       threads, 2.0 * size * size * (double)size / best / 1e9, size,
	       size, size, reps, openblas_get_corename());
	dtf_free(a);
	dtf_free(b);
	dtf_free(c);
	return 0;
}

/* ---- FMA peak: acc = acc * x + y on 12 independent vectors ----------------- */

/* x just below 1 and y small keep every chain finite and away from
 * denormals for any number of steps. */
#define FMA_X 0.9999999f
#define FMA_Y 1e-7f

/* static float name(long iters): 12 chains of vector type VT (SET1
 * broadcasts a float, FMA(a, x, y) = a x + y, ADD adds), summed and
 * reduced to one float by REDUCE.  The chain loops are unrolled whole,
 * so the 12 accumulators live in registers.  12 chains: two FMA pipes of
 * latency 4 (Skylake-SP, Zen 3, Zen 4's double pumping) need at least 8
 * in flight. */
#define FMA_CHAINS(attr, name, VT, SET1, FMA, ADD, REDUCE)                   \
	attr static float name(long iters)                                     \
	{                                                                      \
		VT x = SET1(FMA_X), y = SET1(FMA_Y), a[12];                    \
		_Pragma("GCC unroll 12") for (int c = 0; c < 12; c++)          \
			a[c] = SET1(1.0f + (float)c);                          \
		for (long it = 0; it < iters; it++) {                          \
			_Pragma("GCC unroll 12") for (int c = 0; c < 12; c++)  \
				a[c] = FMA(a[c], x, y);                        \
		}                                                              \
		VT s = a[0];                                                   \
		_Pragma("GCC unroll 12") for (int c = 1; c < 12; c++)          \
			s = ADD(s, a[c]);                                      \
		return REDUCE(s);                                              \
	}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v)
{
	float f[8];
	_mm256_storeu_ps(f, v);
	return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
FMA_CHAINS(__attribute__((target("avx512f"))), fma_512, __m512,
	   _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_reduce_add_ps)
FMA_CHAINS(__attribute__((target("avx2,fma"))), fma_256, __m256,
	   _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, hsum256)
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define NEON_FMA(a, x, y) vfmaq_f32(y, a, x)
FMA_CHAINS(, fma_neon, float32x4_t, vdupq_n_f32, NEON_FMA, vaddq_f32,
	   vaddvq_f32)
#endif

/* scalar chains: what the baseline build issues without vectors */
#define SCALAR_SET1(v) (v)
#define SCALAR_FMA(a, x, y) ((a) * (x) + (y))
#define SCALAR_ADD(a, b) ((a) + (b))
FMA_CHAINS(, fma_scalar, float, SCALAR_SET1, SCALAR_FMA, SCALAR_ADD,
	   SCALAR_SET1)

/* one run of `iters` steps of the ISA's chains; its FLOPs in *flop */
static float fma_run(enum dtf_cpu_isa isa, long iters, double *flop)
{
	(void)isa;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
	if (isa == DTF_ISA_AVX512) {
		*flop = 2.0 * 12 * 16 * (double)iters;
		return fma_512(iters);
	}
	if (isa == DTF_ISA_AVX2) {
		*flop = 2.0 * 12 * 8 * (double)iters;
		return fma_256(iters);
	}
#elif defined(__aarch64__) && defined(__ARM_NEON)
	if (isa == DTF_ISA_NEON) {
		*flop = 2.0 * 12 * 4 * (double)iters;
		return fma_neon(iters);
	}
#endif
	*flop = 2.0 * 12 * (double)iters;
	return fma_scalar(iters);
}

static int run_fma(int reps)
{
	enum dtf_cpu_isa isa = dtf_cpu_isa();
	double flop = 0, best = 1e30;
	long iters = 1 << 20;
	float sink = 0;
	/* size a run to about 0.1 s */
	for (;;) {
		double t0 = now();
		sink += fma_run(isa, iters, &flop);
		double t = now() - t0;
		if (t > 0.05 || iters > (1L << 34))
			break;
		iters *= 2;
	}
	BEST(best, reps, sink += fma_run(isa, iters, &flop));
	printf("fma peak 1 thread (%s): %.1f GFLOP/s (12 chains, best of %d; checksum %g)\n",
	       dtf_cpu_isa_name(isa), flop / best / 1e9, reps, (double)sink);
	return 0;
}

static struct dtf_window_geom geom(int n, int h, int c, int k, int o,
				   int stride)
{
	struct dtf_window_geom g = {.n = n, .h = h, .w = h, .c = c, .kh = k,
				    .kw = k, .o = o, .stride_h = stride,
				    .stride_w = stride, .dilation_h = 1,
				    .dilation_w = 1};
	dtf_window_geom_finish(&g, stride == 1 ? DTF_PAD_SAME : DTF_PAD_VALID);
	return g;
}

static double tot_ref, tot_fast;

static void row(const char *op, double ref, double fast, double flop)
{
	tot_ref += ref;
	tot_fast += fast;
	printf("%-34s %9.3f %9.3f %7.2fx", op, ref * 1e3, fast * 1e3,
	       ref / fast);
	if (flop > 0)
		printf("  %6.1f -> %6.1f GFLOP/s", flop / ref / 1e9,
		       flop / fast / 1e9);
	printf("\n");
}

static int run_ops(int threads, int reps, int B)
{
	struct dtf_pool *pool = NULL;
	if (dtf_pool_new(threads, &pool) < 0) {
		fprintf(stderr, "bench_kernels: cannot start threads\n");
		return 1;
	}
	struct dtf_window_geom c1 = geom(B, 28, 1, 5, 32, 1);
	struct dtf_window_geom p1 = geom(B, 28, 32, 2, 0, 2);
	struct dtf_window_geom c2 = geom(B, 14, 32, 5, 64, 1);
	struct dtf_window_geom p2 = geom(B, 14, 64, 2, 0, 2);
	size_t ws_ref = dtf_cpu_conv2d_workspace(&c1);
	if (dtf_cpu_conv2d_workspace(&c2) > ws_ref)
		ws_ref = dtf_cpu_conv2d_workspace(&c2);
	size_t ws_fast = dtf_fast_conv2d_workspace(&c2, threads);
	if (dtf_fast_conv2d_workspace(&c1, threads) > ws_fast)
		ws_fast = dtf_fast_conv2d_workspace(&c1, threads);
	ws_fast += dtf_fast_bias_grad_workspace(1024, threads);
	if (dtf_fast_matmul_workspace(B, 3136, 1024, 0, 1) > ws_fast)
		ws_fast = dtf_fast_matmul_workspace(B, 3136, 1024, 0, 1);
	float *wsr = buf(ws_ref, 9), *wsf = buf(ws_fast, 9);
	size_t a0 = (size_t)B * 784, a1 = a0 * 32, a1p = a1 / 4;
	size_t a2 = a1p * 2, a2p = a2 / 4;
	float *x = buf(a0, 1), *w1 = buf(800, 2), *b1 = buf(32, 3);
	float *y1 = buf(a1, 4), *y1f = buf(a1, 5), *q1 = buf(a1p, 6);
	float *w2 = buf(51200, 7), *b2 = buf(64, 8), *y2 = buf(a2, 10);
	float *y2f = buf(a2, 11), *q2 = buf(a2p, 12);
	float *w3 = buf((size_t)3136 * 1024, 13), *b3 = buf(1024, 14);
	float *h = buf((size_t)B * 1024, 15), *hf = buf((size_t)B * 1024, 16);
	float *dh = buf((size_t)B * 1024, 17), *dq2 = buf(a2p, 18);
	float *dw3 = buf((size_t)3136 * 1024, 19), *db = buf(1024, 20);
	float *dy2 = buf(a2, 21), *dq1 = buf(a1p, 22), *dy1 = buf(a1, 23);
	float *dw2 = buf(51200, 24), *dw1 = buf(800, 25), *tmp = buf(a1, 26);
	size_t np = 3274634;
	float *pp = buf(np, 27), *gg = buf(np, 28), *mm = buf(np, 29);
	float *vv = buf(np, 30);
	for (size_t i = 0; i < np; i++)
		vv[i] = vv[i] * vv[i];
	double r, f;
	int T = threads;
	printf("batch %d, %d thread(s); best of %d; milliseconds; fast kernels %s (DTF_CPU_ISA), OpenBLAS %s\n",
	       B, T, reps, dtf_cpu_isa_name(dtf_cpu_isa()), openblas_get_corename());
	printf("%-34s %9s %9s %8s\n", "op", "reference", "fast", "speedup");

#define REF(stmt) do { openblas_set_num_threads(T); BEST(r, reps, stmt); } while (0)
#define FAST(stmt) do { openblas_set_num_threads(1); BEST(f, reps, stmt); } while (0)
	REF((dtf_cpu_conv2d(&c1, x, w1, tmp, wsr),
	     dtf_cpu_bias_add(a1 / 32, 32, tmp, b1, tmp), dtf_cpu_relu(a1, tmp, y1)));
	FAST(dtf_fast_conv2d(pool, &c1, x, w1, b1, 1, y1f, wsf));
	row("conv1 5x5x1x32 + bias + relu", r, f, 2.0 * B * 784 * 800);
	REF(dtf_cpu_max_pool2d(&p1, y1, q1));
	FAST(dtf_fast_max_pool2d(pool, &p1, y1, q1));
	row("max_pool1", r, f, 0);
	REF((dtf_cpu_conv2d(&c2, q1, w2, tmp, wsr),
	     dtf_cpu_bias_add(a2 / 64, 64, tmp, b2, tmp), dtf_cpu_relu(a2, tmp, y2)));
	FAST(dtf_fast_conv2d(pool, &c2, q1, w2, b2, 1, y2f, wsf));
	row("conv2 5x5x32x64 + bias + relu", r, f, 2.0 * B * 196 * 800 * 64);
	REF(dtf_cpu_max_pool2d(&p2, y2, q2));
	FAST(dtf_fast_max_pool2d(pool, &p2, y2, q2));
	row("max_pool2", r, f, 0);
	REF((dtf_cpu_matmul(B, 1024, 3136, q2, 0, w3, 0, tmp),
	     dtf_cpu_bias_add((size_t)B, 1024, tmp, b3, tmp), dtf_cpu_relu((size_t)B * 1024, tmp, h)));
	FAST((dtf_fast_matmul(pool, B, 1024, 3136, q2, 0, w3, 0, hf, wsf),
	      dtf_fast_bias_act(pool, (size_t)B, 1024, hf, b3, 1, hf)));
	row("dense1 3136x1024 + bias + relu", r, f, 2.0 * B * 3136 * 1024);
	REF((dtf_cpu_relu_grad((size_t)B * 1024, dh, h, tmp),
	     dtf_cpu_bias_add_grad((size_t)B, 1024, tmp, db)));
	FAST(dtf_fast_relu_grad_bias(pool, (size_t)B, 1024, dh, h, tmp, db, wsf));
	row("dense1 relu_grad + bias_grad", r, f, 0);
	REF(dtf_cpu_matmul(3136, 1024, B, q2, 1, dh, 0, dw3));
	FAST(dtf_fast_matmul(pool, 3136, 1024, B, q2, 1, dh, 0, dw3, wsf));
	row("dense1 grad_kernel", r, f, 2.0 * B * 3136 * 1024);
	REF(dtf_cpu_matmul(B, 3136, 1024, dh, 0, w3, 1, dq2));
	FAST(dtf_fast_matmul(pool, B, 3136, 1024, dh, 0, w3, 1, dq2, wsf));
	row("dense1 grad_input", r, f, 2.0 * B * 3136 * 1024);
	REF((dtf_cpu_max_pool2d_grad(&p2, y2, dq2, tmp),
	     dtf_cpu_relu_grad(a2, tmp, y2, dy2),
	     dtf_cpu_bias_add_grad(a2 / 64, 64, dy2, db)));
	FAST(dtf_fast_max_pool2d_grad(pool, &p2, y2, dq2, 1, dy2, db, wsf));
	row("pool2 + relu + bias grads", r, f, 0);
	REF(dtf_cpu_conv2d_backprop_input(&c2, dy2, w2, dq1, wsr));
	FAST(dtf_fast_conv2d_backprop_input(pool, &c2, dy2, w2, dq1, wsf));
	row("conv2 backprop_input", r, f, 2.0 * B * 196 * 800 * 64);
	REF(dtf_cpu_conv2d_backprop_filter(&c2, q1, dy2, dw2, wsr));
	FAST(dtf_fast_conv2d_backprop_filter(pool, &c2, q1, dy2, dw2, wsf));
	row("conv2 backprop_filter", r, f, 2.0 * B * 196 * 800 * 64);
	REF((dtf_cpu_max_pool2d_grad(&p1, y1, dq1, tmp),
	     dtf_cpu_relu_grad(a1, tmp, y1, dy1),
	     dtf_cpu_bias_add_grad(a1 / 32, 32, dy1, db)));
	FAST(dtf_fast_max_pool2d_grad(pool, &p1, y1, dq1, 1, dy1, db, wsf));
	row("pool1 + relu + bias grads", r, f, 0);
	REF(dtf_cpu_conv2d_backprop_filter(&c1, x, dy1, dw1, wsr));
	FAST(dtf_fast_conv2d_backprop_filter(pool, &c1, x, dy1, dw1, wsf));
	row("conv1 backprop_filter", r, f, 2.0 * B * 784 * 800);
	/* Adam: the reference loop of train/optimizer.c, inlined here */
	REF(for (size_t i = 0; i < np; i++) {
		mm[i] = 0.9f * mm[i] + (1.0f - 0.9f) * gg[i];
		vv[i] = 0.999f * vv[i] + (1.0f - 0.999f) * gg[i] * gg[i];
		pp[i] -= 1e-3f * mm[i] / (__builtin_sqrtf(vv[i]) + 1e-7f);
	});
	FAST(dtf_fast_adam(pool, np, pp, gg, mm, vv, 1e-3f, 0.9f, 0.999f, 1e-7f));
	row("adam (3.27M parameters)", r, f, 0);
	printf("%-34s %9.3f %9.3f %7.2fx\n", "total", tot_ref * 1e3,
	       tot_fast * 1e3, tot_ref / tot_fast);
	/* the fusions dtf-train's plan makes, against the rows they replace
	 * (not in the total) */
	float *q1f = buf(a1p, 31);
	size_t ws_fused = dtf_fast_pool_grad_conv2d_filter_workspace(&p1, &c1, T);
	float *wsp = buf(ws_fused, 32);
	REF((dtf_fast_conv2d(pool, &c1, x, w1, b1, 1, y1f, wsf),
	     dtf_fast_max_pool2d(pool, &p1, y1f, q1f)));
	FAST(dtf_fast_conv2d_pool(pool, &c1, x, w1, b1, 1, y1f, &p1, q1f, wsf));
	printf("%-34s %9.3f %9.3f %7.2fx  (unfused -> fused)\n",
	       "conv1 + relu + max_pool1", r * 1e3, f * 1e3, r / f);
	REF((dtf_fast_max_pool2d_grad(pool, &p1, y1, dq1, 1, dy1, db, wsf),
	     dtf_fast_conv2d_backprop_filter(pool, &c1, x, dy1, dw1, wsf)));
	FAST(dtf_fast_pool_grad_conv2d_filter(pool, &p1, y1, dq1, 1, db, &c1, x,
					      dw1, wsp));
	printf("%-34s %9.3f %9.3f %7.2fx  (unfused -> fused)\n",
	       "pool1 grads + conv1 filter grad", r * 1e3, f * 1e3, r / f);
	dtf_free(q1f);
	dtf_free(wsp);
	dtf_pool_free(pool);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "ops";
	int threads = 1, reps = 0, size = 1024, batch = 64;
	for (int i = 2; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (strcmp(argv[i], "-t") == 0)
			threads = v;
		else if (strcmp(argv[i], "-r") == 0)
			reps = v;
		else if (strcmp(argv[i], "-s") == 0)
			size = v;
		else if (strcmp(argv[i], "-b") == 0)
			batch = v;
		else
			goto usage;
		if (v < 1)
			goto usage;
	}
	if (strcmp(mode, "sgemm") == 0)
		return run_sgemm(threads, reps ? reps : 20, size);
	if (strcmp(mode, "ops") == 0)
		return run_ops(threads, reps ? reps : 10, batch);
	if (strcmp(mode, "fma") == 0)
		return run_fma(reps ? reps : 5);
usage:
	fprintf(stderr, "usage: bench_kernels sgemm|ops|fma [-t THREADS] [-r REPEATS] [-s SIZE] [-b BATCH]\n");
	return 2;
}
