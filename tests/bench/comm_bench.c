/*
 * comm_bench.c - allreduce bandwidth sweep: the strategies' collective
 * paths (dtf_strategy_reduce_buffer) beside one plain MPI_Allreduce call of
 * the same size, in the same run.
 *
 *   mpirun -np 2 build/tests/bench/comm_bench [MAX_MIB]   (default 64)
 *
 * Prints one row per size: bytes, then GB/s for each path, where GB/s is
 * the float32 payload (bytes) / seconds per call (so fp16 shows the
 * effective rate of the float32 gradients it carries).  Each cell is the
 * best of 3 timed batches of calls lasting >= 0.05 s each.  The plain MPI
 * call is the peer; "flat" is what multi_worker_mirrored/mirrored do
 * (16 MB chunks, implementation mpi); "flat shm" is their shared-memory
 * reduction (implementation shared_memory: the buffer lives in the
 * window; sum of this rank's slice between two barriers, gather, and a
 * closing barrier); central_storage is reduce to rank 0 + broadcast;
 * parameter_server is a push and a pull through one ps (so with 2 ranks:
 * 1 worker + 1 ps); hierarchical with 1 rank per "node"
 * (DTF_TEST_RANKS_PER_NODE=1 inside) and with one node.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "distribute/comm.h"
#include "distribute/strategy.h"

static const char job_text[] =
	"data:\n"
	"  train: {files: \"unused-*.tfrecord\"}\n"
	"  features:\n"
	"    image: {type: float, shape: [4]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers: [{dense: {units: 2, name: logits}}]\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 2}\n";

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { NPATHS = 8, SHM = 2 };
static const char *const names[NPATHS] = {
	"MPI_Allreduce", "flat", "flat shm", "flat+fp16", "hier(1 node)",
	"hier(2 nodes)", "central", "ps push+pull"};
static const char *const sets[NPATHS][2] = {
	{NULL, NULL},
	{"strategy.type=multi_worker_mirrored",
	 "strategy.communication.implementation=mpi"},
	{"strategy.type=multi_worker_mirrored",
	 "strategy.communication.implementation=shared_memory"},
	{"strategy.type=multi_worker_mirrored",
	 "strategy.communication.compression=fp16"},
	{"strategy.type=multi_worker_mirrored",
	 "strategy.communication.hierarchical=true"},
	{"strategy.type=multi_worker_mirrored",
	 "strategy.communication.hierarchical=true"},
	{"strategy.type=central_storage", NULL},
	{"strategy.type=parameter_server", NULL},
};

int main(int argc, char **argv)
{
	struct dtf_comm *comm;
	if (dtf_comm_init(&argc, &argv, &comm) < 0) {
		fprintf(stderr, "comm_bench: %s\n", dtf_error_msg());
		return 1;
	}
	double max_mb = argc > 1 ? atof(argv[1]) : 64;
	int rank = dtf_comm_rank(comm);
	size_t maxn = (size_t)(max_mb * 1048576 / 4);
	float *buf = dtf_alloc_aligned(maxn * 4);
	uint16_t *scratch = dtf_alloc_aligned(maxn * 2);
	struct dtf_strategy *st[NPATHS] = {0};
	struct dtf_job *jobs[NPATHS] = {0};
	float *shbuf = NULL; /* the shm path's vector, in its window */
	for (int p = 1; p < NPATHS; p++) {
		int n = sets[p][1] ? 2 : 1;
		if (dtf_job_load_string("bench.yaml", job_text, sets[p], n,
					&jobs[p]) < 0 ||
		    (p == 5 && setenv("DTF_TEST_RANKS_PER_NODE", "1", 1)) ||
		    dtf_strategy_new(jobs[p], comm, 0, NULL, &st[p]) < 0 ||
		    (p == SHM && dtf_strategy_share_grads(st[p], NULL, maxn,
							  &shbuf, NULL) < 0)) {
			fprintf(stderr, "comm_bench: %s: %s\n", names[p],
				dtf_error_msg());
			return 1;
		}
		unsetenv("DTF_TEST_RANKS_PER_NODE");
	}
	if (rank == 0) {
		printf("# %d ranks; GB/s of float32 payload per call\n%10s",
		       dtf_comm_size(comm), "bytes");
		for (int p = 0; p < NPATHS; p++)
			printf(" %14s", names[p]);
		printf("\n");
	}
	for (size_t bytes = 4096; bytes <= maxn * 4; bytes *= 4) {
		size_t n = bytes / 4;
		if (rank == 0)
			printf("%10zu", bytes);
		for (int p = 0; p < NPATHS; p++) {
			double best = 1e30;
			for (int rep = 0; rep < 3; rep++) {
				int calls = 0;
				MPI_Barrier(MPI_COMM_WORLD);
				double t0 = now(), t;
				int go = 1;
				float *b = p == SHM && shbuf ? shbuf : buf;
				if (p == SHM && !shbuf)
					break; /* one rank: no window */
				while (go) {
					for (size_t i = 0; i < n; i += 1024)
						b[i] = 1.0f;
					if (p == 0)
						MPI_Allreduce(MPI_IN_PLACE, buf, (int)n,
							      MPI_FLOAT, MPI_SUM,
							      MPI_COMM_WORLD);
					else
						dtf_strategy_reduce_buffer(st[p], b,
									   scratch, n);
					calls++;
					t = now() - t0;
					/* every rank stops after the same call */
					int more = t < 0.05;
					MPI_Allreduce(MPI_IN_PLACE, &more, 1, MPI_INT,
						      MPI_MAX, MPI_COMM_WORLD);
					go = more;
				}
				if (t / calls < best)
					best = t / calls;
			}
			if (rank == 0)
				printf(" %14.3f", (double)bytes / best / 1e9);
		}
		if (rank == 0) {
			printf("\n");
			fflush(stdout);
		}
	}
	for (int p = 0; p < NPATHS; p++) {
		dtf_strategy_free(st[p]);
		dtf_job_free(jobs[p]);
	}
	dtf_free(buf);
	dtf_free(scratch);
	dtf_comm_finalize(comm);
	return 0;
}
