/*
 * test_plan.c - the liveness memory planner against the naive one.
 *
 * Both planners must give bit-identical losses, gradients and parameters
 * (mem/plan.h).  Rather than a few hand-picked models, the tests generate
 * them:
 *  - op_pairs: every forward op of the op table (graph.h) that can be
 *    placed in a small graph feeds every other such op it can feed (at
 *    rank 4 NHWC and rank 2 where both accept it; its first input the
 *    pipeline's input itself or a computed buffer; a binary op's second
 *    operand the same node or another live one), followed by a dense head
 *    and each of the four losses in turn, with the labels input declared
 *    after the logits as the lowering does.  Each graph is planned both
 *    ways, run two training steps on the reference kernels and on the
 *    fast path, with the arena poisoned with NaN before every step
 *    (dtf_plan_poison), so a buffer read before this step wrote it shows
 *    as NaN rather than as a stale value.  Losses, gradient vectors and
 *    parameter vectors (moving statistics included) must be finite and
 *    bit-identical.  An op added to the table without a place in this
 *    matrix (or among the gradient ops and losses) fails the test.
 *  - shipped_graphs: every job under graphs/ trains three steps with its
 *    own optimizer under both planners, poisoned; the parameters must be
 *    bit-identical.
 *  - poison_keeps_inputs: dtf_plan_poison fills everything but the inputs.
 *  - first_report: the model of the first report (conv2d feeding
 *    global_avg_pool, the labels after it) trains with dtf-train under
 *    both planners, poisoned or not, to the same bits.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "ops/cpu/exec.h"
#include "ops/cpu/fast_exec.h"
#include "graph/graph.h"
#include "mem/plan.h"
#include "train/optimizer.h"

#include "testutil.h"

enum { BATCH = 2, H = 4, W = 4, C = 3, CLASSES = 4, STEPS = 2 };

/* ---- the op table, classified ------------------------------------------- */

enum kind {
	K_PLACE,  /* a forward op the matrix places */
	K_SOURCE, /* input, variable */
	K_LOSS,   /* a loss: the head of every graph, in turn */
	K_GRAD,   /* emitted by autodiff only */
	K_OUTSIDE, /* a forward op whose input the rank-2 and rank-4 cases
		      cannot give (causal_self_attention: (b, t, 3c)); its
		      graphs are planned by the tests of the op */
};

