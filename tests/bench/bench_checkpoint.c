/*
 * bench_checkpoint.c - checkpoint save and load speed of the Fashion-MNIST
 * CNN with Adam state (3.27 M parameters x 3 = 39 MB), side by side with a
 * plain cp (and cp + fsync) of a file of the same size, in the same run
 * and directory.
 *
 *   build/tests/bench/bench_checkpoint [JOB.yaml] [DIR]
 *
 * Defaults: graphs/fashion_mnist_cnn.yaml under DTF_SOURCE_ROOT (or .), and
 * a fresh directory under TMPDIR (or /tmp).  No data is read.  Prints, per
 * repetition and as the best of 3: the time training waits (the staging
 * copy), the background write (CRC + write + fsync + rename + index),
 * load (read + CRC verify + copy into the model), and the cp figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double sh(const char *fmt, const char *a, const char *b)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), fmt, a, b, b);
	double t0 = now();
	int st = system(cmd);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench: '%s' failed\n", cmd);
		exit(1);
	}
	return now() - t0;
}

int main(int argc, char **argv)
{
	char jobpath[1024], dir[1024];
	const char *root = getenv("DTF_SOURCE_ROOT");
	snprintf(jobpath, sizeof(jobpath), "%s/graphs/fashion_mnist_cnn.yaml",
		 root ? root : ".");
	if (argc > 1)
		snprintf(jobpath, sizeof(jobpath), "%s", argv[1]);
	if (argc > 2) {
		snprintf(dir, sizeof(dir), "%s", argv[2]);
	} else {
		const char *t = getenv("TMPDIR");
		snprintf(dir, sizeof(dir), "%s/dtf-bench-ckpt-XXXXXX",
			 t ? t : "/tmp");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
	}
	char set[1100];
	snprintf(set, sizeof(set), "checkpoint.dir=%s/ckpt", dir);
	const char *sets[] = {set, "checkpoint.keep=1"};
	struct dtf_job *job;
	if (dtf_job_load(jobpath, sets, 2, &job) < 0) {
		fprintf(stderr, "bench: %s\n", dtf_error_msg());
		return 1;
	}
	struct dtf_graph g;
	int *layer_out = dtf_calloc((size_t)job->model.nlayers + 1, sizeof(int));
	struct dtf_optimizer opt;
	struct dtf_checkpointer *ck = NULL;
	if (dtf_graph_lower_model(job, 32, &g, layer_out) < 0 ||
	    dtf_optimizer_init(&opt, job, g.nparams) < 0) {
		fprintf(stderr, "bench: %s\n", dtf_error_msg());
		return 1;
	}
	float *params = dtf_alloc_aligned(g.nparams * sizeof(float));
	dtf_graph_init_params(&g, job->seed, params);
	for (size_t i = 0; i < 2 * g.nparams; i++) /* Adam moments, not zero */
		opt.slots[i] = params[i % g.nparams] * 0.5f;
	opt.iterations = 1000;
	if (dtf_checkpointer_new(job, &g, params, &opt, 1, NULL, &ck) < 0) {
		fprintf(stderr, "bench: %s\n", dtf_error_msg());
		return 1;
	}
	double mb = (double)dtf_checkpointer_file_bytes(ck) / 1e6;
	printf("Fashion-MNIST CNN + Adam: %zu parameters, checkpoint %.1f MB, in %s\n",
	       dtf_graph_num_params(&g), mb, dir);
	double best_stage = 1e9, best_save = 1e9, best_load = 1e9;
	double best_cp = 1e9, best_cps = 1e9, best_cat = 1e9;
	char src[1100], dst[1100];
	for (int rep = 0; rep < 3; rep++) {
		struct dtf_ckpt_position pos = {
			.step = 1000 + rep, .global_batch = 64, .world = 2,
			.per_replica_batch = 32, .seed = job->seed};
		double t0 = now();
		if (dtf_checkpointer_save(ck, &pos) < 0)
			goto fail;
		double t1 = now();
		if (dtf_checkpointer_wait(ck) < 0)
			goto fail;
		double t2 = now();
		struct dtf_ckpt_position back;
		int found;
		if (dtf_checkpointer_restore(ck, 0, &back, &found) < 0 || !found)
			goto fail;
		double t3 = now();
		snprintf(src, sizeof(src), "%s/ckpt/ckpt-%d.dtf", dir, 1000 + rep);
		snprintf(dst, sizeof(dst), "%s/copy.bin", dir);
		double cp = sh("cp %s %s", src, dst);
		double cps = sh("cp %s %s && sync %s", src, dst);
		double cat = sh("cat %s > /dev/null # %s %s", src, dst);
		printf("rep %d: save %.3f s (training waits %.1f ms, then %.3f s in the background) = %.0f MB/s; "
		       "load %.3f s = %.0f MB/s; cp %.3f s = %.0f MB/s; cp+sync %.3f s = %.0f MB/s; cat %.3f s = %.0f MB/s\n",
		       rep, t2 - t0, (t1 - t0) * 1e3, t2 - t1, mb / (t2 - t0),
		       t3 - t2, mb / (t3 - t2), cp, mb / cp, cps, mb / cps,
		       cat, mb / cat);
		if (t1 - t0 < best_stage)
			best_stage = t1 - t0;
		if (t2 - t0 < best_save)
			best_save = t2 - t0;
		if (t3 - t2 < best_load)
			best_load = t3 - t2;
		if (cp < best_cp)
			best_cp = cp;
		if (cps < best_cps)
			best_cps = cps;
		if (cat < best_cat)
			best_cat = cat;
	}
	printf("best of 3: save %.0f MB/s (with fsync) vs cp %.0f MB/s (no fsync) and cp+sync %.0f MB/s: ratio %.2f of cp+sync; "
	       "training waits %.1f ms per save (%.0f MB/s staging copy)\n",
	       mb / best_save, mb / best_cp, mb / best_cps,
	       best_cps / best_save, best_stage * 1e3, mb / best_stage);
	printf("best of 3: load %.0f MB/s (read + CRC-32C verify + copy, page cache warm) vs cat %.0f MB/s: ratio %.2f\n",
	       mb / best_load, mb / best_cat, best_cat / best_load);
	dtf_checkpointer_free(ck);
	if (argc <= 2) {
		char cmd[1100];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			return 1;
	}
	return 0;
fail:
	fprintf(stderr, "bench: %s\n", dtf_error_msg());
	return 1;
}
