/*
 * isa.h - which vector instruction set the fast CPU kernels use.
 *
 * The ISAs are levels: generic (plain C, the build's baseline), then the
 * machine's narrow vector ISA (AVX2 + FMA on x86-64, NEON on AArch64),
 * then its wide one (AVX-512, x86-64 only).  On x86-64 with GCC the fast
 * kernels (fast.h, winograd.h, gemm_tile.h) are compiled for AVX-512,
 * AVX2+FMA and the baseline in one binary and pick one at run time: the
 * widest the CPU has, capped by DTF_CPU_ISA in the environment (avx512,
 * avx2 or generic; read on first use) or by dtf_cpu_isa_set() (tests run
 * every kernel on every ISA the CPU has).  On AArch64 the register-tile
 * kernels are compiled for NEON (every AArch64 CPU has it) beside the
 * baseline (DTF_CPU_ISA neon or generic); the x86 kernels are not
 * compiled there.  Elsewhere there is only the baseline.
 */
#ifndef DTF_OPS_CPU_ISA_H
#define DTF_OPS_CPU_ISA_H

enum dtf_cpu_isa {
	DTF_ISA_GENERIC = 0, /* plain C, the build's baseline flags */
	DTF_ISA_AVX2 = 1,    /* x86-64: AVX2 and FMA, 8 floats per vector */
	DTF_ISA_NEON = 1,    /* AArch64: Advanced SIMD, 4 floats per vector */
	DTF_ISA_AVX512 = 2,  /* AVX-512 F, VL, DQ and BW: 16 floats per vector */
};

/* The widest ISA this CPU and this build support. */
enum dtf_cpu_isa dtf_cpu_isa_max(void);

/* The ISA the fast kernels use now: dtf_cpu_isa_max() capped by
 * DTF_CPU_ISA or the last dtf_cpu_isa_set(). */
enum dtf_cpu_isa dtf_cpu_isa(void);

/* Cap the fast kernels at `isa` (above dtf_cpu_isa_max(): at the max) from
 * now on, for every thread; returns the ISA now in use.  Call between
 * kernel calls, not during one (plans and workspace sizes made under one
 * ISA must run under the same one). */
enum dtf_cpu_isa dtf_cpu_isa_set(enum dtf_cpu_isa isa);

/* "avx512", "avx2" (x86; "neon" for level 1 on AArch64), "generic". */
const char *dtf_cpu_isa_name(enum dtf_cpu_isa isa);

/* *isa = the ISA named by s (the names above, this machine's); 0, or -1
 * when s names none. */
int dtf_cpu_isa_parse(const char *s, enum dtf_cpu_isa *isa);

#endif
