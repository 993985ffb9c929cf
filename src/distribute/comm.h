/*
 * comm.h - the collectives training needs, on Open MPI.  Only distribute/
 * includes <mpi.h>; everything else sees this opaque handle.
 *
 * Error agreement: a rank that fails between collectives does not leave the
 * others waiting in the next allreduce.  It calls dtf_comm_agree() with its
 * error, as every rank does once per step with 0, and every rank learns the
 * worst status and which rank reported it before any other collective runs
 * (MPI_Allreduce with MPI_MAXLOC on {status, rank}).
 *
 * The collectives below accept c == NULL as a communicator of one rank
 * (this process alone: an evaluator task, which trains with no one).
 */
#ifndef DTF_DIST_COMM_H
#define DTF_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

struct dtf_comm;

/*
 * Start MPI (MPI_Init_thread, FUNNELED) or join it if already started, and
 * learn this rank's place: world rank/size and node-local rank/size
 * (MPI_Comm_split_type SHARED).  Runs without mpirun too (a singleton).
 * Before MPI_Init: a task of a Slurm step of several tasks
 * (SLURM_STEP_NUM_TASKS, else SLURM_NTASKS, > 1 with SLURM_PROCID set) with
 * no PMI to join the others by (none of PMIX_RANK, PMIX_NAMESPACE,
 * PMI_RANK, PMI_FD, OMPI_COMM_WORLD_SIZE set: `srun --mpi=none`) is
 * DTF_ERR_USAGE saying to use `srun --mpi=pmix`; each task says it, since
 * there is no world to agree in.
 * Errors: DTF_ERR_USAGE, DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
int dtf_comm_init(int *argc, char ***argv, struct dtf_comm **out);

/*
 * A communicator of the ranks of c that pass the same color >= 0 (MPI_Comm_split,
 * ordered by rank in c), as a handle of its own; a rank passing color < 0
 * gets *out = NULL.  A collective over c.  Free with dtf_comm_finalize().
 * Errors: DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
int dtf_comm_split(struct dtf_comm *c, int color, struct dtf_comm **out);

/*
 * Check the launch before any training collective (a collective over c):
 *  - a world of 1 while Slurm started several tasks (SLURM_STEP_NUM_TASKS,
 *    else SLURM_NTASKS, > 1 with SLURM_PROCID set: srun without
 *    --mpi=pmix) is DTF_ERR_USAGE saying to use `srun --mpi=pmix`;
 *  - every rank learns every rank's host, the address its host name
 *    resolves to and the interface holding it (MPI_Allgather); when the
 *    ranks run on more than one host, rank 0 logs one line per rank
 *    ("rank R of N: host H, interface I, address A"), and a host whose
 *    name resolves to a loopback address (127.0.0.0/8, ::1; Debian's
 *    127.0.1.1 for the machine's own name) is DTF_ERR_USAGE naming the
 *    host and rank, the same on every rank.
 * Errors: DTF_ERR_USAGE, DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
int dtf_comm_check_launch(struct dtf_comm *c);

/* Free a handle; the one that started MPI also calls MPI_Finalize.  NULL is
 * a no-op. */
void dtf_comm_finalize(struct dtf_comm *c);

int dtf_comm_rank(const struct dtf_comm *c);
int dtf_comm_size(const struct dtf_comm *c);
int dtf_comm_local_rank(const struct dtf_comm *c);
int dtf_comm_local_size(const struct dtf_comm *c);
int dtf_comm_num_nodes(const struct dtf_comm *c);
const char *dtf_comm_host(const struct dtf_comm *c);

/* In-place sum over ranks of n float32 values.  Large buffers go in chunks
 * of at most 4 Mi floats (16 MB): Open MPI's shared-memory allreduce slows
 * about 5x above ~24 MB per call (DESIGN.md section 7). */
int dtf_comm_allreduce_sum_f32(struct dtf_comm *c, float *buf, size_t n);
int dtf_comm_allreduce_sum_f64(struct dtf_comm *c, double *buf, size_t n);
int dtf_comm_allreduce_min_i64(struct dtf_comm *c, int64_t *buf, size_t n);
int dtf_comm_allreduce_max_i64(struct dtf_comm *c, int64_t *buf, size_t n);

