/*
 * fast_exec.c - fusion plan and dispatch to the fast CPU kernels.
 * See fast_exec.h for the patterns and the rule that makes them safe.
 *
 * Both go through one table indexed by the op (fast_kernels, below): an
 * op's plan function decides its action and what it absorbs, its run
 * function executes it as planned.  The action per node stays the plan's
 * state (the undo pass reads it); the run is picked by the op.
 */
#include "ops/cpu/fast_exec.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

enum action {
	A_REF = 0,      /* reference kernel */
	A_SKIP,         /* absorbed by an earlier node */
	A_CONV,         /* conv2d [+ bias] [+ relu] into out[i] */
	A_CONV_BWI,
	A_CONV_BWF,
	A_MATMUL,       /* matmul [+ bias] [+ relu] into out[i] */
	A_BIAS_ACT,     /* bias_add [+ relu] into out[i] */
	A_RELU,
	A_RELU_GRAD,    /* relu_grad [+ bias grad into bias[i]] */
	A_POOL,
	A_POOL_GRAD,    /* max_pool2d_grad [+ relu_grad into out[i]] [+ bias grad] */
	A_ADD,
	A_DROPOUT,      /* dropout or dropout_grad */
	A_POOL_GRAD_BWF, /* A_POOL_GRAD, then the filter gradient next[i]
			    from dx, which is not stored */
	A_BMM,          /* batch_matmul: sgemm per matrix */
	A_ATTENTION,    /* causal_self_attention or its gradient */
	A_GELU,         /* gelu or gelu_grad */
	A_LAYER_NORM,   /* layer_norm or one of its gradients */
};

static float *F(const struct dtf_graph *g, int id)
{
	return (float *)g->nodes[id].data;
}

/* The only consumer of node i, or -1 when it has none or several. */
static int sole_consumer(const int *uses, const int *user, int i)
{
	return uses[i] == 1 ? user[i] : -1;
}

