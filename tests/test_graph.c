/*
 * test_graph.c - lowering, shape inference, topological order, and the
 * whole backward pass of a model checked against finite differences.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "mem/plan.h"

static const char tiny_job[] =
	"data:\n"
	"  train: {files: unused}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, shape: [6, 6, 2]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 3, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - {conv2d: {filters: 4, kernel: 2, strides: 1, padding: valid}}\n"
	"    - relu\n"
	"    - flatten\n"
	"    - {dense: {units: 5, activation: relu}}\n"
	"    - {dropout: {rate: 0.3}}\n"
	"    - {dense: {units: 3, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train: {batch_size: 4}\n";

struct model {
	struct dtf_job *job;
	struct dtf_graph g;
	struct dtf_plan plan;
	float *params, *grads;
	uint64_t ids[4];
	struct dtf_exec_ctx ctx;
};

static void model_build(struct model *m, const char *text)
{
	memset(m, 0, sizeof(*m));
	int rc = dtf_job_load_string("tiny.yaml", text, NULL, 0, &m->job);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	rc = dtf_graph_lower_model(m->job, 4, &m->g, NULL);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	rc = dtf_graph_backward(&m->g);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	m->params = dtf_alloc_aligned(m->g.nparams * sizeof(float));
	m->grads = dtf_alloc_aligned(m->g.nparams * sizeof(float));
	ck_assert_int_eq(dtf_plan_graph(&m->g, m->params, m->grads, &m->plan), 0);
	dtf_graph_init_params(&m->g, 3, m->params);
	/* biases start at zero; move them so relu kinks are not all at 0 */
	struct dtf_philox_key key = dtf_philox_make_key(99, 1);
	for (int i = 0; i < m->g.nnodes; i++) {
		struct dtf_node *n = &m->g.nodes[i];
		if (n->op == DTF_OP_VARIABLE && n->shape.rank == 1)
			dtf_rng_uniform(key, (uint32_t)i, 0, 0, -0.3f, 0.3f,
					n->data, (size_t)n->shape.d[0]);
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_FLOAT32)
			dtf_rng_uniform(key, (uint32_t)i, 1, 0, 0.0f, 1.0f,
					n->data, (size_t)dtf_shape_numel(&n->shape));
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_INT32)
			for (int r = 0; r < 4; r++)
				((int32_t *)n->data)[r] = (r * 2 + 1) % 3;
	}
	for (int r = 0; r < 4; r++)
		m->ids[r] = 1000 + (uint64_t)r * 7;
	m->ctx = (struct dtf_exec_ctx){
		.training = 1, .step = 5, .example_ids = m->ids, .valid = 4,
		.loss_scale = 0.25f,
		.dropout_key = dtf_philox_make_key(11, DTF_RNG_DROPOUT),
		.workspace = m->plan.workspace};
}

static void model_free(struct model *m)
{
	dtf_plan_deinit(&m->plan);
	dtf_graph_deinit(&m->g);
	dtf_free(m->params);
	dtf_free(m->grads);
	dtf_job_free(m->job);
}

static double loss_at(struct model *m)
{
	dtf_exec_forward(&m->g, &m->ctx);
	return m->ctx.loss_sum * m->ctx.loss_scale;
}

/* Every parameter of the model: analytic gradient from the appended
 * backward graph vs the central difference of the forward loss. */
START_TEST(model_gradient_matches_finite_differences)
{
	struct model m;
	model_build(&m, tiny_job);
	dtf_exec_forward(&m.g, &m.ctx);
	dtf_exec_backward(&m.g, &m.ctx);
	float *analytic = malloc(m.g.nparams * sizeof(float));
	memcpy(analytic, m.grads, m.g.nparams * sizeof(float));
	double worst = 0;
	int checked = 0;
	for (int i = 0; i < m.g.nnodes; i++) {
		const struct dtf_node *n = &m.g.nodes[i];
		if (n->op != DTF_OP_VARIABLE)
			continue;
		size_t numel = (size_t)dtf_shape_numel(&n->shape);
		for (size_t k = 0; k < numel; k++) {
			float *p = m.params + n->a.var.offset + k;
			float saved = *p, eps = 2e-3f;
			*p = saved + eps;
			double up = loss_at(&m);
			*p = saved - eps;
			double down = loss_at(&m);
			*p = saved;
			double fd = (up - down) / (2.0 * eps);
			double an = analytic[n->a.var.offset + k];
			double err = fabs(fd - an) / fmax(1e-2, fabs(fd) + fabs(an));
			if (err > worst)
				worst = err;
			ck_assert_msg(err < 1e-2,
				      "%s[%zu]: analytic %g, finite difference %g",
				      n->name, k, an, fd);
			checked++;
		}
	}
	printf("model gradient check: %d parameters, worst relative error %.2e\n",
	       checked, worst);
	ck_assert_int_eq(checked, (int)dtf_graph_num_params(&m.g));
	free(analytic);
	model_free(&m);
}
END_TEST

