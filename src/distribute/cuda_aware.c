/*
 * cuda_aware.c - does this Open MPI take device pointers?
 *
 * Open MPI's own test (its FAQ "how do I know whether my Open MPI is
 * CUDA-aware"): the mpi-ext.h extension header defines
 * MPIX_CUDA_AWARE_SUPPORT when the cuda extension is built, and
 * MPIX_Query_cuda_support() says at run time whether CUDA support is
 * actually on (it can be a runtime component in Open MPI 5).  Other MPIs
 * answer 0, so gradients are staged through host memory.
 */
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#include <stdlib.h>
#include <string.h>

#include "distribute/comm.h"

int dtf_comm_cuda_aware(void)
{
	const char *env = getenv("DTF_CUDA_AWARE_MPI");
	if (env && strcmp(env, "0") == 0)
		return 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
	return MPIX_Query_cuda_support() == 1;
#else
	return 0;
#endif
}
