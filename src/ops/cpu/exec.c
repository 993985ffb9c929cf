/*
 * exec.c - the CPU executor: one kernel per node, from a table indexed by
 * the op.  The reference kernels are the oracle; with a fast plan
 * (fast_exec.h) each node asks the fast path first.
 */
#include "ops/cpu/exec.h"

#include <string.h>

#include "core/error.h"
#include "ops/cpu/fast_exec.h"
#include "ops/cpu/kernels.h"

static float *F(const struct dtf_graph *g, int id)
{
	return (float *)g->nodes[id].data;
}

uint32_t dtf_exec_dropout_salt(const struct dtf_node *n, uint64_t step)
{
	return n->a.drop.salt ^ (uint32_t)(step * 0x85EBCA6Bu) ^
	       (uint32_t)(step >> 32);
}

/* rows and channels of x (..., c) viewed as (rows, c) */
static void rows_cols(const struct dtf_shape *s, size_t *rows, int *c)
{
	*c = (int)s->d[s->rank - 1];
	*rows = *c ? (size_t)dtf_shape_numel(s) / (size_t)*c : 0;
}

/* outer (product of the dimensions before `axis`) of shape s */
static size_t outer_of(const struct dtf_shape *s, int axis)
{
	size_t outer = 1;
	for (int k = 0; k < axis; k++)
		outer *= (size_t)s->d[k];
	return outer;
}

/*
 * The reference kernel table: cpu_<name> for every row of the op table
 * (graph.h), one signature.  A missing kernel is a compile error here, so
 * the oracle always covers every op.
 */
#define KERNEL(name)                                                     \
	static void cpu_##name(const struct dtf_graph *g,                \
			       const struct dtf_node *n,                 \
			       struct dtf_exec_ctx *ctx)
/* a, b: the first two inputs; y: the output; numel: its elements */
#define KERNEL_VARS                                                      \
	int a = n->inputs[0], b = n->inputs[1];                          \
	size_t numel = (size_t)dtf_shape_numel(&n->shape);               \
	float *y = n->data;                                              \
	(void)g, (void)ctx, (void)a, (void)b, (void)numel, (void)y

/* INPUT, VARIABLE: planned in place; RESHAPE aliases its input. */
KERNEL(input) { KERNEL_VARS; }
KERNEL(variable) { KERNEL_VARS; }
KERNEL(reshape) { KERNEL_VARS; }

KERNEL(conv2d)
{
	KERNEL_VARS;
	dtf_cpu_conv2d(&n->a.win.g, F(g, a), F(g, b), y, ctx->workspace);
}

KERNEL(conv2d_backprop_input)
{
	KERNEL_VARS;
	dtf_cpu_conv2d_backprop_input(&n->a.win.g, F(g, a), F(g, b), y,
				      ctx->workspace);
}

KERNEL(conv2d_backprop_filter)
{
	KERNEL_VARS;
	dtf_cpu_conv2d_backprop_filter(&n->a.win.g, F(g, a), F(g, b), y,
				       ctx->workspace);
}

KERNEL(max_pool2d)
{
	KERNEL_VARS;
	dtf_cpu_max_pool2d(&n->a.win.g, F(g, a), y);
}

KERNEL(max_pool2d_grad)
{
	KERNEL_VARS;
	dtf_cpu_max_pool2d_grad(&n->a.win.g, F(g, a), F(g, b), y);
}

KERNEL(matmul)
{
	KERNEL_VARS;
	int m, cols, k;
	dtf_graph_matmul_dims(g, n, &m, &cols, &k);
	dtf_cpu_matmul(m, cols, k, F(g, a), n->a.mm.trans_a, F(g, b),
		       n->a.mm.trans_b, y);
}

/* b of x's trailing dimensions: x viewed as (rows, numel(b)) */
KERNEL(bias_add)
{
	KERNEL_VARS;
	int c = (int)dtf_shape_numel(&g->nodes[b].shape);
	dtf_cpu_bias_add(numel / (size_t)c, c, F(g, a), F(g, b), y);
}

/* db: dy summed over its leading axes down to db's shape */
KERNEL(bias_add_grad)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &g->nodes[a].shape;
	int c = (int)numel;
	dtf_cpu_bias_add_grad((size_t)dtf_shape_numel(s) / (size_t)c, c,
			      F(g, a), y);
}