START_TEST(fashion_mnist_parameter_count)
{
	const char *root = getenv("DTF_SOURCE_ROOT");
	char path[1024];
	snprintf(path, sizeof(path), "%s/graphs/fashion_mnist_cnn.yaml",
		 root ? root : ".");
	struct dtf_job *job;
	int rc = dtf_job_load(path, NULL, 0, &job);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	struct dtf_graph g;
	int out[16];
	ck_assert_int_eq(dtf_graph_lower_model(job, 32, &g, out), 0);
	ck_assert_uint_eq(dtf_graph_num_params(&g), 3274634);
	/* output shapes of the DESIGN.md model */
	const int64_t want[8][4] = {{32, 28, 28, 32}, {32, 14, 14, 32},
				    {32, 14, 14, 64}, {32, 7, 7, 64},
				    {32, 3136}, {32, 1024}, {32, 1024}, {32, 10}};
	for (int l = 0; l < 8; l++)
		for (int d = 0; d < g.nodes[out[l]].shape.rank; d++)
			ck_assert_int_eq(g.nodes[out[l]].shape.d[d], want[l][d]);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

START_TEST(shape_error_names_layer_and_position)
{
	static const char bad[] =
		"data:\n"
		"  train: {files: unused}\n"
		"  features:\n"
		"    image: {type: bytes, decode: uint8, shape: [6, 6, 2]}\n"
		"    label: {type: int64, shape: []}\n"
		"model:\n"
		"  input: image\n"
		"  layers:\n"
		"    - {dense: {units: 3, name: logits}}\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
		"train: {batch_size: 4}\n";
	struct dtf_job *job;
	ck_assert_int_eq(dtf_job_load_string("bad.yaml", bad, NULL, 0, &job), 0);
	struct dtf_graph g;
	int rc = dtf_graph_lower_model(job, 4, &g, NULL);
	ck_assert_int_eq(rc, -DTF_ERR_CONFIG);
	ck_assert_msg(strstr(dtf_error_msg(), "bad.yaml:9:") != NULL, "%s",
		      dtf_error_msg());
	ck_assert_msg(strstr(dtf_error_msg(), "flatten") != NULL, "%s",
		      dtf_error_msg());
	dtf_job_free(job);
}
END_TEST

static void expect_lower_error(const char *text, const char *want)
{
	struct dtf_job *job;
	ck_assert_int_eq(dtf_job_load_string("bad.yaml", text, NULL, 0, &job), 0);
	struct dtf_graph g;
	ck_assert_int_eq(dtf_graph_lower_model(job, 4, &g, NULL), -DTF_ERR_CONFIG);
	ck_assert_msg(strstr(dtf_error_msg(), want) != NULL, "%s", dtf_error_msg());
	dtf_job_free(job);
}

START_TEST(input_must_be_float_and_logits_last)
{
	static const char head[] =
		"data:\n"
		"  train: {files: unused}\n"
		"  features:\n"
		"    image: {type: bytes, decode: uint8, shape: [4]}\n"
		"    label: {type: int64, shape: []}\n"
		"model:\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s%s", head,
		 "  input: label\n"
		 "  layers: [{dense: {units: 3, name: logits}}]\n"
		 "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
		 "train: {batch_size: 4}\n");
	expect_lower_error(text, "feature 'label' is int64");
	snprintf(text, sizeof(text), "%s%s", head,
		 "  input: image\n"
		 "  layers:\n"
		 "    - {dense: {units: 3, name: logits}}\n"
		 "    - relu\n"
		 "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
		 "train: {batch_size: 4}\n");
	expect_lower_error(text, "bad.yaml:10:7: layer 'relu_1' comes after the logits layer");
}
END_TEST