static enum kind kind_of(enum dtf_op op)
{
	switch (op) {
	case DTF_OP_INPUT:
	case DTF_OP_VARIABLE:
		return K_SOURCE;
	case DTF_OP_SPARSE_SOFTMAX_XENT:
	case DTF_OP_SOFTMAX_XENT:
	case DTF_OP_SIGMOID_XENT:
	case DTF_OP_MSE:
		return K_LOSS;
	case DTF_OP_CONV2D_BACKPROP_INPUT:
	case DTF_OP_CONV2D_BACKPROP_FILTER:
	case DTF_OP_MAX_POOL2D_GRAD:
	case DTF_OP_BIAS_ADD_GRAD:
	case DTF_OP_RELU_GRAD:
	case DTF_OP_DROPOUT_GRAD:
	case DTF_OP_SPARSE_SOFTMAX_XENT_GRAD:
	case DTF_OP_DEPTHWISE_CONV2D_BACKPROP_INPUT:
	case DTF_OP_DEPTHWISE_CONV2D_BACKPROP_FILTER:
	case DTF_OP_AVG_POOL2D_GRAD:
	case DTF_OP_GLOBAL_AVG_POOL_GRAD:
	case DTF_OP_BATCH_NORM_GRAD_INPUT:
	case DTF_OP_BATCH_NORM_GRAD_GAMMA:
	case DTF_OP_LAYER_NORM_GRAD_INPUT:
	case DTF_OP_LAYER_NORM_GRAD_GAMMA:
	case DTF_OP_SLICE_GRAD:
	case DTF_OP_LEAKY_RELU_GRAD:
	case DTF_OP_ELU_GRAD:
	case DTF_OP_GELU_GRAD:
	case DTF_OP_TANH_GRAD:
	case DTF_OP_SIGMOID_GRAD:
	case DTF_OP_SOFTMAX_GRAD:
	case DTF_OP_SOFTMAX_XENT_GRAD:
	case DTF_OP_SIGMOID_XENT_GRAD:
	case DTF_OP_MSE_GRAD:
	case DTF_OP_EMBEDDING_GRAD:
	case DTF_OP_CAUSAL_SELF_ATTENTION_GRAD:
		return K_GRAD;
	case DTF_OP_CAUSAL_SELF_ATTENTION:
		return K_OUTSIDE;
	case DTF_OP_CONV2D:
	case DTF_OP_MAX_POOL2D:
	case DTF_OP_MATMUL:
	case DTF_OP_BIAS_ADD:
	case DTF_OP_RELU:
	case DTF_OP_DROPOUT:
	case DTF_OP_RESHAPE:
	case DTF_OP_ADD:
	case DTF_OP_DEPTHWISE_CONV2D:
	case DTF_OP_AVG_POOL2D:
	case DTF_OP_GLOBAL_AVG_POOL:
	case DTF_OP_BATCH_NORM:
	case DTF_OP_LAYER_NORM:
	case DTF_OP_MULTIPLY:
	case DTF_OP_CONCAT:
	case DTF_OP_LEAKY_RELU:
	case DTF_OP_ELU:
	case DTF_OP_GELU:
	case DTF_OP_TANH:
	case DTF_OP_SIGMOID:
	case DTF_OP_SOFTMAX:
	case DTF_OP_IDENTITY:
	case DTF_OP_EMBEDDING: /* reads ids of its own (place) */
	case DTF_OP_SLICE:
	case DTF_OP_TRANSPOSE:
	case DTF_OP_BATCH_MATMUL:
		return K_PLACE;
	default:
		ck_abort_msg("op '%s' is neither placed by the planner matrix "
			     "nor listed as a source, loss or gradient op: "
			     "add it to tests/test_plan.c",
			     dtf_op_name(op));
		return K_GRAD;
	}
}

/* Ops that take rank-4 NHWC only, rank-2 (rows, features) only. */
static int needs_rank4(enum dtf_op op)
{
	return op == DTF_OP_CONV2D || op == DTF_OP_DEPTHWISE_CONV2D ||
	       op == DTF_OP_MAX_POOL2D || op == DTF_OP_AVG_POOL2D ||
	       op == DTF_OP_GLOBAL_AVG_POOL || op == DTF_OP_BATCH_MATMUL;
}

static int needs_rank2(enum dtf_op op) { return op == DTF_OP_MATMUL; }

static int binary(enum dtf_op op)
{
	return op == DTF_OP_ADD || op == DTF_OP_MULTIPLY ||
	       op == DTF_OP_CONCAT;
}

static int accepts(enum dtf_op op, int rank)
{
	return rank == 4 ? !needs_rank2(op) : !needs_rank4(op);
}

static int out_rank(enum dtf_op op, int rank)
{
	if (op == DTF_OP_GLOBAL_AVG_POOL || op == DTF_OP_RESHAPE ||
	    op == DTF_OP_MATMUL)
		return 2;
	return rank;
}

/* ---- building a case ----------------------------------------------------- */

static const struct dtf_shape *shape_of(const struct dtf_graph *g, int id)
{
	return &g->nodes[id].shape;
}

static int channels(const struct dtf_graph *g, int id)
{
	const struct dtf_shape *s = shape_of(g, id);
	return (int)s->d[s->rank - 1];
}

static int var(struct dtf_graph *g, const char *prefix, const char *suffix,
	       int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
	char name[64];
	snprintf(name, sizeof(name), "%s/%s", prefix, suffix);
	struct dtf_shape s = {.rank = rank, .d = {d0, d1, d2, d3}};
	int id = dtf_graph_variable(g, name, &s, DTF_INIT_GLOROT_UNIFORM, 4, 4);
	ck_assert_msg(id >= 0, "%s", dtf_error_msg());
	return id;
}