KERNEL(relu)
{
	KERNEL_VARS;
	dtf_cpu_relu(numel, F(g, a), y);
}

KERNEL(relu_grad)
{
	KERNEL_VARS;
	dtf_cpu_relu_grad(numel, F(g, a), F(g, b), y);
}

/* DROPOUT and DROPOUT_GRAD: the same mask, drawn from the step's key */
static void dropout(const struct dtf_graph *g, const struct dtf_node *n,
		    struct dtf_exec_ctx *ctx, int grad)
{
	KERNEL_VARS;
	size_t rows = (size_t)n->shape.d[0], cols = numel / rows;
	float rate = ctx->training ? n->a.drop.rate : 0.0f;
	uint32_t salt = dtf_exec_dropout_salt(n, ctx->step);
	if (!grad)
		dtf_cpu_dropout(rows, cols, rate, ctx->dropout_key,
				ctx->example_ids, salt, F(g, a), y);
	else
		dtf_cpu_dropout_grad(rows, cols, rate, ctx->dropout_key,
				     ctx->example_ids, salt, F(g, a), y);
}

KERNEL(dropout) { dropout(g, n, ctx, 0); }
KERNEL(dropout_grad) { dropout(g, n, ctx, 1); }

KERNEL(add)
{
	KERNEL_VARS;
	if (y != F(g, a))
		memcpy(y, F(g, a), numel * sizeof(float));
	dtf_cpu_add_inplace(numel, F(g, b), y);
}

/* logits (n, ..., classes), labels (n, ...): an example's loss is the
 * mean over its `per` positions (PyTorch's cross_entropy of the flattened
 * (n * per, classes) logits once divided by the n examples) */
KERNEL(sparse_softmax_cross_entropy)
{
	KERNEL_VARS;
	size_t rows;
	int classes, per;
	dtf_graph_xent_dims(g, a, &rows, &classes, &per);
	ctx->loss_sum = dtf_cpu_sparse_softmax_xent(
				rows, classes, F(g, a),
				(const int32_t *)g->nodes[b].data,
				(size_t)ctx->valid * (size_t)per, NULL) /
			per;
	*y = (float)(ctx->loss_sum * ctx->loss_scale);
}

KERNEL(sparse_softmax_cross_entropy_grad)
{
	KERNEL_VARS;
	size_t rows;
	int classes, per;
	dtf_graph_xent_dims(g, a, &rows, &classes, &per);
	dtf_cpu_sparse_softmax_xent_grad(
		rows, classes, F(g, a), (const int32_t *)g->nodes[b].data,
		(size_t)ctx->valid * (size_t)per, ctx->loss_scale / (float)per,
		y);
}

KERNEL(depthwise_conv2d)
{
	KERNEL_VARS;
	dtf_cpu_depthwise_conv2d(&n->a.win.g, F(g, a), F(g, b), y);
}

KERNEL(depthwise_conv2d_backprop_input)
{
	KERNEL_VARS;
	dtf_cpu_depthwise_conv2d_backprop_input(&n->a.win.g, F(g, a), F(g, b),
						y);
}

KERNEL(depthwise_conv2d_backprop_filter)
{
	KERNEL_VARS;
	dtf_cpu_depthwise_conv2d_backprop_filter(&n->a.win.g, F(g, a),
						 F(g, b), y);
}

KERNEL(avg_pool2d)
{
	KERNEL_VARS;
	dtf_cpu_avg_pool2d(&n->a.win.g, F(g, a), y);
}

KERNEL(avg_pool2d_grad)
{
	KERNEL_VARS;
	dtf_cpu_avg_pool2d_grad(&n->a.win.g, F(g, a), y);
}

KERNEL(global_avg_pool)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &g->nodes[a].shape;
	dtf_cpu_global_avg_pool((size_t)s->d[0], (size_t)(s->d[1] * s->d[2]),
				(int)s->d[3], F(g, a), y);
}

KERNEL(global_avg_pool_grad)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &n->shape;
	dtf_cpu_global_avg_pool_grad((size_t)s->d[0],
				     (size_t)(s->d[1] * s->d[2]), (int)s->d[3],
				     F(g, a), y);
}

