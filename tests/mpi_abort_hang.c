/*
 * An MPI_Abort that never returns nor ends the process, preloaded
 * (LD_PRELOAD) into dtf-train by test_checkpoint to stand for an
 * MPI_Abort that waits on an unresponsive mpirun: the rank must still end
 * (dtf_comm_abort's backstop).
 */
#include <mpi.h>
#include <unistd.h>

int MPI_Abort(MPI_Comm comm, int errorcode)
{
	(void)comm;
	(void)errorcode;
	for (;;)
		pause();
}