/* Node `name` of kind op over a (and b for binary ops). */
static int place(struct dtf_graph *g, enum dtf_op op, const char *name,
		 int a, int b)
{
	int c = channels(g, a), id = -1;
	switch (op) {
	case DTF_OP_CONV2D:
		id = dtf_graph_conv2d(g, name, a, var(g, name, "w", 4, 3, 3, c, c),
				      1, 1, DTF_PAD_SAME);
		break;
	case DTF_OP_DEPTHWISE_CONV2D: {
		struct dtf_conv_attrs at = {.stride_h = 1, .stride_w = 1,
					    .padding = DTF_PAD_SAME};
		id = dtf_graph_depthwise_conv2d(
			g, name, a, var(g, name, "w", 4, 3, 3, c, 1), &at);
		break;
	}
	case DTF_OP_MAX_POOL2D:
		id = dtf_graph_max_pool2d(g, name, a, 2, 2, 1, 1, DTF_PAD_SAME);
		break;
	case DTF_OP_AVG_POOL2D:
		id = dtf_graph_avg_pool2d(g, name, a, 2, 2, 1, 1, DTF_PAD_SAME);
		break;
	case DTF_OP_GLOBAL_AVG_POOL:
		id = dtf_graph_global_avg_pool(g, name, a);
		break;
	case DTF_OP_MATMUL:
		id = dtf_graph_matmul(g, name, a, var(g, name, "w", 2, c, c, 0, 0));
		break;
	case DTF_OP_BIAS_ADD:
		id = dtf_graph_bias_add(g, name, a, var(g, name, "b", 1, c, 0, 0, 0));
		break;
	case DTF_OP_RELU:
		id = dtf_graph_relu(g, name, a);
		break;
	case DTF_OP_DROPOUT:
		id = dtf_graph_dropout(g, name, a, 0.25f);
		break;
	case DTF_OP_RESHAPE:
		id = dtf_graph_flatten(g, name, a);
		break;
	case DTF_OP_ADD:
		id = dtf_graph_add(g, name, a, b);
		break;
	case DTF_OP_MULTIPLY:
		id = dtf_graph_multiply(g, name, a, b);
		break;
	case DTF_OP_CONCAT:
		id = dtf_graph_concat(g, name, a, b, -1);
		break;
	case DTF_OP_BATCH_NORM:
		id = dtf_graph_batch_norm(
			g, name, a, var(g, name, "gamma", 1, c, 0, 0, 0),
			var(g, name, "beta", 1, c, 0, 0, 0),
			var(g, name, "moving_mean", 1, c, 0, 0, 0),
			var(g, name, "moving_variance", 1, c, 0, 0, 0), 0.9f,
			1e-3f);
		break;
	case DTF_OP_LAYER_NORM:
		id = dtf_graph_layer_norm(g, name, a,
					  var(g, name, "gamma", 1, c, 0, 0, 0),
					  var(g, name, "beta", 1, c, 0, 0, 0),
					  1e-3f);
		break;
	case DTF_OP_LEAKY_RELU:
		id = dtf_graph_leaky_relu(g, name, a, 0.1f);
		break;
	case DTF_OP_ELU:
		id = dtf_graph_elu(g, name, a, 1.0f);
		break;
	case DTF_OP_GELU:
		id = dtf_graph_gelu(g, name, a, 0);
		break;
	case DTF_OP_TANH:
		id = dtf_graph_tanh(g, name, a);
		break;
	case DTF_OP_SIGMOID:
		id = dtf_graph_sigmoid(g, name, a);
		break;
	case DTF_OP_SOFTMAX:
		id = dtf_graph_softmax(g, name, a);
		break;
	case DTF_OP_IDENTITY:
		id = dtf_graph_identity(g, name, a);
		break;
	case DTF_OP_SLICE: /* the last axis less its first entry */
		id = dtf_graph_slice(g, name, a, -1, 1, -1);
		break;
	case DTF_OP_TRANSPOSE: {
		static const int p4[4] = {0, 2, 1, 3}, p2[2] = {0, 1};
		int r = shape_of(g, a)->rank;
		id = dtf_graph_transpose(g, name, a, r == 4 ? p4 : p2, r);
		break;
	}
	case DTF_OP_BATCH_MATMUL: { /* (n, h, w, c) times (n, h, c, c) */
		const struct dtf_shape *sa = shape_of(g, a);
		int64_t n = sa->d[0], h = sa->d[1];
		id = dtf_graph_batch_matmul(g, name, a,
					    var(g, name, "w", 4, n, h, c, c), 0,
					    0, 0.5f);
		break;
	}
	case DTF_OP_EMBEDDING: {
		/* a's shape from int32 ids of its own (an input "<name>_ids"
		 * of a's shape less the last axis; feed() draws them in
		 * [0, CLASSES)) and a (CLASSES, c) table; a itself is then
		 * unused, which the planners must handle too */
		const struct dtf_shape *sa = shape_of(g, a);
		struct dtf_feature_spec is = {.type = DTF_FEATURE_INT64,
					      .dtype = DTF_INT32,
					      .rank = sa->rank - 2};
		snprintf(is.name, sizeof(is.name), "%s_ids", name);
		for (int k = 0; k < is.rank; k++)
			is.shape[k] = sa->d[k + 1];
		int ids = dtf_graph_input(g, is.name, 2, &is);
		ck_assert_int_ge(ids, 0);
		id = dtf_graph_embedding(g, name, ids,
					 var(g, name, "table", 2, CLASSES, c, 0, 0));
		break;
	}
	default:
		ck_abort_msg("cannot place '%s'", dtf_op_name(op));
	}
	ck_assert_msg(id >= 0, "%s: %s", name, dtf_error_msg());
	return id;
}

