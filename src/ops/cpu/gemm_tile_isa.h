/*
 * gemm_tile_isa.h - the body of dtf_mm_tile (gemm_tile.h) for one vector
 * width: included by gemm_tile.c once per width after vec.h, it defines
 * VN(mm_tile) and VN(dtf_mm_tile).  Register tiles of R rows x DTF_VW OV
 * columns, the broadcast operand read from memory per FMA.
 */

/* c[R rows][DTF_VW OV] (=|+=) sum over k < K of a(row, k) b[k][..].  R
 * and OV are literals at every call, so acc stays in registers. */
static inline __attribute__((always_inline)) VT void
VN(mm_tile)(const float *restrict a, size_t ars, size_t aks,
	    const float *restrict b, size_t ldb, float *restrict c,
	    size_t ldc, int K, int add, int ct, const int R, const int OV)
{
	VF acc[12][4];
	for (int i = 0; i < R; i++)
		for (int v = 0; v < OV; v++)
			acc[i][v] = VZERO();
	for (int k = 0; k < K; k++) {
		VF bv[4];
		for (int v = 0; v < OV; v++)
			bv[v] = VLOAD(b + (size_t)k * ldb + DTF_VW * v);
		const float *ak = a + (size_t)k * aks;
		for (int i = 0; i < R; i++) {
			VF av = VSET1(ak[(size_t)i * ars]);
			for (int v = 0; v < OV; v++)
				acc[i][v] = VFMA(av, bv[v], acc[i][v]);
		}
	}
	if (ct) {
		float t[12][64];
		for (int i = 0; i < R; i++)
			for (int v = 0; v < OV; v++)
				VSTORE(&t[i][DTF_VW * v], acc[i][v]);
		for (int j = 0; j < DTF_VW * OV; j++) {
			float *cj = c + (size_t)j * ldc;
			for (int i = 0; i < R; i++)
				cj[i] = add ? cj[i] + t[i][j] : t[i][j];
		}
		return;
	}
	for (int i = 0; i < R; i++)
		for (int v = 0; v < OV; v++) {
			float *cp = c + (size_t)i * ldc + DTF_VW * v;
			VF s = add ? VADD(VLOAD(cp), acc[i][v]) : acc[i][v];
			VSTORE(cp, s);
		}
}

#define MMC(n, ov) \
	case n: VN(mm_tile)(ap, ars, aks, bp, lds, cp, ldc, kn, add, ct, n, ov); break;

/* One row tile of n rows at (r0, o) against the slice of b at bp: the
 * switch that makes R and OV literals. */
static inline __attribute__((always_inline)) VT void
VN(mm_row_tile)(const float *ap, size_t ars, size_t aks, const float *bp,
		size_t lds, float *cp, size_t ldc, int kn, int add, int ct,
		int n, const int ov)
{
#if DTF_VW == 16
	if (ov == 4) {
		switch (n) {
		MMC(1, 4) MMC(2, 4) MMC(3, 4) MMC(4, 4) MMC(5, 4) MMC(6, 4)
		}
	} else if (ov == 2) {
		switch (n) {
		MMC(1, 2) MMC(2, 2) MMC(3, 2) MMC(4, 2) MMC(5, 2) MMC(6, 2)
		MMC(7, 2) MMC(8, 2) MMC(9, 2) MMC(10, 2) MMC(11, 2) MMC(12, 2)
		}
	} else {
		switch (n) {
		MMC(1, 1) MMC(2, 1) MMC(3, 1) MMC(4, 1) MMC(5, 1) MMC(6, 1)
		MMC(7, 1) MMC(8, 1) MMC(9, 1) MMC(10, 1) MMC(11, 1) MMC(12, 1)
		}
	}
#else
	(void)ov;
	switch (n) {
	MMC(1, 2) MMC(2, 2) MMC(3, 2) MMC(4, 2) MMC(5, 2) MMC(6, 2)
	}
#endif
}

