/*
 * simd.h - compile one loop body for several x86 vector ISAs and pick the
 * widest the CPU has at run time.
 *
 * DTF_ISA_FN(name, (params), (args)) expects `static inline DTF_BODY void
 * name##_body params` to be defined before it, and defines `static void
 * name params` that calls a copy of the body compiled for AVX-512
 * (512-bit vectors), AVX2+FMA, or the build's baseline, whichever
 * dtf_cpu_isa() (isa.h) names: the widest the CPU has unless capped.
 * DTF_ISA_FN_OWN512 does the same with a hand-written name##_512.
 * Off x86 or off GCC/clang the body is called directly (on AArch64, GCC
 * vectorises it with NEON, the base ISA).
 */
#ifndef DTF_OPS_CPU_SIMD_H
#define DTF_OPS_CPU_SIMD_H

#include "ops/cpu/isa.h"

#if defined(__GNUC__)
#define DTF_BODY __attribute__((always_inline))
#else
#define DTF_BODY
#endif

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && \
	!defined(__clang__)
#define DTF_T512 \
	__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,prefer-vector-width=512")))
#define DTF_T256 __attribute__((target("avx2,fma")))
#define DTF_ISA_FN(name, params, args)                                  \
	DTF_T512 static void name##_512 params { name##_body args; }    \
	DTF_ISA_FN_OWN512(name, params, args)
/* The same, with name##_512 written by hand (e.g. in intrinsics) rather
 * than compiled from the body. */
#define DTF_ISA_FN_OWN512(name, params, args)                           \
	DTF_T256 static void name##_256 params { name##_body args; }    \
	static void name##_base params { name##_body args; }            \
	static void name params                                         \
	{                                                               \
		switch (dtf_cpu_isa()) {                                \
		case DTF_ISA_AVX512: name##_512 args; break;            \
		case DTF_ISA_AVX2: name##_256 args; break;              \
		default: name##_base args; break;                       \
		}                                                       \
	}
#else
#define DTF_ISA_FN(name, params, args) \
	static void name params { name##_body args; }
#define DTF_ISA_FN_OWN512(name, params, args) DTF_ISA_FN(name, params, args)
#endif

/* AArch64 with GCC or clang: Advanced SIMD (NEON, 4 floats per vector) is
 * part of the base ISA, so its kernels need no target attribute and no
 * run-time check. */
#if defined(__aarch64__) && defined(__GNUC__) && defined(__ARM_NEON)
#define DTF_NEON 1
#endif

/*
 * DTF_VEC_TILES: vec.h has a backend here, so the register-tile kernels
 * written over it (gemm_tile_isa.h, winograd_isa.h, fast_conv_isa.h,
 * pool_grad_isa.h) are compiled: for DTF_VW 16 and 8 on x86 (DTF_T512),
 * for DTF_VW 4 on AArch64 (DTF_NEON).
 *
 * DTF_VEC_CALL(name, (args)) calls the copy of name for the vector width
 * dtf_cpu_isa() names: name##_512 (AVX-512) or name##_256 (AVX2) on x86,
 * name##_128 on AArch64.  Call only where dtf_cpu_isa() is above
 * DTF_ISA_GENERIC.
 */
#if defined(DTF_T512)
#define DTF_VEC_TILES 1
#define DTF_VEC_CALL(name, args)                                         \
	(dtf_cpu_isa() == DTF_ISA_AVX512 ? name##_512 args : name##_256 args)
#elif defined(DTF_NEON)
#define DTF_VEC_TILES 1
#define DTF_VEC_CALL(name, args) name##_128 args
#endif

#endif
