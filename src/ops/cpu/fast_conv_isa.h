/*
 * fast_conv_isa.h - the direct conv2d kernels of fast_conv.c in register
 * tiles for one vector width (vec.h): included by fast_conv.c once per
 * width, it defines VN(conv_fwd), VN(conv_bwf), VN(conv_bwfn) and
 * VN(conv_bwi).  A tile is RT pixels (or TT, TN filter taps) x OT = two
 * vectors of outputs, inputs broadcast from memory: 28 or 24 accumulators
 * of AVX-512's 32 registers, 12 of AVX2's 16.  Every output's sum runs
 * over the same terms in the same order, one FMA each, whatever the tile,
 * so both widths give the same bits.
 */

/* ---- direct forward ------------------------------------------------------- */

#if DTF_VW == 16
#define RT 14 /* pixels per row tile (forward, input gradient) */
#define TT 12 /* taps per filter-gradient tile, wide filters */
#define TN 13 /* taps per filter-gradient tile, narrow filters */
#else
#define RT 6
#define TT 6
#define TN 6
#endif
#define OT (2 * DTF_VW) /* outputs per tile */

/* One tile: y[oy, ox0 .. ox0+R) x [o0, o0+OT) from the padded image.
 * R is a literal at every call, so acc stays in registers. */
static inline __attribute__((always_inline)) VT void
VN(fwd_tile)(const struct dtf_window_geom *g, const float *restrict xp,
	    const float *restrict w, const float *restrict bias, int relu,
	    float *restrict y, int oy, int ox0, int o0, const int R)
{
	const int pw = pad_w(g), c = g->c, O = g->o, kw = g->kw;
	const size_t xs = (size_t)g->stride_w * c;
	VF acc[RT][2];
	VF b0 = bias ? VLOAD(bias + o0) : VZERO();
	VF b1 = bias ? VLOAD(bias + o0 + DTF_VW) : VZERO();
	for (int p = 0; p < R; p++) {
		acc[p][0] = b0;
		acc[p][1] = b1;
	}
	for (int ki = 0; ki < g->kh; ki++) {
		for (int kj = 0; kj < kw; kj++) {
			const float *xr = xp + ((size_t)(oy * g->stride_h + ki * g->dilation_h) * pw +
						(size_t)ox0 * g->stride_w + (size_t)kj * g->dilation_w) * c;
			const float *wr = w + ((size_t)ki * kw + kj) * c * O + o0;
			for (int ci = 0; ci < c; ci++) {
				VF w0 = VLOAD(wr + (size_t)ci * O);
				VF w1 = VLOAD(wr + (size_t)ci * O + DTF_VW);
				for (int p = 0; p < R; p++) {
					VF xv = VSET1(xr[(size_t)p * xs + ci]);
					acc[p][0] = VFMA(xv, w0, acc[p][0]);
					acc[p][1] = VFMA(xv, w1, acc[p][1]);
				}
			}
		}
	}
	const VF zero = VZERO();
	for (int p = 0; p < R; p++) {
		float *yr = y + ((size_t)oy * g->ow + ox0 + p) * O + o0;
		VF v0 = relu ? VMAX(acc[p][0], zero) : acc[p][0];
		VF v1 = relu ? VMAX(acc[p][1], zero) : acc[p][1];
		VSTORE(yr, v0);
		VSTORE(yr + DTF_VW, v1);
	}
}

#define FWD_CASE(r) \
	case r: VN(fwd_tile)(g, xp, w, bias, relu, y, oy, ox0, o0, r); break;

/* One image: y (oh, ow, o) = act(conv(xp, w) + bias), o % 32 == 0. */
VT static void VN(conv_fwd)(const struct dtf_window_geom *g,
				    const float *restrict xp,
				    const float *restrict w,
				    const float *restrict bias, int relu,
				    float *restrict y)
{
	for (int oy = 0; oy < g->oh; oy++)
		for (int ox0 = 0; ox0 < g->ow; ox0 += RT)
			for (int o0 = 0; o0 < g->o; o0 += OT) {
				int r = g->ow - ox0 < RT ? g->ow - ox0 : RT;
				switch (r) {
				FWD_CASE(1) FWD_CASE(2) FWD_CASE(3)
				FWD_CASE(4) FWD_CASE(5) FWD_CASE(6)
#if DTF_VW == 16
				FWD_CASE(7) FWD_CASE(8) FWD_CASE(9)
				FWD_CASE(10) FWD_CASE(11) FWD_CASE(12)
				FWD_CASE(13) FWD_CASE(14)
#endif
				}
			}
}

/* Filter-gradient tiles: TT taps (within one (ki, kj), consecutive
 * input channels) x OT outputs. */

/* dw[t0 .. t0+R) x [o0, o0+OT) += sum over the image's pixels of
 * x(pixel, tap) * dy(pixel, o); the R taps are input channels ci0 ..
 * ci0+R of filter position (ki, kj). */