/* Broadcast n floats from `root`. */
int dtf_comm_bcast_f32(struct dtf_comm *c, float *buf, size_t n, int root);
/* Broadcast n bytes from `root` (small records: checkpoint positions). */
int dtf_comm_bcast_bytes(struct dtf_comm *c, void *buf, size_t n, int root);

/*
 * Agree on the step's status: `status` is this rank's (0 ok, else a
 * positive exit status, see core/error.h); *worst receives the largest over
 * ranks and *who the lowest rank that reported it.  A collective.
 */
int dtf_comm_agree(struct dtf_comm *c, int status, int *worst, int *who);

int dtf_comm_barrier(struct dtf_comm *c);

/*
 * Gather n int32 from every rank to `root` (MPI_Gather): rank r's values
 * land at recv[r * n .. r * n + n - 1].  recv holds size * n values on the
 * root and is not touched elsewhere (may be NULL there).  A collective;
 * small records only (which ranks saw a signal).  Errors: DTF_ERR_MPI.
 */
int dtf_comm_gather_i32(struct dtf_comm *c, const int32_t *send, int n,
			int32_t *recv, int root);

/* As dtf_comm_gather_i32, for n float64 (the straggler report's per-rank
 * times, obs/straggler.h). */
int dtf_comm_gather_f64(struct dtf_comm *c, const double *send, int n,
			double *recv, int root);

/* As dtf_comm_gather_i32, for n bytes per rank (host names). */
int dtf_comm_gather_bytes(struct dtf_comm *c, const void *send, int n,
			  void *recv, int root);

/*
 * Round trips on the ring of ranks, for naming a host with a slow link: a
 * collective in effect (every rank of c calls it).  Rank r sends a 16-byte
 * ping to rank (r + 1) % size, `rounds` times in a row (at most 16), each
 * after the answer to the last, and answers each of the pings of rank
 * (r - 1) % size the moment it comes, whatever its own rounds are doing;
 * *rtt_seconds receives the shortest of its round trips to r + 1 (a rank
 * that arrives late delays its neighbour's first round only).  It waits
 * by polling (MPI_Testany) with 20 us sleeps in between, not by spinning:
 * spinning ranks compete for the cores, and on a busy machine the round
 * trips would measure the scheduler.  A communicator of one rank gets 0.
 * Point-to-point on tags of its own, never matched by collectives or
 * notices.  Errors: DTF_ERR_MPI.
 */
int dtf_comm_ring_rtt(struct dtf_comm *c, int rounds, double *rtt_seconds);

/*
 * Notices: one message of two int64 from one rank to another on the world
 * communicator, outside every collective; the chief tells the evaluator
 * task that training ended (train/evaluator.h).  The receiver posts the
 * receive early (MPI_Irecv) and polls it (MPI_Test) between other work;
 * the sender's MPI_Send of 16 bytes completes without waiting for it.
 * dtf_comm_notice_free cancels a receive that got nothing.
 * Errors: DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
struct dtf_comm_notice;
int dtf_comm_notice_post(struct dtf_comm *c, int from,
			 struct dtf_comm_notice **out);
/* *arrived = 1 and msg filled once the notice has come (and after). */
int dtf_comm_notice_test(struct dtf_comm_notice *n, int *arrived,
			 int64_t msg[2]);
void dtf_comm_notice_free(struct dtf_comm_notice *n);
int dtf_comm_notice_send(struct dtf_comm *c, int to, const int64_t msg[2]);

/* End every rank now with `status` (MPI_Abort).  For failures that cannot
 * be agreed on (a broken invariant under MPI, a stuck collective seen by
 * the watchdog thread: Open MPI's MPI_Abort may be called from any thread,
 * and it is the one call made outside the main thread).  Should MPI_Abort
 * not end this process within 3 s (it waits on mpirun, which may be loaded
 * or confused), the process writes an error line and exits with `status`
 * (_exit), which ends the job as well: mpirun ends the others when a rank
 * exits without MPI_Finalize, srun with --kill-on-bad-exit. */
_Noreturn void dtf_comm_abort(struct dtf_comm *c, int status);

#endif
