/*
 * pool_grad_isa.h - fused.c's pool_grad_2x2_16 (the max pool gradient of
 * one 2x2 window, 16 channels) in intrinsics for one vector width
 * (vec.h): included by fused.c once per width, it defines
 * VN(pool_grad_2x2_16).  Selects and masks only, so every width (16, 8,
 * NEON's 4) gives the generic version's bits.  Not always_inline: the copies of
 * pool_grad_walk for other ISAs hold a dead call to it, which GCC
 * removes; the copy of its own ISA inlines it.
 */
static inline VT void
VN(pool_grad_2x2_16)(const float *restrict img, float *restrict dimg,
		     const float *restrict gy, size_t base, int w, int c,
		     int relu, float *restrict part)
{
	for (int v = 0; v < 16; v += DTF_VW) {
		const float *x0 = img + base + v, *x1 = x0 + c;
		const float *x2 = x0 + (size_t)w * c, *x3 = x2 + c;
		float *d0 = dimg + base + v, *d1 = d0 + c;
		float *d2 = d0 + (size_t)w * c, *d3 = d2 + c;
		VF best = VLOAD(x0);
		VF a1 = VLOAD(x1);
		VF a2 = VLOAD(x2);
		VF a3 = VLOAD(x3);
		VM m1 = VCMPGT(a1, best);
		best = VSELM(m1, best, a1);
		VM m2 = VCMPGT(a2, best);
		best = VSELM(m2, best, a2);
		VM m3 = VCMPGT(a3, best);
		best = VSELM(m3, best, a3);
		/* one-hot masks of the winner: the last cell that beat the
		 * best */
		VM w3 = m3, w2 = VMANDN(m3, m2), w1 = VMANDN(m3, VMANDN(m2, m1));
		VM w0 = VMNOT(VMOR(VMOR(m1, m2), m3));
		VM keep = relu ? VCMPGT(best, VZERO()) : VMALL();
		VF val = VMASKZ(keep, VLOAD(gy + v));
		VSTORE(part + v, VADD(VLOAD(part + v), val));
		VSTORE(d0, VMASKZ(w0, val));
		VSTORE(d1, VMASKZ(w1, val));
		VSTORE(d2, VMASKZ(w2, val));
		VSTORE(d3, VMASKZ(w3, val));
	}
}