/* Channels of a (rows, c) view of the node's output. */
static int last_dim(const struct dtf_node *n)
{
	int64_t c = n->shape.rank > 0 ? n->shape.d[n->shape.rank - 1] : 1;
	return c > 0 ? (int)c : 1;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Do the buffers of nodes a and b share any byte? */
static int overlaps(const struct dtf_graph *g, int a, int b)
{
	if (a < 0 || b < 0 || a >= g->nnodes || b >= g->nnodes)
		return 0;
	const char *pa = g->nodes[a].data, *pb = g->nodes[b].data;
	if (!pa || !pb)
		return 0;
	size_t na = (size_t)dtf_shape_numel(&g->nodes[a].shape) * 4;
	size_t nb = (size_t)dtf_shape_numel(&g->nodes[b].shape) * 4;
	return pa < pb + nb && pb < pa + na;
}

/* Does node k (as it will run: its own output, its fused output and bias
 * gradient, its inputs) touch the buffer of node t? */
static int touches(const struct dtf_graph *g, const struct dtf_fast_plan *fp,
		   int k, int t)
{
	if (overlaps(g, k, t) || overlaps(g, fp->out[k], t))
		return 1;
	if ((fp->action[k] == A_RELU_GRAD || fp->action[k] == A_POOL_GRAD ||
	     fp->action[k] == A_POOL_GRAD_BWF) && overlaps(g, fp->bias[k], t))
		return 1;
	if (fp->next[k] >= 0) {
		const struct dtf_node *c = &g->nodes[fp->next[k]];
		if (overlaps(g, fp->next[k], t) || overlaps(g, c->inputs[0], t))
			return 1;
	}
	for (int j = 0; j < DTF_MAX_INPUTS; j++)
		if (overlaps(g, g->nodes[k].inputs[j], t))
			return 1;
	return 0;
}

/*
 * Node i writes the buffer of a later node t (t > i) at i's turn.  The
 * memory planner (mem/plan.h) gave t's buffer a lifetime that starts at
 * t; it may share it with buffers that die between i and t.  Safe when
 * none of i's inputs shares it, and no node that runs in between (t's
 * absorbed neighbours do not run) reads or writes it.
 */
static int early_write_ok(const struct dtf_graph *g,
			  const struct dtf_fast_plan *fp, const int *absorber,
			  int i, int t)
{
	if (t <= i)
		return 1;
	for (int j = 0; j < DTF_MAX_INPUTS; j++)
		if (overlaps(g, g->nodes[i].inputs[j], t))
			return 0;
	for (int k = i + 1; k < t; k++) {
		if (fp->action[k] == A_SKIP && absorber[k] == i)
			continue;
		if (fp->action[k] == A_SKIP)
			continue; /* runs inside its absorber, checked there */
		if (touches(g, fp, k, t))
			return 0;
	}
	return 1;
}

/* Undo the fusions of node i: its absorbed nodes run on their own (the
 * reference kernel), node i writes only its own output. */
static void unfuse(const struct dtf_graph *g, struct dtf_fast_plan *fp,
		   int *absorber, int i)
{
	for (int k = 0; k < fp->nnodes; k++)
		if (absorber[k] == i) {
			fp->action[k] = g->nodes[k].op == DTF_OP_CONV2D_BACKPROP_FILTER
						? A_CONV_BWF
					: g->nodes[k].op == DTF_OP_MAX_POOL2D ? A_POOL
									      : A_REF;
			absorber[k] = -1;
		}
	if (fp->action[i] == A_POOL_GRAD_BWF)
		fp->action[i] = A_POOL_GRAD;
	fp->next[i] = -1;
	fp->out[i] = i;
	if (g->nodes[i].op != DTF_OP_BIAS_ADD)
		fp->bias[i] = -1;
}

/* Undo only the later node node i computes (fast_plan.next): it runs on
 * its own again, with its fast kernel. */
static void drop_next(const struct dtf_graph *g, struct dtf_fast_plan *fp,
		      int *absorber, int i)
{
	int k = fp->next[i];
	fp->action[k] = g->nodes[k].op == DTF_OP_MAX_POOL2D ? A_POOL : A_CONV_BWF;
	absorber[k] = -1;
	fp->next[i] = -1;
	if (fp->action[i] == A_POOL_GRAD_BWF)
		fp->action[i] = A_POOL_GRAD;
}

/* The bias_add_grad reading node i, when node i feeds only that and
 * other nodes (it is a gradient used by several ops). */
static int bias_grad_of(const struct dtf_graph *g, int i)
{
	for (int k = i + 1; k < g->nnodes; k++)
		if (g->nodes[k].op == DTF_OP_BIAS_ADD_GRAD &&
		    g->nodes[k].inputs[0] == i)
			/* fused as column sums of the last axis: only a
			 * vector's gradient */
			return g->nodes[k].shape.rank == 1 ? k : -1;
	return -1;
}

/* A max_pool2d with tiling windows reading node r (the output of the
 * conv2d with geometry cg), which can then pool each image as soon as the
 * conv2d has written it; -1 if none. */
static int pool_of(const struct dtf_graph *g, int r,
		   const struct dtf_window_geom *cg)
{
	for (int j = r + 1; j < g->nnodes; j++) {
		const struct dtf_node *nj = &g->nodes[j];
		if (nj->op != DTF_OP_MAX_POOL2D || nj->inputs[0] != r)
			continue;
		const struct dtf_window_geom *pg = &nj->a.win.g;
		if (dtf_fast_pool_tiles(pg) && pg->n == cg->n &&
		    pg->h == cg->oh && pg->w == cg->ow && pg->c == cg->o)
			return j;
	}
	return -1;
}

/* The conv2d_backprop_filter reading node r (a relu gradient of a pooled
 * conv2d output, computed by node i) as its dy, when it and r's bias
 * gradient b (or -1) are r's only readers, its other input is ready when
 * node i runs, and its shapes match the pooling's input: node i can then
 * form dx image by image for it alone. */
static int filter_grad_of(const struct dtf_graph *g, const int *uses,
			  const int *user, int r, int b, int i)
{
	(void)user;
	int k = -1, readers = 0;
	for (int j = r + 1; j < g->nnodes; j++) {
		const struct dtf_node *nj = &g->nodes[j];
		int reads = 0;
		for (int q = 0; q < DTF_MAX_INPUTS; q++)
			reads |= nj->inputs[q] == r;
		if (!reads)
			continue;
		readers++;
		if (nj->op == DTF_OP_CONV2D_BACKPROP_FILTER && nj->inputs[1] == r &&
		    nj->inputs[0] != r)
			k = j;
		else if (j != b)
			return -1;
	}
	if (k < 0 || readers != uses[r] || readers != 1 + (b >= 0))
		return -1;
	const struct dtf_node *c = &g->nodes[k], *pn = &g->nodes[i];
	const struct dtf_window_geom *cg = &c->a.win.g, *pg = &pn->a.win.g;
	if (c->inputs[0] >= i || cg->n != pg->n || cg->oh != pg->h ||
	    cg->ow != pg->w || cg->o != pg->c)
		return -1;
	return k;
}

/* The state of dtf_fast_plan_init while it walks the nodes. */
struct planner {
	const struct dtf_graph *g;
	struct dtf_fast_plan *fp;
	const int *uses, *user; /* per node: consumers, the last one */
	int *absorber;          /* per node: the node that absorbed it, or -1 */
	size_t ws;              /* floats of workspace so far */
	int nt;                 /* threads of the pool */
};

/* CONV2D, MATMUL, BIAS_ADD: absorb the bias_add and relu that follow
 * (and, after a conv2d, a tiling max_pool2d). */
static void plan_producer(struct planner *P, int i)
{
	const struct dtf_graph *g = P->g;
	struct dtf_fast_plan *fp = P->fp;
	const struct dtf_node *nd = &g->nodes[i];
	int first = nd->op == DTF_OP_CONV2D   ? A_CONV
		    : nd->op == DTF_OP_MATMUL ? A_MATMUL
					      : A_BIAS_ACT;
	if (nd->op == DTF_OP_MATMUL) {
		int mm, mc, mk;
		dtf_graph_matmul_dims(g, nd, &mm, &mc, &mk);
		P->ws = max_sz(P->ws, dtf_fast_matmul_workspace(
					      mm, mc, mk, nd->a.mm.trans_a,
					      nd->a.mm.trans_b));
	}
	if (nd->op == DTF_OP_MATMUL && (nd->a.mm.trans_a || nd->a.mm.trans_b)) {
		fp->action[i] = A_MATMUL;
		return;
	}
	fp->action[i] = (unsigned char)first;
	int cur = i;
	if (nd->op == DTF_OP_BIAS_ADD) {
		fp->bias[i] = nd->inputs[1];
	} else {
		int b = sole_consumer(P->uses, P->user, cur);
		int bv = b >= 0 ? g->nodes[b].inputs[1] : -1;
		/* the bias must be ready when node i runs */
		if (b >= 0 && g->nodes[b].op == DTF_OP_BIAS_ADD &&
		    g->nodes[b].inputs[0] == cur && bv != cur &&
		    g->nodes[bv].shape.rank == 1 &&
		    (bv < i || g->nodes[bv].op == DTF_OP_VARIABLE)) {
			fp->bias[i] = g->nodes[b].inputs[1];
			fp->action[b] = A_SKIP;
			P->absorber[b] = i;
			cur = b;
		}
	}
	int r = sole_consumer(P->uses, P->user, cur);
	if (r >= 0 && g->nodes[r].op == DTF_OP_RELU) {
		fp->action[r] = A_SKIP;
		P->absorber[r] = i;
		cur = r;
	}
	fp->out[i] = cur;
	if (nd->op == DTF_OP_CONV2D) {
		P->ws = max_sz(P->ws, dtf_fast_conv2d_workspace(&nd->a.win.g, P->nt));
		int k = pool_of(g, cur, &nd->a.win.g);
		if (k >= 0) {
			fp->next[i] = k;
			fp->action[k] = A_SKIP;
			P->absorber[k] = i;
		}
	}
}

static void plan_conv_backprop(struct planner *P, int i)
{
	const struct dtf_node *nd = &P->g->nodes[i];
	P->fp->action[i] = nd->op == DTF_OP_CONV2D_BACKPROP_INPUT ? A_CONV_BWI
								  : A_CONV_BWF;
	P->ws = max_sz(P->ws, dtf_fast_conv2d_workspace(&nd->a.win.g, P->nt));
}

static void plan_relu(struct planner *P, int i) { P->fp->action[i] = A_RELU; }

/* RELU_GRAD: absorb the bias_add_grad that reads it. */
static void plan_relu_grad(struct planner *P, int i)
{
	struct dtf_fast_plan *fp = P->fp;
	fp->action[i] = A_RELU_GRAD;
	int b = bias_grad_of(P->g, i);
	if (b >= 0) {
		fp->bias[i] = b;
		fp->action[b] = A_SKIP;
		P->absorber[b] = i;
		int c = last_dim(&P->g->nodes[i]);
		P->ws = max_sz(P->ws, dtf_fast_bias_grad_workspace(c, P->nt));
	}
}

static void plan_max_pool2d(struct planner *P, int i) { P->fp->action[i] = A_POOL; }

/* MAX_POOL2D_GRAD with tiling windows: absorb relu_grad, its bias gradient
 * and the filter gradient that reads it. */
static void plan_max_pool2d_grad(struct planner *P, int i)
{
	const struct dtf_graph *g = P->g;
	struct dtf_fast_plan *fp = P->fp;
	const struct dtf_node *nd = &g->nodes[i];
	if (!dtf_fast_pool_tiles(&nd->a.win.g))
		return; /* reference */
	fp->action[i] = A_POOL_GRAD;
	int c = nd->a.win.g.c;
	P->ws = max_sz(P->ws, dtf_fast_bias_grad_workspace(c, P->nt));
	int r = sole_consumer(P->uses, P->user, i);
	/* relu_grad(dy = this, y = the pooled relu output) */
	if (r < 0 || g->nodes[r].op != DTF_OP_RELU_GRAD ||
	    g->nodes[r].inputs[0] != i || g->nodes[r].inputs[1] != nd->inputs[0])
		return;
	fp->action[r] = A_SKIP;
	P->absorber[r] = i;
	fp->out[i] = r;
	int b = bias_grad_of(g, r);
	if (b >= 0) {
		fp->bias[i] = b;
		fp->action[b] = A_SKIP;
		P->absorber[b] = i;
	}
	int k = filter_grad_of(g, P->uses, P->user, r, b, i);
	if (k >= 0) {
		const struct dtf_window_geom *cg = &g->nodes[k].a.win.g;
		fp->action[i] = A_POOL_GRAD_BWF;
		fp->next[i] = k;
		fp->action[k] = A_SKIP;
		P->absorber[k] = i;
		P->ws = max_sz(P->ws, dtf_fast_pool_grad_conv2d_filter_workspace(
					      &nd->a.win.g, cg, P->nt));
	}
}

static void plan_add(struct planner *P, int i) { P->fp->action[i] = A_ADD; }
static void plan_bmm(struct planner *P, int i) { P->fp->action[i] = A_BMM; }
static void plan_dropout(struct planner *P, int i) { P->fp->action[i] = A_DROPOUT; }
static void plan_gelu(struct planner *P, int i) { P->fp->action[i] = A_GELU; }

/* LAYER_NORM and its gradients; the gamma gradient's workspace: a row of
 * partial sums per thread (its input 0 is dy, of the rows' shape) */
static void plan_layer_norm(struct planner *P, int i)
{
	const struct dtf_node *nd = &P->g->nodes[i];
	P->fp->action[i] = A_LAYER_NORM;
	if (nd->op == DTF_OP_LAYER_NORM_GRAD_GAMMA)
		P->ws = max_sz(P->ws, dtf_fast_layer_norm_workspace(
					      last_dim(&P->g->nodes[nd->inputs[0]]), P->nt));
}

/* CAUSAL_SELF_ATTENTION and its gradient: input 0 is qkv (b, t, 3c) */
static void plan_attention(struct planner *P, int i)
{
	const struct dtf_node *nd = &P->g->nodes[i];
	const struct dtf_shape *s = &P->g->nodes[nd->inputs[0]].shape;
	P->fp->action[i] = A_ATTENTION;
	P->ws = max_sz(P->ws, dtf_fast_attention_workspace(
				      (int)s->d[1], (int)(s->d[2] / 3),
				      nd->a.attn.heads, P->nt));
}

/* ---- the fast kernel table ------------------------------------------- */

/* One signature for every fast kernel: node i as planned (its fused
 * output fp->out[i], bias fp->bias[i], later node fp->next[i]). */
#define RUN(fn)                                                          \
	static void fn(const struct dtf_fast_plan *fp,                   \
		       const struct dtf_graph *g, int i,                 \
		       const struct dtf_exec_ctx *ctx)
#define RUN_VARS                                                         \
	const struct dtf_node *n = &g->nodes[i];                         \
	struct dtf_pool *p = fp->pool;                                   \
	float *ws = fp->workspace;                                       \
	int a = n->inputs[0], b = n->inputs[1];                          \
	int out = fp->out[i], bias = fp->bias[i];                        \
	int relu = out != i && g->nodes[out].op == DTF_OP_RELU;          \
	size_t numel = (size_t)dtf_shape_numel(&n->shape);               \
	(void)ctx, (void)p, (void)ws, (void)a, (void)b, (void)out,       \
		(void)bias, (void)relu, (void)numel

RUN(run_conv2d)
{
	RUN_VARS;
	if (fp->next[i] >= 0)
		dtf_fast_conv2d_pool(p, &n->a.win.g, F(g, a), F(g, b),
				     bias >= 0 ? F(g, bias) : NULL, relu,
				     F(g, out), &g->nodes[fp->next[i]].a.win.g,
				     F(g, fp->next[i]), ws);
	else
		dtf_fast_conv2d(p, &n->a.win.g, F(g, a), F(g, b),
				bias >= 0 ? F(g, bias) : NULL, relu, F(g, out),
				ws);
}

RUN(run_conv2d_backprop_input)
{
	RUN_VARS;
	dtf_fast_conv2d_backprop_input(p, &n->a.win.g, F(g, a), F(g, b),
				       F(g, i), ws);
}

RUN(run_conv2d_backprop_filter)
{
	RUN_VARS;
	dtf_fast_conv2d_backprop_filter(p, &n->a.win.g, F(g, a), F(g, b),
					F(g, i), ws);
}

RUN(run_matmul)
{
	RUN_VARS;
	int m, cols, k;
	dtf_graph_matmul_dims(g, n, &m, &cols, &k);
	dtf_fast_matmul(p, m, cols, k, F(g, a), n->a.mm.trans_a, F(g, b),
			n->a.mm.trans_b, F(g, out), ws);
	if (bias >= 0 || relu)
		dtf_fast_bias_act(p, (size_t)m, cols, F(g, out),
				  bias >= 0 ? F(g, bias) : NULL, relu, F(g, out));
}

RUN(run_bias_add)
{
	RUN_VARS;
	/* b of x's trailing dimensions: x viewed as (rows, numel(b)) */
	int c = (int)dtf_shape_numel(&g->nodes[b].shape);
	dtf_fast_bias_act(p, numel / (size_t)c, c, F(g, a), F(g, b), relu,
			  F(g, out));
}

RUN(run_relu)
{
	RUN_VARS;
	int c = last_dim(n);
	dtf_fast_bias_act(p, numel / (size_t)c, c, F(g, a), NULL, 1, F(g, i));
}

RUN(run_relu_grad)
{
	RUN_VARS;
	int c = last_dim(n);
	dtf_fast_relu_grad_bias(p, numel / (size_t)c, c, F(g, a), F(g, b),
				F(g, i), bias >= 0 ? F(g, bias) : NULL, ws);
}

RUN(run_max_pool2d)
{
	RUN_VARS;
	dtf_fast_max_pool2d(p, &n->a.win.g, F(g, a), F(g, i));
}

RUN(run_max_pool2d_grad)
{
	RUN_VARS;
	if (fp->action[i] == A_POOL_GRAD_BWF) {
		const struct dtf_node *c = &g->nodes[fp->next[i]];
		dtf_fast_pool_grad_conv2d_filter(p, &n->a.win.g, F(g, a), F(g, b),
						 out != i,
						 bias >= 0 ? F(g, bias) : NULL,
						 &c->a.win.g, F(g, c->inputs[0]),
						 F(g, fp->next[i]), ws);
		return;
	}
	dtf_fast_max_pool2d_grad(p, &n->a.win.g, F(g, a), F(g, b), out != i,
				 F(g, out), bias >= 0 ? F(g, bias) : NULL, ws);
}

RUN(run_add)
{
	RUN_VARS;
	float *y = F(g, i);
	if (y != F(g, a))
		memcpy(y, F(g, a), numel * sizeof(float));
	dtf_fast_add_inplace(p, numel, F(g, b), y);
}

RUN(run_batch_matmul)
{
	RUN_VARS;
	int nb, m, cols, k;
	dtf_graph_batch_matmul_dims(g, n, &nb, &m, &cols, &k);
	dtf_fast_batch_matmul(p, nb, m, cols, k, F(g, a), n->a.mm.trans_a,
			      F(g, b), n->a.mm.trans_b, n->a.mm.alpha, F(g, i));
}

/* DROPOUT and DROPOUT_GRAD */
RUN(run_dropout)
{
	RUN_VARS;
	size_t rows = (size_t)n->shape.d[0];
	dtf_fast_dropout(p, rows, numel / rows,
			 ctx->training ? n->a.drop.rate : 0.0f, ctx->dropout_key,
			 ctx->example_ids, dtf_exec_dropout_salt(n, ctx->step),
			 F(g, a), F(g, i));
}

/* GELU (x) and GELU_GRAD (dy, x) */
RUN(run_gelu)
{
	RUN_VARS;
	if (n->op == DTF_OP_GELU)
		dtf_fast_gelu(p, numel, n->a.act.approximate, F(g, a), F(g, i));
	else
		dtf_fast_gelu_grad(p, numel, n->a.act.approximate, F(g, a), F(g, b),
				   F(g, i));
}

/* LAYER_NORM (x, gamma, beta), LAYER_NORM_GRAD_INPUT (dy, x, gamma),
 * LAYER_NORM_GRAD_GAMMA (dy, x) */
RUN(run_layer_norm)
{
	RUN_VARS;
	const struct dtf_node *x = &g->nodes[n->op == DTF_OP_LAYER_NORM ? a : b];
	int c = last_dim(x);
	size_t rows = (size_t)dtf_shape_numel(&x->shape) / (size_t)c;
	float eps = n->a.norm.epsilon;
	switch (n->op) {
	case DTF_OP_LAYER_NORM:
		dtf_fast_layer_norm(p, rows, c, F(g, a), F(g, b),
				    F(g, n->inputs[2]), eps, F(g, i));
		break;
	case DTF_OP_LAYER_NORM_GRAD_INPUT:
		dtf_fast_layer_norm_grad_input(p, rows, c, F(g, b),
					       F(g, n->inputs[2]), F(g, a), eps,
					       F(g, i));
		break;
	default:
		dtf_fast_layer_norm_grad_gamma(p, rows, c, F(g, b), F(g, a), eps,
					       F(g, i), ws);
		break;
	}
}

/* CAUSAL_SELF_ATTENTION (qkv) and CAUSAL_SELF_ATTENTION_GRAD (qkv, dy) */
RUN(run_attention)
{
	RUN_VARS;
	const struct dtf_shape *s = &g->nodes[a].shape;
	int nb = (int)s->d[0], t = (int)s->d[1], c = (int)(s->d[2] / 3);
	if (n->op == DTF_OP_CAUSAL_SELF_ATTENTION)
		dtf_fast_causal_self_attention(p, nb, t, c, n->a.attn.heads,
					       F(g, a), F(g, i), ws);
	else
		dtf_fast_causal_self_attention_grad(p, nb, t, c, n->a.attn.heads,
						    F(g, a), F(g, b), F(g, i), ws);
}

/*
 * The fast kernel table, indexed by the op: how an op is planned (which
 * neighbours it absorbs, its workspace) and run.  REFERENCE: no fast
 * kernel, the reference kernel runs.  One entry per row of the op table,
 * FAST_<ID>: an op added there without one here does not compile.
 */
struct fast_kernel {
	void (*plan)(struct planner *P, int i);
	void (*run)(const struct dtf_fast_plan *fp, const struct dtf_graph *g,
		    int i, const struct dtf_exec_ctx *ctx);
};
#define REFERENCE {NULL, NULL}
#define FAST_INPUT REFERENCE
#define FAST_VARIABLE REFERENCE
#define FAST_CONV2D {plan_producer, run_conv2d}
#define FAST_CONV2D_BACKPROP_INPUT {plan_conv_backprop, run_conv2d_backprop_input}
#define FAST_CONV2D_BACKPROP_FILTER {plan_conv_backprop, run_conv2d_backprop_filter}
#define FAST_MAX_POOL2D {plan_max_pool2d, run_max_pool2d}
#define FAST_MAX_POOL2D_GRAD {plan_max_pool2d_grad, run_max_pool2d_grad}
#define FAST_MATMUL {plan_producer, run_matmul}
#define FAST_BIAS_ADD {plan_producer, run_bias_add}
#define FAST_BIAS_ADD_GRAD REFERENCE /* fused into relu_grad, pool grads */
#define FAST_RELU {plan_relu, run_relu}
#define FAST_RELU_GRAD {plan_relu_grad, run_relu_grad}
#define FAST_DROPOUT {plan_dropout, run_dropout}
#define FAST_DROPOUT_GRAD {plan_dropout, run_dropout}
#define FAST_RESHAPE REFERENCE
#define FAST_ADD {plan_add, run_add}
#define FAST_SPARSE_SOFTMAX_XENT REFERENCE
#define FAST_SPARSE_SOFTMAX_XENT_GRAD REFERENCE
#define FAST_DEPTHWISE_CONV2D REFERENCE
#define FAST_DEPTHWISE_CONV2D_BACKPROP_INPUT REFERENCE
#define FAST_DEPTHWISE_CONV2D_BACKPROP_FILTER REFERENCE
#define FAST_AVG_POOL2D REFERENCE
#define FAST_AVG_POOL2D_GRAD REFERENCE
#define FAST_GLOBAL_AVG_POOL REFERENCE
#define FAST_GLOBAL_AVG_POOL_GRAD REFERENCE
#define FAST_BATCH_NORM REFERENCE
#define FAST_BATCH_NORM_GRAD_INPUT REFERENCE
#define FAST_BATCH_NORM_GRAD_GAMMA REFERENCE
#define FAST_LAYER_NORM {plan_layer_norm, run_layer_norm}
#define FAST_LAYER_NORM_GRAD_INPUT {plan_layer_norm, run_layer_norm}
#define FAST_LAYER_NORM_GRAD_GAMMA {plan_layer_norm, run_layer_norm}
#define FAST_MULTIPLY REFERENCE
#define FAST_CONCAT REFERENCE
#define FAST_SLICE REFERENCE /* memcpy per row already */
#define FAST_SLICE_GRAD REFERENCE
#define FAST_LEAKY_RELU REFERENCE
#define FAST_LEAKY_RELU_GRAD REFERENCE
#define FAST_ELU REFERENCE
#define FAST_ELU_GRAD REFERENCE
#define FAST_GELU {plan_gelu, run_gelu}
#define FAST_GELU_GRAD {plan_gelu, run_gelu}
/* a gather and a scatter-add: memory-bound copies, no faster kernel */
#define FAST_EMBEDDING REFERENCE
#define FAST_EMBEDDING_GRAD REFERENCE
#define FAST_TANH REFERENCE
#define FAST_TANH_GRAD REFERENCE
#define FAST_SIGMOID REFERENCE
#define FAST_SIGMOID_GRAD REFERENCE
#define FAST_SOFTMAX REFERENCE
#define FAST_SOFTMAX_GRAD REFERENCE
#define FAST_IDENTITY REFERENCE
#define FAST_SOFTMAX_XENT REFERENCE
#define FAST_SOFTMAX_XENT_GRAD REFERENCE
#define FAST_SIGMOID_XENT REFERENCE
#define FAST_SIGMOID_XENT_GRAD REFERENCE
#define FAST_MSE REFERENCE
#define FAST_MSE_GRAD REFERENCE
/* an odometer walk, one copy per element already */
#define FAST_TRANSPOSE REFERENCE
#define FAST_BATCH_MATMUL {plan_bmm, run_batch_matmul}
#define FAST_CAUSAL_SELF_ATTENTION {plan_attention, run_attention}
#define FAST_CAUSAL_SELF_ATTENTION_GRAD {plan_attention, run_attention}
static const struct fast_kernel fast_kernels[] = {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) \
	[DTF_OP_##id] = FAST_##id,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
};
_Static_assert(sizeof(fast_kernels) / sizeof(fast_kernels[0]) == DTF_OP_COUNT_,
	       "fast kernel table out of step with enum dtf_op");

int dtf_fast_plan_init(struct dtf_fast_plan *fp, const struct dtf_graph *g,
		       struct dtf_pool *pool)
{
	memset(fp, 0, sizeof(*fp));
	int n = g->nnodes, rc = 0, nt = dtf_pool_size(pool);
	fp->pool = pool;
	fp->nnodes = n;
	fp->action = dtf_calloc((size_t)n, 1);
	fp->out = dtf_calloc((size_t)n, sizeof(int));
	fp->bias = dtf_calloc((size_t)n, sizeof(int));
	fp->next = dtf_calloc((size_t)n, sizeof(int));
	int *uses = dtf_calloc((size_t)n, sizeof(int));
	int *user = dtf_calloc((size_t)n, sizeof(int));
	int *absorber = dtf_calloc((size_t)n, sizeof(int));
	if (!fp->action || !fp->out || !fp->bias || !fp->next || !uses || !user ||
	    !absorber) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		const struct dtf_node *nd = &g->nodes[i];
		for (int k = 0; k < DTF_MAX_INPUTS; k++) {
			int in = nd->inputs[k];
			if (in < 0 || in >= n)
				continue;
			if (k == 1 && nd->inputs[0] == in)
				continue;
			uses[in]++;
			user[in] = i;
		}
		fp->out[i] = i;
		fp->bias[i] = -1;
		fp->next[i] = -1;
		absorber[i] = -1;
	}
	struct planner P = {.g = g, .fp = fp, .uses = uses, .user = user,
			    .absorber = absorber, .ws = 0, .nt = nt};
	for (int i = 0; i < n; i++) {
		if (fp->action[i] == A_SKIP)
			continue;
		const struct fast_kernel *fk = &fast_kernels[g->nodes[i].op];
		if (fk->plan)
			fk->plan(&P, i);
	}
	/* Undo the fusions whose early writes the memory plan does not
	 * allow; undoing one makes more nodes run, so repeat until none
	 * changes. */
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 0; i < n; i++) {
			if (fp->action[i] == A_SKIP || fp->action[i] == A_REF)
				continue;
			/* a later node's work first: dropping it alone keeps
			 * node i's other fusions */
			if (fp->next[i] >= 0 &&
			    !early_write_ok(g, fp, absorber, i, fp->next[i])) {
				drop_next(g, fp, absorber, i);
				changed = 1;
			}
			int ok = early_write_ok(g, fp, absorber, i, fp->out[i]);
			if ((fp->action[i] == A_RELU_GRAD ||
			     fp->action[i] == A_POOL_GRAD ||
			     fp->action[i] == A_POOL_GRAD_BWF) && fp->bias[i] >= 0)
				ok = ok && early_write_ok(g, fp, absorber, i, fp->bias[i]);
			if (!ok) {
				unfuse(g, fp, absorber, i);
				changed = 1;
			}
		}
	}
	for (int i = 0; i < n; i++)
		fp->fused += fp->action[i] == A_SKIP;
	size_t ws = P.ws;
	fp->ws_floats = ws;
	fp->workspace = dtf_alloc_aligned((ws ? ws : 1) * sizeof(float));
	if (!fp->workspace)
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory for kernel workspace");
out:
	dtf_free(uses);
	dtf_free(user);
	dtf_free(absorber);
	if (rc < 0)
		dtf_fast_plan_deinit(fp);
	return rc;
}

void dtf_fast_plan_deinit(struct dtf_fast_plan *fp)
{
	dtf_free(fp->action);
	dtf_free(fp->out);
	dtf_free(fp->bias);
	dtf_free(fp->next);
	dtf_free(fp->workspace);
	memset(fp, 0, sizeof(*fp));
}

int dtf_fast_exec_node(const struct dtf_fast_plan *fp,
		       const struct dtf_graph *g, int i,
		       const struct dtf_exec_ctx *ctx)
{
	if (i >= fp->nnodes || fp->action[i] == A_REF)
		return 0;
	if (fp->action[i] != A_SKIP)
		fast_kernels[g->nodes[i].op].run(fp, g, i, ctx);
	return 1;
}
