/*
 * isa.c - the fast kernels' instruction set (isa.h).
 */
#include "ops/cpu/isa.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/simd.h"

#if defined(DTF_NEON)
static const char *const names[] = {"generic", "neon", "avx512"};
#else
static const char *const names[] = {"generic", "avx2", "avx512"};
#endif

/* the ISA in use; -1 until the first dtf_cpu_isa() */
static atomic_int current = -1;

enum dtf_cpu_isa dtf_cpu_isa_max(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && \
	!defined(__clang__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512bw"))
		return DTF_ISA_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return DTF_ISA_AVX2;
#elif defined(DTF_NEON)
	return DTF_ISA_NEON;
#endif
	return DTF_ISA_GENERIC;
}

enum dtf_cpu_isa dtf_cpu_isa_set(enum dtf_cpu_isa isa)
{
	enum dtf_cpu_isa max = dtf_cpu_isa_max();
	if (isa > max || isa < DTF_ISA_GENERIC)
		isa = max;
	atomic_store_explicit(&current, (int)isa, memory_order_relaxed);
	return isa;
}

enum dtf_cpu_isa dtf_cpu_isa(void)
{
	int v = atomic_load_explicit(&current, memory_order_relaxed);
	if (v >= 0)
		return (enum dtf_cpu_isa)v;
	enum dtf_cpu_isa isa = DTF_ISA_AVX512;
	const char *e = getenv("DTF_CPU_ISA");
	if (e && *e && dtf_cpu_isa_parse(e, &isa) != 0)
		isa = DTF_ISA_AVX512; /* dtf-train warns (train/threads.c) */
	return dtf_cpu_isa_set(isa);
}

const char *dtf_cpu_isa_name(enum dtf_cpu_isa isa)
{
	return isa >= DTF_ISA_GENERIC && isa <= DTF_ISA_AVX512 ? names[isa]
							       : "?";
}

int dtf_cpu_isa_parse(const char *s, enum dtf_cpu_isa *isa)
{
	for (int i = 0; i <= DTF_ISA_AVX512; i++)
		if (strcmp(s, names[i]) == 0) {
			*isa = (enum dtf_cpu_isa)i;
			return 0;
		}
	return -1;
}