/* Can b be the second operand of binary op (first operand a)? */
static int pairs_with(const struct dtf_graph *g, enum dtf_op op, int a, int b)
{
	const struct dtf_shape *sa = shape_of(g, a), *sb = shape_of(g, b);
	if (sa->rank != sb->rank)
		return 0;
	for (int k = 0; k < sa->rank; k++)
		if (sa->d[k] != sb->d[k] &&
		    !(op == DTF_OP_CONCAT && k == sa->rank - 1))
			return 0;
	return 1;
}

struct pair_case {
	enum dtf_op p, c, loss;
	int rank;    /* of the producer's input */
	int raw;     /* the producer reads the input node itself */
	int other;   /* binary ops: second operand another live node */
};

static const struct dtf_feature_spec image_spec = {
	.name = "image", .type = DTF_FEATURE_FLOAT, .rank = 3,
	.shape = {H, W, C}, .dtype = DTF_FLOAT32};

/*
 * x (input) -> [flatten] -> a = bias_add, o = bias_add (the other live
 * node) -> P -> C -> [flatten] -> matmul -> bias_add (logits) -> loss,
 * with the labels input declared after the logits.  Returns 0, or 1 when
 * the case does not apply (a binary op's other operand does not fit).
 */
static int build_case(struct dtf_graph *g, const struct pair_case *k)
{
	ck_assert_int_eq(dtf_graph_init(g, BATCH), 0);
	int x = dtf_graph_input(g, "image", 0, &image_spec);
	ck_assert_int_ge(x, 0);
	int xin = k->rank == 4 ? x : dtf_graph_flatten(g, "flat_in", x);
	ck_assert_int_ge(xin, 0);
	int a = place(g, DTF_OP_BIAS_ADD, "a", xin, -1);
	int o = place(g, DTF_OP_BIAS_ADD, "o", xin, -1);
	int src = k->raw ? xin : a;
	int pb = src;
	if (binary(k->p) && k->other) {
		if (!pairs_with(g, k->p, src, o))
			goto skip;
		pb = o;
	}
	int p = place(g, k->p, "p", src, pb);
	int cb = p;
	if (binary(k->c) && k->other) {
		if (!pairs_with(g, k->c, p, o))
			goto skip;
		cb = o;
	}
	int c = place(g, k->c, "c", p, cb);
	int h = shape_of(g, c)->rank == 2 ? c : dtf_graph_flatten(g, "flat", c);
	ck_assert_int_ge(h, 0);
	int logits = dtf_graph_matmul(
		g, "logits/matmul", h,
		var(g, "logits", "w", 2, channels(g, h), CLASSES, 0, 0));
	ck_assert_int_ge(logits, 0);
	logits = dtf_graph_bias_add(g, "logits", logits,
				    var(g, "logits", "b", 1, CLASSES, 0, 0, 0));
	ck_assert_int_ge(logits, 0);
	struct dtf_feature_spec ls = {.name = "label"};
	int labels, loss;
	if (k->loss == DTF_OP_SPARSE_SOFTMAX_XENT) {
		ls.type = DTF_FEATURE_INT64;
		ls.dtype = DTF_INT32;
		labels = dtf_graph_input(g, "label", 1, &ls);
		loss = dtf_graph_sparse_softmax_xent(g, "loss", logits, labels);
	} else {
		ls.type = DTF_FEATURE_FLOAT;
		ls.dtype = DTF_FLOAT32;
		ls.rank = 1;
		ls.shape[0] = CLASSES;
		labels = dtf_graph_input(g, "label", 1, &ls);
		loss = k->loss == DTF_OP_SOFTMAX_XENT
			       ? dtf_graph_softmax_xent(g, "loss", logits,
							labels, 0.1f)
		       : k->loss == DTF_OP_SIGMOID_XENT
			       ? dtf_graph_sigmoid_xent(g, "loss", logits,
							labels)
			       : dtf_graph_mean_squared_error(g, "loss", logits,
							      labels);
	}
	ck_assert_msg(loss >= 0, "%s", dtf_error_msg());
	return 0;
skip:
	dtf_graph_deinit(g);
	return 1;
}

