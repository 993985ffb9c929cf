/*
 * test_lang.c - the job language beyond the first model: optimizers and
 * schedules against hand formulas, the layers and graph forms of one model
 * giving identical results, the memory planner (liveness vs naive
 * bit-identical, and how much it saves), and the validation errors with
 * their exact positions.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/cpu/exec.h"
#include "graph/graph.h"
#include "graph/lower.h"
#include "mem/plan.h"
#include "ops/backend.h"
#include "train/optimizer.h"
#include "train/schedule.h"

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

static const char HEAD[] =
	"data:\n"
	"  train: {files: unused}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, shape: [6, 6, 2]}\n"
	"    label: {type: int64, shape: []}\n";

/* HEAD + body + a train section */
static struct dtf_job *load(const char *body, const char *train, int *rc)
{
	static char text[8192];
	snprintf(text, sizeof(text), "%smodel:\n%strain: %s\n", HEAD, body,
		 train ? train : "{batch_size: 4}");
	struct dtf_job *job = NULL;
	*rc = dtf_job_load_string("job.yaml", text, NULL, 0, &job);
	return job;
}

static struct dtf_job *load_ok(const char *body, const char *train)
{
	int rc;
	struct dtf_job *job = load(body, train, &rc);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	return job;
}

/* The message of loading (and, if that passes, lowering) body. */
static const char *fails(const char *body, int want_rc)
{
	int rc;
	struct dtf_job *job = load(body, NULL, &rc);
	if (rc == 0) {
		struct dtf_graph g;
		rc = dtf_graph_lower_model(job, 4, &g, NULL);
		if (rc == 0)
			dtf_graph_deinit(&g);
	}
	dtf_job_free(job);
	ck_assert_msg(rc == want_rc, "rc %d, want %d: %s", rc, want_rc,
		      dtf_error_msg());
	return dtf_error_msg();
}

#define ck_assert_msg_is(got, want)                                    \
	do {                                                           \
		const char *got_ = (got);                              \
		ck_assert_msg(strcmp(got_, want) == 0,                 \
			      "\n got: %s\nwant: %s", got_, want);     \
	} while (0)

/* ---- optimizers against hand formulas ------------------------------------ */

#define NP 5

