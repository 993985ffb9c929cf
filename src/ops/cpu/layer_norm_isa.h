/*
 * layer_norm_isa.h - fast_act.c's layer normalization rows for one vector
 * width: included after vec.h and vmath_isa.h once per width, it defines
 * VN(ln_forward), VN(ln_grad_input) and VN(ln_grad_gamma) over rows of c
 * floats, c a multiple of DTF_VW (the caller checks).
 *
 * The reference (norm.c) keeps its sums in double; these keep them in
 * float lanes, two accumulators per pass, the mean first and then the
 * biased variance as the mean of squared deviations (two passes: no
 * cancellation), so a row's statistics are within about c ulp of the
 * reference's.
 */

/* *m = mean of row x, *inv = 1 / sqrt(biased variance + eps) */
static inline VT void VN(ln_stats)(int c, const float *x, float eps, float *m,
				   float *inv)
{
	VF s0 = VZERO(), s1 = VZERO();
	int j = 0;
	for (; j + 2 * DTF_VW <= c; j += 2 * DTF_VW) {
		s0 = VADD(s0, VLOAD(x + j));
		s1 = VADD(s1, VLOAD(x + j + DTF_VW));
	}
	for (; j < c; j += DTF_VW)
		s0 = VADD(s0, VLOAD(x + j));
	float mean = VN(vhsum)(VADD(s0, s1)) / (float)c;
	VF vm = VSET1(mean);
	s0 = VZERO();
	s1 = VZERO();
	for (j = 0; j + 2 * DTF_VW <= c; j += 2 * DTF_VW) {
		VF d0 = VSUB(VLOAD(x + j), vm), d1 = VSUB(VLOAD(x + j + DTF_VW), vm);
		s0 = VFMA(d0, d0, s0);
		s1 = VFMA(d1, d1, s1);
	}
	for (; j < c; j += DTF_VW) {
		VF d0 = VSUB(VLOAD(x + j), vm);
		s0 = VFMA(d0, d0, s0);
	}
	float var = VN(vhsum)(VADD(s0, s1)) / (float)c;
	*m = mean;
	*inv = 1.0f / sqrtf(var + eps);
}

/* y = (x - mean) inv gamma + beta for rows [lo, hi); y == x allowed */
static VT void VN(ln_forward)(size_t lo, size_t hi, int c, const float *x,
			      const float *gamma, const float *beta, float eps,
			      float *y)
{
	for (size_t r = lo; r < hi; r++) {
		const float *xr = x + r * (size_t)c;
		float *yr = y + r * (size_t)c;
		float m, inv;
		VN(ln_stats)(c, xr, eps, &m, &inv);
		VF vm = VSET1(m), vi = VSET1(inv);
		for (int j = 0; j < c; j += DTF_VW) {
			VF xh = VMUL(VSUB(VLOAD(xr + j), vm), vi);
			VSTORE(yr + j, VFMA(xh, VLOAD(gamma + j), VLOAD(beta + j)));
		}
	}
}

/* dx = inv (g - mean(g) - xhat mean(g xhat)), g = dy gamma, rows [lo, hi);
 * dx == dy allowed */
static VT void VN(ln_grad_input)(size_t lo, size_t hi, int c, const float *x,
				 const float *gamma, const float *dy, float eps,
				 float *dx)
{
	for (size_t r = lo; r < hi; r++) {
		const float *xr = x + r * (size_t)c, *gr = dy + r * (size_t)c;
		float *dr = dx + r * (size_t)c;
		float m, inv;
		VN(ln_stats)(c, xr, eps, &m, &inv);
		VF vm = VSET1(m), vi = VSET1(inv), sg = VZERO(), sgx = VZERO();
		for (int j = 0; j < c; j += DTF_VW) {
			VF gj = VMUL(VLOAD(gr + j), VLOAD(gamma + j));
			VF xh = VMUL(VSUB(VLOAD(xr + j), vm), vi);
			sg = VADD(sg, gj);
			sgx = VFMA(gj, xh, sgx);
		}
		VF mg = VSET1(VN(vhsum)(sg) / (float)c);
		VF mgx = VSET1(VN(vhsum)(sgx) / (float)c);
		for (int j = 0; j < c; j += DTF_VW) {
			VF gj = VMUL(VLOAD(gr + j), VLOAD(gamma + j));
			VF xh = VMUL(VSUB(VLOAD(xr + j), vm), vi);
			/* inv (g - mg - xh mgx) */
			VF t = VSUB(VSUB(gj, mg), VMUL(xh, mgx));
			VSTORE(dr + j, VMUL(vi, t));
		}
	}
}

/* acc (c) += sum over rows [lo, hi) of dy xhat */
static VT void VN(ln_grad_gamma)(size_t lo, size_t hi, int c, const float *x,
				 const float *dy, float eps, float *acc)
{
	for (size_t r = lo; r < hi; r++) {
		const float *xr = x + r * (size_t)c, *gr = dy + r * (size_t)c;
		float m, inv;
		VN(ln_stats)(c, xr, eps, &m, &inv);
		VF vm = VSET1(m), vi = VSET1(inv);
		for (int j = 0; j < c; j += DTF_VW) {
			VF xh = VMUL(VSUB(VLOAD(xr + j), vm), vi);
			VSTORE(acc + j, VFMA(VLOAD(gr + j), xh, VLOAD(acc + j)));
		}
	}
}
