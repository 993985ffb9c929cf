/*
 * autodiff.c - reverse-mode differentiation by appending gradient ops.
 *
 * Walk the forward nodes from the loss back to the variables in reverse
 * topological order.  Each node's total gradient is the sum of the
 * contributions of its consumers (an ADD chain where there are several);
 * the op's gradient rule (its row of the op table names it) emits, for each
 * input that needs a gradient, the op that computes that input's
 * contribution (TensorFlow's gradient registry, as in
 * nn_grad.py: Conv2DBackpropInput/Filter, MaxPoolGrad, ReluGrad,
 * BiasAddGrad).  The gradient of the loss itself is 1 and is folded into
 * SPARSE_SOFTMAX_XENT_GRAD, which also carries the 1 / global-batch scale.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "graph/graph.h"

/* Append a backward node; like add_node in graph.c but marked backward.
 * Implemented on top of the public constructors where they fit, directly
 * otherwise. */
static int grad_node_v(struct dtf_graph *g, enum dtf_op op, const char *base,
		       const char *suffix, const int *in,
		       const struct dtf_shape *shape)
{
	/* base and shape usually point into g->nodes, which may move below */
	const struct dtf_shape out = *shape;
	char name[sizeof(g->nodes[0].name)];
	snprintf(name, sizeof(name), "%.96s/%.24s", base, suffix);
	if (g->nnodes == g->cap) {
		int cap = g->cap * 2;
		struct dtf_node *n =
			dtf_realloc(g->nodes, (size_t)cap * sizeof(*n));
		if (!n)
			return dtf_error(DTF_ERR_NOMEM,
					 "out of memory building gradients");
		g->nodes = n;
		g->cap = cap;
	}
	int id = g->nnodes++;
	struct dtf_node *n = &g->nodes[id];
	memset(n, 0, sizeof(*n));
	n->op = op;
	n->layer = -1;
	n->backward = 1;
	memcpy(n->name, name, sizeof(name));
	for (int i = 0; i < DTF_MAX_INPUTS; i++)
		n->inputs[i] = in[i];
	n->shape = out;
	n->dtype = DTF_FLOAT32;
	return id;
}

static int grad_node(struct dtf_graph *g, enum dtf_op op, const char *base,
		     const char *suffix, int in0, int in1,
		     const struct dtf_shape *shape)
{
	int in[DTF_MAX_INPUTS] = {in0, in1, -1, -1, -1};
	return grad_node_v(g, op, base, suffix, in, shape);
}

static int grad_node3(struct dtf_graph *g, enum dtf_op op, const char *base,
		      const char *suffix, int in0, int in1, int in2,
		      const struct dtf_shape *shape)
{
	int in[DTF_MAX_INPUTS] = {in0, in1, in2, -1, -1};
	return grad_node_v(g, op, base, suffix, in, shape);
}

/* grads[i]: id of the node holding the gradient accumulated so far for
 * forward node i, or -1. */
static int accumulate(struct dtf_graph *g, int *grads, int target, int contrib)
{
	if (contrib < 0)
		return contrib;
	if (grads[target] < 0) {
		grads[target] = contrib;
		return 0;
	}
	int id = grad_node(g, DTF_OP_ADD, g->nodes[target].name, "grad_sum",
			   grads[target], contrib, &g->nodes[target].shape);
	if (id < 0)
		return id;
	grads[target] = id;
	return 0;
}

static int needs(const struct dtf_graph *g, int id)
{
	return g->nodes[id].requires_grad;
}

/*
 * The gradient rules, one per forward op, named in the op's row of the op
 * table (graph.h).  Each emits the contributions of node `i` (whose total
 * gradient is node `dy`) to its inputs.  Each works on a copy of the node
 * (grad_node may move g->nodes) and sees x, y: its first two inputs, sx:
 * x's shape.
 */
#define RULE(fn)                                                         \
	static int fn(struct dtf_graph *g, int *grads, int i, int dy,    \
		      const struct dtf_node *np)
#define RULE_VARS                                                        \
	struct dtf_node n = *np;                                         \
	int x = n.inputs[0], y = n.inputs[1];                            \
	const struct dtf_shape *sx = x >= 0 ? &g->nodes[x].shape : NULL; \
	int rc = 0, id;                                                  \
	(void)x, (void)y, (void)sx, (void)rc, (void)id, (void)i

