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

/* o + r os (d) (+)= sum_{j < n} w(r, j) v[j d + .] for r < 4, each row of
 * v loaded once for all four, where w(r, j) = w[r rs + j js]: rows of
 * weights (rs = tp, js = 1: attn_pv for four query rows, each zero from
 * its own length to n) or columns of them (rs = 1, js = tp: the transposed
 * product, four keys' gradients from the rows of a block).  Adds to o when
 * add != 0; sums run over j in order either way. */
static inline VT void VN(attn_pv4s)(const float *restrict w, size_t rs,
				    size_t js, int n,
				    const float *restrict v, int d,
				    float *restrict o, size_t os, int add)
{
	const float *w1 = w + rs, *w2 = w1 + rs, *w3 = w2 + rs;
	float *o1 = o + os, *o2 = o1 + os, *o3 = o2 + os;
	int k = 0;
#define PV4_INIT(p) (add ? VLOAD(p) : VZERO())
	for (; k + 2 * DTF_VW <= d; k += 2 * DTF_VW) {
		VF a00 = PV4_INIT(o + k), a01 = PV4_INIT(o + k + DTF_VW);
		VF a10 = PV4_INIT(o1 + k), a11 = PV4_INIT(o1 + k + DTF_VW);
		VF a20 = PV4_INIT(o2 + k), a21 = PV4_INIT(o2 + k + DTF_VW);
		VF a30 = PV4_INIT(o3 + k), a31 = PV4_INIT(o3 + k + DTF_VW);
		for (int j = 0; j < n; j++) {
			const float *r = v + (size_t)j * d + k;
			size_t wj = (size_t)j * js;
			VF v0 = VLOAD(r), v1 = VLOAD(r + DTF_VW);
			VF b0 = VSET1(w[wj]), b1 = VSET1(w1[wj]);
			VF b2 = VSET1(w2[wj]), b3 = VSET1(w3[wj]);
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
		VSTORE(o1 + k, a10);
		VSTORE(o1 + k + DTF_VW, a11);
		VSTORE(o2 + k, a20);
		VSTORE(o2 + k + DTF_VW, a21);
		VSTORE(o3 + k, a30);
		VSTORE(o3 + k + DTF_VW, a31);
	}
	for (; k + DTF_VW <= d; k += DTF_VW) {
		VF a0 = PV4_INIT(o + k), a1 = PV4_INIT(o1 + k);
		VF a2 = PV4_INIT(o2 + k), a3 = PV4_INIT(o3 + k);
		for (int j = 0; j < n; j++) {
			VF vv = VLOAD(v + (size_t)j * d + k);
			size_t wj = (size_t)j * js;
			a0 = VFMA(VSET1(w[wj]), vv, a0);
			a1 = VFMA(VSET1(w1[wj]), vv, a1);
			a2 = VFMA(VSET1(w2[wj]), vv, a2);
			a3 = VFMA(VSET1(w3[wj]), vv, a3);
		}
		VSTORE(o + k, a0);
		VSTORE(o1 + k, a1);
		VSTORE(o2 + k, a2);
		VSTORE(o3 + k, a3);
	}
#undef PV4_INIT
	for (; k < d; k++)
		for (int r = 0; r < 4; r++) {
			float a = add ? o[(size_t)r * os + k] : 0.0f;
			for (int j = 0; j < n; j++)
				a += w[(size_t)r * rs + (size_t)j * js] *
				     v[(size_t)j * d + k];
			o[(size_t)r * os + k] = a;
		}
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
		VN(attn_pv4s)(s, (size_t)tp, 1, i + 4, v, d,
			      y + (size_t)i * c + (size_t)h * d, (size_t)c, 0);
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
 * columns of dqkv (t, 3c).  Query rows in blocks of ATTN_QB, four at a
 * time as the forward: each row's probabilities P and score gradients dS
 * are recomputed into the block's buffers and give dQ at once; then dK =
 * dS^T Q and dV = P^T dY over the block's rows, four keys at a time with
 * their sums in registers (attn_pv4s over columns).  Every sum runs over
 * query rows in order.  ws: fast_attention.c's thread_floats(t, d)
 * floats. */
static VT void VN(attn_head_bwd)(int t, int c, int d, int h, float scale,
				 const float *restrict qkv,
				 const float *restrict dy, float *restrict dqkv,
				 float *restrict ws)
{
	int tp = (t + 15) / 16 * 16, t4 = (t + 3) / 4 * 4;
	size_t td = (size_t)t * d, t4d = (size_t)t4 * d, dtp = (size_t)d * tp;
	size_t c3 = 3 * (size_t)c, bs = (size_t)ATTN_QB * tp;
	float *q = ws, *k = q + td, *dyh = k + td, *kt = dyh + td;
	float *vt = kt + dtp, *dk = vt + dtp, *dv = dk + t4d;
	float *pb = dv + t4d, *db = pb + bs;
	VN(attn_gather)(qkv, t, c, d, h, 0, scale, tp, q, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, scale, tp, k, NULL);
	VN(attn_gather)(qkv, t, c, d, h, 1, 1.0f, tp, NULL, kt);
	VN(attn_gather)(qkv, t, c, d, h, 2, 1.0f, tp, NULL, vt);
	for (int r = 0; r < t; r++)
		memcpy(dyh + (size_t)r * d, dy + (size_t)r * c + (size_t)h * d,
		       (size_t)d * sizeof(float));
	memset(dk, 0, 2 * t4d * sizeof(float));
	for (int i0 = 0; i0 < t; i0 += ATTN_QB) {
		int i1 = i0 + ATTN_QB < t ? i0 + ATTN_QB : t, i = i0;
		for (; i + 4 <= i1; i += 4) {
			float *s = pb + (size_t)(i - i0) * tp;
			float *dp = db + (size_t)(i - i0) * tp;
			VN(attn_scores4)(q + (size_t)i * d, kt, d, tp, i + 4, s);
			VN(attn_scores4)(dyh + (size_t)i * d, vt, d, tp, i + 4, dp);
			for (int r = 0; r < 4; r++) {
				float *sr = s + (size_t)r * tp, *dr = dp + (size_t)r * tp;
				VN(attn_softmax)(sr, i + r + 1);
				VN(attn_ds)(sr, dr, i + r + 1);
				for (int j = i + r + 1; j < i + 4; j++)
					sr[j] = dr[j] = 0.0f;
			}
			/* dq_i = scale sum_j dS_ij k_j (k holds scale k) */
			VN(attn_pv4s)(dp, (size_t)tp, 1, i + 4, k, d,
				      dqkv + (size_t)i * c3 + (size_t)h * d, c3, 0);
		}
		for (; i < i1; i++) {
			float *s = pb + (size_t)(i - i0) * tp;
			float *dp = db + (size_t)(i - i0) * tp;
			int n = i + 1;
			VN(attn_scores)(q + (size_t)i * d, kt, d, tp, n, s);
			VN(attn_softmax)(s, n);
			VN(attn_scores)(dyh + (size_t)i * d, vt, d, tp, n, dp);
			VN(attn_ds)(s, dp, n);
			/* zeros to the end of the last group of four keys */
			for (int j = n; j < (n + 3) / 4 * 4; j++)
				s[j] = dp[j] = 0.0f;
			VN(attn_pv)(dp, n, k, d, dqkv + (size_t)i * c3 + (size_t)h * d);
		}
		/* dk_j += scale sum_i dS_ij q_i (q holds scale q), dv_j +=
		 * sum_i P_ij dy_i, over the block's rows i >= j (the rest of
		 * each column is zero: causal) */
		for (int j = 0; j < i1; j += 4) {
			int is = j > i0 ? j : i0;
			size_t at = (size_t)(is - i0) * tp + (size_t)j;
			VN(attn_pv4s)(db + at, 1, (size_t)tp, i1 - is, q + (size_t)is * d,
				      d, dk + (size_t)j * d, (size_t)d, 1);
			VN(attn_pv4s)(pb + at, 1, (size_t)tp, i1 - is, dyh + (size_t)is * d,
				      d, dv + (size_t)j * d, (size_t)d, 1);
		}
	}
	for (int r = 0; r < t; r++) {
		float *row = dqkv + (size_t)r * c3 + (size_t)h * d;
		memcpy(row + c, dk + (size_t)r * d, (size_t)d * sizeof(float));
		memcpy(row + 2 * (size_t)c, dv + (size_t)r * d,
		       (size_t)d * sizeof(float));
	}
}