static inline __attribute__((always_inline)) VT void
VN(bwf_tile)(const struct dtf_window_geom *g, const float *restrict xp,
	    const float *restrict dy, float *restrict dw, int ki, int kj,
	    int ci0, int o0, const int R)
{
	const int pw = pad_w(g), c = g->c, O = g->o;
	const size_t base = ((size_t)ki * g->dilation_h * pw +
			     (size_t)kj * g->dilation_w) * c + ci0;
	VF acc[TT][2];
	for (int t = 0; t < R; t++) {
		acc[t][0] = VZERO();
		acc[t][1] = VZERO();
	}
	for (int oy = 0; oy < g->oh; oy++) {
		const float *xrow = xp + (size_t)oy * g->stride_h * pw * c + base;
		const float *drow = dy + (size_t)oy * g->ow * O + o0;
		for (int ox = 0; ox < g->ow; ox++) {
			const float *xv = xrow + (size_t)ox * g->stride_w * c;
			VF d0 = VLOAD(drow + (size_t)ox * O);
			VF d1 = VLOAD(drow + (size_t)ox * O + DTF_VW);
			for (int t = 0; t < R; t++) {
				VF v = VSET1(xv[t]);
				acc[t][0] = VFMA(v, d0, acc[t][0]);
				acc[t][1] = VFMA(v, d1, acc[t][1]);
			}
		}
	}
	float *dr = dw + (((size_t)ki * g->kw + kj) * c + ci0) * O + o0;
	for (int t = 0; t < R; t++) {
		float *d = dr + (size_t)t * O;
		VSTORE(d, VADD(VLOAD(d), acc[t][0]));
		VSTORE(d + DTF_VW, VADD(VLOAD(d + DTF_VW), acc[t][1]));
	}
}

#define BWF_CASE(r) \
	case r: VN(bwf_tile)(g, xp, dy, dw, ki, kj, ci0, o0, r); break;

/* dw (K, o) += the filter gradient of one padded image, o % 32 == 0. */
VT static void VN(conv_bwf)(const struct dtf_window_geom *g,
				  const float *restrict xp,
				  const float *restrict dy, float *restrict dw)
{
	for (int ki = 0; ki < g->kh; ki++)
		for (int kj = 0; kj < g->kw; kj++)
			for (int ci0 = 0; ci0 < g->c; ci0 += TT)
				for (int o0 = 0; o0 < g->o; o0 += OT) {
					int r = g->c - ci0 < TT ? g->c - ci0 : TT;
					switch (r) {
					BWF_CASE(1) BWF_CASE(2) BWF_CASE(3)
					BWF_CASE(4) BWF_CASE(5) BWF_CASE(6)
#if DTF_VW == 16
					BWF_CASE(7) BWF_CASE(8) BWF_CASE(9)
					BWF_CASE(10) BWF_CASE(11) BWF_CASE(12)
#endif
					}
				}
}

/* Tiles of the narrow-filter gradient: TN taps anywhere in the window
 * (e.g. all 25 of a 5x5x1 filter in two tiles on AVX-512) x OT outputs. */

/* dw[t0 .. t0+R) x [o0, o0+OT) += sum over the image's pixels of
 * x(pixel, tap) * dy(pixel, o), taps anywhere in the window. */
static inline __attribute__((always_inline)) VT void
VN(bwfn_tile)(const struct dtf_window_geom *g, const float *restrict xp,
	     const float *restrict dy, float *restrict dw, int t0, int o0,
	     const int R)
{
	const int pw = pad_w(g), c = g->c, O = g->o;
	size_t toff[TN];
	for (int t = 0; t < R; t++) {
		int tap = t0 + t, ci = tap % c, kj = (tap / c) % g->kw;
		int ki = tap / c / g->kw;
		toff[t] = ((size_t)ki * g->dilation_h * pw +
			   (size_t)kj * g->dilation_w) * c + ci;
	}
	VF acc[TN][2];
	for (int t = 0; t < R; t++) {
		acc[t][0] = VZERO();
		acc[t][1] = VZERO();
	}
	for (int oy = 0; oy < g->oh; oy++) {
		const float *xrow = xp + (size_t)oy * g->stride_h * pw * c;
		const float *drow = dy + (size_t)oy * g->ow * O + o0;
		for (int ox = 0; ox < g->ow; ox++) {
			const float *xv = xrow + (size_t)ox * g->stride_w * c;
			VF d0 = VLOAD(drow + (size_t)ox * O);
			VF d1 = VLOAD(drow + (size_t)ox * O + DTF_VW);
			for (int t = 0; t < R; t++) {
				VF v = VSET1(xv[toff[t]]);
				acc[t][0] = VFMA(v, d0, acc[t][0]);
				acc[t][1] = VFMA(v, d1, acc[t][1]);
			}
		}
	}
	for (int t = 0; t < R; t++) {
		float *d = dw + (size_t)(t0 + t) * O + o0;
		VSTORE(d, VADD(VLOAD(d), acc[t][0]));
		VSTORE(d + DTF_VW, VADD(VLOAD(d + DTF_VW), acc[t][1]));
	}
}

