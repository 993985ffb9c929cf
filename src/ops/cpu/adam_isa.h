/*
 * adam_isa.h - optim_fast.c's Adam update for one vector width (vec.h):
 * included once per width, it defines VN(adam).  One vector operation per
 * operation of the reference loop (train/optimizer.c), in its order, no
 * FMA; IEEE division and square root are correctly rounded at every
 * width, so every width gives the reference's bits.  (Intrinsics rather
 * than the loop itself: GCC vectorizes sqrtf only under -fno-math-errno,
 * which a target attribute cannot set.)
 */
VT static void VN(adam)(size_t n, float *restrict p, const float *restrict g,
			float *restrict m, float *restrict v, float step,
			float b1, float b2, float eps)
{
	const VF vb1 = VSET1(b1), vb1c = VSET1(1.0f - b1);
	const VF vb2 = VSET1(b2), vb2c = VSET1(1.0f - b2);
	const VF vs = VSET1(step), ve = VSET1(eps);
	size_t i = 0;
	for (; i + DTF_VW <= n; i += DTF_VW) {
		VF gi = VLOAD(g + i);
		VF mi = VADD(VMUL(vb1, VLOAD(m + i)), VMUL(vb1c, gi));
		VF vi = VADD(VMUL(vb2, VLOAD(v + i)), VMUL(VMUL(vb2c, gi), gi));
		VSTORE(m + i, mi);
		VSTORE(v + i, vi);
		VF u = VDIV(VMUL(vs, mi), VADD(VSQRT(vi), ve));
		VSTORE(p + i, VSUB(VLOAD(p + i), u));
	}
	adam_scalar(n - i, p + i, g + i, m + i, v + i, step, b1, b2, eps);
}
