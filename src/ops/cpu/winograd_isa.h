/*
 * winograd_isa.h - the tile transforms of winograd.c for one vector width
 * (DTF_VW channels per vector, vec.h): included by winograd.c once per
 * width, it defines VN(in_transform), VN(out_transform), VN(dy_transform),
 * VN(filter_transform) and VN(filter_inverse).  Both widths do the same
 * float operations per channel, so they give the same bits.
 */

/* ---- the 1-D transforms, DTF_VW channels per vector ---------------------- */

#define ADD VADD
#define SUB VSUB
#define MUL(a, s) VMUL(a, VSET1(s))
#define FMA(a, s, c) VFMA(a, VSET1(s), c)

/* out = B^T d (6 points) */
static inline __attribute__((always_inline)) VT void
VN(bt6)(const VF *d, VF *out)
{
	VF d4 = d[4];
	out[0] = FMA(d[0], 4.0f, FMA(d[2], -5.0f, d4));
	out[1] = FMA(ADD(d[1], d[2]), -4.0f, ADD(d[3], d4));
	out[2] = FMA(SUB(d[1], d[2]), 4.0f, SUB(d4, d[3]));
	out[3] = FMA(SUB(d[3], d[1]), 2.0f, SUB(d4, d[2]));
	out[4] = FMA(SUB(d[1], d[3]), 2.0f, SUB(d4, d[2]));
	out[5] = FMA(d[1], 4.0f, FMA(d[3], -5.0f, d[5]));
}

/*
 * The 8-point transforms of F(4x4, 5x5): points p = 0, 1, -1, 2, -2, 1/2,
 * -1/2 and infinity (index order), the same Toom-Cook construction as
 * above (see the top of this file), so with s = (-1, -2/9, -2/9, 1/90,
 * 1/90, 32/45, 32/45):
 *     B^T row j < 7 = the coefficients of prod over l != j of (x - p_l),
 *     B^T row 7     = those of prod over all l of (x - p_l),
 *     G[j][k] = s_j p_j^k,   A^T[i][j] = p_j^i   (j < 7).
 * Rows for +a and -a share an even and an odd part: (x +- a) E_a(x).
 */

/* out = B^T d (8 points) */
static inline __attribute__((always_inline)) VT void
VN(bt8)(const VF *d, VF *out)
{
	VF e, o;
	out[0] = FMA(SUB(d[2], d[4]), 5.25f, SUB(d[6], d[0]));
	e = FMA(d[4], -4.25f, ADD(d[2], d[6]));
	o = FMA(d[3], -4.25f, ADD(d[1], d[5]));
	out[1] = ADD(e, o);
	out[2] = SUB(e, o);
	e = FMA(d[2], 0.25f, FMA(d[4], -1.25f, d[6]));
	o = FMA(d[1], 0.5f, FMA(d[3], -2.5f, MUL(d[5], 2.0f)));
	out[3] = ADD(e, o);
	out[4] = SUB(e, o);
	e = FMA(d[2], 4.0f, FMA(d[4], -5.0f, d[6]));
	o = FMA(d[1], 2.0f, FMA(d[3], -2.5f, MUL(d[5], 0.5f)));
	out[5] = ADD(e, o);
	out[6] = SUB(e, o);
	out[7] = FMA(SUB(d[3], d[5]), 5.25f, SUB(d[7], d[1]));
}

/* sum[q], dif[q] = x at +a_q plus, minus x at -a_q, for np pairs */
static inline __attribute__((always_inline)) VT void
VN(pair_sums)(const VF *x, VF *sum, VF *dif, const int np)
{
	for (int q = 0; q < np; q++) {
		sum[q] = ADD(x[1 + 2 * q], x[2 + 2 * q]);
		dif[q] = SUB(x[1 + 2 * q], x[2 + 2 * q]);
	}
}

/* out (m) = A^T z (N) */
static inline __attribute__((always_inline)) VT void
VN(at_n)(const VF *z, VF *out, const int m, const int N)
{
	const int np = (N - 2) / 2;
	VF sum[3], dif[3];
	VN(pair_sums)(z, sum, dif, np);
	for (int i = 0; i < m; i++) {
		const VF *x = i % 2 == 0 ? sum : dif;
		VF v = x[0];
		for (int q = 1; q < np; q++)
			v = FMA(x[q], pw(pair_point(q), i), v);
		if (i == 0)
			v = ADD(v, z[0]);
		if (i == m - 1)
			v = ADD(v, z[N - 1]);
		out[i] = v;
	}
}

