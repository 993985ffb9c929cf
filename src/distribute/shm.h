/*
 * shm.h - the replicas' gradient vectors in one MPI-3 shared-memory
 * window, for the intra-node gradient allreduce of distribute/strategy.c.
 *
 * When every replica runs on one node, each rank's flat gradient vector is
 * its segment of a window from MPI_Win_allocate_shared (one segment per
 * rank, found with MPI_Win_shared_query), so a bucket is reduced by loads
 * and stores instead of messages (the reduce-scatter / allgather of a ring
 * allreduce, done in place):
 *  1. every rank reaches the bucket (MPI_Ibarrier on `arrive`);
 *  2. rank r sums slice r of the bucket over all N segments into its own,
 *     in rank order (g_0 + g_1 + ... + g_{N-1}), so every rank ends with
 *     the same bits;
 *  3. every rank has reduced its slice (MPI_Ibarrier on `reduced`);
 *  4. rank r copies slice q from segment q, for every q != r.
 * The strategy's next collective on the replicas (the statistics'
 * allreduce) keeps a rank from overwriting its segment in the next step
 * while another still reads it.  MPI_Win_sync orders the memory accesses
 * around each synchronization, as MPI-3.1 section 11.7 requires for the
 * unified model; the window stays in one MPI_Win_lock_all epoch.
 * With the sharded update (distribute/strategy.h, dtf_strategy_sync_slots) step 4
 * is skipped: the variables are one copy for the node, behind rank 0's
 * segment (`shared`), and each rank updates those of its own slices in
 * place.
 * Open MPI stays the engine: the window and the barriers are its own.
 */
#ifndef DTF_DIST_SHM_H
#define DTF_DIST_SHM_H

#include <mpi.h>
#include <stddef.h>

struct dtf_shm {
	MPI_Win win;
	MPI_Comm arrive, reduced; /* one per phase: each starts in bucket order */
	int rank, size;
	int locked;               /* in the MPI_Win_lock_all epoch */
	float **seg;              /* [size]: every rank's vector */
	size_t n;                 /* floats per segment */
	float *shared;            /* the nshared floats behind rank 0's
				   * segment, one copy every rank maps (NULL
				   * if none) */
};

/*
 * A window of n floats per rank of `comm` (whose ranks must share memory:
 * an MPI_Comm_split_type SHARED communicator), zeroed, each segment aligned
 * to DTF_ALIGN, and nshared floats more behind rank 0's segment
 * (sh->shared, aligned to DTF_ALIGN, zeroed; nshared may be 0: no such
 * part; the same value on every rank).  A collective over comm; comm is
 * borrowed (the handle keeps duplicates).  *out is NULL when the window cannot be had
 * (MPI_Win_allocate_shared failed or gave misaligned segments on some rank:
 * every rank sees the same outcome; the reason is left in *why).
 * Errors: DTF_ERR_NOMEM.
 */
int dtf_shm_new(MPI_Comm comm, size_t n, size_t nshared,
		struct dtf_shm **out, const char **why);

/* Free the window (MPI_Win_free: a collective over the ranks of the
 * window).  NULL is a no-op; after MPI_Finalize only the memory of the
 * handle is released. */
void dtf_shm_free(struct dtf_shm *sh);

/* seg[rank][off, off+n) = seg[0] + seg[1] + ... + seg[size-1], added left
 * to right in float32.  Returns 1 when a sum is NaN or infinite, else 0. */
int dtf_shm_sum(const struct dtf_shm *sh, size_t off, size_t n);

/* seg[rank][off, off+n) = seg[from][off, off+n). */
void dtf_shm_copy_from(const struct dtf_shm *sh, int from, size_t off,
		       size_t n);

/* Slice `part` of `size` of a range of n floats: [*lo, *hi), on
 * 16-float boundaries (a cache line), the last slice taking the rest. */
void dtf_shm_slice(size_t n, int part, int size, size_t *lo, size_t *hi);

#endif