/* ---- running both planners ---------------------------------------------- */

/* A batch for step `step` of case `seed`, the same for both models. */
static void feed(struct tu_model *m, uint64_t seed, int step)
{
	tu_rng_seed(seed * 1000003u + (uint64_t)step);
	for (int i = 0; i < m->g.nnodes; i++) {
		struct dtf_node *n = &m->g.nodes[i];
		if (n->op != DTF_OP_INPUT)
			continue;
		size_t numel = (size_t)dtf_shape_numel(&n->shape);
		if (n->dtype == DTF_INT32) {
			for (size_t r = 0; r < numel; r++)
				((int32_t *)n->data)[r] =
					(int32_t)(tu_next_u64() % CLASSES);
		} else {
			float lo = i == 0 ? -1.0f : 0.0f;
			for (size_t r = 0; r < numel; r++)
				((float *)n->data)[r] = tu_frand(lo, 1.0f);
		}
	}
	m->ctx.step = (uint64_t)step;
}

static int all_finite(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

/* One poisoned training step of m on the batch of (seed, step). */
static void step_once(struct tu_model *m, uint64_t seed, int step)
{
	feed(m, seed, step);
	dtf_plan_poison(&m->g, &m->plan);
	dtf_exec_forward(&m->g, &m->ctx);
	dtf_exec_backward(&m->g, &m->ctx);
}

/* The first difference between the two models after a step, or NULL. */
static const char *compare(const struct tu_model *a, const struct tu_model *b)
{
	size_t np = a->g.nparams;
	if (!isfinite(a->ctx.loss_sum))
		return "the naive planner's loss is not finite";
	if (memcmp(&a->ctx.loss_sum, &b->ctx.loss_sum, sizeof(double)) != 0)
		return "the losses differ";
	if (!all_finite(a->grads, np))
		return "the naive planner's gradients are not finite";
	if (memcmp(a->grads, b->grads, np * sizeof(float)) != 0)
		return "the gradients differ";
	if (memcmp(a->params, b->params, np * sizeof(float)) != 0)
		return "the parameters (moving statistics) differ";
	const struct dtf_node *la = &a->g.nodes[a->g.logits],
			      *lb = &b->g.nodes[b->g.logits];
	if (memcmp(la->data, lb->data,
		   (size_t)dtf_shape_numel(&la->shape) * sizeof(float)) != 0)
		return "the logits differ";
	return NULL;
}

/* Train both models STEPS steps (plain SGD); the first difference, with
 * the step in *at, or NULL. */
static const char *run_both(struct tu_model *a, struct tu_model *b,
			    uint64_t seed, int *at)
{
	dtf_graph_init_params(&a->g, 3, a->params);
	dtf_graph_init_params(&b->g, 3, b->params);
	for (int s = 0; s < STEPS; s++) {
		*at = s + 1;
		step_once(a, seed, s);
		step_once(b, seed, s);
		const char *why = compare(a, b);
		if (why)
			return why;
		for (size_t i = 0; i < a->g.nparams; i++) {
			a->params[i] -= 0.05f * a->grads[i];
			b->params[i] -= 0.05f * b->grads[i];
		}
	}
	return NULL;
}

static const char *const rank_name[] = {[2] = "rank 2", [4] = "rank 4"};

START_TEST(op_pairs)
{
	enum dtf_op ops[DTF_OP_COUNT_], losses[4];
	int nops = 0, nloss = 0;
	for (int op = 0; op < DTF_OP_COUNT_; op++) {
		enum kind k = kind_of((enum dtf_op)op);
		if (k == K_PLACE)
			ops[nops++] = (enum dtf_op)op;
		else if (k == K_LOSS)
			losses[nloss++] = (enum dtf_op)op;
	}
	ck_assert_int_eq(nloss, 4);
	int ncases = 0, nfail = 0, pairs = 0;
	int as_p[DTF_OP_COUNT_] = {0}, as_c[DTF_OP_COUNT_] = {0};
	for (int i = 0; i < nops; i++)
		for (int j = 0; j < nops; j++) {
			int counted = 0;
			for (int rank = 4; rank >= 2; rank -= 2)
				for (int raw = 0; raw < 2; raw++)
					for (int other = 0; other < 2; other++) {
		struct pair_case k = {.p = ops[i], .c = ops[j], .rank = rank,
				      .raw = raw, .other = other};
		if (!accepts(k.p, rank) || !accepts(k.c, out_rank(k.p, rank)))
			continue;
		if (other && !binary(k.p) && !binary(k.c))
			continue; /* the same graph as other == 0 */
		k.loss = losses[ncases % nloss];
		struct tu_model a = {0}, b = {0};
		if (build_case(&a.g, &k))
			continue;
		ck_assert_int_eq(build_case(&b.g, &k), 0);
		tu_model_plan(&a, BATCH, DTF_PLANNER_NAIVE, 100, 1, 0);
		tu_model_plan(&b, BATCH, DTF_PLANNER_LIVENESS, 100, 1, 0);
		uint64_t seed = (uint64_t)ncases + 1;
		ncases++;
		counted = 1;
		int differs = 0;
		for (int fast = 0; fast < 2; fast++) {
			struct dtf_fast_plan fa, fb;
			if (fast) {
				ck_assert_int_eq(dtf_fast_plan_init(&fa, &a.g, NULL), 0);
				ck_assert_int_eq(dtf_fast_plan_init(&fb, &b.g, NULL), 0);
				a.ctx.fast = &fa;
				b.ctx.fast = &fb;
			}
			int at = 0;
			const char *why = run_both(&a, &b, seed, &at);
			if (why && nfail + differs++ < 20)
				fprintf(stderr,
					"%s -> %s (%s, first input %s, second operand %s, loss %s, %s kernels), step %d: %s\n",
					dtf_op_name(k.p), dtf_op_name(k.c),
					rank_name[rank],
					raw ? "the input node" : "a computed buffer",
					other ? "another node" : "itself",
					dtf_op_name(k.loss),
					fast ? "fast" : "reference", at, why);
			if (fast) {
				dtf_fast_plan_deinit(&fa);
				dtf_fast_plan_deinit(&fb);
				a.ctx.fast = b.ctx.fast = NULL;
			}
		}
		nfail += differs > 0;
		tu_model_free(&a);
		tu_model_free(&b);
					}
			pairs += counted;
			as_p[i] += counted;
			as_c[j] += counted;
		}
	fprintf(stderr,
		"planner matrix: %d ops, %d producer -> consumer pairs, %d graphs, "
		"%d runs (2 planners x 2 kernel sets x %d steps each), %d differ\n",
		nops, pairs, ncases, ncases * 2 * 2 * STEPS, STEPS, nfail);
	/* every op feeds most ops and is fed by most: rank-4-only ops
	 * (conv, pooling) are not fed by the rank-2 ones and matmul is fed
	 * only by them; nothing else is left out */
	for (int i = 0; i < nops; i++) {
		ck_assert_msg(as_p[i] >= nops - 6, "%s feeds only %d ops",
			      dtf_op_name(ops[i]), as_p[i]);
		ck_assert_msg(as_c[i] >= 4, "%s is fed by only %d ops",
			      dtf_op_name(ops[i]), as_c[i]);
	}
	ck_assert_msg(nfail == 0, "%d of %d graphs differ between the naive "
		      "and liveness planners (first ones above)", nfail, ncases);
}
END_TEST

/* ---- the shipped jobs ----------------------------------------------------- */

START_TEST(shipped_graphs)
{
	char dir[1024];
	tu_path(dir, sizeof(dir), tu_source_root(), "graphs");
	DIR *d = opendir(dir);
	ck_assert_msg(d != NULL, "cannot open %s", dir);
	struct dirent *e;
	int njobs = 0;
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 5, ".yaml") != 0)
			continue;
		char path[1280];
		tu_path(path, sizeof(path), dir, e->d_name);
		struct tu_model m[2];
		struct dtf_optimizer opt[2];
		for (int k = 0; k < 2; k++) {
			struct dtf_job *job = NULL;
			int rc = dtf_job_load(path, NULL, 0, &job);
			ck_assert_msg(rc == 0, "%s: %s", path, dtf_error_msg());
			tu_model_build(&m[k], job, BATCH,
				       k ? DTF_PLANNER_LIVENESS
					 : DTF_PLANNER_NAIVE,
				       100, 1, 0);
			ck_assert_int_eq(dtf_optimizer_init(&opt[k], job,
							    m[k].g.nparams), 0);
			ck_assert_int_eq(dtf_optimizer_segments_from_graph(
						 &opt[k], job, &m[k].g), 0);
		}
		for (int s = 0; s < 3; s++) {
			for (int k = 0; k < 2; k++)
				step_once(&m[k], (uint64_t)njobs + 77, s);
			const char *why = compare(&m[0], &m[1]);
			ck_assert_msg(why == NULL, "%s, step %d: %s", e->d_name,
				      s + 1, why);
			for (int k = 0; k < 2; k++)
				dtf_optimizer_apply(&opt[k], m[k].params,
						    m[k].grads, 0.01);
			ck_assert_msg(memcmp(m[0].params, m[1].params,
					     m[0].g.nparams * sizeof(float)) == 0,
				      "%s, step %d: the updated parameters differ",
				      e->d_name, s + 1);
		}
		for (int k = 0; k < 2; k++) {
			dtf_optimizer_deinit(&opt[k]);
			tu_model_free(&m[k]);
		}
		njobs++;
	}
	closedir(d);
	ck_assert_int_ge(njobs, 5);
}
END_TEST