KERNEL(batch_norm)
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	if (ctx->training)
		dtf_cpu_batch_norm_train(rows, c, F(g, a), F(g, b),
					 F(g, n->inputs[2]), n->a.norm.epsilon,
					 n->a.norm.momentum, F(g, n->inputs[3]),
					 F(g, n->inputs[4]), y);
	else
		dtf_cpu_batch_norm_infer(rows, c, F(g, a), F(g, b),
					 F(g, n->inputs[2]), F(g, n->inputs[3]),
					 F(g, n->inputs[4]), n->a.norm.epsilon,
					 y);
}

KERNEL(batch_norm_grad_input) /* dy, x, gamma */
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	dtf_cpu_batch_norm_grad_input(rows, c, F(g, b), F(g, n->inputs[2]),
				      F(g, a), n->a.norm.epsilon, y);
}

KERNEL(batch_norm_grad_gamma) /* dy, x */
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&g->nodes[a].shape, &rows, &c);
	dtf_cpu_batch_norm_grad_gamma(rows, c, F(g, b), F(g, a),
				      n->a.norm.epsilon, y);
}

KERNEL(layer_norm)
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	dtf_cpu_layer_norm(rows, c, F(g, a), F(g, b), F(g, n->inputs[2]),
			   n->a.norm.epsilon, y);
}

KERNEL(layer_norm_grad_input) /* dy, x, gamma */
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	dtf_cpu_layer_norm_grad_input(rows, c, F(g, b), F(g, n->inputs[2]),
				      F(g, a), n->a.norm.epsilon, y);
}

KERNEL(layer_norm_grad_gamma) /* dy, x */
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&g->nodes[a].shape, &rows, &c);
	dtf_cpu_layer_norm_grad_gamma(rows, c, F(g, b), F(g, a),
				      n->a.norm.epsilon, y);
}

KERNEL(embedding) /* ids, table */
{
	KERNEL_VARS;
	const struct dtf_shape *st = &g->nodes[b].shape;
	dtf_cpu_embedding((size_t)dtf_shape_numel(&g->nodes[a].shape),
			  (int)st->d[0], (int)st->d[1],
			  (const int32_t *)g->nodes[a].data, F(g, b), y);
}

KERNEL(embedding_grad) /* dy, ids -> dtable */
{
	KERNEL_VARS;
	dtf_cpu_embedding_grad((size_t)dtf_shape_numel(&g->nodes[b].shape),
			       (int)n->shape.d[0], (int)n->shape.d[1], F(g, a),
			       (const int32_t *)g->nodes[b].data, y);
}

KERNEL(multiply)
{
	KERNEL_VARS;
	dtf_cpu_multiply(numel, F(g, a), F(g, b), y);
}

KERNEL(concat)
{
	KERNEL_VARS;
	size_t outer = outer_of(&n->shape, n->a.cat.axis);
	size_t ia = (size_t)dtf_shape_numel(&g->nodes[a].shape) / outer;
	size_t ib = (size_t)dtf_shape_numel(&g->nodes[b].shape) / outer;
	dtf_cpu_concat(outer, ia, ib, F(g, a), F(g, b), y);
}

KERNEL(slice)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &g->nodes[a].shape;
	size_t outer = outer_of(s, n->a.cat.axis);
	size_t after = (size_t)dtf_shape_numel(s) / outer /
		       (size_t)s->d[n->a.cat.axis];
	dtf_cpu_slice_inner(outer, (size_t)dtf_shape_numel(s) / outer,
			    (size_t)n->a.cat.begin * after, numel / outer,
			    F(g, a), y);
}

/* SLICE_GRAD: x's shape is the node's, dy (input 0) the slice's */
KERNEL(slice_grad)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &n->shape;
	size_t outer = outer_of(s, n->a.cat.axis);
	size_t after = numel / outer / (size_t)s->d[n->a.cat.axis];
	dtf_cpu_slice_grad(outer, numel / outer,
			   (size_t)n->a.cat.begin * after,
			   (size_t)dtf_shape_numel(&g->nodes[a].shape) / outer,
			   F(g, a), y);
}

KERNEL(leaky_relu)
{
	KERNEL_VARS;
	dtf_cpu_leaky_relu(numel, n->a.act.alpha, F(g, a), y);
}

