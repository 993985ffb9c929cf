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

/* VN(vexp), VN(vhsum), VN(vhmax) */
#include "ops/cpu/vmath_isa.h"

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
	VF vm = VSET1(VN(vhmax)(m));
	for (int j = 0; j < nr; j += DTF_VW)
		VSTORE(s + j, VN(vexp)(VSUB(VLOAD(s + j), vm)));
	for (int j = n; j < nr; j++)
		s[j] = 0.0f;
	VF sum = VZERO();
	for (int j = 0; j < nr; j += DTF_VW)
		sum = VADD(sum, VLOAD(s + j));
	VF inv = VSET1(1.0f / VN(vhsum)(sum));
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

/* attn_scores for 4 rows x (d apart) at once, each kt load serving all
 * four: s + r tp, r < 4, for keys j < n rounded up to whole vectors. */
static inline VT void VN(attn_scores4)(const float *restrict x,
				       const float *restrict kt, int d, int tp,
				       int n, float *restrict s)
{
	int nr = VN(attn_nr)(n), j = 0;
	const float *x1 = x + d, *x2 = x1 + d, *x3 = x2 + d;
	for (; j + 2 * DTF_VW <= nr; j += 2 * DTF_VW) {
		VF a00 = VZERO(), a01 = VZERO(), a10 = VZERO(), a11 = VZERO();
		VF a20 = VZERO(), a21 = VZERO(), a30 = VZERO(), a31 = VZERO();
		for (int k = 0; k < d; k++) {
			const float *r = kt + (size_t)k * tp + j;
			VF k0 = VLOAD(r), k1 = VLOAD(r + DTF_VW);
			VF b0 = VSET1(x[k]), b1 = VSET1(x1[k]);
			VF b2 = VSET1(x2[k]), b3 = VSET1(x3[k]);
			a00 = VFMA(b0, k0, a00);
			a01 = VFMA(b0, k1, a01);
			a10 = VFMA(b1, k0, a10);
			a11 = VFMA(b1, k1, a11);
			a20 = VFMA(b2, k0, a20);
			a21 = VFMA(b2, k1, a21);
			a30 = VFMA(b3, k0, a30);
			a31 = VFMA(b3, k1, a31);
		}
		VSTORE(s + j, a00);
		VSTORE(s + j + DTF_VW, a01);
		VSTORE(s + tp + j, a10);
		VSTORE(s + tp + j + DTF_VW, a11);
		VSTORE(s + 2 * tp + j, a20);
		VSTORE(s + 2 * tp + j + DTF_VW, a21);
		VSTORE(s + 3 * tp + j, a30);
		VSTORE(s + 3 * tp + j + DTF_VW, a31);
	}
	for (; j < nr; j += DTF_VW) {
		VF a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
		for (int k = 0; k < d; k++) {
			VF kv = VLOAD(kt + (size_t)k * tp + j);
			a0 = VFMA(VSET1(x[k]), kv, a0);
			a1 = VFMA(VSET1(x1[k]), kv, a1);
			a2 = VFMA(VSET1(x2[k]), kv, a2);
			a3 = VFMA(VSET1(x3[k]), kv, a3);
		}
		VSTORE(s + j, a0);
		VSTORE(s + tp + j, a1);
		VSTORE(s + 2 * tp + j, a2);
		VSTORE(s + 3 * tp + j, a3);
	}
}

/* attn_pv for 4 rows of weights (p + r tp, each zero from its own length
 * to n) at once, each row of v loaded once for all four: o + r os. */
