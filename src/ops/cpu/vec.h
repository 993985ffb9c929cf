/*
 * vec.h - the vector layer the fast kernels' register tiles are written
 * over, so that one source serves every vector width.
 *
 * Define DTF_VW as 16 (AVX-512: __m512), 8 (AVX2 + FMA: __m256) or 4
 * (AArch64 NEON: float32x4_t) and include this header; it (re)defines
 *     VF            the vector of DTF_VW floats
 *     VT            the target attribute every function using VF carries
 *                   (none on AArch64, where NEON is the base ISA)
 *     VN(name)      name##_512, name##_256 or name##_128, for the
 *                   functions of one width
 *     VLOAD(p), VLOADA(p), VSTORE(p, v), VSTOREA(p, v)   (A: aligned)
 *     VZERO(), VSET1(s), VADD, VSUB, VMUL, VDIV, VSQRT(a), VMAX,
 *     VFMA(a, b, c) = a * b + c
 * (each one instruction on x86, so both x86 widths do the same float
 * operations per lane; VFMA is fused on every width, and VMAX(a, b) is
 * x86's maxps on every width: a > b ? a : b, so b where either is NaN or
 * both are zeros), and lane masks (a mask register on AVX-512, all-ones or
 * all-zero lanes of a vector on AVX2 and NEON):
 *     VM            the mask type
 *     VCMPGT(a, b)  a > b, ordered (false where either is NaN); VCMPGE(a, b)
 *                   a >= b, likewise
 *     VSELM(m, a, b)  b where m, else a;   VMASKZ(m, a)  a where m, else +0
 *     VMANDN(a, b) = ~a & b, VMOR(a, b), VMNOT(a), VMALL() (every lane)
 * A kernel source is a header of static functions over these, included
 * once per width from its .c file (the pattern of gemm_tile.c); include
 * this header again with the other DTF_VW before the second inclusion.
 * Only where simd.h defines DTF_VEC_TILES: DTF_VW 16 and 8 with GCC on x86
 * (DTF_T512), 4 on AArch64 (DTF_NEON).
 */
#include "ops/cpu/simd.h"

#if !defined(DTF_VEC_TILES)
#error "vec.h needs GCC on x86 or AArch64 (DTF_VEC_TILES in simd.h)"
#endif

#if defined(DTF_T512)
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif

#undef VF
#undef VT
#undef VN
#undef VLOAD
#undef VLOADA
#undef VSTORE
#undef VSTOREA
#undef VZERO
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VSQRT
#undef VMAX
#undef VFMA
#undef VM
#undef VCMPGT
#undef VCMPGE
#undef VSELM
#undef VMASKZ
#undef VMANDN
#undef VMOR
#undef VMNOT
#undef VMALL

#if DTF_VW == 16
#define VF __m512
#define VT DTF_T512
#define VN(name) name##_512
#define VLOAD(p) _mm512_loadu_ps(p)
#define VLOADA(p) _mm512_load_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSTOREA(p, v) _mm512_store_ps(p, v)
#define VZERO() _mm512_setzero_ps()
#define VSET1(s) _mm512_set1_ps(s)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VSQRT(a) _mm512_sqrt_ps(a)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VM __mmask16
#define VCMPGT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define VCMPGE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define VSELM(m, a, b) _mm512_mask_mov_ps(a, m, b)
#define VMASKZ(m, a) _mm512_maskz_mov_ps(m, a)
#define VMANDN(a, b) ((__mmask16)(~(a) & (b)))
#define VMOR(a, b) ((__mmask16)((a) | (b)))
#define VMNOT(a) ((__mmask16)~(a))
#define VMALL() ((__mmask16)0xffff)
#elif DTF_VW == 8
#define VF __m256
#define VT DTF_T256
#define VN(name) name##_256
#define VLOAD(p) _mm256_loadu_ps(p)
#define VLOADA(p) _mm256_load_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSTOREA(p, v) _mm256_store_ps(p, v)
#define VZERO() _mm256_setzero_ps()
#define VSET1(s) _mm256_set1_ps(s)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VSQRT(a) _mm256_sqrt_ps(a)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VM __m256
#define VCMPGT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define VCMPGE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define VSELM(m, a, b) _mm256_blendv_ps(a, b, m)
#define VMASKZ(m, a) _mm256_and_ps(m, a)
#define VMANDN(a, b) _mm256_andnot_ps(a, b)
#define VMOR(a, b) _mm256_or_ps(a, b)
#define VMNOT(a) _mm256_xor_ps(a, VMALL())
#define VMALL() _mm256_castsi256_ps(_mm256_set1_epi32(-1))
#elif DTF_VW == 4 && defined(DTF_NEON)
#define VF float32x4_t
#define VT
#define VN(name) name##_128
#define VLOAD(p) vld1q_f32(p)
#define VLOADA(p) vld1q_f32(p)
#define VSTORE(p, v) vst1q_f32(p, v)
#define VSTOREA(p, v) vst1q_f32(p, v)
#define VZERO() vdupq_n_f32(0.0f)
#define VSET1(s) vdupq_n_f32(s)
#define VADD(a, b) vaddq_f32(a, b)
#define VSUB(a, b) vsubq_f32(a, b)
#define VMUL(a, b) vmulq_f32(a, b)
#define VDIV(a, b) vdivq_f32(a, b)
#define VSQRT(a) vsqrtq_f32(a)
/* maxps, not vmaxq_f32 (which gives NaN for a NaN and +0 for -0, +0) */
#define VMAX(a, b) dtf_vmax_128(a, b)
#define VFMA(a, b, c) vfmaq_f32(c, a, b)
#define VM uint32x4_t
#define VCMPGT(a, b) vcgtq_f32(a, b)
#define VCMPGE(a, b) vcgeq_f32(a, b)
#define VSELM(m, a, b) vbslq_f32(m, b, a)
#define VMASKZ(m, a) vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(a)))
#define VMANDN(a, b) vbicq_u32(b, a)
#define VMOR(a, b) vorrq_u32(a, b)
#define VMNOT(a) vmvnq_u32(a)
#define VMALL() vdupq_n_u32(0xffffffffu)
#ifndef DTF_VMAX_128
#define DTF_VMAX_128
static inline float32x4_t dtf_vmax_128(float32x4_t a, float32x4_t b)
{
	return vbslq_f32(vcgtq_f32(a, b), a, b);
}
#endif
#else
#error "vec.h: DTF_VW must be 16 or 8 (x86) or 4 (AArch64)"
#endif
