/*
 * threads.c - thread placement for the BLAS and the fast kernels, and
 * OpenBLAS's kernel choice.
 */
#include "train/threads.h"

#include <cblas.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/isa.h"
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

int dtf_threads_choose(int requested, int local_ranks)
{
	if (requested > 0)
		return requested;
	const char *env = getenv("OPENBLAS_NUM_THREADS");
	if (env && *env) {
		char *end;
		long v = strtol(env, &end, 10);
		if (*end == 0 && v > 0 && v <= 4096)
			return (int)v;
		dtf_warn("OPENBLAS_NUM_THREADS='%s' is not a number of threads from 1 to 4096: ignored (the cores per rank are used)",
			 env);
	}
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int per_rank = (int)(online / (local_ranks > 0 ? local_ranks : 1));
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int mine = CPU_COUNT(&set);
		if (mine < per_rank)
			per_rank = mine;
	}
	return per_rank > 0 ? per_rank : 1;
}

void dtf_threads_set(int n) { openblas_set_num_threads(n); }

const char *dtf_threads_blas_core(void) { return openblas_get_corename(); }

/* Kernel set OpenBLAS should use on this CPU, or NULL when its own choice
 * is fine.  Its generic fallback is Prescott (SSE3). */
static const char *better_core(void)
{
	const char *core = openblas_get_corename();
	if (!core || strcasecmp(core, "prescott") != 0)
		return NULL;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
#endif
	return NULL;
}

void dtf_threads_fix_blas_core(char **argv)
{
	if (getenv("OPENBLAS_CORETYPE"))
		return; /* the user's choice, or our second run */
	const char *core = better_core();
	if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0)
		return;
	/* the binary's own path, not /proc/self/exe: the kernel names the
	 * process after the file executed (ps, pgrep, pkill dtf-train) */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		execv(self, argv);
	}
	execv("/proc/self/exe", argv);
	unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on as we are */
}

int dtf_threads_setup_fast(int threads, int *use_fast, struct dtf_pool **pool)
{
	const char *k = getenv("DTF_CPU_KERNELS");
	*pool = NULL;
	*use_fast = !(k && strcmp(k, "reference") == 0);
	if (k && *k && strcmp(k, "reference") != 0 && strcmp(k, "fast") != 0)
		dtf_warn("DTF_CPU_KERNELS=%s: unknown value (known: fast, reference); using the fast kernels",
			 k);
	const char *i = getenv("DTF_CPU_ISA");
	enum dtf_cpu_isa isa = DTF_ISA_AVX512;
	if (i && *i && dtf_cpu_isa_parse(i, &isa) != 0)
		dtf_warn("DTF_CPU_ISA=%s: unknown value (known: avx512, %s, generic); using %s, the widest this CPU has",
			 i, dtf_cpu_isa_name(DTF_ISA_AVX2),
			 dtf_cpu_isa_name(dtf_cpu_isa_max()));
	else if (i && *i && isa > dtf_cpu_isa_max())
		dtf_warn("DTF_CPU_ISA=%s: this CPU has %s at most; using that",
			 i, dtf_cpu_isa_name(dtf_cpu_isa_max()));
	dtf_cpu_isa_set(isa);
	if (!*use_fast) {
		dtf_threads_set(threads);
		return 0;
	}
	/* One sgemm per pool thread: OpenBLAS must not start its own. */
	dtf_threads_set(1);
	return dtf_pool_new(threads, pool);
}

void dtf_threads_flush_denormals(void)
{
#if defined(__SSE__)
	_mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
}
