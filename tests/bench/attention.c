/*
 * attention.c - the fused causal_self_attention beside the attention
 * composed of graph ops (slice, reshape, transpose, batch_matmul, causal
 * softmax, batch_matmul, transpose, reshape), on the fast CPU plan.
 *
 *   bench_attention [-b BATCH] [-T TIME] [-c CHANNELS] [-H HEADS]
 *                   [-t THREADS] [-r REPEATS]
 *
 * Builds qkv = x w (BATCH, TIME, 3 CHANNELS) and, from it, the attention
 * in each form (its nodes named att_*), a dense head and a sequence loss;
 * runs forward and backward REPEATS times (default 10) and prints, per
 * form, the best time of the attention's own nodes (forward: att_*;
 * backward: their gradient nodes and the sum of qkv's gradients) in
 * milliseconds.  Defaults: the 4-layer job's block (6, 64, 128, 4 heads).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/backend.h"
#include "ops/cpu/exec.h"
#include "ops/cpu/fast.h"
#include "ops/cpu/fast_exec.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char head_fmt[] =
	"data:\n"
	"  train: {files: unused}\n"
	"  features:\n"
	"    x: {type: float, shape: [%d, 16]}\n"
	"    y: {type: bytes, decode: uint8, dtype: int32, shape: [%d]}\n"
	"model:\n"
	"  graph:\n"
	"    w: {variable: {shape: [16, %d]}}\n"
	"    qkv: {matmul: {inputs: [x, w]}}\n"
	"%s"
	"    wo: {variable: {shape: [%d, 8]}}\n"
	"    logits: {matmul: {inputs: [att_y, wo]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: y}}\n"
	"train: {batch_size: %d}\n";

/* the attention part of the job in `composed` or fused form */
static void attention_text(char *out, size_t size, int t, int c, int heads,
			   int composed)
{
	int d = c / heads;
	if (!composed) {
		snprintf(out, size,
			 "    att_y: {causal_self_attention: {inputs: [qkv], heads: %d}}\n",
			 heads);
		return;
	}
	size_t n = 0;
	const char *part = "qkv";
	for (int p = 0; p < 3; p++)
		n += (size_t)snprintf(out + n, size - n,
			"    att_%c: {slice: {inputs: [qkv], axis: 2, begin: %d, size: %d}}\n"
			"    att_%ch: {reshape: {inputs: [att_%c], shape: [%d, %d, %d]}}\n"
			"    att_%ct: {transpose: {inputs: [att_%ch], perm: [0, 2, 1, 3]}}\n",
			part[p], p * c, c, part[p], part[p], t, heads, d, part[p], part[p]);
	snprintf(out + n, size - n,
		 "    att_s: {batch_matmul: {inputs: [att_qt, att_kt], adj_y: true, alpha: %.9g}}\n"
		 "    att_p: {softmax: {inputs: [att_s], causal: true}}\n"
		 "    att_o: {batch_matmul: {inputs: [att_p, att_vt]}}\n"
		 "    att_ot: {transpose: {inputs: [att_o], perm: [0, 2, 1, 3]}}\n"
		 "    att_y: {reshape: {inputs: [att_ot], shape: [%d, %d]}}\n",
		 1.0 / sqrt((double)d), t, c);
}

static int is_attention(const struct dtf_node *n)
{
	return strncmp(n->name, "att_", 4) == 0 ||
	       strncmp(n->name, "qkv/grad_sum", 12) == 0;
}

