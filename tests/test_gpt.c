/*
 * test_gpt.c - the character-level GPT from a job file: the layers form's
 * GPT layers (embedding, position_embedding, transformer_block, dense
 * tied_to) lower to GPT-2's variables with their names, shapes,
 * initialisers and weight-decay groups; the layers form and its twin
 * written op by op in the graph form (tests/fixtures/gpt-small*.yaml)
 * train to the same bits; 1 rank and 2 ranks reach the same variables
 * after 20 steps (max relative difference <= 1e-5); the fused attention
 * and its composition agree; the liveness plan's activation memory of
 * the shipped GPT job against the naive plan; the shipped jobs' --dry-run
 * tables give parameters and FLOPs per token.
 *
 * The records are the tests' own: a 16-letter text with some structure
 * (a repeating phrase with random letters between) cut by
 * `dtf-records convert-text --block-size 16` into windows of 17 ids.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/backend.h"

#include "testutil.h"

static char tmpdir[256];

/* the fixture's path under the source tree */
static const char *fixture(const char *name)
{
	static char path[1024];
	snprintf(path, sizeof(path), "%s/tests/fixtures/%s", tu_source_root(),
		 name);
	return path;
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-gpt-test");
	/* 6000 letters a..p: "the quick fox " patterns with noise */
	static const char phrase[] = "abcdefghij";
	char *text = malloc(6001);
	ck_assert_ptr_nonnull(text);
	tu_rng_seed(19);
	for (int i = 0; i < 6000; i++)
		text[i] = tu_next_u64() % 4 ? phrase[i % 10]
					    : (char)('a' + tu_next_u64() % 16);
	tu_write_bytes(tmpdir, "text.txt", text, 6000);
	free(text);
	int st = tu_run("%s/dtf-records convert-text --text %s/text.txt "
			"--out %s --block-size 16 --shards 2 >/dev/null",
			tu_build_root(), tmpdir, tmpdir);
	ck_assert_int_eq(st, 0);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

static struct dtf_job *load_fixture(const char *name)
{
	struct dtf_job *job = NULL;
	int rc = dtf_job_load(fixture(name), NULL, 0, &job);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	return job;
}

/* ---- the layers form's lowering ------------------------------------------- */

struct want_var {
	const char *name;
	int rank;
	int64_t d0, d1;
	enum dtf_var_group group;
	double stddev; /* of the initial values; -1: all equal to `fill` */
	float fill;
};

/* GPT-2's variables of gpt-small.yaml (C 16, T 16, V 16, 2 blocks), in
 * parameter-vector order */
#define BLOCK_VARS(h)                                                         \
	{h "/ln_1/gamma", 1, 16, 0, DTF_GROUP_NORM, -1, 1},                   \
	{h "/ln_1/beta", 1, 16, 0, DTF_GROUP_NORM, -1, 0},                    \
	{h "/attn/qkv/kernel", 2, 16, 48, DTF_GROUP_KERNEL, 0.02, 0},         \
	{h "/attn/qkv/bias", 1, 48, 0, DTF_GROUP_BIAS, -1, 0},                \
	{h "/attn/proj/kernel", 2, 16, 16, DTF_GROUP_KERNEL, 0.01, 0},        \
	{h "/attn/proj/bias", 1, 16, 0, DTF_GROUP_BIAS, -1, 0},               \
	{h "/ln_2/gamma", 1, 16, 0, DTF_GROUP_NORM, -1, 1},                   \
	{h "/ln_2/beta", 1, 16, 0, DTF_GROUP_NORM, -1, 0},                    \
	{h "/mlp/fc/kernel", 2, 16, 64, DTF_GROUP_KERNEL, 0.02, 0},           \
	{h "/mlp/fc/bias", 1, 64, 0, DTF_GROUP_BIAS, -1, 0},                  \
	{h "/mlp/proj/kernel", 2, 64, 16, DTF_GROUP_KERNEL, 0.01, 0},         \
	{h "/mlp/proj/bias", 1, 16, 0, DTF_GROUP_BIAS, -1, 0}

static const struct want_var small_vars[] = {
	{"wte/embeddings", 2, 16, 16, DTF_GROUP_KERNEL, 0.02, 0},
	{"wpe/embeddings", 2, 16, 16, DTF_GROUP_KERNEL, 0.02, 0},
	BLOCK_VARS("h0"),
	BLOCK_VARS("h1"),
	{"ln_f/gamma", 1, 16, 0, DTF_GROUP_NORM, -1, 1},
	{"ln_f/beta", 1, 16, 0, DTF_GROUP_NORM, -1, 0},
};

/* Names, shapes, order, groups and initial statistics of every variable;
 * the parameter count by GPT-2's formula; the logits' shape; the job's
 * decay groups select exactly the tensors of rank >= 2. */
START_TEST(layers_lower_to_gpt2_variables)
{
	struct dtf_job *job = load_fixture("gpt-small.yaml");
	struct dtf_graph g;
	int rc = dtf_graph_lower_model(job, 4, &g, NULL);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	float *params = malloc(g.nparams * sizeof(float));
	ck_assert_ptr_nonnull(params);
	dtf_graph_init_params(&g, job->seed, params);
	int nv = 0;
	size_t prev_offset = 0;
	for (int i = 0; i < g.nnodes; i++) {
		const struct dtf_node *n = &g.nodes[i];
		if (n->op != DTF_OP_VARIABLE)
			continue;
		ck_assert_int_lt(nv, (int)(sizeof(small_vars) / sizeof(small_vars[0])));
		const struct want_var *w = &small_vars[nv++];
		ck_assert_str_eq(n->name, w->name);
		ck_assert_int_eq(n->shape.rank, w->rank);
		ck_assert_int_eq(n->shape.d[0], w->d0);
		if (w->rank == 2)
			ck_assert_int_eq(n->shape.d[1], w->d1);
		ck_assert_int_eq(dtf_graph_var_group(n), w->group);
		/* rank >= 2 <=> decayed with the default groups [kernel] */
		int decayed = (job->train.decay_groups >> dtf_graph_var_group(n)) & 1;
		ck_assert_int_eq(decayed, n->shape.rank >= 2);
		ck_assert(nv == 1 || n->a.var.offset > prev_offset);
		prev_offset = n->a.var.offset;
		int64_t k = dtf_shape_numel(&n->shape);
		const float *p = params + n->a.var.offset;
		if (w->stddev < 0) {
			for (int64_t j = 0; j < k; j++)
				ck_assert_float_eq(p[j], w->fill);
			continue;
		}
		double s = 0, s2 = 0;
		for (int64_t j = 0; j < k; j++) {
			s += p[j];
			s2 += (double)p[j] * p[j];
		}
		double mean = s / (double)k, sd = sqrt(s2 / (double)k - mean * mean);
		/* 256..1024 draws: the sample stddev within 15% */
		ck_assert_msg(fabs(sd / w->stddev - 1) < 0.15 && fabs(mean) < w->stddev / 4,
			      "%s: mean %g stddev %g, want 0 and %g", n->name, mean, sd,
			      w->stddev);
	}
	ck_assert_int_eq(nv, (int)(sizeof(small_vars) / sizeof(small_vars[0])));
	/* V C + T C + L (12 C^2 + 13 C) + 2 C */
	ck_assert_uint_eq(dtf_graph_num_params(&g),
			  16 * 16 + 16 * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16);
	const struct dtf_shape *sl = &g.nodes[g.logits].shape;
	ck_assert_int_eq(sl->rank, 3);
	ck_assert_int_eq(sl->d[0], 4);
	ck_assert_int_eq(sl->d[1], 16);
	ck_assert_int_eq(sl->d[2], 16);
	/* the tied head is the embedding table, transposed: no own kernel */
	ck_assert_int_lt(dtf_graph_find(&g, "logits/kernel"), 0);
	free(params);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

/* ---- training runs --------------------------------------------------------- */

/* mpirun -np np dtf-train JOB for 20 steps on the test's records,
 * --export-variables NAME.bin; asserts exit 0 */
static void train(int np, const char *name, const char *job,
		  const char *sets)
{
	char log[128];
	snprintf(log, sizeof(log), "%s.log", name);
	int st = tu_mpirun(np, "DTF_CPU_KERNELS=reference", tmpdir, log,
			   "--threads 1 --set data.train.files=%s/train-*.tfrecord "
			   "--set data.eval.files=%s/validation-*.tfrecord "
			   "--set train.max_steps=20 --export-variables %s/%s.bin "
			   "%s %s",
			   tmpdir, tmpdir, tmpdir, name, sets ? sets : "",
			   fixture(job));
	ck_assert_msg(st == 0, "%s: exit %d\n%s", name, st, tu_slurp(tmpdir, log));
}

static double rel_diff(const char *a, const char *b, int *same)
{
	char an[128], bn[128];
	snprintf(an, sizeof(an), "%s.bin", a);
	snprintf(bn, sizeof(bn), "%s.bin", b);
	size_t n, moved;
	double worst = tu_vars_rel_diff(tmpdir, an, bn, &n, &moved, same);
	ck_assert_uint_eq(n, 7104);
	ck_assert_uint_gt(moved, 5000);
	return worst;
}

/* The layers form and the graph form of the same GPT train to the same
 * bits (one rank, the reference kernels). */
START_TEST(layers_and_graph_forms_same_bits)
{
	train(1, "layers", "gpt-small.yaml", "--set strategy.type=one_device");
	train(1, "graph", "gpt-small-graph.yaml", "--set strategy.type=one_device");
	int same = 0;
	double d = rel_diff("graph", "layers", &same);
	printf("gpt-small, layers vs graph form after 20 steps: max rel diff %g%s\n",
	       d, same ? " (same bits)" : "");
	ck_assert_msg(same, "the forms differ: max relative difference %g", d);
	/* and it learned: the loss fell from about ln 16 */
	tu_assert_log(tmpdir, "layers.log", "step 20");
}
END_TEST

/* 1 rank at global batch 4 and 2 ranks at 2 per replica: the same
 * variables after 20 steps within 1e-5 (relative). */
START_TEST(one_and_two_ranks_agree)
{
	train(1, "one", "gpt-small.yaml", "--set strategy.type=one_device");
	train(2, "two", "gpt-small.yaml", NULL);
	int same = 0;
	double d = rel_diff("two", "one", &same);
	printf("gpt-small, 1 rank vs 2 ranks after 20 steps: max rel diff %g%s\n",
	       d, same ? " (same bits)" : "");
	ck_assert_msg(d <= 1e-5, "max relative difference %g > 1e-5", d);
}
END_TEST

/* ---- the shipped job -------------------------------------------------------- */

/* graphs/shakespeare_char_gpt.yaml at 6 windows per replica: the liveness
 * plan's activation memory against the naive plan's (every tensor its
 * own buffer). */
START_TEST(shipped_gpt_plan_saves_memory)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/graphs/shakespeare_char_gpt.yaml",
		 tu_source_root());
	struct dtf_job *job;
	ck_assert_int_eq(dtf_job_load(path, NULL, 0, &job), 0);
	struct dtf_graph g;
	int rc = dtf_graph_lower_model(job, 6, &g, NULL);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(dtf_graph_backward(&g), 0);
	ck_assert_uint_eq(dtf_graph_num_params(&g), 812288);
	struct dtf_plan_stats live, naive;
	ck_assert_int_eq(dtf_plan_measure(&g, DTF_PLANNER_LIVENESS, 1,
					  dtf_backend_cpu_workspace(&g), &live), 0);
	ck_assert_int_eq(dtf_plan_measure(&g, DTF_PLANNER_NAIVE, 1,
					  dtf_backend_cpu_workspace(&g), &naive), 0);
	printf("shakespeare_char_gpt batch 6: planned %zu of naive %zu bytes (%.1f%%), %d in place\n",
	       live.planned_bytes, live.naive_bytes,
	       100.0 * (double)live.planned_bytes / (double)live.naive_bytes,
	       live.inplace);
	ck_assert_uint_eq(live.naive_bytes, naive.naive_bytes);
	ck_assert_uint_lt(live.planned_bytes * 2, live.naive_bytes);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

/* --dry-run of both shipped GPT jobs: the parameter count and a FLOPs per
 * token line; for the 4-layer job the forward FLOPs per token by hand:
 * 2 x (matmul weights) + attention 4 T C per layer (the two T x T
 * products over the full square, as nanoGPT's estimate counts them). */
START_TEST(dry_run_gives_params_and_flops_per_token)
{
	static const struct {
		const char *job;
		const char *params;
	} jobs[] = {
		{"shakespeare_char_gpt", "Total params: 812288 "},
		{"shakespeare_char_gpt_6l", "Total params: 10778112 "},
	};
	for (int i = 0; i < 2; i++) {
		char log[64];
		snprintf(log, sizeof(log), "%s.out", jobs[i].job);
		int st = tu_run("%s/dtf-train --dry-run %s/graphs/%s.yaml >%s/%s 2>&1",
				tu_build_root(), tu_source_root(), jobs[i].job, tmpdir,
				log);
		ck_assert_msg(st == 0, "%s: exit %d\n%s", jobs[i].job, st,
			      tu_slurp(tmpdir, log));
		tu_assert_log(tmpdir, log, jobs[i].params);
		tu_assert_log(tmpdir, log, "FLOPs per token (");
		tu_assert_log(tmpdir, log, "Activation memory per replica");
	}
	tu_assert_log(tmpdir, "shakespeare_char_gpt.out", "FLOPs per token (64 per example)");
	tu_assert_log(tmpdir, "shakespeare_char_gpt_6l.out", "FLOPs per token (256 per example)");
}
END_TEST

/* ---- errors --------------------------------------------------------------- */

static const char *lower_fails(const char *layers)
{
	static char text[4096];
	snprintf(text, sizeof(text),
		 "data:\n"
		 "  train: {files: unused}\n"
		 "  features:\n"
		 "    tokens: {type: bytes, decode: uint8, dtype: int32, shape: [9]}\n"
		 "model:\n"
		 "  input: tokens\n"
		 "  layers:\n%s"
		 "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: targets}}\n"
		 "train: {batch_size: 2}\n",
		 layers);
	struct dtf_job *job = NULL;
	int rc = dtf_job_load_string("gpt.yaml", text, NULL, 0, &job);
	if (rc == 0) {
		struct dtf_graph g;
		rc = dtf_graph_lower_model(job, 2, &g, NULL);
		if (rc == 0)
			dtf_graph_deinit(&g);
	}
	dtf_job_free(job);
	ck_assert_msg(rc < 0, "lowered without an error:\n%s", text);
	return dtf_error_msg();
}

#define SLICES                                                                \
	"    - {slice: {axis: 1, begin: 0, size: 8, name: context}}\n"           \
	"    - {slice: {inputs: [tokens], axis: 1, begin: 1, size: 8, name: targets}}\n"

START_TEST(errors_name_the_layer)
{
	const char *m = lower_fails(SLICES
		"    - {embedding: {input_dim: 10, output_dim: 6, inputs: [context], name: wte}}\n"
		"    - {transformer_block: {heads: 4, name: h0}}\n"
		"    - {dense: {tied_to: wte, name: logits}}\n");
	ck_assert_msg(strstr(m, "gpt.yaml:12:7: layer 'h0': transformer_block: heads (4) must divide the channels (6)"),
		      "%s", m);
	m = lower_fails(SLICES
		"    - {embedding: {input_dim: 10, output_dim: 6, inputs: [context], name: wte}}\n"
		"    - {dense: {tied_to: wpe, name: logits}}\n");
	ck_assert_msg(strstr(m, "layer 'logits': tied_to: 'wpe' names no earlier embedding layer"),
		      "%s", m);
	m = lower_fails(SLICES
		"    - {embedding: {input_dim: 10, output_dim: 6, inputs: [context], name: wte}}\n"
		"    - {dense: {tied_to: wte, units: 11, name: logits}}\n");
	ck_assert_msg(strstr(m, "units 11 differ from the vocabulary of the table 'wte/embeddings' (10, 6)"),
		      "%s", m);
	m = lower_fails(SLICES
		"    - {embedding: {input_dim: 10, output_dim: 6, inputs: [context], name: wte}}\n"
		"    - {position_embedding: {length: 9, name: wpe}}\n"
		"    - {dense: {tied_to: wte, name: logits}}\n");
	ck_assert_msg(strstr(m, "position_embedding: length 9, but the input 'wte/lookup' has 8 positions"),
		      "%s", m);
	m = lower_fails(SLICES
		"    - {transformer_block: {heads: 2, inputs: [context], name: h0}}\n"
		"    - {dense: {units: 3, name: logits}}\n");
	ck_assert_msg(strstr(m, "layer 'h0': transformer_block needs a float32 input of shape (batch, time, channels): 'context' has shape (2, 8)"),
		      "%s", m);
	m = lower_fails(SLICES
		"    - {embedding: {input_dim: 10, output_dim: 6, inputs: [context], name: wte}}\n"
		"    - {dense: {use_bias: false, name: logits}}\n");
	ck_assert_msg(strstr(m, "missing required key 'units' (or 'tied_to')"), "%s", m);
}
END_TEST

static Suite *gpt_suite(void)
{
	Suite *s = suite_create("gpt");
	TCase *tc = tcase_create("gpt");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, layers_lower_to_gpt2_variables);
	tcase_add_test(tc, layers_and_graph_forms_same_bits);
	tcase_add_test(tc, one_and_two_ranks_agree);
	tcase_add_test(tc, shipped_gpt_plan_saves_memory);
	tcase_add_test(tc, dry_run_gives_params_and_flops_per_token);
	tcase_add_test(tc, errors_name_the_layer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(gpt_suite(), 0);
}