/* ---- the poison itself ---------------------------------------------------- */

START_TEST(poison_keeps_inputs)
{
	struct pair_case k = {.p = DTF_OP_CONV2D, .c = DTF_OP_GLOBAL_AVG_POOL,
			      .rank = 4, .loss = DTF_OP_SPARSE_SOFTMAX_XENT};
	struct tu_model m = {0};
	ck_assert_int_eq(build_case(&m.g, &k), 0);
	tu_model_plan(&m, BATCH, DTF_PLANNER_LIVENESS, 100, 1, 0);
	feed(&m, 5, 0);
	int x = dtf_graph_find(&m.g, "image"), y = dtf_graph_find(&m.g, "label");
	size_t nx = (size_t)dtf_shape_numel(&m.g.nodes[x].shape);
	float *xs = tu_falloc(nx);
	int32_t ys[BATCH];
	memcpy(xs, m.g.nodes[x].data, nx * sizeof(float));
	memcpy(ys, m.g.nodes[y].data, sizeof(ys));
	dtf_plan_poison(&m.g, &m.plan);
	ck_assert(memcmp(xs, m.g.nodes[x].data, nx * sizeof(float)) == 0);
	ck_assert(memcmp(ys, m.g.nodes[y].data, sizeof(ys)) == 0);
	/* everything else is NaN: the conv output, the workspace, the loss */
	const float *f = m.plan.arena;
	size_t nan = 0, nfloat = m.plan.arena_bytes / sizeof(float);
	for (size_t i = 0; i < nfloat; i++)
		nan += isnan(f[i]) != 0;
	size_t pinned = 0;
	for (int i = 0; i < m.g.nnodes; i++)
		if (m.g.nodes[i].op == DTF_OP_INPUT) /* aligned to DTF_ALIGN */
			pinned += ((size_t)dtf_shape_numel(&m.g.nodes[i].shape) *
					   4 + DTF_ALIGN - 1) /
				  DTF_ALIGN * DTF_ALIGN / 4;
	ck_assert_uint_eq(nan, nfloat - pinned);
	ck_assert(isnan(((float *)m.g.nodes[dtf_graph_find(&m.g, "p")].data)[0]));
	/* and the step after it is finite */
	dtf_exec_forward(&m.g, &m.ctx);
	ck_assert(isfinite(m.ctx.loss_sum));
	free(xs);
	tu_model_free(&m);
}
END_TEST

