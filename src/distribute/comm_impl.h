/*
 * comm_impl.h - struct dtf_comm for the files of distribute/ (which may include
 * <mpi.h>); everything outside distribute/ sees only comm.h's opaque handle.
 */
#ifndef DTF_DIST_COMM_IMPL_H
#define DTF_DIST_COMM_IMPL_H

#include <mpi.h>

#include "distribute/comm.h"

struct dtf_comm {
	MPI_Comm comm;    /* MPI_COMM_WORLD, or a split owned by the handle */
	int rank, size;
	int local_rank, local_size; /* within this node, in `comm` */
	int num_nodes;
	int started_mpi;
	char host[MPI_MAX_PROCESSOR_NAME];
};

/* DTF_ERR_MPI naming `call` and MPI's message for `err`. */
int dtf_comm_mpi_fail(int err, const char *call);

#define MPI_TRY(call)                                                     \
	do {                                                              \
		int mpi_err_ = (call);                                    \
		if (mpi_err_ != MPI_SUCCESS)                              \
			return dtf_comm_mpi_fail(mpi_err_, #call);        \
	} while (0)

/*
 * Split `in` into one communicator per node (MPI_Comm_split_type SHARED),
 * ordered by `rank`.  For tests of multi-node code on one machine, the
 * environment variable DTF_TEST_RANKS_PER_NODE=K makes "nodes" of K
 * consecutive ranks instead.  Errors: DTF_ERR_MPI.
 */
int dtf_comm_split_node(MPI_Comm in, int rank, MPI_Comm *out);

#endif