/* Nodes declared out of order are sorted; a cycle is reported as a path. */
START_TEST(toposort_orders_and_finds_cycles)
{
	struct dtf_graph g;
	ck_assert_int_eq(dtf_graph_init(&g, 2), 0);
	struct dtf_feature_spec spec = {.name = "x", .rank = 1, .shape = {3}};
	int x = dtf_graph_input(&g, "x", 0, &spec);
	int a = dtf_graph_relu(&g, "a", x);
	int b = dtf_graph_relu(&g, "b", a);
	int c = dtf_graph_relu(&g, "c", b);
	ck_assert_int_eq(c, 3);
	/* reverse the array: now every consumer precedes its producer */
	for (int i = 0; i < 2; i++) {
		struct dtf_node t = g.nodes[i];
		g.nodes[i] = g.nodes[3 - i];
		g.nodes[3 - i] = t;
	}
	for (int i = 0; i < 4; i++)
		if (g.nodes[i].op == DTF_OP_RELU)
			g.nodes[i].inputs[0] = 3 - g.nodes[i].inputs[0];
	ck_assert_int_eq(dtf_graph_toposort(&g), 0);
	ck_assert_str_eq(g.nodes[0].name, "x");
	ck_assert_str_eq(g.nodes[1].name, "a");
	ck_assert_str_eq(g.nodes[3].name, "c");
	ck_assert_int_eq(g.nodes[3].inputs[0], 2);
	/* close a cycle a -> b -> c -> a */
	g.nodes[1].inputs[0] = 3;
	ck_assert_int_eq(dtf_graph_toposort(&g), -DTF_ERR_GRAPH);
	/* the path may start anywhere on the cycle */
	const char *msg = dtf_error_msg();
	ck_assert_msg(strstr(msg, "a -> b") && strstr(msg, "b -> c") &&
			      strstr(msg, "c -> a"),
		      "%s", msg);
	dtf_graph_deinit(&g);
}
END_TEST

START_TEST(loss_without_trainable_variable)
{
	struct dtf_graph g;
	ck_assert_int_eq(dtf_graph_init(&g, 2), 0);
	struct dtf_feature_spec fx = {.name = "x", .rank = 1, .shape = {3}};
	struct dtf_feature_spec fy = {.name = "y", .rank = 0,
				      .type = DTF_FEATURE_INT64,
				      .dtype = DTF_INT32};
	int x = dtf_graph_input(&g, "x", 0, &fx);
	int y = dtf_graph_input(&g, "y", 1, &fy);
	ck_assert_int_ge(dtf_graph_sparse_softmax_xent(&g, "loss", x, y), 0);
	ck_assert_int_eq(dtf_graph_backward(&g), -DTF_ERR_GRAPH);
	ck_assert(strstr(dtf_error_msg(), "does not depend on any trainable") != NULL);
	dtf_graph_deinit(&g);
}
END_TEST

START_TEST(init_is_glorot_and_deterministic)
{
	struct model m1, m2;
	model_build(&m1, tiny_job);
	model_build(&m2, tiny_job);
	ck_assert(memcmp(m1.params, m2.params, m1.g.nparams * 4) == 0);
	/* dense_1 kernel (in, 5): every value within the Glorot limit */
	int k = dtf_graph_find(&m1.g, "dense_1/kernel");
	ck_assert_int_ge(k, 0);
	const struct dtf_node *n = &m1.g.nodes[k];
	float lim = sqrtf(6.0f / (float)(n->shape.d[0] + n->shape.d[1]));
	double mean = 0;
	for (int64_t i = 0; i < dtf_shape_numel(&n->shape); i++) {
		float v = ((float *)n->data)[i];
		ck_assert(v >= -lim && v <= lim);
		mean += v;
	}
	ck_assert(fabs(mean / (double)dtf_shape_numel(&n->shape)) < lim / 4);
	model_free(&m1);
	model_free(&m2);
}
END_TEST

static Suite *graph_suite(void)
{
	Suite *s = suite_create("graph");
	TCase *tc = tcase_create("lowering");
	tcase_add_test(tc, fashion_mnist_parameter_count);
	tcase_add_test(tc, shape_error_names_layer_and_position);
	tcase_add_test(tc, init_is_glorot_and_deterministic);
	tcase_add_test(tc, input_must_be_float_and_logits_last);
	suite_add_tcase(s, tc);
	tc = tcase_create("autodiff");
	tcase_add_test(tc, model_gradient_matches_finite_differences);
	tcase_add_test(tc, loss_without_trainable_variable);
	suite_add_tcase(s, tc);
	tc = tcase_create("toposort");
	tcase_add_test(tc, toposort_orders_and_finds_cycles);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(graph_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