/* INPUT, VARIABLE: the walk ends here. */
RULE(grad_none)
{
	(void)g, (void)grads, (void)i, (void)dy, (void)np;
	return 0;
}

RULE(grad_conv2d)
{
	RULE_VARS;
	if (needs(g, x)) {
		id = grad_node(g, DTF_OP_CONV2D_BACKPROP_INPUT, n.name,
			       "backprop_input", dy, y, sx);
		if (id >= 0)
			g->nodes[id].a.win = n.a.win;
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, y)) {
		id = grad_node(g, DTF_OP_CONV2D_BACKPROP_FILTER, n.name,
			       "backprop_filter", x, dy, &g->nodes[y].shape);
		if (id >= 0)
			g->nodes[id].a.win = n.a.win;
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

RULE(grad_max_pool2d)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_MAX_POOL2D_GRAD, n.name, "grad", x, dy, sx);
	if (id >= 0)
		g->nodes[id].a.win = n.a.win;
	return accumulate(g, grads, x, id);
}

/* y = x w (x (..., k), w (k, n)) or, with trans_b, y = x w^T (w (n, k));
 * x viewed as (rows, k).  The forward op never has trans_a. */
RULE(grad_matmul)
{
	RULE_VARS;
	DTF_ASSERT(!n.a.mm.trans_a);
	int tb = n.a.mm.trans_b;
	if (needs(g, x)) {
		/* dx (rows, k) = dy w^T, or dy w with trans_b */
		id = grad_node(g, DTF_OP_MATMUL, n.name, "grad_input", dy, y,
			       sx);
		if (id >= 0)
			g->nodes[id].a.mm.trans_b = !tb;
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, y)) {
		/* dw (k, n) = x^T dy, or (n, k) = dy^T x with trans_b */
		id = grad_node(g, DTF_OP_MATMUL, n.name, "grad_kernel",
			       tb ? dy : x, tb ? x : dy, &g->nodes[y].shape);
		if (id >= 0)
			g->nodes[id].a.mm.trans_a = 1;
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

RULE(grad_bias_add)
{
	RULE_VARS;
	if (needs(g, x) && (rc = accumulate(g, grads, x, dy)) < 0)
		return rc;
	if (needs(g, y)) {
		id = grad_node(g, DTF_OP_BIAS_ADD_GRAD, n.name, "grad", dy, -1,
			       &g->nodes[y].shape);
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

RULE(grad_relu)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_RELU_GRAD, n.name, "grad", dy, i, sx);
	return accumulate(g, grads, x, id);
}

RULE(grad_dropout)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_DROPOUT_GRAD, n.name, "grad", dy, -1, sx);
	if (id >= 0)
		g->nodes[id].a.drop = n.a.drop;
	return accumulate(g, grads, x, id);
}

RULE(grad_reshape)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_RESHAPE, n.name, "grad", dy, -1, sx);
	return accumulate(g, grads, x, id);
}

RULE(grad_add)
{
	RULE_VARS;
	if (needs(g, x) && (rc = accumulate(g, grads, x, dy)) < 0)
		return rc;
	if (needs(g, y))
		rc = accumulate(g, grads, y, dy);
	return rc;
}

RULE(grad_sparse_xent)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_SPARSE_SOFTMAX_XENT_GRAD, n.name, "grad", x,
		       y, sx);
	return accumulate(g, grads, x, id);
}

RULE(grad_depthwise_conv2d)
{
	RULE_VARS;
	if (needs(g, x)) {
		id = grad_node(g, DTF_OP_DEPTHWISE_CONV2D_BACKPROP_INPUT, n.name,
			       "backprop_input", dy, y, sx);
		if (id >= 0)
			g->nodes[id].a.win = n.a.win;
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, y)) {
		id = grad_node(g, DTF_OP_DEPTHWISE_CONV2D_BACKPROP_FILTER,
			       n.name, "backprop_filter", x, dy,
			       &g->nodes[y].shape);
		if (id >= 0)
			g->nodes[id].a.win = n.a.win;
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

RULE(grad_avg_pool2d)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_AVG_POOL2D_GRAD, n.name, "grad", dy, -1, sx);
	if (id >= 0)
		g->nodes[id].a.win = n.a.win;
	return accumulate(g, grads, x, id);
}

RULE(grad_global_avg_pool)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_GLOBAL_AVG_POOL_GRAD, n.name, "grad", dy, -1,
		       sx);
	return accumulate(g, grads, x, id);
}

