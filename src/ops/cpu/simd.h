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
 * Off x86 or off GCC/clang the body is called directly.
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

#endif