KERNEL(leaky_relu_grad)
{
	KERNEL_VARS;
	dtf_cpu_leaky_relu_grad(numel, n->a.act.alpha, F(g, a), F(g, b), y);
}

KERNEL(elu)
{
	KERNEL_VARS;
	dtf_cpu_elu(numel, n->a.act.alpha, F(g, a), y);
}

KERNEL(elu_grad)
{
	KERNEL_VARS;
	dtf_cpu_elu_grad(numel, n->a.act.alpha, F(g, a), F(g, b), y);
}

KERNEL(gelu)
{
	KERNEL_VARS;
	dtf_cpu_gelu(numel, n->a.act.approximate, F(g, a), y);
}

KERNEL(gelu_grad)
{
	KERNEL_VARS;
	dtf_cpu_gelu_grad(numel, n->a.act.approximate, F(g, a), F(g, b), y);
}

KERNEL(tanh)
{
	KERNEL_VARS;
	dtf_cpu_tanh(numel, F(g, a), y);
}

KERNEL(tanh_grad)
{
	KERNEL_VARS;
	dtf_cpu_tanh_grad(numel, F(g, a), F(g, b), y);
}

KERNEL(sigmoid)
{
	KERNEL_VARS;
	dtf_cpu_sigmoid(numel, F(g, a), y);
}

KERNEL(sigmoid_grad)
{
	KERNEL_VARS;
	dtf_cpu_sigmoid_grad(numel, F(g, a), F(g, b), y);
}

KERNEL(softmax)
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	dtf_cpu_softmax(rows, c, F(g, a), y);
}

KERNEL(softmax_grad)
{
	KERNEL_VARS;
	size_t rows;
	int c;
	rows_cols(&n->shape, &rows, &c);
	dtf_cpu_softmax_grad(rows, c, F(g, a), F(g, b), y);
}

KERNEL(identity)
{
	KERNEL_VARS;
	if (y != F(g, a))
		memcpy(y, F(g, a), numel * sizeof(float));
}

/* rows and columns of the logits (input 0) of a dense loss */
static void loss_dims(const struct dtf_graph *g, const struct dtf_node *n,
		      size_t *rows, size_t *cols)
{
	const struct dtf_shape *s = &g->nodes[n->inputs[0]].shape;
	*rows = (size_t)s->d[0];
	*cols = (size_t)dtf_shape_numel(s) / *rows;
}

KERNEL(softmax_cross_entropy)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	ctx->loss_sum = dtf_cpu_softmax_xent(r, (int)cols, F(g, a), F(g, b),
					     n->a.loss.label_smoothing,
					     (size_t)ctx->valid, NULL);
	*y = (float)(ctx->loss_sum * ctx->loss_scale);
}

KERNEL(sigmoid_cross_entropy)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	ctx->loss_sum = dtf_cpu_sigmoid_xent(r, cols, F(g, a), F(g, b),
					     (size_t)ctx->valid, NULL);
	*y = (float)(ctx->loss_sum * ctx->loss_scale);
}

KERNEL(mean_squared_error)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	ctx->loss_sum = dtf_cpu_mean_squared_error(r, cols, F(g, a), F(g, b),
						   (size_t)ctx->valid, NULL);
	*y = (float)(ctx->loss_sum * ctx->loss_scale);
}

KERNEL(softmax_cross_entropy_grad)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	dtf_cpu_softmax_xent_grad(r, (int)cols, F(g, a), F(g, b),
				  n->a.loss.label_smoothing, (size_t)ctx->valid,
				  ctx->loss_scale, y);
}

KERNEL(sigmoid_cross_entropy_grad)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	dtf_cpu_sigmoid_xent_grad(r, cols, F(g, a), F(g, b),
				  (size_t)ctx->valid, ctx->loss_scale, y);
}

KERNEL(mean_squared_error_grad)
{
	KERNEL_VARS;
	size_t r, cols;
	loss_dims(g, n, &r, &cols);
	dtf_cpu_mean_squared_error_grad(r, cols, F(g, a), F(g, b),
					(size_t)ctx->valid, ctx->loss_scale, y);
}

/* (b, t, c) and heads of an attention node; q is its qkv input */
static void attention_dims(const struct dtf_graph *g, const struct dtf_node *n,
			   int q, int *b, int *t, int *c)
{
	const struct dtf_shape *s = &g->nodes[q].shape;
	*b = (int)s->d[0];
	*t = (int)s->d[1];
	*c = (int)(s->d[2] / 3);
	(void)n;
}