/* out (N) = A y (m): the adjoint of at_n */
static inline __attribute__((always_inline)) VT void
VN(a_n)(const VF *y, VF *out, const int m, const int N)
{
	const int np = (N - 2) / 2;
	VF e[3], o[3];
	for (int q = 0; q < np; q++) {
		e[q] = y[0];
		o[q] = VZERO();
	}
	for (int i = 1; i < m; i++)
		for (int q = 0; q < np; q++) {
			VF *t = i % 2 == 0 ? &e[q] : &o[q];
			*t = q == 0 ? ADD(*t, y[i])
				    : FMA(y[i], pw(pair_point(q), i), *t);
		}
	out[0] = y[0];
	for (int q = 0; q < np; q++) {
		out[1 + 2 * q] = ADD(e[q], o[q]);
		out[2 + 2 * q] = SUB(e[q], o[q]);
	}
	out[N - 1] = y[m - 1];
}

/* out (N) = G g (r): A's rows j < N - 1 scaled by s_j */
static inline __attribute__((always_inline)) VT void
VN(g_n)(const VF *g, VF *out, const int r, const int N)
{
	VN(a_n)(g, out, r, N);
	out[0] = MUL(out[0], pair_scale(N, -1));
	for (int q = 0; q < (N - 2) / 2; q++) {
		out[1 + 2 * q] = MUL(out[1 + 2 * q], pair_scale(N, q));
		out[2 + 2 * q] = MUL(out[2 + 2 * q], pair_scale(N, q));
	}
}

/* out (r) = G^T u (N): the adjoint of g_n */
static inline __attribute__((always_inline)) VT void
VN(gt_n)(const VF *u, VF *out, const int r, const int N)
{
	const int np = (N - 2) / 2;
	VF sum[3], dif[3];
	VN(pair_sums)(u, sum, dif, np);
	for (int k = 0; k < r; k++) {
		const VF *x = k % 2 == 0 ? sum : dif;
		VF v = MUL(x[0], pair_scale(N, 0));
		for (int q = 1; q < np; q++)
			v = FMA(x[q], pair_scale(N, q) * pw(pair_point(q), k), v);
		if (k == 0)
			v = FMA(u[0], pair_scale(N, -1), v);
		if (k == r - 1)
			v = ADD(v, u[N - 1]);
		out[k] = v;
	}
}

/* B^T d for either tile side (N a literal at every call) */
#define BT_N(N, d, o) ((N) == 8 ? VN(bt8)(d, o) : VN(bt6)(d, o))

/* out (N x N) = F in F^T for an n x n block `in` (in[a][b], n = m or r):
 * F = A (the dy tiles of the filter gradient) or, with gscale, F = G (the
 * filter) */
static inline __attribute__((always_inline)) VT void
VN(spread)(const VF in[5][5], VF out[8][8], const int n, const int gscale,
       const int N)
{
	VF tmp[8][5], col[5], cN[8];
	for (int b = 0; b < n; b++) {
		for (int a = 0; a < n; a++)
			col[a] = in[a][b];
		if (gscale)
			VN(g_n)(col, cN, n, N);
		else
			VN(a_n)(col, cN, n, N);
		for (int j = 0; j < N; j++)
			tmp[j][b] = cN[j];
	}
	for (int j = 0; j < N; j++) {
		if (gscale)
			VN(g_n)(tmp[j], out[j], n, N);
		else
			VN(a_n)(tmp[j], out[j], n, N);
	}
}

/* V[xi][t][c] = B^T d B for every tile t of padded image xp. */
static inline __attribute__((always_inline)) VT void
VN(in_transform_n)(const struct wgeo *q, const float *xp, float *restrict V,
	       const int N)
{
	const int C = q->c;
	const size_t vs = q->vs; /* V's stride between points */
	for (int ty = 0; ty < q->th; ty++)
		for (int tx = 0; tx < q->tw; tx++) {
			const int t = ty * q->tw + tx;
			const float *base = xp + ((size_t)ty * q->m * q->wp + (size_t)tx * q->m) * C;
			for (int c0 = 0; c0 < C; c0 += DTF_VW) {
				VF tmp[8][8], d[8], col[8];
				for (int j = 0; j < N; j++) {
					for (int i = 0; i < N; i++)
						d[i] = VLOAD(base + ((size_t)i * q->wp + j) * C + c0);
					BT_N(N, d, col);
					for (int i = 0; i < N; i++)
						tmp[i][j] = col[i];
				}
				float *v = V + (size_t)t * C + c0;
				for (int i = 0; i < N; i++) {
					VF out[8];
					BT_N(N, tmp[i], out);
					for (int k = 0; k < N; k++)
						VSTORE(v + (size_t)(i * N + k) * vs, out[k]);
				}
			}
		}
}