static inline VT void VN(attn_pv4)(const float *restrict p, int tp, int n,
				   const float *restrict v, int d,
				   float *restrict o, size_t os)
{
	const float *p1 = p + tp, *p2 = p1 + tp, *p3 = p2 + tp;
	int k = 0;
	for (; k + 2 * DTF_VW <= d; k += 2 * DTF_VW) {
		VF a00 = VZERO(), a01 = VZERO(), a10 = VZERO(), a11 = VZERO();
		VF a20 = VZERO(), a21 = VZERO(), a30 = VZERO(), a31 = VZERO();
		for (int j = 0; j < n; j++) {
			const float *r = v + (size_t)j * d + k;
			VF v0 = VLOAD(r), v1 = VLOAD(r + DTF_VW);
			VF b0 = VSET1(p[j]), b1 = VSET1(p1[j]);
			VF b2 = VSET1(p2[j]), b3 = VSET1(p3[j]);
			a00 = VFMA(b0, v0, a00);
			a01 = VFMA(b0, v1, a01);
			a10 = VFMA(b1, v0, a10);
			a11 = VFMA(b1, v1, a11);
			a20 = VFMA(b2, v0, a20);
			a21 = VFMA(b2, v1, a21);
			a30 = VFMA(b3, v0, a30);
			a31 = VFMA(b3, v1, a31);
		}
		VSTORE(o + k, a00);
		VSTORE(o + k + DTF_VW, a01);
		VSTORE(o + os + k, a10);
		VSTORE(o + os + k + DTF_VW, a11);
		VSTORE(o + 2 * os + k, a20);
		VSTORE(o + 2 * os + k + DTF_VW, a21);
		VSTORE(o + 3 * os + k, a30);
		VSTORE(o + 3 * os + k + DTF_VW, a31);
	}
	for (; k + DTF_VW <= d; k += DTF_VW) {
		VF a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
		for (int j = 0; j < n; j++) {
			VF vv = VLOAD(v + (size_t)j * d + k);
			a0 = VFMA(VSET1(p[j]), vv, a0);
			a1 = VFMA(VSET1(p1[j]), vv, a1);
			a2 = VFMA(VSET1(p2[j]), vv, a2);
			a3 = VFMA(VSET1(p3[j]), vv, a3);
		}
		VSTORE(o + k, a0);
		VSTORE(o + os + k, a1);
		VSTORE(o + 2 * os + k, a2);
		VSTORE(o + 3 * os + k, a3);
	}
	for (; k < d; k++)
		for (int r = 0; r < 4; r++) {
			float a = 0.0f;
			for (int j = 0; j < n; j++)
				a += p[(size_t)r * tp + j] * v[(size_t)j * d + k];
			o[(size_t)r * os + k] = a;
		}
}

/* y (d) += sum_r a[r tp] x[r d + .], r < 4: one pass over y for four
 * rows' contributions. */