KERNEL(causal_self_attention) /* qkv */
{
	KERNEL_VARS;
	int nb, t, c;
	attention_dims(g, n, a, &nb, &t, &c);
	dtf_cpu_causal_self_attention(nb, t, c, n->a.attn.heads, F(g, a), y);
}

KERNEL(causal_self_attention_grad) /* qkv, dy */
{
	KERNEL_VARS;
	int nb, t, c;
	attention_dims(g, n, a, &nb, &t, &c);
	dtf_cpu_causal_self_attention_grad(nb, t, c, n->a.attn.heads, F(g, a),
					   F(g, b), y);
}

typedef void (*cpu_kernel_fn)(const struct dtf_graph *g,
			      const struct dtf_node *n,
			      struct dtf_exec_ctx *ctx);
static const cpu_kernel_fn cpu_kernels[] = {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) \
	[DTF_OP_##id] = cpu_##name,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
};
_Static_assert(sizeof(cpu_kernels) / sizeof(cpu_kernels[0]) == DTF_OP_COUNT_,
	       "CPU kernel table out of step with enum dtf_op");

static void exec_node(const struct dtf_graph *g, int i,
		      struct dtf_exec_ctx *ctx)
{
	if (ctx->fast && dtf_fast_exec_node(ctx->fast, g, i, ctx))
		return;
	cpu_kernels[g->nodes[i].op](g, &g->nodes[i], ctx);
}

void dtf_exec_range(const struct dtf_graph *g, int from, int to,
		    struct dtf_exec_ctx *ctx)
{
	for (int i = from; i < to; i++)
		exec_node(g, i, ctx);
}

void dtf_exec_forward(const struct dtf_graph *g, struct dtf_exec_ctx *ctx)
{
	int end = g->loss >= 0 ? g->loss + 1 : g->nforward;
	dtf_exec_range(g, 0, end, ctx);
}

void dtf_exec_backward(const struct dtf_graph *g, struct dtf_exec_ctx *ctx)
{
	dtf_exec_range(g, g->nforward, g->nnodes, ctx);
}

void dtf_exec_backward_hook(const struct dtf_graph *g, struct dtf_exec_ctx *ctx,
			    void (*after)(void *arg, int node), void *arg)
{
	for (int i = g->nforward; i < g->nnodes; i++) {
		exec_node(g, i, ctx);
		after(arg, i);
	}
}

/* ---- metrics ------------------------------------------------------------ */

double dtf_graph_count_correct(const struct dtf_graph *g, int valid, int k)
{
	if (g->loss < 0 || valid <= 0)
		return 0.0;
	const struct dtf_node *l = &g->nodes[g->logits];
	const void *labels = g->nodes[g->labels].data;
	size_t rows = (size_t)l->shape.d[0];
	size_t cols = (size_t)(dtf_shape_numel(&l->shape) / l->shape.d[0]);
	const float *logits = l->data;
	if (k < 1)
		k = 1;
	switch (g->nodes[g->loss].op) {
	case DTF_OP_SPARSE_SOFTMAX_XENT: {
		/* (n, ..., classes): each example counts the fraction of
		 * its positions that are right */
		int classes, per;
		dtf_graph_xent_dims(g, g->logits, &rows, &classes, &per);
		size_t v = (size_t)valid * (size_t)per;
		if (k == 1)
			return (double)dtf_cpu_count_correct(rows, classes, logits,
							     labels, v) / per;
		return (double)dtf_cpu_count_in_top_k(rows, classes, logits,
						      labels, v, k) / per;
	}
	case DTF_OP_SOFTMAX_XENT:
		if (k == 1)
			return (double)dtf_cpu_count_correct_onehot(
				rows, (int)cols, logits, labels, (size_t)valid);
		return (double)dtf_cpu_count_in_top_k_onehot(
			rows, (int)cols, logits, labels, (size_t)valid, k);
	case DTF_OP_SIGMOID_XENT:
		return dtf_cpu_binary_accuracy_sum(rows, cols, logits, labels,
						   (size_t)valid);
	default:
		return 0.0;
	}
}