static VT void VN(in_transform)(const struct wgeo *q, const float *xp,
				  float *V)
{
	if (q->n == 8)
		VN(in_transform_n)(q, xp, V, 8);
	else
		VN(in_transform_n)(q, xp, V, 6);
}

/* y (oh, ow, o) = act(A^T M A + bias) for every tile; outputs past oh/ow
 * are dropped. */
static inline __attribute__((always_inline)) VT void
VN(out_transform_m)(const struct wgeo *q, const float *restrict M,
		const float *restrict bias, int relu,
		const unsigned char *restrict wz, float *restrict y,
		const int m, const int N)
{
	const int O = q->o;
	const size_t ms = q->ms;
	const VF zero = VZERO();
	for (int ty = 0; ty < q->th; ty++)
		for (int tx = 0; tx < q->tw; tx++) {
			const int t = ty * q->tw + tx;
			const int nr = q->oh - ty * m < m ? q->oh - ty * m : m;
			const int nc = q->ow - tx * m < m ? q->ow - tx * m : m;
			for (int o0 = 0; o0 < O; o0 += DTF_VW) {
				const float *z = M + (size_t)t * O + o0;
				VF tmp[8][8], col[8], out[8];
				for (int k = 0; k < N; k++) {
					VF zz[8];
					for (int j = 0; j < N; j++)
						zz[j] = VLOAD(z + (size_t)(j * N + k) * ms);
					VN(at_n)(zz, col, m, N);
					for (int i = 0; i < m; i++)
						tmp[i][k] = col[i];
				}
				VF b = bias ? VLOAD(bias + o0) : zero;
				for (int i = 0; i < nr; i++) {
					VN(at_n)(tmp[i], out, m, N);
					float *yr = y + ((size_t)(ty * m + i) * q->ow + (size_t)tx * m) * O + o0;
					const unsigned char *zr = wz ? wz + (size_t)(ty * m + i) * q->ow + (size_t)tx * m : NULL;
					for (int k = 0; k < nc; k++) {
						VF v = zr && zr[k] ? b : ADD(out[k], b);
						if (relu)
							v = VMAX(v, zero);
						VSTORE(yr + (size_t)k * O, v);
					}
				}
			}
		}
}

static VT void VN(out_transform)(const struct wgeo *q, const float *M,
				   const float *bias, int relu,
				   const unsigned char *wz, float *y)
{
	if (q->n == 8)
		VN(out_transform_m)(q, M, bias, relu, wz, y, 4, 8);
	else if (q->m == 3)
		VN(out_transform_m)(q, M, bias, relu, wz, y, 3, 6);
	else
		VN(out_transform_m)(q, M, bias, relu, wz, y, 4, 6);
}

/* dM[xi][t][o] = A dy A^T for every tile of one image's dy (oh, ow, o),
 * zeros past oh/ow. */
static inline __attribute__((always_inline)) VT void
VN(dy_transform_m)(const struct wgeo *q, const float *restrict dy,
	       float *restrict dM, const int m, const int N)
{
	const int O = q->o;
	const size_t ms = q->ms;
	const VF zero = VZERO();
	for (int ty = 0; ty < q->th; ty++)
		for (int tx = 0; tx < q->tw; tx++) {
			const int t = ty * q->tw + tx;
			const int nr = q->oh - ty * m < m ? q->oh - ty * m : m;
			const int nc = q->ow - tx * m < m ? q->ow - tx * m : m;
			for (int o0 = 0; o0 < O; o0 += DTF_VW) {
				VF in[5][5], out[8][8];
				for (int i = 0; i < m; i++)
					for (int k = 0; k < m; k++)
						in[i][k] = i < nr && k < nc
							? VLOAD(dy + ((size_t)(ty * m + i) * q->ow + (size_t)tx * m + k) * O + o0)
							: zero;
				VN(spread)(in, out, m, 0, N);
				float *d = dM + (size_t)t * O + o0;
				for (int j = 0; j < N; j++)
					for (int l = 0; l < N; l++)
						VSTORE(d + (size_t)(j * N + l) * ms, out[j][l]);
			}
		}
}

