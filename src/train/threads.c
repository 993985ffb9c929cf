/*
 * threads.c - thread placement for the BLAS.
 */
#include "train/threads.h"

#include <cblas.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

int dtf_threads_choose(int requested, int local_ranks)
{
	if (requested > 0)
		return requested;
	const char *env = getenv("OPENBLAS_NUM_THREADS");
	if (env && atoi(env) > 0)
		return atoi(env);
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

void dtf_threads_flush_denormals(void)
{
#if defined(__SSE__)
	_mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
}