static inline VT void VN(attn_axpy4)(const float *restrict a, int tp,
				     const float *restrict x, int d,
				     float *restrict y)
{
	VF b0 = VSET1(a[0]), b1 = VSET1(a[tp]), b2 = VSET1(a[2 * tp]);
	VF b3 = VSET1(a[3 * tp]);
	const float *x1 = x + d, *x2 = x1 + d, *x3 = x2 + d;
	int k = 0;
	for (; k + DTF_VW <= d; k += DTF_VW) {
		VF acc = VLOAD(y + k);
		acc = VFMA(b0, VLOAD(x + k), acc);
		acc = VFMA(b1, VLOAD(x1 + k), acc);
		acc = VFMA(b2, VLOAD(x2 + k), acc);
		acc = VFMA(b3, VLOAD(x3 + k), acc);
		VSTORE(y + k, acc);
	}
	for (; k < d; k++)
		y[k] += a[0] * x[k] + a[tp] * x1[k] + a[2 * tp] * x2[k] +
			a[3 * tp] * x3[k];
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

/* Head h of one example: qkv (t, 3c) -> its columns of y (t, c).  Query
 * rows four at a time (attn_scores4, attn_pv4), the last t % 4 one by
 * one.  ws: fast_attention.c's thread_floats(t, d) floats. */
static VT void VN(attn_head_fwd)(int t, int c, int d, int h, float scale,
				 const float *restrict qkv, float *restrict y,
				 float *restrict ws)
{
	int tp = (t + 15) / 16 * 16, i = 0;
	float *q = ws, *kt = q + (size_t)t * d, *v = kt + (size_t)d * tp;
	float *s = v + (size_t)t * d;
	VN(attn_gather)(qkv, t, c, d, h, 0, scale, tp, q, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, 1.0f, tp, NULL, kt);
	VN(attn_gather)(qkv, t, c, d, h, 2, 1.0f, tp, v, NULL);
	for (; i + 4 <= t; i += 4) {
		VN(attn_scores4)(q + (size_t)i * d, kt, d, tp, i + 4, s);
		for (int r = 0; r < 4; r++) {
			VN(attn_softmax)(s + (size_t)r * tp, i + r + 1);
			for (int j = i + r + 1; j < i + 4; j++)
				s[(size_t)r * tp + j] = 0.0f;
		}
		VN(attn_pv4)(s, tp, i + 4, v, d, y + (size_t)i * c + (size_t)h * d,
			     (size_t)c);
	}
	for (; i < t; i++) {
		VN(attn_scores)(q + (size_t)i * d, kt, d, tp, i + 1, s);
		VN(attn_softmax)(s, i + 1);
		VN(attn_pv)(s, i + 1, v, d, y + (size_t)i * c + (size_t)h * d);
	}
}

/* dS = P (dP - delta) of one row of n keys (p, dp rounded up to whole
 * vectors, p zero past n), into dp; delta = sum_j P_j dP_j. */
static inline VT void VN(attn_ds)(const float *restrict p, float *restrict dp,
				  int n)
{
	int nr = VN(attn_nr)(n);
	VF acc = VZERO();
	for (int j = 0; j < nr; j += DTF_VW)
		acc = VFMA(VLOAD(p + j), VLOAD(dp + j), acc);
	VF delta = VSET1(VN(vhsum)(acc));
	for (int j = 0; j < nr; j += DTF_VW)
		VSTORE(dp + j, VMUL(VLOAD(p + j), VSUB(VLOAD(dp + j), delta)));
}

/* The gradient of head h of one example: qkv (t, 3c), dy (t, c) -> its
 * columns of dqkv (t, 3c).  Query rows four at a time as the forward; dK
 * and dV take the four rows' contributions in one pass (attn_axpy4).
 * ws as attn_head_fwd. */
static VT void VN(attn_head_bwd)(int t, int c, int d, int h, float scale,
				 const float *restrict qkv,
				 const float *restrict dy, float *restrict dqkv,
				 float *restrict ws)
{
	int tp = (t + 15) / 16 * 16, i = 0;
	size_t td = (size_t)t * d, dtp = (size_t)d * tp, c3 = 3 * (size_t)c;
	float *q = ws, *k = q + td, *kt = k + td, *vt = kt + dtp;
	float *dyh = vt + dtp, *dk = dyh + td, *dv = dk + td;
	float *s = dv + td, *dp = s + 4 * (size_t)tp;
	VN(attn_gather)(qkv, t, c, d, h, 0, scale, tp, q, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, scale, tp, k, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, 1.0f, tp, NULL, kt);
	VN(attn_gather)(qkv, t, c, d, h, 2, 1.0f, tp, NULL, vt);
	for (int r = 0; r < t; r++)
		memcpy(dyh + (size_t)r * d, dy + (size_t)r * c + (size_t)h * d,
		       (size_t)d * sizeof(float));
	memset(dk, 0, 2 * td * sizeof(float));
	for (; i + 4 <= t; i += 4) {
		const float *qi = q + (size_t)i * d, *dyi = dyh + (size_t)i * d;
		VN(attn_scores4)(qi, kt, d, tp, i + 4, s);
		VN(attn_scores4)(dyi, vt, d, tp, i + 4, dp);
		for (int r = 0; r < 4; r++) {
			float *sr = s + (size_t)r * tp, *dr = dp + (size_t)r * tp;
			VN(attn_softmax)(sr, i + r + 1);
			VN(attn_ds)(sr, dr, i + r + 1);
			for (int j = i + r + 1; j < i + 4; j++)
				sr[j] = dr[j] = 0.0f;
		}
		/* dq_i = scale sum_j dS_ij k_j (k holds scale k) */
		VN(attn_pv4)(dp, tp, i + 4, k, d, dqkv + (size_t)i * c3 + (size_t)h * d,
			     c3);
		/* dk_j += scale dS_ij q_i (q holds scale q), dv_j += P_ij dy_i */
		for (int j = 0; j < i + 4; j++) {
			VN(attn_axpy4)(dp + j, tp, qi, d, dk + (size_t)j * d);
			VN(attn_axpy4)(s + j, tp, dyi, d, dv + (size_t)j * d);
		}
	}
	for (; i < t; i++) {
		const float *qi = q + (size_t)i * d, *dyi = dyh + (size_t)i * d;
		int n = i + 1;
		VN(attn_scores)(qi, kt, d, tp, n, s);
		VN(attn_softmax)(s, n);
		VN(attn_scores)(dyi, vt, d, tp, n, dp);
		VN(attn_ds)(s, dp, n);
		VN(attn_pv)(dp, n, k, d, dqkv + (size_t)i * c3 + (size_t)h * d);
		for (int j = 0; j < n; j++) {
			VN(attn_axpy)(dp[j], qi, d, dk + (size_t)j * d);
			VN(attn_axpy)(s[j], dyi, d, dv + (size_t)j * d);
		}
	}
	for (int r = 0; r < t; r++) {
		float *row = dqkv + (size_t)r * c3 + (size_t)h * d;
		memcpy(row + c, dk + (size_t)r * d, (size_t)d * sizeof(float));
		memcpy(row + 2 * (size_t)c, dv + (size_t)r * d,
		       (size_t)d * sizeof(float));
	}
}