static struct dtf_job *opt_job(const char *optimizer, const char *extra)
{
	char train[512];
	snprintf(train, sizeof(train), "{batch_size: 4, optimizer: %s%s}",
		 optimizer, extra ? extra : "");
	return load_ok("  input: image\n  layers: [flatten, {dense: {units: 2, name: l}}]\n"
		       "  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		       train);
}

/* gradient of step t (0-based) for parameter i: varied signs and sizes */
static float grad_at(int t, int i)
{
	return (float)(0.3 * sin(1.7 * t + 0.9 * i) + 0.05 * (i - 2));
}

static void run_opt(struct dtf_optimizer *o, float *p, int steps, double lr)
{
	float g[NP];
	for (int t = 0; t < steps; t++) {
		for (int i = 0; i < NP; i++)
			g[i] = grad_at(t, i);
		dtf_optimizer_apply(o, p, g, lr);
	}
}

static void close_to(const float *got, const double *want, const char *what)
{
	for (int i = 0; i < NP; i++)
		ck_assert_msg(fabs(got[i] - want[i]) <=
				      1e-6 * fmax(1.0, fabs(want[i])),
			      "%s[%d]: got %.9g, want %.9g", what, i, got[i],
			      want[i]);
}

START_TEST(sgd_momentum_and_nesterov)
{
	for (int nesterov = 0; nesterov < 2; nesterov++) {
		char spec[128];
		snprintf(spec, sizeof(spec),
			 "{sgd: {learning_rate: 0.1, momentum: 0.9, nesterov: %s}}",
			 nesterov ? "true" : "false");
		struct dtf_job *job = opt_job(spec, NULL);
		struct dtf_optimizer o;
		ck_assert_int_eq(dtf_optimizer_init(&o, job, NP), 0);
		float p[NP];
		double want[NP];
		for (int i = 0; i < NP; i++)
			p[i] = (float)(want[i] = 0.5 - 0.2 * i);
		run_opt(&o, p, 4, 0.1);
		for (int i = 0; i < NP; i++) {
			double v = 0, w = 0.5 - 0.2 * i;
			for (int t = 0; t < 4; t++) {
				double g = grad_at(t, i);
				v = 0.9 * v - 0.1 * g;
				w += nesterov ? 0.9 * v - 0.1 * g : v;
			}
			want[i] = w;
		}
		close_to(p, want, nesterov ? "nesterov" : "momentum");
		dtf_optimizer_deinit(&o);
		dtf_job_free(job);
	}
}
END_TEST

/* Adam and AdamW (decoupled decay before the Adam step), 5 steps */
START_TEST(adam_and_adamw)
{
	for (int w = 0; w < 2; w++) {
		struct dtf_job *job = opt_job(
			w ? "{adamw: {learning_rate: 0.01, weight_decay: 0.1, beta_1: 0.8, beta_2: 0.95, epsilon: 1e-6}}"
			  : "{adam: {learning_rate: 0.01, beta_1: 0.8, beta_2: 0.95, epsilon: 1e-6}}",
			NULL);
		struct dtf_optimizer o;
		ck_assert_int_eq(dtf_optimizer_init(&o, job, NP), 0);
		float p[NP];
		double want[NP];
		for (int i = 0; i < NP; i++)
			p[i] = (float)(0.5 - 0.2 * i);
		run_opt(&o, p, 5, 0.01);
		for (int i = 0; i < NP; i++) {
			double m = 0, v = 0, x = 0.5 - 0.2 * i;
			for (int t = 1; t <= 5; t++) {
				double g = grad_at(t - 1, i);
				if (w)
					x -= 0.01 * 0.1 * x;
				m = 0.8 * m + 0.2 * g;
				v = 0.95 * v + 0.05 * g * g;
				double mhat = m / (1 - pow(0.8, t));
				double vhat = v / (1 - pow(0.95, t));
				/* Keras: eps added to sqrt(v), not sqrt(vhat) */
				x -= 0.01 * mhat /
				     (sqrt(vhat) + 1e-6 / sqrt(1 - pow(0.95, t)));
			}
			want[i] = x;
		}
		close_to(p, want, w ? "adamw" : "adam");
		dtf_optimizer_deinit(&o);
		dtf_job_free(job);
	}
}
END_TEST

START_TEST(rmsprop_plain_centered_momentum)
{
	static const char *const specs[] = {
		"{rmsprop: {learning_rate: 0.01, rho: 0.8}}",
		"{rmsprop: {learning_rate: 0.01, rho: 0.8, centered: true}}",
		"{rmsprop: {learning_rate: 0.01, rho: 0.8, momentum: 0.5, centered: true}}",
		"{rmsprop: {learning_rate: 0.01, rho: 0.8, momentum: 0.5}}",
	};
	for (int k = 0; k < 4; k++) {
		int centered = k == 1 || k == 2, mom = k >= 2;
		struct dtf_job *job = opt_job(specs[k], NULL);
		struct dtf_optimizer o;
		ck_assert_int_eq(dtf_optimizer_init(&o, job, NP), 0);
		float p[NP];
		double want[NP];
		for (int i = 0; i < NP; i++)
			p[i] = (float)(0.5 - 0.2 * i);
		run_opt(&o, p, 5, 0.01);
		for (int i = 0; i < NP; i++) {
			double ms = 0, mg = 0, buf = 0, x = 0.5 - 0.2 * i;
			for (int t = 0; t < 5; t++) {
				double g = grad_at(t, i);
				ms = 0.8 * ms + 0.2 * g * g;
				mg = 0.8 * mg + 0.2 * g;
				double den = centered ? ms - mg * mg + 1e-7
						      : ms + 1e-7;
				double inc = 0.01 * g / sqrt(den);
				if (mom) {
					buf = 0.5 * buf + inc;
					x -= buf;
				} else {
					x -= inc;
				}
			}
			want[i] = x;
		}
		close_to(p, want, specs[k]);
		dtf_optimizer_deinit(&o);
		dtf_job_free(job);
	}
}
END_TEST

/* L2 on the decayed segment only, then clipping by the global norm over
 * the trainable segments; a non-trainable segment is never touched. */
START_TEST(weight_decay_groups_and_clipnorm)
{
	struct dtf_job *job = opt_job("{sgd: {learning_rate: 0.5}}",
				      ", weight_decay: 0.2, clipnorm: 0.25");
	struct dtf_optimizer o;
	ck_assert_int_eq(dtf_optimizer_init(&o, job, NP), 0);
	struct dtf_opt_segment segs[] = {
		{.offset = 0, .count = 2, .trainable = 1, .decay = 1},
		{.offset = 2, .count = 2, .trainable = 1, .decay = 0},
		{.offset = 4, .count = 1, .trainable = 0, .decay = 0},
	};
	ck_assert_int_eq(dtf_optimizer_set_segments(&o, segs, 3), 0);
	float p[NP], p0[NP];
	for (int i = 0; i < NP; i++)
		p0[i] = p[i] = (float)(1.0 + i);
	double want[NP];
	for (int t = 0; t < 3; t++) {
		float g[NP];
		double gd[NP], sq = 0;
		for (int i = 0; i < NP; i++)
			g[i] = grad_at(t, i);
		for (int i = 0; i < 4; i++) {
			gd[i] = g[i] + (i < 2 ? 0.2 * p[i] : 0);
			sq += gd[i] * gd[i];
		}
		double scale = sqrt(sq) > 0.25 ? 0.25 / sqrt(sq) : 1;
		for (int i = 0; i < 4; i++)
			want[i] = p[i] - 0.5 * gd[i] * scale;
		want[4] = p0[4];
		dtf_optimizer_apply(&o, p, g, 0.5);
		ck_assert(fabs(o.last_norm - sqrt(sq)) < 1e-6);
		close_to(p, want, "decay+clip");
	}
	ck_assert(p[4] == p0[4]);
	dtf_optimizer_deinit(&o);
	dtf_job_free(job);
}
END_TEST

/* The groups come from the graph: kernels decay, biases do not, and
 * `groups` changes that. */
START_TEST(decay_groups_from_graph)
{
	for (int k = 0; k < 2; k++) {
		struct dtf_job *job = opt_job(
			"sgd", k ? ", weight_decay: {rate: 0.1, groups: [bias]}"
				 : ", weight_decay: 0.1");
		struct dtf_graph g;
		ck_assert_int_eq(dtf_graph_lower_model(job, 4, &g, NULL), 0);
		struct dtf_optimizer o;
		ck_assert_int_eq(dtf_optimizer_init(&o, job, g.nparams), 0);
		ck_assert_int_eq(dtf_optimizer_segments_from_graph(&o, job, &g), 0);
		ck_assert_int_eq(o.nsegs, 2);
		int kern = dtf_graph_find(&g, "l/kernel");
		int bias = dtf_graph_find(&g, "l/bias");
		for (int s = 0; s < 2; s++) {
			if (o.segs[s].offset == g.nodes[kern].a.var.offset)
				ck_assert_int_eq(o.segs[s].decay, !k);
			if (o.segs[s].offset == g.nodes[bias].a.var.offset)
				ck_assert_int_eq(o.segs[s].decay, k);
			ck_assert_int_eq(o.segs[s].trainable, 1);
		}
		dtf_optimizer_deinit(&o);
		dtf_graph_deinit(&g);
		dtf_job_free(job);
	}
}
END_TEST

START_TEST(metrics_parse)
{
	static const char body[] =
		"  input: image\n  layers: [flatten, {dense: {units: 4, name: l}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n"
		"  metrics: [accuracy, %s]\n";
	char text[512];
	snprintf(text, sizeof(text), body, "{top_k_accuracy: {k: 3}}");
	struct dtf_job *job = load_ok(text, NULL);
	ck_assert_int_eq(job->model.metric_accuracy, 1);
	ck_assert_int_eq(job->model.metric_top_k, 3);
	dtf_job_free(job);
	snprintf(text, sizeof(text), body, "top_k_accuracy");
	job = load_ok(text, NULL);
	ck_assert_int_eq(job->model.metric_top_k, 5);
	dtf_job_free(job);
	snprintf(text, sizeof(text), body, "{top_k_accuracy: {k: 0}}");
	int rc;
	job = load(text, NULL, &rc);
	ck_assert_int_eq(rc, -DTF_ERR_CONFIG);
	ck_assert_msg_is(dtf_error_msg(),
			 "job.yaml:10:44: model.metrics[1].top_k_accuracy.k: "
			 "expected a positive integer, got '0'");
	/* k below the 4 classes lowers; k at or past them (the default 5
	 * here) is 1 whatever the model does: an error at the metric */
	snprintf(text, sizeof(text), body, "{top_k_accuracy: {k: 3}}");
	fails(text, 0);
	snprintf(text, sizeof(text), body, "{top_k_accuracy: {k: 4}}");
	ck_assert_msg_is(fails(text, -DTF_ERR_CONFIG),
			 "job.yaml:10:44: model.metrics: top_k_accuracy's k 4 is not below the 4 classes of 'l': "
			 "it would be 1 whatever the model predicts\nHINT: k from 1 to 3");
	snprintf(text, sizeof(text), body, "top_k_accuracy");
	ck_assert_msg(strncmp(fails(text, -DTF_ERR_CONFIG), "job.yaml:10:23: model.metrics: top_k_accuracy's k 5 ", 52) == 0,
		      "%s", dtf_error_msg());
}
END_TEST

/* ---- schedules ------------------------------------------------------------ */

static double sched_at(const char *spec, int64_t total, int64_t step)
{
	char train[512];
	snprintf(train, sizeof(train),
		 "{batch_size: 4, optimizer: {sgd: {learning_rate: 0.1}}, schedule: %s}",
		 spec);
	struct dtf_job *job = load_ok(
		"  input: image\n  layers: [flatten, {dense: {units: 2, name: l}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		train);
	struct dtf_schedule s;
	dtf_schedule_init(&s, job, total);
	double lr = dtf_schedule_lr(&s, step);
	dtf_job_free(job);
	return lr;
}

#define ck_close(a, b)                                                   \
	ck_assert_msg(fabs((a) - (b)) <= 1e-12 * fmax(1, fabs(b)),       \
		      "%s = %.15g, want %.15g", #a, (double)(a), (double)(b))

START_TEST(schedules_match_keras_formulas)
{
	for (int64_t s = 0; s < 40; s += 3) {
		ck_close(sched_at("constant", 100, s), 0.1);
		/* PiecewiseConstantDecay([10, 20], [1, .5, .1]) */
		double pw = s <= 10 ? 1.0 : s <= 20 ? 0.5 : 0.1;
		ck_close(sched_at("{piecewise_constant: {boundaries: [10, 20], values: [1, 0.5, 0.1]}}",
				  100, s),
			 pw);
		ck_close(sched_at("{exponential_decay: {decay_steps: 7, decay_rate: 0.5}}",
				  100, s),
			 0.1 * pow(0.5, s / 7.0));
		ck_close(sched_at("{exponential_decay: {decay_steps: 7, decay_rate: 0.5, staircase: true}}",
				  100, s),
			 0.1 * pow(0.5, (double)(s / 7)));
		double t = s < 25 ? (double)s : 25.0;
		ck_close(sched_at("{cosine_decay: {decay_steps: 25, alpha: 0.1}}",
				  100, s),
			 0.1 * (0.9 * 0.5 * (1 + cos(M_PI * t / 25)) + 0.1));
		/* warmup 8 then cosine over the rest of 40 steps (32) */
		double want = s < 8 ? 0.1 * s / 8.0
				    : 0.1 * 0.5 * (1 + cos(M_PI * (s - 8) / 32.0));
		ck_close(sched_at("{cosine_decay: {warmup_steps: 8}}", 40, s),
			 want);
		/* warmup on a constant */
		ck_close(sched_at("{constant: {warmup_steps: 5}}", 40, s),
			 s < 5 ? 0.1 * s / 5.0 : 0.1);
	}
	/* piecewise values must be one more than boundaries */
	int rc;
	struct dtf_job *job = load(
		"  input: image\n  layers: [flatten, {dense: {units: 2, name: l}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		"\n  batch_size: 4\n  schedule: {piecewise_constant: {boundaries: [10], values: [1, 2, 3]}}",
		&rc);
	ck_assert_int_eq(rc, -DTF_ERR_CONFIG);
	ck_assert_msg_is(dtf_error_msg(),
			 "job.yaml:12:61: train.schedule.piecewise_constant.values: "
			 "3 values for 1 boundary: give 2 (one more value than "
			 "boundaries)");
	dtf_job_free(job);
}
END_TEST

/* The error of train.schedule `spec` (after "job.yaml:L:C: "). */
static const char *sched_error(const char *spec)
{
	char train[512];
	int rc;
	snprintf(train, sizeof(train), "\n  batch_size: 4\n  schedule: %s", spec);
	struct dtf_job *job = load(
		"  input: image\n  layers: [flatten, {dense: {units: 2, name: l}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		train, &rc);
	ck_assert_msg(rc == -DTF_ERR_CONFIG, "%s: rc %d", spec, rc);
	dtf_job_free(job);
	const char *m = dtf_error_msg();
	const char *p = strstr(m, ": train.schedule");
	ck_assert_msg(p != NULL, "%s", m);
	return p + 2;
}

/* Each key of a schedule out of its range is an error naming the key,
 * with the lengths of the lists; the ranges are dtf-train-job(5)'s. */
START_TEST(schedule_errors_name_the_key)
{
	ck_assert_msg_is(sched_error("{piecewise_constant: {boundaries: [5, 12], values: [0.1, 0.01]}}"),
			 "train.schedule.piecewise_constant.values: 2 values for 2 "
			 "boundaries: give 3 (one more value than boundaries)");
	ck_assert_msg_is(sched_error("{piecewise_constant: {boundaries: [5, 12], values: [0.1]}}"),
			 "train.schedule.piecewise_constant.values: expected a list "
			 "of 2 to 33 learning rates (one more than boundaries), got "
			 "a list of 1 item");
	ck_assert_msg_is(sched_error("{piecewise_constant: {boundaries: [], values: [0.1]}}"),
			 "train.schedule.piecewise_constant.boundaries: expected a "
			 "list of 1 to 32 increasing steps, got an empty list");
	ck_assert_msg_is(sched_error("{piecewise_constant: {values: [0.1, 0.01, 0.001]}}"),
			 "train.schedule.piecewise_constant: missing required key "
			 "'boundaries' (the steps where the rate changes: 2 for the "
			 "3 values)");
	ck_assert_msg_is(sched_error("{piecewise_constant: {boundaries: [5]}}"),
			 "train.schedule.piecewise_constant: missing required key "
			 "'values' (the learning rates: 2 for the 1 boundary)");
	ck_assert_msg_is(sched_error("piecewise_constant"),
			 "train.schedule.piecewise_constant: missing required keys "
			 "'boundaries' (the steps where the rate changes) and "
			 "'values' (one more learning rate than boundaries)");
	ck_assert_msg_is(sched_error("{cosine_decay: {decay_steps: 0}}"),
			 "train.schedule.cosine_decay.decay_steps: expected a "
			 "positive number of steps, got 0\n"
			 "HINT: leave decay_steps out to decay over the run's steps "
			 "less the warmup");
	ck_assert_msg_is(sched_error("{cosine_decay: {alpha: 1.5}}"),
			 "train.schedule.cosine_decay.alpha: expected a number from "
			 "0 to 1 (the final rate as a fraction of learning_rate), "
			 "got '1.5'");
	const char *neg = sched_error("{cosine_decay: {alpha: -0.1}}");
	ck_assert_msg(strstr(neg, "train.schedule.cosine_decay.alpha: expected a "
			     "non-negative number") == neg, "%s", neg);
	/* the ends of the ranges are in them */
	ck_close(sched_at("{cosine_decay: {decay_steps: 5, alpha: 1}}", 100, 3), 0.1);
	ck_close(sched_at("{cosine_decay: {decay_steps: 1, alpha: 0}}", 100, 1), 0.0);
}
END_TEST

/* ---- the same model written both ways --------------------------------------- */

static const char LAYERS_FORM[] =
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 3, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: 5, activation: relu, kernel_initializer: he_normal}}\n"
	"    - {dropout: {rate: 0.3}}\n"
	"    - {dense: {units: 3, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n";

/* Same ops and variable names, declared out of order. */
static const char GRAPH_FORM[] =
	"  graph:\n"
	"    logits: {bias_add: {inputs: [logits/matmul, logits/bias]}}\n"
	"    logits/matmul: {matmul: {inputs: [dropout_1, logits/kernel]}}\n"
	"    dropout_1: {dropout: {inputs: [dense_1/relu], rate: 0.3}}\n"
	"    dense_1/relu: {relu: {inputs: [dense_1/bias_add]}}\n"
	"    dense_1/bias_add: {bias_add: {inputs: [dense_1/matmul, dense_1/bias]}}\n"
	"    dense_1/matmul: {matmul: {inputs: [flatten_1, dense_1/kernel]}}\n"
	"    flatten_1: {flatten: {inputs: [max_pool2d_1]}}\n"
	"    max_pool2d_1: {max_pool2d: {inputs: [conv2d_1/relu], size: 2}}\n"
	"    conv2d_1/relu: {relu: {inputs: [conv2d_1/bias_add]}}\n"
	"    conv2d_1/bias_add: {bias_add: {inputs: [conv2d_1/conv2d, conv2d_1/bias]}}\n"
	"    conv2d_1/conv2d: {conv2d: {inputs: [image, conv2d_1/kernel], padding: same}}\n"
	"    conv2d_1/kernel: {variable: {shape: [3, 3, 2, 3]}}\n"
	"    conv2d_1/bias: {variable: {shape: [3], initializer: zeros}}\n"
	"    dense_1/kernel: {variable: {shape: [27, 5], initializer: he_normal}}\n"
	"    dense_1/bias: {variable: {shape: [5]}}\n"
	"    logits/kernel: {variable: {shape: [5, 3], initializer: glorot_uniform}}\n"
	"    logits/bias: {variable: {shape: [3]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n";

static void model_build(struct tu_model *m, const char *body,
			enum dtf_planner_kind planner)
{
	tu_model_build(m, load_ok(body, NULL), 4, planner, 1000, 7, 5);
}

/* a batch that depends on `step` only */
static void feed(struct tu_model *m, int step)
{
	struct dtf_philox_key key = dtf_philox_make_key(99, 1);
	for (int i = 0; i < m->g.nnodes; i++) {
		struct dtf_node *n = &m->g.nodes[i];
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_FLOAT32)
			dtf_rng_uniform(key, (uint32_t)step, 1, 0, 0.0f, 1.0f,
					n->data,
					(size_t)dtf_shape_numel(&n->shape));
		if (n->op == DTF_OP_INPUT && n->dtype == DTF_INT32)
			for (int r = 0; r < 4; r++)
				((int32_t *)n->data)[r] = (r * 2 + step) % 3;
	}
	m->ctx.step = (uint64_t)step;
}

static const float *var_by_name(const struct tu_model *m, const char *name,
				const float *vec, size_t *numel)
{
	int id = dtf_graph_find(&m->g, name);
	ck_assert_msg(id >= 0, "no variable %s", name);
	*numel = (size_t)dtf_shape_numel(&m->g.nodes[id].shape);
	return vec + m->g.nodes[id].a.var.offset;
}

START_TEST(layers_and_graph_forms_agree)
{
	struct tu_model a, b;
	model_build(&a, LAYERS_FORM, DTF_PLANNER_LIVENESS);
	model_build(&b, GRAPH_FORM, DTF_PLANNER_LIVENESS);
	ck_assert_uint_eq(dtf_graph_num_params(&a.g), dtf_graph_num_params(&b.g));
	ck_assert_int_eq(a.g.nforward, b.g.nforward);
	feed(&a, 1);
	feed(&b, 1);
	dtf_exec_forward(&a.g, &a.ctx);
	dtf_exec_backward(&a.g, &a.ctx);
	dtf_exec_forward(&b.g, &b.ctx);
	dtf_exec_backward(&b.g, &b.ctx);
	ck_assert(a.ctx.loss_sum == b.ctx.loss_sum);
	ck_assert(a.ctx.loss_sum > 0);
	int checked = 0;
	for (int i = 0; i < a.g.nnodes; i++) {
		const struct dtf_node *n = &a.g.nodes[i];
		if (n->op != DTF_OP_VARIABLE)
			continue;
		size_t na, nb;
		const float *pa = var_by_name(&a, n->name, a.params, &na);
		const float *pb = var_by_name(&b, n->name, b.params, &nb);
		ck_assert_uint_eq(na, nb);
		ck_assert_msg(memcmp(pa, pb, na * 4) == 0, "%s values differ",
			      n->name);
		const float *ga = var_by_name(&a, n->name, a.grads, &na);
		const float *gb = var_by_name(&b, n->name, b.grads, &nb);
		ck_assert_msg(memcmp(ga, gb, na * 4) == 0,
			      "%s gradients differ", n->name);
		double norm = 0;
		for (size_t k = 0; k < na; k++)
			norm += fabs(ga[k]);
		ck_assert_msg(norm > 0 || strstr(n->name, "bias"),
			      "%s has a zero gradient", n->name);
		checked++;
	}
	ck_assert_int_eq(checked, 6);
	tu_model_free(&a);
	tu_model_free(&b);
}
END_TEST

/* Initialisers: values within the Keras bounds / moments, from the name. */
START_TEST(initializers)
{
	struct dtf_job *job = load_ok(
		"  graph:\n"
		"    u: {variable: {shape: [40, 50], initializer: glorot_uniform}}\n"
		"    hu: {variable: {shape: [4, 4, 10, 50], initializer: he_uniform}}\n"
		"    gn: {variable: {shape: [200, 300], initializer: glorot_normal}}\n"
		"    hn: {variable: {shape: [200, 300], initializer: he_normal}}\n"
		"    tn: {variable: {shape: [20000], initializer: {truncated_normal: {mean: 1, stddev: 0.5}}}}\n"
		"    rn: {variable: {shape: [20000], initializer: {random_normal: {mean: -1, stddev: 0.02}}}}\n"
		"    c: {variable: {shape: [3], initializer: {constant: {value: 2.5}}, trainable: false}}\n"
		"    o: {variable: {shape: [3], initializer: ones}}\n"
		"    k: {constant: {value: [1, 2, 3]}}\n"
		"    f: {constant: {shape: [2, 2], fill: -1}}\n"
		"    x: {flatten: {inputs: [image]}}\n"
		"    w: {variable: {shape: [72, 3]}}\n"
		"    l: {matmul: {inputs: [x, w]}}\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		NULL);
	struct dtf_graph g;
	ck_assert_int_eq(dtf_graph_lower_model(job, 4, &g, NULL), 0);
	float *p = dtf_alloc_aligned(g.nparams * sizeof(float));
	dtf_graph_init_params(&g, 42, p);
	struct {
		const char *name;
		double lo, hi, mean, sd; /* bounds; moments (sd < 0: skip) */
	} want[] = {
		{"u", -sqrt(6.0 / 90), sqrt(6.0 / 90), 0, -1},
		{"hu", -sqrt(6.0 / 160), sqrt(6.0 / 160), 0, -1},
		{"gn", -2 * sqrt(2.0 / 500) / .8796, 2 * sqrt(2.0 / 500) / .8796, 0, sqrt(2.0 / 500)},
		{"hn", -2 * sqrt(2.0 / 200) / .8796, 2 * sqrt(2.0 / 200) / .8796, 0, sqrt(2.0 / 200)},
		{"tn", 0, 2, 1, 0.5 * .8796},
		/* not truncated: beyond 2 sd occur (checked below) */
		{"rn", -1 - 6 * 0.02, -1 + 6 * 0.02, -1, 0.02},
		{"c", 2.5, 2.5, 2.5, -1},
		{"o", 1, 1, 1, -1},
		{"f", -1, -1, -1, -1},
	};
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		int id = dtf_graph_find(&g, want[k].name);
		const float *v = p + g.nodes[id].a.var.offset;
		int64_t n = dtf_shape_numel(&g.nodes[id].shape);
		double s = 0, s2 = 0;
		for (int64_t i = 0; i < n; i++) {
			ck_assert_msg(v[i] >= want[k].lo - 1e-6 &&
					      v[i] <= want[k].hi + 1e-6,
				      "%s[%lld] = %g", want[k].name,
				      (long long)i, v[i]);
			s += v[i];
			s2 += v[i] * v[i];
		}
		double mean = s / n, sd = sqrt(s2 / n - mean * mean);
		if (want[k].sd >= 0) {
			ck_assert_msg(fabs(mean - want[k].mean) < 0.05 * (want[k].sd + 0.01) * 4,
				      "%s mean %g", want[k].name, mean);
			ck_assert_msg(fabs(sd - want[k].sd) < 0.05 * want[k].sd,
				      "%s stddev %g, want %g", want[k].name, sd,
				      want[k].sd);
		}
	}
	/* random_normal is not truncated: a plain normal has 4.55% of its
	 * values beyond two standard deviations (910 of 20000) */
	int rn = dtf_graph_find(&g, "rn"), beyond = 0;
	for (int i = 0; i < 20000; i++)
		beyond += fabsf(p[g.nodes[rn].a.var.offset + i] + 1.0f) > 0.04f;
	ck_assert_msg(beyond > 700 && beyond < 1100, "%d beyond 2 sd", beyond);
	int k = dtf_graph_find(&g, "k");
	const float *kv = p + g.nodes[k].a.var.offset;
	ck_assert(kv[0] == 1 && kv[1] == 2 && kv[2] == 3);
	/* trainable: false and constants are not trained nor counted */
	ck_assert_int_eq(g.nodes[dtf_graph_find(&g, "c")].a.var.trainable, 0);
	ck_assert_uint_eq(dtf_graph_num_nontrainable(&g), 3);
	/* the same name gives the same values in another graph */
	int u = dtf_graph_find(&g, "u");
	float first = p[g.nodes[u].a.var.offset];
	dtf_free(p);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
	job = load_ok("  graph:\n"
		      "    x: {flatten: {inputs: [image]}}\n"
		      "    u: {variable: {shape: [40, 50]}}\n"
		      "    w: {variable: {shape: [72, 3]}}\n"
		      "    l: {matmul: {inputs: [x, w]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		      NULL);
	ck_assert_int_eq(dtf_graph_lower_model(job, 4, &g, NULL), 0);
	p = dtf_alloc_aligned(g.nparams * sizeof(float));
	dtf_graph_init_params(&g, 42, p);
	ck_assert(p[g.nodes[dtf_graph_find(&g, "u")].a.var.offset] == first);
	dtf_free(p);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

/* ---- memory planner ------------------------------------------------------ */

/* A branchy model: residual adds over relus, so buffers are reused and
 * ops run in place. */
static const char RESIDUAL[] =
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, use_bias: false}}\n"
	"    - batch_norm\n"
	"    - {relu: {name: stem}}\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, name: c2}}\n"
	"    - {batch_norm: {momentum: 0.9}}\n"
	"    - {add: {inputs: [batch_norm_2, stem]}}\n"
	"    - {dropout: {rate: 0.2}}\n"
	"    - {leaky_relu: {alpha: 0.1}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: 3, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n";

/* Every layer kind and every op kind builds, with its gradient. */
START_TEST(every_kind_lowers_in_both_forms)
{
	static const char layers[] =
		"  input: image\n"
		"  layers:\n"
		"    - {conv2d: {filters: 4, kernel: 3, dilation: 2, padding: [1, 2], activation: gelu, name: c}}\n"
		"    - {depthwise_conv2d: {kernel: 3, depth_multiplier: 2, padding: same, activation: elu}}\n"
		"    - {batch_norm: {center: false}}\n"
		"    - {avg_pool2d: {size: 2, strides: 1}}\n"
		"    - {max_pool2d: {size: 2, padding: same}}\n"
		"    - {layer_norm: {scale: false}}\n"
		"    - {concat: {inputs: [layer_norm_1, max_pool2d_1], axis: -1}}\n"
		"    - {multiply: {inputs: [concat_1, concat_1]}}\n"
		"    - {add: {inputs: [multiply_1, concat_1, multiply_1]}}\n"
		"    - {reshape: {shape: [2, -1, 8]}}\n"
		"    - tanh\n"
		"    - sigmoid\n"
		"    - {softmax: {axis: -1}}\n"
		"    - identity\n"
		"    - global_avg_pool\n"
		"    - {dense: {units: 6, activation: leaky_relu}}\n"
		"    - {leaky_relu: {alpha: 0.1}}\n"
		"    - elu\n"
		"    - {gelu: {approximate: true}}\n"
		"    - relu\n"
		"    - {dropout: {rate: 0.1}}\n"
		"    - {dense: {units: 3, activation: softmax, name: logits}}\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n";
	struct dtf_job *job = load_ok(layers, NULL);
	struct dtf_graph g;
	int out[32];
	ck_assert_msg(dtf_graph_lower_model(job, 4, &g, out) == 0, "%s",
		      dtf_error_msg());
	ck_assert_int_eq(dtf_graph_backward(&g), 0);
	/* dilation 2 (5x5 window), pads [1, 2] = 1 above and below, 2 left
	 * and right, on 6x6: 6 + 2 - 5 + 1 = 4 rows, 6 + 4 - 5 + 1 = 6 cols */
	ck_assert_int_eq(g.nodes[out[0]].shape.d[1], 4);
	ck_assert_int_eq(g.nodes[out[0]].shape.d[2], 6);
	ck_assert_int_eq(g.nodes[out[1]].shape.d[3], 8);
	ck_assert_int_eq(g.nodes[out[6]].shape.d[3], 16);
	ck_assert_int_eq(g.nodes[out[9]].shape.rank, 4);
	ck_assert_int_eq(g.nodes[out[9]].shape.d[3], 8);
	ck_assert_int_ge(dtf_graph_find(&g, "batch_norm_1/moving_variance"), 0);
	ck_assert_uint_eq(dtf_graph_num_nontrainable(&g), 16);
	dtf_graph_deinit(&g);
	dtf_job_free(job);

	static const char ops[] =
		"  graph:\n"
		"    k: {variable: {shape: [3, 3, 2, 2]}}\n"
		"    dk: {variable: {shape: [3, 3, 2, 1]}}\n"
		"    c: {conv2d: {inputs: [image, k], strides: 2, padding: same}}\n"
		"    d: {depthwise_conv2d: {inputs: [c, dk], padding: [1, 1]}}\n"
		"    bn: {batch_norm: {inputs: [d]}}\n"
		"    ln: {layer_norm: {inputs: [bn]}}\n"
		"    ap: {avg_pool2d: {inputs: [ln], size: 1}}\n"
		"    mp: {max_pool2d: {inputs: [ap], size: 1}}\n"
		"    cat: {concat: {inputs: [mp, ap]}}\n"
		"    mul: {multiply: {inputs: [cat, cat]}}\n"
		"    sum: {add: {inputs: [mul, cat]}}\n"
		"    r: {reshape: {inputs: [sum], shape: [36]}}\n"
		"    one: {constant: {shape: [36], fill: 1}}\n"
		"    sh: {bias_add: {inputs: [r, one]}}\n"
		"    a1: {leaky_relu: {inputs: [sh]}}\n"
		"    a2: {elu: {inputs: [a1]}}\n"
		"    a3: {gelu: {inputs: [a2]}}\n"
		"    a4: {tanh: {inputs: [a3]}}\n"
		"    a5: {sigmoid: {inputs: [a4]}}\n"
		"    a6: {softmax: {inputs: [a5]}}\n"
		"    a7: {identity: {inputs: [a6]}}\n"
		"    a8: {relu: {inputs: [a7]}}\n"
		"    dr: {dropout: {inputs: [a8], rate: 0.5}}\n"
		"    w: {variable: {shape: [36, 3]}}\n"
		"    l: {matmul: {inputs: [dr, w]}}\n"
		"    gp: {global_avg_pool: {inputs: [image]}}\n"
		"    fl: {flatten: {inputs: [gp]}}\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n";
	job = load_ok(ops, NULL);
	ck_assert_msg(dtf_graph_lower_model(job, 4, &g, out) == 0, "%s",
		      dtf_error_msg());
	ck_assert_int_eq(dtf_graph_backward(&g), 0);
	ck_assert_int_eq(g.nodes[dtf_graph_find(&g, "c")].shape.d[1], 3);
	ck_assert_int_eq(g.nodes[dtf_graph_find(&g, "cat")].shape.d[3], 4);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

/* Several SGD steps with each planner: bit-identical parameters. */
START_TEST(liveness_equals_naive_bitwise)
{
	const char *const bodies[] = {LAYERS_FORM, RESIDUAL};
	for (int k = 0; k < 2; k++) {
		struct tu_model a, b;
		model_build(&a, bodies[k], DTF_PLANNER_NAIVE);
		model_build(&b, bodies[k], DTF_PLANNER_LIVENESS);
		ck_assert_uint_lt(b.plan.arena_bytes, a.plan.arena_bytes);
		ck_assert_uint_eq(b.plan.naive_bytes, a.plan.arena_bytes);
		struct dtf_optimizer oa, ob;
		ck_assert_int_eq(dtf_optimizer_init(&oa, a.job, a.g.nparams), 0);
		ck_assert_int_eq(dtf_optimizer_init(&ob, b.job, b.g.nparams), 0);
		for (int step = 0; step < 6; step++) {
			feed(&a, step);
			feed(&b, step);
			dtf_exec_forward(&a.g, &a.ctx);
			dtf_exec_backward(&a.g, &a.ctx);
			dtf_exec_forward(&b.g, &b.ctx);
			dtf_exec_backward(&b.g, &b.ctx);
			ck_assert(a.ctx.loss_sum == b.ctx.loss_sum);
			dtf_optimizer_apply(&oa, a.params, a.grads, 0.1);
			dtf_optimizer_apply(&ob, b.params, b.grads, 0.1);
			ck_assert(memcmp(a.params, b.params,
					 a.g.nparams * sizeof(float)) == 0);
		}
		dtf_optimizer_deinit(&oa);
		dtf_optimizer_deinit(&ob);
		tu_model_free(&a);
		tu_model_free(&b);
	}
}
END_TEST

/* No two buffers that are live at the same time overlap: every node's
 * buffer is checked against the buffers of the nodes still to be read. */
START_TEST(liveness_buffers_do_not_overlap)
{
	struct tu_model m;
	model_build(&m, RESIDUAL, DTF_PLANNER_LIVENESS);
	struct dtf_graph *g = &m.g;
	int n = g->nnodes;
	int *last = calloc((size_t)n, sizeof(int));
	for (int i = 0; i < n; i++)
		last[i] = -1;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < DTF_MAX_INPUTS; k++)
			if (g->nodes[i].inputs[k] >= 0 &&
			    g->nodes[i].op != DTF_OP_RESHAPE)
				last[g->nodes[i].inputs[k]] = i;
	/* a reshape extends its input's life */
	for (int i = n - 1; i >= 0; i--)
		if (g->nodes[i].op == DTF_OP_RESHAPE &&
		    last[i] > last[g->nodes[i].inputs[0]])
			last[g->nodes[i].inputs[0]] = last[i];
	char *lo = m.plan.arena, *hi = lo + m.plan.arena_bytes;
	for (int i = 0; i < n; i++) {
		const struct dtf_node *a = &g->nodes[i];
		char *pa = a->data;
		if (pa < lo || pa >= hi || a->op == DTF_OP_RESHAPE)
			continue;
		size_t sa = (size_t)dtf_shape_numel(&a->shape) * 4;
		for (int j = i + 1; j < n; j++) {
			const struct dtf_node *b = &g->nodes[j];
			char *pb = b->data;
			if (pb < lo || pb >= hi || b->op == DTF_OP_RESHAPE)
				continue;
			if (j > last[i] && !(i == g->logits || a->op == DTF_OP_INPUT))
				continue; /* a is dead when b is written */
			size_t sb = (size_t)dtf_shape_numel(&b->shape) * 4;
			int overlap = pa < pb + sb && pb < pa + sa;
			/* allowed only when b writes over its own input a */
			int inplace = overlap && pa == pb &&
				      b->inputs[0] == i && last[i] == j;
			ck_assert_msg(!overlap || inplace,
				      "'%s' and '%s' overlap while both live",
				      a->name, b->name);
		}
	}
	free(last);
	tu_model_free(&m);
}
END_TEST

/* The acceptance: resnet_small's plan at most 60% of naive. */
START_TEST(resnet_plan_saves_memory)
{
	const char *root = getenv("DTF_SOURCE_ROOT");
	char path[1024];
	snprintf(path, sizeof(path), "%s/graphs/resnet_small.yaml",
		 root ? root : ".");
	struct dtf_job *job;
	ck_assert_int_eq(dtf_job_load(path, NULL, 0, &job), 0);
	struct dtf_graph g;
	ck_assert_int_eq(dtf_graph_lower_model(job, 32, &g, NULL), 0);
	ck_assert_int_eq(dtf_graph_backward(&g), 0);
	struct dtf_plan_stats live, naive;
	ck_assert_int_eq(dtf_plan_measure(&g, DTF_PLANNER_LIVENESS, 1, dtf_backend_cpu_workspace(&g), &live), 0);
	ck_assert_int_eq(dtf_plan_measure(&g, DTF_PLANNER_NAIVE, 1, dtf_backend_cpu_workspace(&g), &naive), 0);
	printf("resnet_small batch 32: planned %zu of naive %zu bytes (%.1f%%), %d in place\n",
	       live.planned_bytes, live.naive_bytes,
	       100.0 * (double)live.planned_bytes / (double)live.naive_bytes,
	       live.inplace);
	ck_assert_uint_eq(naive.planned_bytes, naive.naive_bytes);
	ck_assert_uint_eq(live.naive_bytes, naive.naive_bytes);
	ck_assert_uint_le(live.planned_bytes * 10, live.naive_bytes * 6);
	ck_assert_int_gt(live.inplace, 0);
	dtf_graph_deinit(&g);
	dtf_job_free(job);
}
END_TEST

/* ---- validation errors ------------------------------------------------------ */

START_TEST(error_unknown_key_did_you_mean)
{
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - {conv2d: {filters: 2, kernel: 3, dilations: 2}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: conv2d_1, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:9:40: model.layers[0].conv2d.dilations: unknown key "
		"'dilations' (did you mean 'dilation'?)");
	ck_assert_msg_is(
		fails("  graph:\n    w: {variable: {shape: [2], initialiser: ones}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: w, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:32: model.graph.w.variable.initialiser: unknown key "
		"'initialiser' (did you mean 'initializer'?)");
	ck_assert_msg_is(
		fails("  graph:\n    w: {variabel: {shape: [2]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: w, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:9: model.graph.w: unknown op 'variabel' (did you "
		"mean 'variable'?)");
}
END_TEST

START_TEST(error_input_names_nothing)
{
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - flatten\n"
		      "    - {dense: {units: 3, name: logits, inputs: [flaten_1]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:49: model.layers[1].dense.inputs[0]: 'flaten_1' "
		"names no earlier layer or feature (did you mean 'flatten_1'?)");
	/* a later layer is not an input of an earlier one */
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - {flatten: {inputs: [logits]}}\n"
		      "    - {dense: {units: 3, name: logits}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:9:27: model.layers[0].flatten.inputs[0]: 'logits' is "
		"not an earlier layer (layers may only take inputs from layers "
		"above them; use model.graph for other orders)");
	ck_assert_msg_is(
		fails("  graph:\n    x: {flatten: {inputs: [imag]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: x, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:28: model.graph.x.flatten.inputs[0]: 'imag' names "
		"no node or feature (did you mean 'image'?)");
}
END_TEST

START_TEST(error_cycle_path)
{
	ck_assert_msg_is(
		fails("  graph:\n"
		      "    x: {flatten: {inputs: [image]}}\n"
		      "    a: {relu: {inputs: [c]}}\n"
		      "    b: {relu: {inputs: [a]}}\n"
		      "    c: {add: {inputs: [b, x]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: c, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:25: model.graph.b: the graph has a cycle: "
		"b -> c -> a -> b");
	/* a node reading itself */
	ck_assert_msg_is(
		fails("  graph:\n    a: {relu: {inputs: [a]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: a, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:25: model.graph.a: the graph has a cycle: a -> a");
}
END_TEST

START_TEST(error_shape_mismatch_names_both)
{
	ck_assert_msg_is(
		fails("  graph:\n"
		      "    x: {flatten: {inputs: [image]}}\n"
		      "    w: {variable: {shape: [70, 3]}}\n"
		      "    l: {matmul: {inputs: [x, w]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:5: node 'l': matmul inner dimensions differ: 'x' "
		"has shape (4, 72) but 'w' has shape (70, 3)");
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n"
		      "    - flatten\n"
		      "    - {conv2d: {filters: 3, kernel: 3, name: logits}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:7: layer 'logits': conv2d needs a 4-D (batch, "
		"height, width, channels) input, got rank 2");
}
END_TEST

START_TEST(error_loss_without_trainable)
{
	ck_assert_msg_is(
		fails("  graph:\n"
		      "    x: {flatten: {inputs: [image]}}\n"
		      "    w: {variable: {shape: [72, 3], trainable: false}}\n"
		      "    l: {matmul: {inputs: [x, w]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:11:3: model.loss: the loss does not depend on any "
		"trainable variable (every variable it reaches has trainable: "
		"false, or the logits 'l' come from inputs and constants only)");
}
END_TEST

START_TEST(error_duplicate_names)
{
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - {flatten: {name: f}}\n"
		      "    - {dense: {units: 3, name: f}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: f, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:32: model.layers[1]: duplicate layer name 'f' (also "
		"layer 0 at job.yaml:9:7)");
	ck_assert_msg_is(
		fails("  graph:\n    x: {flatten: {inputs: [image]}}\n"
		      "    x: {relu: {inputs: [image]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: x, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:9:5: model.graph.x: duplicate node name 'x' (also at "
		"job.yaml:8:5)");
	ck_assert_msg_is(
		fails("  graph:\n    label: {flatten: {inputs: [image]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: label, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:5: model.graph: the name 'label' is both a node and "
		"a feature in data.features");
}
END_TEST

START_TEST(error_wrong_types)
{
	ck_assert_msg_is(
		fails("  graph:\n    w: {variable: {shape: [2, two]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: w, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:8:31: model.graph.w.variable.shape[1]: expected a "
		"positive integer, got 'two'");
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - {dropout: {rate: high}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: dropout_1, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:9:24: model.layers[0].dropout.rate: expected a number "
		"in [0, 1), got 'high'");
	ck_assert_msg_is(
		fails("  input: image\n  layers:\n    - {add: {inputs: image}}\n"
		      "    - {batch_norm: {momentum: [1]}}\n"
		      "  loss: {sparse_softmax_cross_entropy: {logits: add_1, labels: label}}\n",
		      -DTF_ERR_CONFIG),
		"job.yaml:10:31: model.layers[1].batch_norm.momentum: expected a "
		"number in [0, 1), got a list");
	int rc;
	struct dtf_job *job = load(
		"  input: image\n  layers: [flatten, {dense: {units: 2, name: l}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: l, labels: label}}\n",
		"{batch_size: 4, clipnorm: lots}", &rc);
	ck_assert_int_eq(rc, -DTF_ERR_CONFIG);
	ck_assert_msg_is(dtf_error_msg(),
			 "job.yaml:10:34: train.clipnorm: expected a "
			 "non-negative number, got 'lots'");
	dtf_job_free(job);
}
END_TEST

/* The command line: a job error exits 2 and prints file:line:col. */
START_TEST(cli_job_error_exit_2)
{
	const char *build = getenv("DTF_BUILD_ROOT");
	char path[] = "/tmp/dtf-lang-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "%smodel:\n  graph:\n    a: {relu: {inputs: [b]}}\n"
		   "    b: {relu: {inputs: [a]}}\n"
		   "  loss: {sparse_softmax_cross_entropy: {logits: b, labels: label}}\n"
		   "train: {batch_size: 4}\n", HEAD);
	fclose(f);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s%s/dtf-train --dry-run %s 2>&1",
		 tu_exe_wrapper(), build ? build : ".", path);
	FILE *p = popen(cmd, "r");
	char out[1024] = "";
	size_t got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	unlink(path);
	ck_assert_int_eq(WEXITSTATUS(st), 2);
	ck_assert_msg(strstr(out, ":9:25: model.graph.b: the graph has a "
				  "cycle: b -> a -> b") != NULL,
		      "%s", out);
}
END_TEST

static Suite *lang_suite(void)
{
	Suite *s = suite_create("lang");
	TCase *tc = tcase_create("optimizers");
	tcase_add_test(tc, sgd_momentum_and_nesterov);
	tcase_add_test(tc, adam_and_adamw);
	tcase_add_test(tc, rmsprop_plain_centered_momentum);
	tcase_add_test(tc, weight_decay_groups_and_clipnorm);
	tcase_add_test(tc, decay_groups_from_graph);
	tcase_add_test(tc, schedules_match_keras_formulas);
	tcase_add_test(tc, schedule_errors_name_the_key);
	tcase_add_test(tc, metrics_parse);
	suite_add_tcase(s, tc);
	tc = tcase_create("two_forms");
	tcase_add_test(tc, layers_and_graph_forms_agree);
	tcase_add_test(tc, initializers);
	tcase_add_test(tc, every_kind_lowers_in_both_forms);
	suite_add_tcase(s, tc);
	tc = tcase_create("planner");
	tcase_add_test(tc, liveness_equals_naive_bitwise);
	tcase_add_test(tc, liveness_buffers_do_not_overlap);
	tcase_add_test(tc, resnet_plan_saves_memory);
	suite_add_tcase(s, tc);
	tc = tcase_create("validation");
	tcase_add_test(tc, error_unknown_key_did_you_mean);
	tcase_add_test(tc, error_input_names_nothing);
	tcase_add_test(tc, error_cycle_path);
	tcase_add_test(tc, error_shape_mismatch_names_both);
	tcase_add_test(tc, error_loss_without_trainable);
	tcase_add_test(tc, error_duplicate_names);
	tcase_add_test(tc, error_wrong_types);
	tcase_add_test(tc, cli_job_error_exit_2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lang_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