#define BWFN_CASE(r) \
	case r: VN(bwfn_tile)(g, xp, dy, dw, t0, o0, r); break;

/* dw (K, o) += the filter gradient of one padded image, o % 32 == 0, for
 * narrow filters (K spread over tiles of up to TN taps). */
VT static void VN(conv_bwfn)(const struct dtf_window_geom *g,
				   const float *restrict xp,
				   const float *restrict dy, float *restrict dw)
{
	const int K = (int)kwidth(g);
	const int ntile = (K + TN - 1) / TN;
	for (int i = 0; i < ntile; i++) {
		/* tiles of even size: 25 taps -> 12 + 13 */
		int t0 = (int)((long)K * i / ntile), t1 = (int)((long)K * (i + 1) / ntile);
		for (int o0 = 0; o0 < g->o; o0 += OT) {
			switch (t1 - t0) {
			BWFN_CASE(1) BWFN_CASE(2) BWFN_CASE(3)
			BWFN_CASE(4) BWFN_CASE(5) BWFN_CASE(6)
#if DTF_VW == 16
			BWFN_CASE(7) BWFN_CASE(8) BWFN_CASE(9)
			BWFN_CASE(10) BWFN_CASE(11) BWFN_CASE(12)
			BWFN_CASE(13)
#endif
			}
		}
	}
}

/* ---- direct input gradient (stride 1) ---- */

/* dx[iy, ix0 .. ix0+R) x [ci0, ci0+OT) = sum over (ki, kj, o) of
 * dy(iy + pad_top - ki*dh, ix + pad_left - kj*dw, o) * w(ki, kj, ci, o),
 * from the padded dy and wt, the filter with (ci, o) transposed. */
static inline __attribute__((always_inline)) VT void
VN(bwi_tile)(const struct dtf_window_geom *g, const float *restrict dyp,
	    const float *restrict wt, float *restrict dx, int iy, int ix0,
	    int ci0, const int R)
{
	const int Wp = bwi_w(g), O = g->o, c = g->c;
	const int y0 = (g->kh - 1) * g->dilation_h, x0 = (g->kw - 1) * g->dilation_w;
	VF acc[RT][2];
	for (int p = 0; p < R; p++) {
		acc[p][0] = VZERO();
		acc[p][1] = VZERO();
	}
	for (int ki = 0; ki < g->kh; ki++) {
		for (int kj = 0; kj < g->kw; kj++) {
			const float *dr = dyp + ((size_t)(iy + g->pad_top - ki * g->dilation_h + y0) * Wp +
						 (size_t)(ix0 + g->pad_left - kj * g->dilation_w + x0)) * O;
			const float *wr = wt + ((size_t)ki * g->kw + kj) * O * c + ci0;
			for (int o = 0; o < O; o++) {
				VF w0 = VLOAD(wr + (size_t)o * c);
				VF w1 = VLOAD(wr + (size_t)o * c + DTF_VW);
				for (int p = 0; p < R; p++) {
					VF v = VSET1(dr[(size_t)p * O + o]);
					acc[p][0] = VFMA(v, w0, acc[p][0]);
					acc[p][1] = VFMA(v, w1, acc[p][1]);
				}
			}
		}
	}
	for (int p = 0; p < R; p++) {
		float *d = dx + ((size_t)iy * g->w + ix0 + p) * c + ci0;
		VSTORE(d, acc[p][0]);
		VSTORE(d + DTF_VW, acc[p][1]);
	}
}

#define BWI_CASE(r) \
	case r: VN(bwi_tile)(g, dyp, wt, dx, iy, ix0, ci0, r); break;

/* dx (h, w, c) of one image from its padded dy, c % 32 == 0. */
VT static void VN(conv_bwi)(const struct dtf_window_geom *g,
				  const float *restrict dyp,
				  const float *restrict wt, float *restrict dx)
{
	for (int iy = 0; iy < g->h; iy++)
		for (int ix0 = 0; ix0 < g->w; ix0 += RT)
			for (int ci0 = 0; ci0 < g->c; ci0 += OT) {
				int r = g->w - ix0 < RT ? g->w - ix0 : RT;
				switch (r) {
				BWI_CASE(1) BWI_CASE(2) BWI_CASE(3)
				BWI_CASE(4) BWI_CASE(5) BWI_CASE(6)
#if DTF_VW == 16
				BWI_CASE(7) BWI_CASE(8) BWI_CASE(9)
				BWI_CASE(10) BWI_CASE(11) BWI_CASE(12)
				BWI_CASE(13) BWI_CASE(14)
#endif
				}
			}
}

#undef RT
#undef TT
#undef TN
#undef OT
#undef FWD_CASE
#undef BWF_CASE
#undef BWFN_CASE
#undef BWI_CASE
