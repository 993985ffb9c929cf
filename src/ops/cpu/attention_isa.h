/*
 * attention_isa.h - fast_attention.c's kernels for one vector width: the
 * row primitives (scores against a transposed key block, softmax, the
 * probability-weighted sum of rows, axpy) and the per-head forward and
 * backward built from them.  Included by fast_attention.c once per width:
 * DTF_VW 16 and 8 after vec.h (AVX-512, AVX2), and 1 with scalar
 * definitions of the same macros (the baseline).  Defines VN(attn_*).
 *
 * Buffers of key positions (scores, probabilities, columns of the
 * transposed blocks) are padded to tp = t rounded up to 16, so whole
 * vectors may be read and written past the last valid key; the padding of
 * the transposed blocks is zero, so padded scores are finite.
 */

#undef VMINF
#if DTF_VW == 16
#define VMINF(a, b) _mm512_min_ps(a, b)
static inline VT VF VN(attn_exp2i)(VF n)
{
	__m512i e = _mm512_cvtps_epi32(n);
	e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
	return _mm512_castsi512_ps(e);
}
static inline VT VF VN(attn_round)(VF x)
{
	return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline VT float VN(attn_hsum)(VF v) { return _mm512_reduce_add_ps(v); }
static inline VT float VN(attn_hmax)(VF v) { return _mm512_reduce_max_ps(v); }
#elif DTF_VW == 8
#define VMINF(a, b) _mm256_min_ps(a, b)
static inline VT VF VN(attn_exp2i)(VF n)
{
	__m256i e = _mm256_cvtps_epi32(n);
	e = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
	return _mm256_castsi256_ps(e);
}
static inline VT VF VN(attn_round)(VF x)
{
	return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline VT float VN(attn_hsum)(VF v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
static inline VT float VN(attn_hmax)(VF v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
#elif DTF_VW == 1
#define VMINF(a, b) fminf(a, b)
#endif

/* exp(x) for x <= 0 (clamped below at -87.3, where it is ~1e-38): x = n ln2
 * + r, |r| <= ln2 / 2, exp(r) by Cephes expf's polynomial (within ~2 ulp),
 * times 2^n built in the exponent bits. */
static inline VT VF VN(attn_exp)(VF x)
{
#if DTF_VW == 1
	return expf(x);
#else
	x = VMAX(VMINF(x, VSET1(88.0f)), VSET1(-87.3f));
	VF n = VN(attn_round)(VMUL(x, VSET1(1.44269504088896341f)));
	VF r = VFMA(n, VSET1(-0.693359375f), x);
	r = VFMA(n, VSET1(2.12194440e-4f), r);
	VF p = VSET1(1.9875691500e-4f);
	p = VFMA(p, r, VSET1(1.3981999507e-3f));
	p = VFMA(p, r, VSET1(8.3334519073e-3f));
	p = VFMA(p, r, VSET1(4.1665795894e-2f));
	p = VFMA(p, r, VSET1(1.6666665459e-1f));
	p = VFMA(p, r, VSET1(5.0000001201e-1f));
	p = VFMA(p, VMUL(r, r), VADD(r, VSET1(1.0f)));
	return VMUL(p, VN(attn_exp2i)(n));
#endif
}

#if DTF_VW == 1
static inline float VN(attn_hsum)(VF v) { return v; }
static inline float VN(attn_hmax)(VF v) { return v; }
#endif

/* n rounded up to whole vectors */
static inline int VN(attn_nr)(int n) { return (n + DTF_VW - 1) / DTF_VW * DTF_VW; }

/* s[j] = sum_k x[k] kt[k tp + j] for j < n rounded up to whole vectors:
 * row x (d) against the columns of kt (d, tp). */
static inline VT void VN(attn_scores)(const float *restrict x,
				      const float *restrict kt, int d, int tp,
				      int n, float *restrict s)
{
	int nr = VN(attn_nr)(n), j = 0;
	for (; j + 4 * DTF_VW <= nr; j += 4 * DTF_VW) {
		VF a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
		for (int k = 0; k < d; k++) {
			const float *r = kt + (size_t)k * tp + j;
			VF xk = VSET1(x[k]);
			a0 = VFMA(xk, VLOAD(r), a0);
			a1 = VFMA(xk, VLOAD(r + DTF_VW), a1);
			a2 = VFMA(xk, VLOAD(r + 2 * DTF_VW), a2);
			a3 = VFMA(xk, VLOAD(r + 3 * DTF_VW), a3);
		}
		VSTORE(s + j, a0);
		VSTORE(s + j + DTF_VW, a1);
		VSTORE(s + j + 2 * DTF_VW, a2);
		VSTORE(s + j + 3 * DTF_VW, a3);
	}
	for (; j < nr; j += DTF_VW) {
		VF a0 = VZERO();
		for (int k = 0; k < d; k++)
			a0 = VFMA(VSET1(x[k]), VLOAD(kt + (size_t)k * tp + j), a0);
		VSTORE(s + j, a0);
	}
}

/* s[0, n) = softmax(s[0, n)); s[n, nr) = 0. */
static inline VT void VN(attn_softmax)(float *restrict s, int n)
{
	int nr = VN(attn_nr)(n);
	for (int j = n; j < nr; j++)
		s[j] = -INFINITY;
	VF m = VLOAD(s);
	for (int j = DTF_VW; j < nr; j += DTF_VW)
		m = VMAX(m, VLOAD(s + j));
	VF vm = VSET1(VN(attn_hmax)(m));
	for (int j = 0; j < nr; j += DTF_VW)
		VSTORE(s + j, VN(attn_exp)(VSUB(VLOAD(s + j), vm)));
	for (int j = n; j < nr; j++)
		s[j] = 0.0f;
	VF sum = VZERO();
	for (int j = 0; j < nr; j += DTF_VW)
		sum = VADD(sum, VLOAD(s + j));
	VF inv = VSET1(1.0f / VN(attn_hsum)(sum));
	for (int j = 0; j < nr; j += DTF_VW)
		VSTORE(s + j, VMUL(VLOAD(s + j), inv));
}

/* o (d) = sum_{j < n} p[j] v[j d + .]: rows of v (n, d) weighted by p. */
static inline VT void VN(attn_pv)(const float *restrict p, int n,
				  const float *restrict v, int d,
				  float *restrict o)
{
	int k = 0;
	for (; k + 4 * DTF_VW <= d; k += 4 * DTF_VW) {
		VF a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
		for (int j = 0; j < n; j++) {
			const float *r = v + (size_t)j * d + k;
			VF pj = VSET1(p[j]);
			a0 = VFMA(pj, VLOAD(r), a0);
			a1 = VFMA(pj, VLOAD(r + DTF_VW), a1);
			a2 = VFMA(pj, VLOAD(r + 2 * DTF_VW), a2);
			a3 = VFMA(pj, VLOAD(r + 3 * DTF_VW), a3);
		}
		VSTORE(o + k, a0);
		VSTORE(o + k + DTF_VW, a1);
		VSTORE(o + k + 2 * DTF_VW, a2);
		VSTORE(o + k + 3 * DTF_VW, a3);
	}
	for (; k + DTF_VW <= d; k += DTF_VW) {
		VF a0 = VZERO();
		for (int j = 0; j < n; j++)
			a0 = VFMA(VSET1(p[j]), VLOAD(v + (size_t)j * d + k), a0);
		VSTORE(o + k, a0);
	}
	for (; k < d; k++) {
		float a = 0.0f;
		for (int j = 0; j < n; j++)
			a += p[j] * v[(size_t)j * d + k];
		o[k] = a;
	}
}

/* y (d) += a x */
static inline VT void VN(attn_axpy)(float a, const float *restrict x, int d,
				    float *restrict y)
{
	VF va = VSET1(a);
	int k = 0;
	for (; k + DTF_VW <= d; k += DTF_VW)
		VSTORE(y + k, VFMA(va, VLOAD(x + k), VLOAD(y + k)));
	for (; k < d; k++)
		y[k] += a * x[k];
}

/* Gather head h of part `part` (0 q, 1 k, 2 v) of one example's qkv
 * (t, 3c), times `scale`, as rows (t, d) into r and/or transposed (d, tp)
 * into rt (zero padded); either may be NULL. */
static inline VT void VN(attn_gather)(const float *restrict qkv, int t, int c,
				      int d, int h, int part, float scale,
				      int tp, float *restrict r,
				      float *restrict rt)
{
	for (int i = 0; i < t; i++) {
		const float *src = qkv + (size_t)i * 3 * c + (size_t)part * c +
				   (size_t)h * d;
		for (int k = 0; k < d; k++) {
			if (r)
				r[(size_t)i * d + k] = scale * src[k];
			if (rt)
				rt[(size_t)k * tp + i] = scale * src[k];
		}
	}
	if (rt)
		for (int k = 0; k < d; k++)
			for (int i = t; i < tp; i++)
				rt[(size_t)k * tp + i] = 0.0f;
}

/* Head h of one example: qkv (t, 3c) -> its columns of y (t, c).  ws:
 * dtf_fast_attention_thread_floats(t, d) floats. */
static VT void VN(attn_head_fwd)(int t, int c, int d, int h, float scale,
				 const float *restrict qkv, float *restrict y,
				 float *restrict ws)
{
	int tp = (t + 15) / 16 * 16;
	float *q = ws, *kt = q + (size_t)t * d, *v = kt + (size_t)d * tp;
	float *s = v + (size_t)t * d;
	VN(attn_gather)(qkv, t, c, d, h, 0, scale, tp, q, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, 1.0f, tp, NULL, kt);
	VN(attn_gather)(qkv, t, c, d, h, 2, 1.0f, tp, v, NULL);
	for (int i = 0; i < t; i++) {
		VN(attn_scores)(q + (size_t)i * d, kt, d, tp, i + 1, s);
		VN(attn_softmax)(s, i + 1);
		VN(attn_pv)(s, i + 1, v, d, y + (size_t)i * c + (size_t)h * d);
	}
}

/* The gradient of head h of one example: qkv (t, 3c), dy (t, c) -> its
 * columns of dqkv (t, 3c).  ws as attn_head_fwd. */
static VT void VN(attn_head_bwd)(int t, int c, int d, int h, float scale,
				 const float *restrict qkv,
				 const float *restrict dy, float *restrict dqkv,
				 float *restrict ws)
{
	int tp = (t + 15) / 16 * 16;
	size_t td = (size_t)t * d, dtp = (size_t)d * tp;
	float *q = ws, *k = q + td, *kt = k + td, *vt = kt + dtp;
	float *dyh = vt + dtp, *dk = dyh + td, *dv = dk + td;
	float *s = dv + td, *dp = s + tp;
	VN(attn_gather)(qkv, t, c, d, h, 0, scale, tp, q, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, scale, tp, k, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, 1.0f, tp, NULL, kt);
	VN(attn_gather)(qkv, t, c, d, h, 2, 1.0f, tp, NULL, vt);
	for (int i = 0; i < t; i++)
		memcpy(dyh + (size_t)i * d, dy + (size_t)i * c + (size_t)h * d,
		       (size_t)d * sizeof(float));
	memset(dk, 0, 2 * td * sizeof(float));
	for (int i = 0; i < t; i++) {
		const float *qi = q + (size_t)i * d, *dyi = dyh + (size_t)i * d;
		int n = i + 1, nr = VN(attn_nr)(n);
		VN(attn_scores)(qi, kt, d, tp, n, s);
		VN(attn_softmax)(s, n);
		VN(attn_scores)(dyi, vt, d, tp, n, dp);
		/* delta = sum_j P_ij dP_ij; dS = P (dP - delta) into dp */
		VF acc = VZERO();
		for (int j = 0; j < nr; j += DTF_VW)
			acc = VFMA(VLOAD(s + j), VLOAD(dp + j), acc);
		VF delta = VSET1(VN(attn_hsum)(acc));
		for (int j = 0; j < nr; j += DTF_VW)
			VSTORE(dp + j, VMUL(VLOAD(s + j), VSUB(VLOAD(dp + j), delta)));
		/* dq_i = scale sum_j dS_ij k_j (k holds scale k) */
		VN(attn_pv)(dp, n, k, d,
			    dqkv + (size_t)i * 3 * c + (size_t)h * d);
		for (int j = 0; j < n; j++) {
			/* dk_j += scale dS_ij q_i (q holds scale q) */
			VN(attn_axpy)(dp[j], qi, d, dk + (size_t)j * d);
			VN(attn_axpy)(s[j], dyi, d, dv + (size_t)j * d);
		}
	}
	for (int i = 0; i < t; i++) {
		float *row = dqkv + (size_t)i * 3 * c + (size_t)h * d;
		memcpy(row + c, dk + (size_t)i * d, (size_t)d * sizeof(float));
		memcpy(row + 2 * (size_t)c, dv + (size_t)i * d,
		       (size_t)d * sizeof(float));
	}
}