static VT void VN(dy_transform)(const struct wgeo *q, const float *dy,
				  float *dM)
{
	if (q->n == 8)
		VN(dy_transform_m)(q, dy, dM, 4, 8);
	else if (q->m == 3)
		VN(dy_transform_m)(q, dy, dM, 3, 6);
	else
		VN(dy_transform_m)(q, dy, dM, 4, 6);
}

/* U[xi][c][o] = G g G^T for input channels [c_lo, c_hi) of filter
 * w (r, r, C, O) (vectors along o). */
static inline __attribute__((always_inline)) VT void
VN(filter_transform_r)(const float *restrict w, int C, int O, int c_lo, int c_hi,
		   float *restrict U, const int r, const int N)
{
	const size_t us = (size_t)C * O;
	for (int c = c_lo; c < c_hi; c++)
		for (int o0 = 0; o0 < O; o0 += DTF_VW) {
			VF in[5][5], out[8][8];
			for (int a = 0; a < r; a++)
				for (int b = 0; b < r; b++)
					in[a][b] = VLOAD(w + (((size_t)a * r + b) * C + c) * O + o0);
			VN(spread)(in, out, r, 1, N);
			float *u = U + (size_t)c * O + o0;
			for (int j = 0; j < N; j++)
				for (int k = 0; k < N; k++)
					VSTORE(u + (size_t)(j * N + k) * us, out[j][k]);
		}
}

static VT void VN(filter_transform)(const float *w, int r, int C, int O,
				      int c_lo, int c_hi, float *U)
{
	switch (r) {
	case 3: VN(filter_transform_r)(w, C, O, c_lo, c_hi, U, 3, 6); break;
	case 4: VN(filter_transform_r)(w, C, O, c_lo, c_hi, U, 4, 6); break;
	default: VN(filter_transform_r)(w, C, O, c_lo, c_hi, U, 5, 8); break;
	}
}

/* dw (r, r, C, O) = G^T dU G for input channels [c_lo, c_hi), dU the sum
 * of the nparts partials at `part` (stride pstride floats). */
static inline __attribute__((always_inline)) VT void
VN(filter_inverse_r)(const float *part, size_t pstride, int nparts, int C, int O,
		 int c_lo, int c_hi, float *restrict dw, const int r,
		 const int N)
{
	const size_t us = (size_t)C * O;
	for (int c = c_lo; c < c_hi; c++)
		for (int o0 = 0; o0 < O; o0 += DTF_VW) {
			VF tmp[8][5], in[8], col[5];
			const float *u = part + (size_t)c * O + o0;
			for (int j = 0; j < N; j++) {
				for (int k = 0; k < N; k++) {
					VF s = VLOAD(u + (size_t)(j * N + k) * us);
					for (int p = 1; p < nparts; p++)
						s = ADD(s, VLOAD(u + (size_t)p * pstride +
									   (size_t)(j * N + k) * us));
					in[k] = s;
				}
				VN(gt_n)(in, col, r, N);
				for (int b = 0; b < r; b++)
					tmp[j][b] = col[b];
			}
			for (int b = 0; b < r; b++) {
				VF cin[8], out[5];
				for (int j = 0; j < N; j++)
					cin[j] = tmp[j][b];
				VN(gt_n)(cin, out, r, N);
				for (int a = 0; a < r; a++)
					VSTORE(dw + (((size_t)a * r + b) * C + c) * O + o0, out[a]);
			}
		}
}

static VT void VN(filter_inverse)(const float *part, size_t pstride,
				    int nparts, int r, int C, int O, int c_lo,
				    int c_hi, float *dw)
{
	switch (r) {
	case 3: VN(filter_inverse_r)(part, pstride, nparts, C, O, c_lo, c_hi, dw, 3, 6); break;
	case 4: VN(filter_inverse_r)(part, pstride, nparts, C, O, c_lo, c_hi, dw, 4, 6); break;
	default: VN(filter_inverse_r)(part, pstride, nparts, C, O, c_lo, c_hi, dw, 5, 8); break;
	}
}

#undef ADD
#undef SUB
#undef MUL
#undef FMA
#undef BT_N
