/*
 * comm_bench.c - allreduce bandwidth sweep: the strategies' collective
 * paths (dtf_strategy_reduce_buffer) beside one plain MPI_Allreduce call of
 * the same size, in the same run.
 *
 *   mpirun -np 2 build/tests/bench/comm_bench [MAX_MIB]   (default 64)
 *   mpirun -np 2 build/tests/bench/comm_bench -t [-p PATHS] [-s SIZES]
 *
 * Prints one row per size: bytes, then GB/s for each path, where GB/s is
 * the float32 payload (bytes) / seconds per call (so fp16 shows the
 * effective rate of the float32 gradients it carries); with -t, seconds
 * per call instead (what tests/bench/scaling_model.py fits).  -p keeps
 * the paths named (a comma list of mpi, flat, shm, fp16, hier1, hier2,
 * central, ps), -s times the sizes given (a comma list of bytes, each a
 * multiple of 4) instead of 4 KiB, 16 KiB, ... MAX_MIB.  Each cell is the
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

static void usage(void)
{
	fprintf(stderr, "usage: comm_bench [MAX_MIB] [-t] [-p mpi,flat,shm,fp16,hier1,hier2,central,ps] [-s BYTES,...]\n");
}

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
static const char *const keys[NPATHS] = {
	"mpi", "flat", "shm", "fp16", "hier1", "hier2", "central", "ps"};
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
	double max_mb = 64;
	int seconds = 0, on[NPATHS];
	size_t sizes[64], nsizes = 0;
	for (int p = 0; p < NPATHS; p++)
		on[p] = 1;
	for (int a = 1; a < argc; a++) {
		char *end, *tok;
		if (!strcmp(argv[a], "-t")) {
			seconds = 1;
		} else if (!strcmp(argv[a], "-p") && a + 1 < argc) {
			for (int p = 0; p < NPATHS; p++)
				on[p] = 0;
			for (tok = strtok(argv[++a], ","); tok; tok = strtok(NULL, ",")) {
				int p = 0;
				while (p < NPATHS && strcmp(tok, keys[p]))
					p++;
				if (p == NPATHS) {
					fprintf(stderr, "comm_bench: unknown path '%s'\n", tok);
					usage();
					dtf_comm_finalize(comm);
					return 2;
				}
				on[p] = 1;
			}
		} else if (!strcmp(argv[a], "-s") && a + 1 < argc) {
			for (tok = strtok(argv[++a], ","); tok; tok = strtok(NULL, ",")) {
				unsigned long long b = strtoull(tok, &end, 10);
				if (*end || b < 4 || b % 4 || nsizes == 64) {
					fprintf(stderr, "comm_bench: size '%s' is not a multiple of 4 bytes (at most 64 sizes)\n", tok);
					dtf_comm_finalize(comm);
					return 2;
				}
				sizes[nsizes++] = (size_t)b;
			}
		} else if ((max_mb = strtod(argv[a], &end)) <= 0 || *end) {
			fprintf(stderr, "comm_bench: bad argument '%s'\n", argv[a]);
			usage();
			dtf_comm_finalize(comm);
			return 2;
		}
	}
	if (!nsizes)
		for (size_t b = 4096; b <= (size_t)(max_mb * 1048576) && nsizes < 64; b *= 4)
			sizes[nsizes++] = b;
	size_t maxn = 1;
	for (size_t i = 0; i < nsizes; i++)
		if (sizes[i] / 4 > maxn)
			maxn = sizes[i] / 4;
	int rank = dtf_comm_rank(comm);
	float *buf = dtf_alloc_aligned(maxn * 4);
	uint16_t *scratch = dtf_alloc_aligned(maxn * 2);
	struct dtf_strategy *st[NPATHS] = {0};
	struct dtf_job *jobs[NPATHS] = {0};
	float *shbuf = NULL; /* the shm path's vector, in its window */
	for (int p = 1; p < NPATHS; p++) {
		if (!on[p])
			continue;
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
		printf("# %d ranks; %s\n%10s", dtf_comm_size(comm),
		       seconds ? "seconds per call"
			       : "GB/s of float32 payload per call",
		       "bytes");
		for (int p = 0; p < NPATHS; p++)
			if (on[p])
				printf(" %14s", seconds ? keys[p] : names[p]);
		printf("\n");
	}
	for (size_t si = 0; si < nsizes; si++) {
		size_t bytes = sizes[si], n = bytes / 4;
		if (rank == 0)
			printf("%10zu", bytes);
		for (int p = 0; p < NPATHS; p++) {
			if (!on[p])
				continue;
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
			if (rank == 0 && seconds)
				printf(" %14.9f", best);
			else if (rank == 0)
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
