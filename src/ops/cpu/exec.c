/*
 * exec.c - the CPU executor: one switch over the op, one kernel per node.
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

/* The ops of graph/ops.c. */
static void exec_more(const struct dtf_graph *g, int i,
		      struct dtf_exec_ctx *ctx)
{
	const struct dtf_node *n = &g->nodes[i];
	int a = n->inputs[0], b = n->inputs[1];
	size_t numel = (size_t)dtf_shape_numel(&n->shape);
	float *y = n->data;
	size_t rows;
	int c;

	switch (n->op) {
	case DTF_OP_DEPTHWISE_CONV2D:
		dtf_cpu_depthwise_conv2d(&n->a.win.g, F(g, a), F(g, b), y);
		break;
	case DTF_OP_DEPTHWISE_CONV2D_BACKPROP_INPUT:
		dtf_cpu_depthwise_conv2d_backprop_input(&n->a.win.g, F(g, a),
							F(g, b), y);
		break;
	case DTF_OP_DEPTHWISE_CONV2D_BACKPROP_FILTER:
		dtf_cpu_depthwise_conv2d_backprop_filter(&n->a.win.g, F(g, a),
							 F(g, b), y);
		break;
	case DTF_OP_AVG_POOL2D:
		dtf_cpu_avg_pool2d(&n->a.win.g, F(g, a), y);
		break;
	case DTF_OP_AVG_POOL2D_GRAD:
		dtf_cpu_avg_pool2d_grad(&n->a.win.g, F(g, a), y);
		break;
	case DTF_OP_GLOBAL_AVG_POOL: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		dtf_cpu_global_avg_pool((size_t)s->d[0], (size_t)(s->d[1] * s->d[2]),
					(int)s->d[3], F(g, a), y);
		break;
	}
	case DTF_OP_GLOBAL_AVG_POOL_GRAD: {
		const struct dtf_shape *s = &n->shape;
		dtf_cpu_global_avg_pool_grad((size_t)s->d[0],
					     (size_t)(s->d[1] * s->d[2]),
					     (int)s->d[3], F(g, a), y);
		break;
	}
	case DTF_OP_BATCH_NORM:
		rows_cols(&n->shape, &rows, &c);
		if (ctx->training)
			dtf_cpu_batch_norm_train(rows, c, F(g, a), F(g, b),
						 F(g, n->inputs[2]),
						 n->a.norm.epsilon,
						 n->a.norm.momentum,
						 F(g, n->inputs[3]),
						 F(g, n->inputs[4]), y);
		else
			dtf_cpu_batch_norm_infer(rows, c, F(g, a), F(g, b),
						 F(g, n->inputs[2]),
						 F(g, n->inputs[3]),
						 F(g, n->inputs[4]),
						 n->a.norm.epsilon, y);
		break;
	case DTF_OP_BATCH_NORM_GRAD_INPUT: /* dy, x, gamma */
		rows_cols(&n->shape, &rows, &c);
		dtf_cpu_batch_norm_grad_input(rows, c, F(g, b), F(g, n->inputs[2]),
					      F(g, a), n->a.norm.epsilon, y);
		break;
	case DTF_OP_BATCH_NORM_GRAD_GAMMA: /* dy, x */
		rows_cols(&g->nodes[a].shape, &rows, &c);
		dtf_cpu_batch_norm_grad_gamma(rows, c, F(g, b), F(g, a),
					      n->a.norm.epsilon, y);
		break;
	case DTF_OP_LAYER_NORM:
		rows_cols(&n->shape, &rows, &c);
		dtf_cpu_layer_norm(rows, c, F(g, a), F(g, b), F(g, n->inputs[2]),
				   n->a.norm.epsilon, y);
		break;
	case DTF_OP_LAYER_NORM_GRAD_INPUT: /* dy, x, gamma */
		rows_cols(&n->shape, &rows, &c);
		dtf_cpu_layer_norm_grad_input(rows, c, F(g, b), F(g, n->inputs[2]),
					      F(g, a), n->a.norm.epsilon, y);
		break;
	case DTF_OP_LAYER_NORM_GRAD_GAMMA: /* dy, x */
		rows_cols(&g->nodes[a].shape, &rows, &c);
		dtf_cpu_layer_norm_grad_gamma(rows, c, F(g, b), F(g, a),
					      n->a.norm.epsilon, y);
		break;
	case DTF_OP_MULTIPLY:
		dtf_cpu_multiply(numel, F(g, a), F(g, b), y);
		break;
	case DTF_OP_CONCAT: {
		size_t outer = outer_of(&n->shape, n->a.cat.axis);
		size_t ia = (size_t)dtf_shape_numel(&g->nodes[a].shape) / outer;
		size_t ib = (size_t)dtf_shape_numel(&g->nodes[b].shape) / outer;
		dtf_cpu_concat(outer, ia, ib, F(g, a), F(g, b), y);
		break;
	}
	case DTF_OP_SLICE: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		size_t outer = outer_of(s, n->a.cat.axis);
		size_t after = (size_t)dtf_shape_numel(s) / outer /
			       (size_t)s->d[n->a.cat.axis];
		dtf_cpu_slice_inner(outer, (size_t)dtf_shape_numel(s) / outer,
				    (size_t)n->a.cat.begin * after, numel / outer,
				    F(g, a), y);
		break;
	}
	case DTF_OP_LEAKY_RELU:
		dtf_cpu_leaky_relu(numel, n->a.act.alpha, F(g, a), y);
		break;
	case DTF_OP_LEAKY_RELU_GRAD:
		dtf_cpu_leaky_relu_grad(numel, n->a.act.alpha, F(g, a), F(g, b), y);
		break;
	case DTF_OP_ELU:
		dtf_cpu_elu(numel, n->a.act.alpha, F(g, a), y);
		break;
	case DTF_OP_ELU_GRAD:
		dtf_cpu_elu_grad(numel, n->a.act.alpha, F(g, a), F(g, b), y);
		break;
	case DTF_OP_GELU:
		dtf_cpu_gelu(numel, n->a.act.approximate, F(g, a), y);
		break;
	case DTF_OP_GELU_GRAD:
		dtf_cpu_gelu_grad(numel, n->a.act.approximate, F(g, a), F(g, b), y);
		break;
	case DTF_OP_TANH:
		dtf_cpu_tanh(numel, F(g, a), y);
		break;
	case DTF_OP_TANH_GRAD:
		dtf_cpu_tanh_grad(numel, F(g, a), F(g, b), y);
		break;
	case DTF_OP_SIGMOID:
		dtf_cpu_sigmoid(numel, F(g, a), y);
		break;
	case DTF_OP_SIGMOID_GRAD:
		dtf_cpu_sigmoid_grad(numel, F(g, a), F(g, b), y);
		break;
	case DTF_OP_SOFTMAX:
		rows_cols(&n->shape, &rows, &c);
		dtf_cpu_softmax(rows, c, F(g, a), y);
		break;
	case DTF_OP_SOFTMAX_GRAD:
		rows_cols(&n->shape, &rows, &c);
		dtf_cpu_softmax_grad(rows, c, F(g, a), F(g, b), y);
		break;
	case DTF_OP_IDENTITY:
		if (y != F(g, a))
			memcpy(y, F(g, a), numel * sizeof(float));
		break;
	case DTF_OP_SOFTMAX_XENT:
	case DTF_OP_SIGMOID_XENT:
	case DTF_OP_MSE: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		size_t r = (size_t)s->d[0];
		size_t cols = (size_t)dtf_shape_numel(s) / r;
		if (n->op == DTF_OP_SOFTMAX_XENT)
			ctx->loss_sum = dtf_cpu_softmax_xent(
				r, (int)cols, F(g, a), F(g, b),
				n->a.loss.label_smoothing, (size_t)ctx->valid, NULL);
		else if (n->op == DTF_OP_SIGMOID_XENT)
			ctx->loss_sum = dtf_cpu_sigmoid_xent(
				r, cols, F(g, a), F(g, b), (size_t)ctx->valid, NULL);
		else
			ctx->loss_sum = dtf_cpu_mean_squared_error(
				r, cols, F(g, a), F(g, b), (size_t)ctx->valid, NULL);
		*y = (float)(ctx->loss_sum * ctx->loss_scale);
		break;
	}
	case DTF_OP_SOFTMAX_XENT_GRAD:
	case DTF_OP_SIGMOID_XENT_GRAD:
	case DTF_OP_MSE_GRAD: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		size_t r = (size_t)s->d[0];
		size_t cols = (size_t)dtf_shape_numel(s) / r;
		if (n->op == DTF_OP_SOFTMAX_XENT_GRAD)
			dtf_cpu_softmax_xent_grad(r, (int)cols, F(g, a), F(g, b),
						  n->a.loss.label_smoothing,
						  (size_t)ctx->valid,
						  ctx->loss_scale, y);
		else if (n->op == DTF_OP_SIGMOID_XENT_GRAD)
			dtf_cpu_sigmoid_xent_grad(r, cols, F(g, a), F(g, b),
						  (size_t)ctx->valid,
						  ctx->loss_scale, y);
		else
			dtf_cpu_mean_squared_error_grad(r, cols, F(g, a), F(g, b),
							(size_t)ctx->valid,
							ctx->loss_scale, y);
		break;
	}
	default:
		DTF_ASSERT(!"op without a CPU kernel");
	}
}

