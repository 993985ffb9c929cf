/*
 * exec.c - the CPU executor: one switch over the op, one kernel per node.
 */
#include "graph/exec.h"

#include <string.h>

#include "core/error.h"
#include "graph/fast_exec.h"
#include "ops/cpu/kernels.h"

static float *F(const struct dtf_graph *g, int id)
{
	return (float *)g->nodes[id].data;
}

static uint32_t dropout_salt(const struct dtf_node *n, uint64_t step)
{
	return n->a.drop.salt ^ (uint32_t)(step * 0x85EBCA6Bu) ^
	       (uint32_t)(step >> 32);
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
		uint32_t salt = dropout_salt(n, ctx->step);
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
		DTF_ASSERT(!"op without a CPU kernel");
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
