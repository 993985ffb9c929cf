/*
 * vmath_isa.h - elementary functions over vec.h's vectors: VN(vexp).
 * Included after vec.h once per width (DTF_VW 16, 8 or 4), or with
 * DTF_VW 1 after scalar definitions of vec.h's macros (the baseline, where
 * VN(vexp) is libm's expf), VN(vhsum) and VN(vhmax) (the sum and the
 * maximum of the lanes, float) and VMINF(a, b) (the lane minimum).
 */

#undef VMINF
#if DTF_VW == 16
#define VMINF(a, b) _mm512_min_ps(a, b)
/* 2^n for whole-number floats n in [-126, 127], built in the exponent */
static inline VT VF VN(vexp2i)(VF n)
{
	__m512i e = _mm512_cvtps_epi32(n);
	e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
	return _mm512_castsi512_ps(e);
}
static inline VT VF VN(vround)(VF x)
{
	return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#elif DTF_VW == 8
#define VMINF(a, b) _mm256_min_ps(a, b)
static inline VT VF VN(vexp2i)(VF n)
{
	__m256i e = _mm256_cvtps_epi32(n);
	e = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
	return _mm256_castsi256_ps(e);
}
static inline VT VF VN(vround)(VF x)
{
	return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#elif DTF_VW == 4
#define VMINF(a, b) vminq_f32(a, b)
static inline VF VN(vexp2i)(VF n)
{
	int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
	return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline VF VN(vround)(VF x) { return vrndnq_f32(x); }
#elif DTF_VW == 1
#define VMINF(a, b) fminf(a, b)
#endif

/* exp(x), x clamped to [-87.3, 88] (exp(-87.3) ~ 1.2e-38, exp(88) ~
 * 1.7e38: no infinities, no denormals): x = n ln2 + r, |r| <= ln2 / 2
 * (ln2 in two parts, Cody and Waite), exp(r) by Cephes expf's polynomial
 * (within ~2 ulp of expf), times 2^n built in the exponent bits. */
static inline VT VF VN(vexp)(VF x)
{
#if DTF_VW == 1
	return expf(x);
#else
	x = VMAX(VMINF(x, VSET1(88.0f)), VSET1(-87.3f));
	VF n = VN(vround)(VMUL(x, VSET1(1.44269504088896341f)));
	VF r = VFMA(n, VSET1(-0.693359375f), x);
	r = VFMA(n, VSET1(2.12194440e-4f), r);
	VF p = VSET1(1.9875691500e-4f);
	p = VFMA(p, r, VSET1(1.3981999507e-3f));
	p = VFMA(p, r, VSET1(8.3334519073e-3f));
	p = VFMA(p, r, VSET1(4.1665795894e-2f));
	p = VFMA(p, r, VSET1(1.6666665459e-1f));
	p = VFMA(p, r, VSET1(5.0000001201e-1f));
	p = VFMA(p, VMUL(r, r), VADD(r, VSET1(1.0f)));
	return VMUL(p, VN(vexp2i)(n));
#endif
}

#if DTF_VW == 16
static inline VT float VN(vhsum)(VF v) { return _mm512_reduce_add_ps(v); }
static inline VT float VN(vhmax)(VF v) { return _mm512_reduce_max_ps(v); }
#elif DTF_VW == 8
static inline VT float VN(vhsum)(VF v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
static inline VT float VN(vhmax)(VF v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
#elif DTF_VW == 4
static inline float VN(vhsum)(VF v) { return vaddvq_f32(v); }
static inline float VN(vhmax)(VF v) { return vmaxvq_f32(v); }
#elif DTF_VW == 1
static inline float VN(vhsum)(VF v) { return v; }
static inline float VN(vhmax)(VF v) { return v; }
#endif