VT static void VN(dtf_mm_tile)(int rows, int K, int O, const float *a,
			       size_t ars, size_t aks, const float *b,
			       size_t ldb, float *c, size_t ldc, int add,
			       int ct)
{
	/* the AVX-512 tile's width in 16-float vectors, which sets the
	 * slices of k and of the columns for both widths (so both give the
	 * same bits and read b in the same order) */
	const int ov16 = O % 64 == 0 ? 4 : O % 32 == 0 ? 2 : 1;
	const int SW = 16 * ov16; /* columns of one slice of b */
#if DTF_VW == 16
	const int ov = ov16;
	const int R = ov == 4 ? 6 : 12;
#else
	/* AVX2: 16 columns, 12 of the 16 registers; NEON: 8 columns */
	const int ov = 2;
	const int R = 6;
#endif
	/* each row tile passes over the slice's SW columns in nsub sub-slices
	 * of the tile's width (1 on AVX-512), its rows of a in the L1 cache
	 * meanwhile: a slice as wide as AVX-512's, rather than one per 16
	 * columns, reads a (the dense kernel gradient's input, the input
	 * gradient's weights) ov16 times less often and b in whole 256-byte
	 * rows (AVX2, 1 thread, batch 64, 3136 x 1024, best of 15 in process
	 * CPU time: forward 8.4 -> 7.1 ms, kernel gradient 7.0 -> 5.8, input
	 * gradient 5.8 -> 5.5) */
	const int TW = DTF_VW * ov, nsub = SW / TW;
	/* K in chunks whose slice of b (KC x SW floats, 32 KB) stays in the
	 * L1 cache while every row tile passes over it */
	const int KC = ct ? (K > 0 ? K : 1) : PACK_FLOATS / SW;
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
	 * 1024, 1 thread, AVX-512: kernel gradient 124 -> 138 GFLOP/s). */
	const int pack = !ct && nt > 1 && ldb != (size_t)SW;
	_Alignas(64) float bpk[PACK_FLOATS];
	/* k outside the column slices: consecutive slices read the same
	 * KC rows of b, the next SW floats of each, so a dense layer's
	 * weights (rows 4 KB apart) are read from the same pages in
	 * ascending order, which the TLB and the prefetchers follow, rather
	 * than from KC new pages per slice (dense forward, 3136 x 1024,
	 * batch 64, weights not cached, AVX-512: median 7.2 -> 5.9 ms).
	 * Every output's sum still runs over k in order. */
	for (int k0 = 0; k0 < K || k0 == 0; k0 += KC)
	for (int o0 = 0; o0 < O; o0 += SW) {
		const int kn = K - k0 < KC ? K - k0 : KC;
		add = add0 || k0 > 0;
		const float *bs = b + (size_t)k0 * ldb + o0;
		size_t lds = ldb;
		if (pack) {
			for (int k = 0; k < kn; k++)
				for (int v = 0; v < SW / DTF_VW; v++)
					VSTOREA(bpk + (size_t)k * SW + (size_t)v * DTF_VW,
						VLOAD(bs + (size_t)k * ldb + DTF_VW * v));
			bs = bpk;
			lds = (size_t)SW;
		}
		/* the next slice's rows of b, fetched into the L2 cache a
		 * share per row tile while this slice is computed: its KC
		 * rows are 4 KB apart in a dense layer's weights, more pages
		 * than the hardware prefetchers follow at once, and all in
		 * the same few L1 sets (so not into L1) */
		const float *nx = NULL;
		int nkn = 0;
		if (pack) {
			int nk0 = k0, no0 = o0 + SW;
			if (no0 >= O) {
				nk0 = k0 + KC;
				no0 = 0;
			}
			if (nk0 < K) {
				nx = b + (size_t)nk0 * ldb + no0;
				nkn = K - nk0 < KC ? K - nk0 : KC;
			}
		}
		for (int ti = 0, r0 = 0; ti < nt; ti++) {
			const int n = base + (ti < extra);
			const float *ap = a + (size_t)r0 * ars + (size_t)k0 * aks;
			if (nx)
				for (int k = nkn * ti / nt; k < nkn * (ti + 1) / nt; k++)
					for (int l = 0; l < SW; l += 16)
						/* into L2 (x86's _MM_HINT_T1) */
						__builtin_prefetch(nx + (size_t)k * ldb + l, 0, 2);
			for (int s = 0; s < nsub; s++) {
				const int os = o0 + s * TW;
				float *cp = ct ? c + (size_t)os * ldc + r0
					       : c + (size_t)r0 * ldc + os;
				VN(mm_row_tile)(ap, ars, aks, bs + (size_t)s * TW,
						lds, cp, ldc, kn, add, ct, n, ov);
			}
			r0 += n;
		}
	}
}

#undef MMC