/* best forward and backward time (s) of the attention nodes */
static int run(int b, int t, int c, int heads, int threads, int reps,
	       int composed, double *fwd, double *bwd)
{
	static char att[8192], text[16384];
	attention_text(att, sizeof att, t, c, heads, composed);
	snprintf(text, sizeof text, head_fmt, t, t, 3 * c, att, c, b);
	struct dtf_job *job = NULL;
	struct dtf_graph g;
	struct dtf_plan plan;
	struct dtf_pool *pool = NULL;
	struct dtf_fast_plan fp;
	if (dtf_job_load_string("bench.yaml", text, NULL, 0, &job) < 0 ||
	    dtf_graph_lower_model(job, b, &g, NULL) < 0 ||
	    dtf_graph_backward(&g) < 0)
		return -1;
	float *params = dtf_alloc_aligned(g.nparams * sizeof(float));
	float *grads = dtf_alloc_aligned(g.nparams * sizeof(float));
	if (!params || !grads ||
	    dtf_plan_graph_with(&g, DTF_PLANNER_LIVENESS, params, grads,
				dtf_backend_cpu_workspace(&g), &plan) < 0 ||
	    dtf_pool_new(threads, &pool) < 0 ||
	    dtf_fast_plan_init(&fp, &g, pool) < 0)
		return -1;
	dtf_graph_init_params(&g, 1, params);
	uint64_t ids[4096] = {0};
	for (int i = 0; i < g.nnodes; i++) {
		struct dtf_node *n = &g.nodes[i];
		if (n->op == DTF_OP_INPUT)
			memset(n->data, 0, (size_t)dtf_shape_numel(&n->shape) * 4);
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_FLOAT32)
			for (int64_t k = 0; k < dtf_shape_numel(&n->shape); k++)
				((float *)n->data)[k] = (float)(k % 17) / 17.0f - 0.5f;
	}
	struct dtf_exec_ctx ctx = {.training = 1, .example_ids = ids,
				   .valid = b, .loss_scale = 1.0f / b,
				   .workspace = plan.workspace, .fast = &fp};
	*fwd = *bwd = 1e30;
	for (int r = 0; r < reps + 1; r++) {
		double tf = 0, tb = 0;
		for (int i = 0; i < g.nnodes; i++) {
			double t0 = now();
			dtf_exec_range(&g, i, i + 1, &ctx);
			double dt = now() - t0;
			if (is_attention(&g.nodes[i])) {
				if (i < g.nforward)
					tf += dt;
				else
					tb += dt;
			}
		}
		if (r > 0 && tf < *fwd)
			*fwd = tf;
		if (r > 0 && tb < *bwd)
			*bwd = tb;
	}
	dtf_fast_plan_deinit(&fp);
	dtf_pool_free(pool);
	dtf_plan_deinit(&plan);
	dtf_graph_deinit(&g);
	dtf_free(params);
	dtf_free(grads);
	dtf_job_free(job);
	return 0;
}

int main(int argc, char **argv)
{
	int b = 6, t = 64, c = 128, heads = 4, threads = 1, reps = 10;
	for (int i = 1; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (strcmp(argv[i], "-b") == 0)
			b = v;
		else if (strcmp(argv[i], "-T") == 0)
			t = v;
		else if (strcmp(argv[i], "-c") == 0)
			c = v;
		else if (strcmp(argv[i], "-H") == 0)
			heads = v;
		else if (strcmp(argv[i], "-t") == 0)
			threads = v;
		else if (strcmp(argv[i], "-r") == 0)
			reps = v;
		else
			goto usage;
		if (v < 1)
			goto usage;
	}
	if (b > 4096 || c % heads)
		goto usage;
	double ff, fb, cf, cb;
	if (run(b, t, c, heads, threads, reps, 0, &ff, &fb) < 0 ||
	    run(b, t, c, heads, threads, reps, 1, &cf, &cb) < 0) {
		fprintf(stderr, "bench_attention: %s\n", dtf_error_msg());
		return 1;
	}
	printf("attention b=%d t=%d c=%d heads=%d, %d thread(s), best of %d (ms):\n"
	       "  fused     forward %8.3f  backward %8.3f  total %8.3f\n"
	       "  composed  forward %8.3f  backward %8.3f  total %8.3f\n"
	       "  composed / fused: forward %.2fx, backward %.2fx, total %.2fx\n",
	       b, t, c, heads, threads, reps, ff * 1e3, fb * 1e3,
	       (ff + fb) * 1e3, cf * 1e3, cb * 1e3, (cf + cb) * 1e3, cf / ff,
	       cb / fb, (cf + cb) / (ff + fb));
	return 0;
usage:
	fprintf(stderr, "usage: bench_attention [-b BATCH] [-T TIME] [-c CHANNELS] [-H HEADS] [-t THREADS] [-r REPEATS]\n");
	return 2;
}