/* ---- end to end ------------------------------------------------------------ */

static const char e2e_job[] =
	"name: plan-e2e\n"
	"seed: 3\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 16}\n"
	"  eval: {files: \"%s/train-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 8, kernel: 3, padding: same}}\n"
	"    - global_avg_pool\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 8\n"
	"  epochs: 1\n"
	"  optimizer: {sgd: {learning_rate: 0.1}}\n"
	"logging: {every_steps: 1000}\n";

START_TEST(first_report)
{
	char dir[256];
	tu_tmpdir_create(dir, sizeof(dir), "dtf-plan-test");
	tu_synth(dir, "train", 64, 1, "8,8,1", 1);
	tu_write_file(dir, "job.yaml", e2e_job, dir, dir);
	static const char *const sets[] = {
		"--set memory.planner=naive",
		"--set memory.planner=liveness",
		"--set memory.planner=naive --set memory.poison=true",
		"--set memory.planner=liveness --set memory.poison=true",
	};
	float *ref = NULL;
	size_t nref = 0;
	for (int k = 0; k < 4; k++) {
		char name[32];
		snprintf(name, sizeof(name), "v%d.bin", k);
		int st = tu_run("%s%s/dtf-train -q -t 1 %s --export-variables "
				"%s/%s %s/job.yaml 2>%s/log",
				tu_exe_wrapper(), tu_build_root(), sets[k], dir,
				name, dir, dir);
		ck_assert_msg(st == 0, "%s: exit %d\n%s", sets[k], st,
			      tu_slurp(dir, "log"));
		size_t n;
		float *v = tu_read_vars(dir, name, &n);
		ck_assert(all_finite(v, n));
		if (!ref) {
			ref = v;
			nref = n;
			continue;
		}
		ck_assert_uint_eq(n, nref);
		ck_assert_msg(memcmp(v, ref, n * sizeof(float)) == 0,
			      "%s: the variables differ from the naive planner's",
			      sets[k]);
		free(v);
	}
	free(ref);
	tu_tmpdir_remove(dir);
}
END_TEST

static Suite *plan_suite(void)
{
	Suite *s = suite_create("plan");
	TCase *tc = tcase_create("matrix");
	tcase_add_test(tc, op_pairs);
	tcase_add_test(tc, poison_keeps_inputs);
	suite_add_tcase(s, tc);
	tc = tcase_create("graphs");
	tcase_add_test(tc, shipped_graphs);
	tcase_add_test(tc, first_report);
	suite_add_tcase(s, tc);
	return s;
}

int main(void) { return tu_run_suite(plan_suite(), 1); }
