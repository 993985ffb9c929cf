/*
 * gemm512.c - dtf_mm512 (gemm512.h): register tiles of R rows x 16*OV
 * columns, the broadcast operand read from memory per FMA.
 */
#include "ops/cpu/gemm512.h"

#include "ops/cpu/simd.h"

#if defined(DTF_T512)
#include <immintrin.h>

/* floats of the slice of b one pass over the row tiles reads (32 KB: the
 * L1 cache holds it) */
#define PACK_FLOATS 8192

/* c[R rows][16 OV] (=|+=) sum over k < K of a(row, k) b[k][..].  R and
 * OV are literals at every call, so acc stays in registers. */
static inline __attribute__((always_inline)) DTF_T512 void
mm_tile(const float *restrict a, size_t ars, size_t aks,
	const float *restrict b, size_t ldb, float *restrict c, size_t ldc,
	int K, int add, int ct, const int R, const int OV)
{
	__m512 acc[12][4];
	for (int i = 0; i < R; i++)
		for (int v = 0; v < OV; v++)
			acc[i][v] = _mm512_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m512 bv[4];
		for (int v = 0; v < OV; v++)
			bv[v] = _mm512_loadu_ps(b + (size_t)k * ldb + 16 * v);
		const float *ak = a + (size_t)k * aks;
		for (int i = 0; i < R; i++) {
			__m512 av = _mm512_set1_ps(ak[(size_t)i * ars]);
			for (int v = 0; v < OV; v++)
				acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
		}
	}
	if (ct) {
		float t[12][64];
		for (int i = 0; i < R; i++)
			for (int v = 0; v < OV; v++)
				_mm512_storeu_ps(&t[i][16 * v], acc[i][v]);
		for (int j = 0; j < 16 * OV; j++) {
			float *cj = c + (size_t)j * ldc;
			for (int i = 0; i < R; i++)
				cj[i] = add ? cj[i] + t[i][j] : t[i][j];
		}
		return;
	}
	for (int i = 0; i < R; i++)
		for (int v = 0; v < OV; v++) {
			float *cp = c + (size_t)i * ldc + 16 * v;
			__m512 s = add ? _mm512_add_ps(_mm512_loadu_ps(cp), acc[i][v])
				       : acc[i][v];
			_mm512_storeu_ps(cp, s);
		}
}

#define MMC(n, ov) \
	case n: mm_tile(ap, ars, aks, bp, lds, cp, ldc, kn, add, ct, n, ov); break;

DTF_T512 void dtf_mm512(int rows, int K, int O, const float *a, size_t ars,
			size_t aks, const float *b, size_t ldb, float *c,
			size_t ldc, int add, int ct)
{
	const int ov = O % 64 == 0 ? 4 : O % 32 == 0 ? 2 : 1;
	const int R = ov == 4 ? 6 : 12;
	/* K in chunks whose slice of b (KC x 16 ov floats, 32 KB) stays in
	 * the L1 cache while every row tile passes over it */
	const int KC = ct ? (K > 0 ? K : 1) : PACK_FLOATS / (16 * ov);
	const int add0 = add;
	/* rows in tiles of near-equal height (49 rows: 6,6,6,6,5,5,5,5,5
	 * rather than eight of 6 and a 1-row tail) */
	const int nt = (rows + R - 1) / R;
	const int base = nt ? rows / nt : 0, extra = nt ? rows % nt : 0;
	/* Where b's rows are further apart than the slice is wide and several
	 * row tiles pass over the slice, it is copied to consecutive rows
	 * first: rows of a dense layer's weights are 4 KB apart (1024
	 * columns), so the slice's 128 rows all fall in the same few L1
	 * sets and would be read from L2 (bench_kernels, batch 64, 3136 x
	 * 1024, 1 thread: kernel gradient 124 -> 138 GFLOP/s). */
	const int pack = !ct && nt > 1 && ldb != (size_t)(16 * ov);
	_Alignas(64) float bpk[PACK_FLOATS];
	/* k outside the column slices: consecutive slices read the same
	 * KC rows of b, the next 16 ov floats of each, so a dense layer's
	 * weights (rows 4 KB apart) are read from the same pages in
	 * ascending order, which the TLB and the prefetchers follow, rather
	 * than from KC new pages per slice (dense forward, 3136 x 1024,
	 * batch 64, weights not cached: median 7.2 -> 5.9 ms).  Every
	 * output's sum still runs over k in order. */
	for (int k0 = 0; k0 < K || k0 == 0; k0 += KC)
	for (int o0 = 0; o0 < O; o0 += 16 * ov) {
		const int kn = K - k0 < KC ? K - k0 : KC;
		add = add0 || k0 > 0;
		const float *bs = b + (size_t)k0 * ldb + o0;
		size_t lds = ldb;
		if (pack) {
			for (int k = 0; k < kn; k++)
				for (int v = 0; v < ov; v++)
					_mm512_store_ps(bpk + (size_t)(k * ov + v) * 16,
							_mm512_loadu_ps(bs + (size_t)k * ldb + 16 * v));
			bs = bpk;
			lds = (size_t)(16 * ov);
		}
		for (int ti = 0, r0 = 0; ti < nt; ti++) {
			const int n = base + (ti < extra);
			const float *ap = a + (size_t)r0 * ars + (size_t)k0 * aks;
			const float *bp = bs;
			float *cp = ct ? c + (size_t)o0 * ldc + r0
				       : c + (size_t)r0 * ldc + o0;
			if (ov == 4) {
				switch (n) {
				MMC(1, 4) MMC(2, 4) MMC(3, 4) MMC(4, 4) MMC(5, 4)
				MMC(6, 4)
				}
			} else if (ov == 2) {
				switch (n) {
				MMC(1, 2) MMC(2, 2) MMC(3, 2) MMC(4, 2) MMC(5, 2)
				MMC(6, 2) MMC(7, 2) MMC(8, 2) MMC(9, 2) MMC(10, 2)
				MMC(11, 2) MMC(12, 2)
				}
			} else {
				switch (n) {
				MMC(1, 1) MMC(2, 1) MMC(3, 1) MMC(4, 1) MMC(5, 1)
				MMC(6, 1) MMC(7, 1) MMC(8, 1) MMC(9, 1) MMC(10, 1)
				MMC(11, 1) MMC(12, 1)
				}
			}
			r0 += n;
		}
	}
}

int dtf_mm512_usable(void)
{
	return dtf_cpu_isa() == DTF_ISA_AVX512;
}

#else

void dtf_mm512(int rows, int K, int O, const float *a, size_t ars, size_t aks,
	       const float *b, size_t ldb, float *c, size_t ldc, int add,
	       int ct)
{
	(void)rows; (void)K; (void)O; (void)a; (void)ars; (void)aks; (void)b;
	(void)ldb; (void)c; (void)ldc; (void)add; (void)ct;
}

int dtf_mm512_usable(void) { return 0; }

#endif
