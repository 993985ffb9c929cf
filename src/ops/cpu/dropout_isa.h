/*
 * dropout_isa.h - fused.c's dropout row (Philox-4x32-10 blocks, one per
 * lane, DTF_VW blocks = 4 DTF_VW elements per iteration) for one vector
 * width (vec.h): included by fused.c once per width, it defines
 * VN(dropout_row).  The integer rounds and the u01 conversion (24-bit
 * integer to float, times 2^-24) are exact, and kept elements get the
 * same single product x * scale, so every width gives the bits of the
 * reference loop (dtf_cpu_dropout_span, ops/cpu/kernels.h), which also
 * does the row's tail.
 */

#undef VI
#undef VISET1
#undef VIADD
#undef VIXOR
#undef VIMULLO
#undef VILANES
#if DTF_VW == 16
#define VI __m512i
#define VISET1(s) _mm512_set1_epi32((int)(s))
#define VIADD(a, b) _mm512_add_epi32(a, b)
#define VIXOR(a, b) _mm512_xor_si512(a, b)
#define VIMULLO(a, b) _mm512_mullo_epi32(a, b)
#define VILANES() \
	_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#else
#define VI __m256i
#define VISET1(s) _mm256_set1_epi32((int)(s))
#define VIADD(a, b) _mm256_add_epi32(a, b)
#define VIXOR(a, b) _mm256_xor_si256(a, b)
#define VIMULLO(a, b) _mm256_mullo_epi32(a, b)
#define VILANES() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#endif

/* High 32 bits of the 32 x 32-bit products, per lane. */
static inline __attribute__((always_inline)) VT VI VN(mulhi32)(VI a, VI b)
{
#if DTF_VW == 16
	__m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, b), 32);
	__m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32),
				       _mm512_srli_epi64(b, 32));
	return _mm512_mask_blend_epi32(0xAAAA, even, odd);
#else
	__m256i even = _mm256_srli_epi64(_mm256_mul_epu32(a, b), 32);
	__m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32),
				       _mm256_srli_epi64(b, 32));
	return _mm256_blend_epi32(even, odd, 0xAA);
#endif
}

/* The 4 x DTF_VW transpose: w[t] holds word t of blocks 0 .. DTF_VW-1;
 * o[q] gets elements DTF_VW q .. DTF_VW q + DTF_VW-1 of the run (blocks
 * q DTF_VW/4 onwards, words in order). */
static inline __attribute__((always_inline)) VT void
VN(blocks_to_elements)(const VI w[4], VI o[4])
{
#if DTF_VW == 16
	__m512i t0 = _mm512_unpacklo_epi32(w[0], w[1]), t1 = _mm512_unpackhi_epi32(w[0], w[1]);
	__m512i t2 = _mm512_unpacklo_epi32(w[2], w[3]), t3 = _mm512_unpackhi_epi32(w[2], w[3]);
	__m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
	__m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
	__m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
	__m512i c = _mm512_shuffle_i32x4(u0, u1, 0xEE), d = _mm512_shuffle_i32x4(u2, u3, 0xEE);
	o[0] = _mm512_shuffle_i32x4(a, b, 0x88);
	o[1] = _mm512_shuffle_i32x4(a, b, 0xDD);
	o[2] = _mm512_shuffle_i32x4(c, d, 0x88);
	o[3] = _mm512_shuffle_i32x4(c, d, 0xDD);
#else
	/* per 128-bit half (blocks 0-3 | 4-7): u_l = block l | block l + 4 */
	__m256i t0 = _mm256_unpacklo_epi32(w[0], w[1]), t1 = _mm256_unpackhi_epi32(w[0], w[1]);
	__m256i t2 = _mm256_unpacklo_epi32(w[2], w[3]), t3 = _mm256_unpackhi_epi32(w[2], w[3]);
	__m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
	__m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
	o[0] = _mm256_permute2x128_si256(u0, u1, 0x20); /* blocks 0, 1 */
	o[1] = _mm256_permute2x128_si256(u2, u3, 0x20); /* blocks 2, 3 */
	o[2] = _mm256_permute2x128_si256(u0, u1, 0x31); /* blocks 4, 5 */
	o[3] = _mm256_permute2x128_si256(u2, u3, 0x31); /* blocks 6, 7 */
#endif
}

/* y[j] = x[j] * scale where the row's uniform j is >= rate, else 0, for
 * j < cols: block l of the row is Philox(key, (l, id, id >> 32, salt)). */
VT static void VN(dropout_row)(size_t cols, uint64_t id, float rate,
			       float scale, struct dtf_philox_key key,
			       uint32_t salt, const float *x, float *y)
{
	const VI m0 = VISET1(DTF_PHILOX_M0), m1 = VISET1(DTF_PHILOX_M1);
	const VI lane = VILANES();
	const VF vr = VSET1(rate), vs = VSET1(scale);
	const VF u24 = VSET1(1.0f / 16777216.0f);
	size_t j0 = 0;
	for (; j0 + 4 * DTF_VW <= cols; j0 += 4 * DTF_VW) {
		VI c0 = VIADD(VISET1((uint32_t)(j0 / 4)), lane);
		VI c1 = VISET1((uint32_t)id);
		VI c2 = VISET1((uint32_t)(id >> 32));
		VI c3 = VISET1(salt);
		uint32_t k0 = key.k[0], k1 = key.k[1];
		for (int round = 0; round < 10; round++) {
			VI hi0 = VN(mulhi32)(c0, m0), lo0 = VIMULLO(c0, m0);
			VI hi1 = VN(mulhi32)(c2, m1), lo1 = VIMULLO(c2, m1);
			VI n0 = VIXOR(VIXOR(hi1, c1), VISET1(k0));
			VI n2 = VIXOR(VIXOR(hi0, c3), VISET1(k1));
			c1 = lo1;
			c3 = lo0;
			c0 = n0;
			c2 = n2;
			k0 += DTF_PHILOX_W0;
			k1 += DTF_PHILOX_W1;
		}
		const VI w[4] = {c0, c1, c2, c3};
		VI o[4];
		VN(blocks_to_elements)(w, o);
		for (int q = 0; q < 4; q++) {
#if DTF_VW == 16
			VF u = _mm512_cvtepi32_ps(_mm512_srli_epi32(o[q], 8));
#else
			VF u = _mm256_cvtepi32_ps(_mm256_srli_epi32(o[q], 8));
#endif
			u = VMUL(u, u24);
			VM keep = VCMPGE(u, vr);
			VF v = VMASKZ(keep, VMUL(VLOAD(x + j0 + DTF_VW * q), vs));
			VSTORE(y + j0 + DTF_VW * q, v);
		}
	}
	dtf_cpu_dropout_span(j0, cols, id, rate, scale, key, salt, x, y);
}