static void exec_node(const struct dtf_graph *g, int i,
		      struct dtf_exec_ctx *ctx)
{
	const struct dtf_node *n = &g->nodes[i];
	int a = n->inputs[0], b = n->inputs[1];
	size_t numel = (size_t)dtf_shape_numel(&n->shape);
	float *y = n->data;

	if (ctx->fast && dtf_fast_exec_node(ctx->fast, g, i, ctx))
		return;
	switch (n->op) {
	case DTF_OP_INPUT:
	case DTF_OP_VARIABLE:
	case DTF_OP_RESHAPE: /* aliases its input */
		break;
	case DTF_OP_CONV2D:
		dtf_cpu_conv2d(&n->a.win.g, F(g, a), F(g, b), y, ctx->workspace);
		break;
	case DTF_OP_CONV2D_BACKPROP_INPUT:
		dtf_cpu_conv2d_backprop_input(&n->a.win.g, F(g, a), F(g, b), y,
					      ctx->workspace);
		break;
	case DTF_OP_CONV2D_BACKPROP_FILTER:
		dtf_cpu_conv2d_backprop_filter(&n->a.win.g, F(g, a), F(g, b), y,
					       ctx->workspace);
		break;
	case DTF_OP_MAX_POOL2D:
		dtf_cpu_max_pool2d(&n->a.win.g, F(g, a), y);
		break;
	case DTF_OP_MAX_POOL2D_GRAD:
		dtf_cpu_max_pool2d_grad(&n->a.win.g, F(g, a), F(g, b), y);
		break;
	case DTF_OP_MATMUL: {
		const struct dtf_shape *sa = &g->nodes[a].shape;
		int m = (int)n->shape.d[0], cols = (int)n->shape.d[1];
		int k = (int)(n->a.mm.trans_a ? sa->d[0] : sa->d[1]);
		dtf_cpu_matmul(m, cols, k, F(g, a), n->a.mm.trans_a, F(g, b),
			       n->a.mm.trans_b, y);
		break;
	}
	case DTF_OP_BIAS_ADD: {
		int c = (int)n->shape.d[n->shape.rank - 1];
		dtf_cpu_bias_add(numel / (size_t)c, c, F(g, a), F(g, b), y);
		break;
	}
	case DTF_OP_BIAS_ADD_GRAD: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		int c = (int)s->d[s->rank - 1];
		dtf_cpu_bias_add_grad((size_t)dtf_shape_numel(s) / (size_t)c, c,
				      F(g, a), y);
		break;
	}
	case DTF_OP_RELU:
		dtf_cpu_relu(numel, F(g, a), y);
		break;
	case DTF_OP_RELU_GRAD:
		dtf_cpu_relu_grad(numel, F(g, a), F(g, b), y);
		break;
	case DTF_OP_DROPOUT:
	case DTF_OP_DROPOUT_GRAD: {
		size_t rows = (size_t)n->shape.d[0], cols = numel / rows;
		float rate = ctx->training ? n->a.drop.rate : 0.0f;
		uint32_t salt = dtf_exec_dropout_salt(n, ctx->step);
		if (n->op == DTF_OP_DROPOUT)
			dtf_cpu_dropout(rows, cols, rate, ctx->dropout_key,
					ctx->example_ids, salt, F(g, a), y);
		else
			dtf_cpu_dropout_grad(rows, cols, rate, ctx->dropout_key,
					     ctx->example_ids, salt, F(g, a), y);
		break;
	}
	case DTF_OP_ADD:
		if (y != F(g, a))
			memcpy(y, F(g, a), numel * sizeof(float));
		dtf_cpu_add_inplace(numel, F(g, b), y);
		break;
	case DTF_OP_SPARSE_SOFTMAX_XENT: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		ctx->loss_sum = dtf_cpu_sparse_softmax_xent(
			(size_t)s->d[0], (int)s->d[1], F(g, a),
			(const int32_t *)g->nodes[b].data, (size_t)ctx->valid,
			NULL);
		*y = (float)(ctx->loss_sum * ctx->loss_scale);
		break;
	}
	case DTF_OP_SPARSE_SOFTMAX_XENT_GRAD: {
		const struct dtf_shape *s = &g->nodes[a].shape;
		dtf_cpu_sparse_softmax_xent_grad(
			(size_t)s->d[0], (int)s->d[1], F(g, a),
			(const int32_t *)g->nodes[b].data, (size_t)ctx->valid,
			ctx->loss_scale, y);
		break;
	}
	default:
		exec_more(g, i, ctx);
	}
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