/* BATCH_NORM, LAYER_NORM */
RULE(grad_norm)
{
	RULE_VARS;
	int bn = n.op == DTF_OP_BATCH_NORM;
	int gamma = n.inputs[1], beta = n.inputs[2];
	if (needs(g, x)) {
		id = grad_node3(g, bn ? DTF_OP_BATCH_NORM_GRAD_INPUT
				      : DTF_OP_LAYER_NORM_GRAD_INPUT,
				n.name, "grad_input", dy, x, gamma, sx);
		if (id >= 0)
			g->nodes[id].a.norm = n.a.norm;
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, gamma)) {
		id = grad_node(g, bn ? DTF_OP_BATCH_NORM_GRAD_GAMMA
				     : DTF_OP_LAYER_NORM_GRAD_GAMMA,
			       n.name, "grad_gamma", dy, x,
			       &g->nodes[gamma].shape);
		if (id >= 0)
			g->nodes[id].a.norm = n.a.norm;
		if ((rc = accumulate(g, grads, gamma, id)) < 0)
			return rc;
	}
	if (needs(g, beta)) {
		id = grad_node(g, DTF_OP_BIAS_ADD_GRAD, n.name, "grad_beta", dy,
			       -1, &g->nodes[beta].shape);
		rc = accumulate(g, grads, beta, id);
	}
	return rc;
}

RULE(grad_multiply)
{
	RULE_VARS;
	if (needs(g, x)) {
		id = grad_node(g, DTF_OP_MULTIPLY, n.name, "grad_a", dy, y, sx);
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, y)) {
		id = grad_node(g, DTF_OP_MULTIPLY, n.name, "grad_b", dy, x,
			       &g->nodes[y].shape);
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

RULE(grad_concat)
{
	RULE_VARS;
	if (needs(g, x)) {
		id = grad_node(g, DTF_OP_SLICE, n.name, "grad_a", dy, -1, sx);
		if (id >= 0)
			g->nodes[id].a.cat = n.a.cat; /* begin 0 */
		if ((rc = accumulate(g, grads, x, id)) < 0)
			return rc;
	}
	if (needs(g, y)) {
		id = grad_node(g, DTF_OP_SLICE, n.name, "grad_b", dy, -1,
			       &g->nodes[y].shape);
		if (id >= 0) {
			g->nodes[id].a.cat.axis = n.a.cat.axis;
			g->nodes[id].a.cat.begin = sx->d[n.a.cat.axis];
		}
		rc = accumulate(g, grads, y, id);
	}
	return rc;
}

/* SLICE: dy back in place in zeros of x's shape */
RULE(grad_slice)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_SLICE_GRAD, n.name, "grad", dy, -1, sx);
	if (id >= 0)
		g->nodes[id].a.cat = n.a.cat;
	return accumulate(g, grads, x, id);
}

/* LEAKY_RELU, ELU, GELU: gradients that read the forward input x */
RULE(grad_act_input)
{
	RULE_VARS;
	enum dtf_op op = n.op == DTF_OP_LEAKY_RELU ? DTF_OP_LEAKY_RELU_GRAD
			 : n.op == DTF_OP_ELU	   ? DTF_OP_ELU_GRAD
						   : DTF_OP_GELU_GRAD;
	id = grad_node(g, op, n.name, "grad", dy, x, sx);
	if (id >= 0)
		g->nodes[id].a.act = n.a.act;
	return accumulate(g, grads, x, id);
}

/* TANH, SIGMOID, SOFTMAX: gradients that read the forward output */
RULE(grad_act_output)
{
	RULE_VARS;
	enum dtf_op op = n.op == DTF_OP_TANH	   ? DTF_OP_TANH_GRAD
			 : n.op == DTF_OP_SIGMOID ? DTF_OP_SIGMOID_GRAD
						  : DTF_OP_SOFTMAX_GRAD;
	id = grad_node(g, op, n.name, "grad", dy, i, sx);
	return accumulate(g, grads, x, id);
}

/* EMBEDDING: the table's gradient; ids (int32) have none */
RULE(grad_embedding)
{
	RULE_VARS;
	if (!needs(g, y))
		return 0;
	id = grad_node(g, DTF_OP_EMBEDDING_GRAD, n.name, "grad_table", dy, x,
		       &g->nodes[y].shape);
	return accumulate(g, grads, y, id);
}

