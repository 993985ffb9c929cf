/*
 * gelu_isa.h - fast_act.c's GELU (tanh form) rows for one vector width:
 * included after vec.h and vmath_isa.h once per width, it defines
 * VN(gelu_span) and VN(gelu_grad_span).
 *
 * 0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3) (Hendrycks and Gimpel, GPT-2's form),
 * which has no cancellation for negative x (1 + tanh u is never formed),
 * and its derivative s + 2 x s (1 - s) u' with s = sigmoid(2u) and
 * u' = sqrt(2/pi) (1 + 3 0.044715 x^2).  The last n mod DTF_VW elements go
 * through the same vector code from a padded copy, so every element gets
 * the same float operations.
 */

/* sigmoid(2u): exactly 0 where -2u >= 80 (sigmoid < 2e-35: there the
 * reference's 1 + tanh u is 0 in double, and x^3 may overflow), exactly 1
 * where exp(-2u) is below half an ulp of 1 */
static inline VT VF VN(gelu_sig2u)(VF x)
{
	VF x2 = VMUL(x, x);
	VF u = VMUL(VMUL(VSET1(0.7978845608028654f), x),
		    VFMA(VSET1(0.044715f), x2, VSET1(1.0f)));
	VF arg = VMUL(VSET1(-2.0f), u);
	VF s = VDIV(VSET1(1.0f), VADD(VSET1(1.0f), VN(vexp)(arg)));
	return VMASKZ(VCMPGT(VSET1(80.0f), arg), s);
}

static inline VT VF VN(gelu_vec)(VF x) { return VMUL(x, VN(gelu_sig2u)(x)); }

static inline VT VF VN(gelu_grad_vec)(VF dy, VF x)
{
	VF s = VN(gelu_sig2u)(x);
	/* u' from x clamped to +-1e4 (finite; where |x| is that large,
	 * s (1 - s) is 0 and so is the term) */
	VF xc = VMAX(VMINF(x, VSET1(1e4f)), VSET1(-1e4f));
	VF du = VMUL(VSET1(0.7978845608028654f),
		     VFMA(VSET1(3.0f * 0.044715f), VMUL(xc, xc), VSET1(1.0f)));
	/* s + 2 (x s) (1 - s) du, x s first: finite for every finite x */
	VF t = VMUL(VSET1(2.0f), VMUL(VMUL(x, s), VSUB(VSET1(1.0f), s)));
	return VMUL(dy, VFMA(t, du, s));
}

/* y[i] = gelu(x[i]) for i < n; y == x allowed */
static VT void VN(gelu_span)(size_t n, const float *x, float *y)
{
	size_t i = 0;
	for (; i + DTF_VW <= n; i += DTF_VW)
		VSTORE(y + i, VN(gelu_vec)(VLOAD(x + i)));
	if (i < n) {
		float b[DTF_VW] = {0};
		memcpy(b, x + i, (n - i) * sizeof(float));
		VSTORE(b, VN(gelu_vec)(VLOAD(b)));
		memcpy(y + i, b, (n - i) * sizeof(float));
	}
}

/* dx[i] = dy[i] gelu'(x[i]) for i < n; dx == dy or dx == x allowed */
static VT void VN(gelu_grad_span)(size_t n, const float *dy, const float *x,
				  float *dx)
{
	size_t i = 0;
	for (; i + DTF_VW <= n; i += DTF_VW)
		VSTORE(dx + i, VN(gelu_grad_vec)(VLOAD(dy + i), VLOAD(x + i)));
	if (i < n) {
		float a[DTF_VW] = {0}, b[DTF_VW] = {0};
		memcpy(a, dy + i, (n - i) * sizeof(float));
		memcpy(b, x + i, (n - i) * sizeof(float));
		VSTORE(a, VN(gelu_grad_vec)(VLOAD(a), VLOAD(b)));
		memcpy(dx + i, a, (n - i) * sizeof(float));
	}
}