RULE(grad_identity)
{
	RULE_VARS;
	return accumulate(g, grads, x, dy);
}

/* SOFTMAX_XENT, SIGMOID_XENT, MSE */
RULE(grad_dense_loss)
{
	RULE_VARS;
	enum dtf_op op = n.op == DTF_OP_SOFTMAX_XENT ? DTF_OP_SOFTMAX_XENT_GRAD
			 : n.op == DTF_OP_SIGMOID_XENT ? DTF_OP_SIGMOID_XENT_GRAD
							: DTF_OP_MSE_GRAD;
	id = grad_node(g, op, n.name, "grad", x, y, sx);
	if (id >= 0)
		g->nodes[id].a.loss = n.a.loss;
	return accumulate(g, grads, x, id);
}

/* CAUSAL_SELF_ATTENTION: dqkv from qkv and dy, the probabilities
 * recomputed (nothing saved by the forward) */
RULE(grad_attention)
{
	RULE_VARS;
	id = grad_node(g, DTF_OP_CAUSAL_SELF_ATTENTION_GRAD, n.name, "grad", x,
		       dy, sx);
	if (id >= 0)
		g->nodes[id].a.attn = n.a.attn;
	return accumulate(g, grads, x, id);
}

/* The gradient column of the op table; NULL for gradient ops. */
typedef int (*grad_rule_fn)(struct dtf_graph *g, int *grads, int i, int dy,
			    const struct dtf_node *n);
static const grad_rule_fn grad_rules[] = {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) grad,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
};
_Static_assert(sizeof(grad_rules) / sizeof(grad_rules[0]) == DTF_OP_COUNT_,
	       "gradient rules out of step with enum dtf_op");

/* Emit the gradient contributions of node `i` (whose total gradient is
 * node `dy`) to its inputs. */
static int backprop_node(struct dtf_graph *g, int *grads, int i, int dy)
{
	/* copy: grad_node may move g->nodes */
	struct dtf_node n = g->nodes[i];
	if (!grad_rules[n.op])
		return dtf_error(DTF_ERR_GRAPH, "no gradient for op %s ('%s')",
				 dtf_op_name(n.op), n.name);
	return grad_rules[n.op](g, grads, i, dy, &n);
}

int dtf_graph_backward(struct dtf_graph *g)
{
	if (g->loss < 0)
		return dtf_error(DTF_ERR_GRAPH, "the model has no loss");
	if (!g->nodes[g->loss].requires_grad)
		return dtf_error(DTF_ERR_GRAPH,
				 "the loss '%s' does not depend on any trainable variable",
				 g->nodes[g->loss].name);
	int nfwd = g->nnodes, rc = 0;
	g->nforward = nfwd;
	int *grads = dtf_malloc((size_t)nfwd * sizeof(int));
	if (!grads)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < nfwd; i++)
		grads[i] = -1;
	/* The loss node's own gradient is implicit (1); mark it with itself
	 * so the walk starts there. */
	grads[g->loss] = g->loss;
	for (int i = g->loss; i >= 0; i--) {
		if (grads[i] < 0 || !g->nodes[i].requires_grad)
			continue;
		if ((rc = backprop_node(g, grads, i, grads[i])) < 0)
			goto out;
	}
	dtf_free(g->var_grad);
	g->var_grad = dtf_malloc((size_t)nfwd * sizeof(int));
	if (!g->var_grad) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < nfwd; i++) {
		g->var_grad[i] = -1;
		if (g->nodes[i].op != DTF_OP_VARIABLE || !g->nodes[i].a.var.trainable)
			continue;
		/* A variable's gradient is written straight into its slot of
		 * the gradient vector, so it must be a computed node of its
		 * own: not an alias (reshape), and not the node another
		 * variable already owns (add(v1, v2) passes dy to both).
		 * Those get a copy. */
		int gi = grads[i], shared = gi >= 0 && g->nodes[gi].op == DTF_OP_RESHAPE;
		for (int v = 0; gi >= 0 && v < i && !shared; v++)
			shared = g->var_grad[v] == gi;
		if (shared) {
			gi = grad_node(g, DTF_OP_IDENTITY, g->nodes[i].name,
				       "grad_copy", gi, -1, &g->nodes[i].shape);
			if (gi < 0) {
				rc = gi;
				goto out;
			}
		}
		g->var_grad[i] = gi;
	}
out:
	dtf_free(grads);
	return rc;
}
