/*
 * exec_cuda.c - the CUDA executor: one CUDA kernel per node, from a table
 * indexed by the op, on device pointers translated from the host plan.
 *
 * Plain C over the backend's interface (ops/cuda/cuda.h): it includes no
 * CUDA header and is built with or without the backend (without it, no
 * context can be made, so dtf_cuda_exec_new is never reached).
 *
 * Device memory is one allocation, carved in this order (each piece
 * DTF_ALIGN-aligned): the arena (the host plan's offsets), parameters,
 * gradients + statistics, optimizer slots, two input sets (every feature,
 * then example ids), evaluation totals (2 doubles).  Pinned host memory is
 * one allocation too: two staging sets laid out as the device input sets.
 */
#include "ops/cuda/exec_cuda.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "ops/backend.h"

#define NSETS 2
/* events of the context: E_COPIED(s) the upload of set s is done,
 * E_USED(s) the step that read device set s is done with it */
#define E_COPIED(s) (s)
#define E_USED(s) (2 + (s))

struct xnode {
	void *d;                          /* device output */
	const struct dtf_cuda_conv *conv; /* CONV2D* */
	const struct dtf_cuda_pool *pool; /* MAX_POOL2D* */
};

struct dtf_cuda_exec {
	struct dtf_cuda_ctx *ctx;
	const struct dtf_graph *g;
	struct xnode *x;        /* per node */
	char *dev;              /* the one device allocation */
	size_t dev_bytes;
	char *d_arena;
	float *d_params, *d_grads, *d_slots;
	size_t nslot_floats;    /* floats at d_slots */
	double *d_eval;         /* {loss sum, correct} */
	size_t nparams, ngrads; /* ngrads = nparams + nstats */
	size_t nstats;
	float *h_params, *h_grads;
	int grads_registered;
	int nfeatures;
	size_t *feat_bytes;     /* per feature, one batch */
	size_t set_bytes;       /* features + ids of one set */
	char *d_sets[NSETS];
	char *h_staging;        /* pinned, NSETS * set_bytes */
	void **h_feed[NSETS];   /* per feature pointers into h_staging */
	void **d_feed[NSETS];
	uint64_t *h_ids[NSETS], *d_ids[NSETS];
	int uploaded[NSETS];    /* set has an upload in flight or done */
	int loss_end;           /* forward runs [0, loss_end) */
};

static size_t align_up(size_t n)
{
	return (n + DTF_ALIGN - 1) / DTF_ALIGN * DTF_ALIGN;
}

static size_t node_bytes(const struct dtf_node *n)
{
	return (size_t)dtf_shape_numel(&n->shape) * 4;
}

/* host pointer of the plan -> device pointer, or NULL */
static void *translate(const struct dtf_cuda_exec *ex,
		       const struct dtf_cuda_exec_opts *o, const void *p,
		       size_t bytes)
{
	const char *c = p;
	const char *arena = o->arena;
	if (c >= arena && c + bytes <= arena + o->arena_bytes)
		return ex->d_arena + (c - arena);
	const char *pp = (const char *)o->params;
	if (c >= pp && c + bytes <= pp + ex->nparams * sizeof(float))
		return (char *)ex->d_params + (c - pp);
	const char *gp = (const char *)o->grads;
	if (gp && c >= gp && c + bytes <= gp + ex->ngrads * sizeof(float))
		return (char *)ex->d_grads + (c - gp);
	return NULL;
}

/* ---- the kernels --------------------------------------------------------- */

static float *D(const struct dtf_cuda_exec *ex, int id)
{
	return ex->x[id].d;
}

/*
 * The CUDA kernel table: one signature for every op.  D(ex, id) is a
 * node's device buffer, set the input set of this step, stats the
 * statistics the run writes.
 */
#define KERNEL(fn)                                                       \
	static void fn(struct dtf_cuda_exec *ex, int i,                  \
		       const struct dtf_exec_ctx *c, int set,            \
		       enum dtf_cuda_stats stats)
#define KERNEL_VARS                                                      \
	struct dtf_cuda_ctx *ctx = ex->ctx;                              \
	const struct dtf_graph *g = ex->g;                               \
	const struct dtf_node *n = &g->nodes[i];                         \
	const struct xnode *xn = &ex->x[i];                              \
	int a = n->inputs[0], b = n->inputs[1];                          \
	size_t numel = (size_t)dtf_shape_numel(&n->shape);               \
	float *y = xn->d;                                                \
	(void)ctx, (void)c, (void)set, (void)stats, (void)xn, (void)a,   \
		(void)b, (void)numel, (void)y

/* INPUT, VARIABLE, RESHAPE: buffers only (dtf_cuda_exec_run points them) */
KERNEL(cu_nothing)
{
	KERNEL_VARS;
}

KERNEL(cu_conv2d)
{
	KERNEL_VARS;
	dtf_cuda_conv2d(ctx, xn->conv, D(ex, a), D(ex, b), y);
}

KERNEL(cu_conv2d_backprop_input)
{
	KERNEL_VARS;
	dtf_cuda_conv2d_backprop_input(ctx, xn->conv, D(ex, a), D(ex, b), y);
}

KERNEL(cu_conv2d_backprop_filter)
{
	KERNEL_VARS;
	dtf_cuda_conv2d_backprop_filter(ctx, xn->conv, D(ex, a), D(ex, b), y);
}

KERNEL(cu_max_pool2d)
{
	KERNEL_VARS;
	dtf_cuda_max_pool2d(ctx, xn->pool, D(ex, a), y);
}

KERNEL(cu_max_pool2d_grad)
{
	KERNEL_VARS;
	dtf_cuda_max_pool2d_grad(ctx, xn->pool, D(ex, a), D(ex, b), y);
}

KERNEL(cu_matmul)
{
	KERNEL_VARS;
	int m, cols, k;
	dtf_graph_matmul_dims(g, n, &m, &cols, &k);
	dtf_cuda_matmul(ctx, m, cols, k, D(ex, a), n->a.mm.trans_a, D(ex, b),
			n->a.mm.trans_b, y);
}

KERNEL(cu_bias_add) /* x (rows, numel(b)) + b, as the CPU's */
{
	KERNEL_VARS;
	int ch = (int)dtf_shape_numel(&g->nodes[b].shape);
	dtf_cuda_bias_add(ctx, numel / (size_t)ch, ch, D(ex, a), D(ex, b), y);
}

KERNEL(cu_bias_add_grad)
{
	KERNEL_VARS;
	const struct dtf_shape *s = &g->nodes[a].shape;
	int ch = (int)numel;
	dtf_cuda_bias_add_grad(ctx, (size_t)dtf_shape_numel(s) / (size_t)ch, ch,
			       D(ex, a), y);
}

KERNEL(cu_relu)
{
	KERNEL_VARS;
	dtf_cuda_relu(ctx, numel, D(ex, a), y);
}

KERNEL(cu_relu_grad)
{
	KERNEL_VARS;
	dtf_cuda_relu_grad(ctx, numel, D(ex, a), D(ex, b), y);
}

/* DROPOUT and DROPOUT_GRAD: the CPU's mask (dtf_exec_dropout_salt) */
KERNEL(cu_dropout)
{
	KERNEL_VARS;
	size_t rows = (size_t)n->shape.d[0], cols = numel / rows;
	float rate = c->training ? n->a.drop.rate : 0.0f;
	uint32_t salt = dtf_exec_dropout_salt(n, c->step);
	if (n->op == DTF_OP_DROPOUT)
		dtf_cuda_dropout(ctx, rows, cols, rate, c->dropout_key,
				 ex->d_ids[set], salt, D(ex, a), y);
	else
		dtf_cuda_dropout_grad(ctx, rows, cols, rate, c->dropout_key,
				      ex->d_ids[set], salt, D(ex, a), y);
}

KERNEL(cu_add)
{
	KERNEL_VARS;
	dtf_cuda_add(ctx, numel, D(ex, a), D(ex, b), y);
}

KERNEL(cu_sparse_xent)
{
	KERNEL_VARS;
	size_t rows;
	int classes, per;
	dtf_graph_xent_dims(g, a, &rows, &classes, &per);
	int step = stats == DTF_CUDA_STATS_STEP && ex->nstats >= 1;
	dtf_cuda_sparse_softmax_xent(
		ctx, rows, classes, D(ex, a), (const int32_t *)D(ex, b),
		(size_t)c->valid * (size_t)per, per, c->loss_scale, y,
		step ? ex->d_grads + ex->nparams : NULL,
		step ? NULL : &ex->d_eval[0]);
}

KERNEL(cu_sparse_xent_grad)
{
	KERNEL_VARS;
	size_t rows;
	int classes, per;
	dtf_graph_xent_dims(g, a, &rows, &classes, &per);
	dtf_cuda_sparse_softmax_xent_grad(
		ctx, rows, classes, D(ex, a), (const int32_t *)D(ex, b),
		(size_t)c->valid * (size_t)per, c->loss_scale / (float)per, y);
}

/* rows and channels of the node's (..., c) output or input */
static void ln_rows(const struct dtf_shape *s, size_t *rows, int *c)
{
	*c = (int)s->d[s->rank - 1];
	*rows = (size_t)dtf_shape_numel(s) / (size_t)*c;
}

KERNEL(cu_layer_norm) /* x, gamma, beta */
{
	KERNEL_VARS;
	size_t rows;
	int ch;
	ln_rows(&n->shape, &rows, &ch);
	dtf_cuda_layer_norm(ctx, rows, ch, D(ex, a), D(ex, b),
			    D(ex, n->inputs[2]), n->a.norm.epsilon, y);
}

KERNEL(cu_layer_norm_grad_input) /* dy, x, gamma */
{
	KERNEL_VARS;
	size_t rows;
	int ch;
	ln_rows(&n->shape, &rows, &ch);
	dtf_cuda_layer_norm_grad_input(ctx, rows, ch, D(ex, b),
				       D(ex, n->inputs[2]), D(ex, a),
				       n->a.norm.epsilon, y);
}

KERNEL(cu_layer_norm_grad_gamma) /* dy, x */
{
	KERNEL_VARS;
	size_t rows;
	int ch;
	ln_rows(&g->nodes[a].shape, &rows, &ch);
	dtf_cuda_layer_norm_grad_gamma(ctx, rows, ch, D(ex, b), D(ex, a),
				       n->a.norm.epsilon, y);
}

KERNEL(cu_gelu)
{
	KERNEL_VARS;
	dtf_cuda_gelu(ctx, numel, n->a.act.approximate, D(ex, a), y);
}

KERNEL(cu_gelu_grad) /* dy, x */
{
	KERNEL_VARS;
	dtf_cuda_gelu_grad(ctx, numel, n->a.act.approximate, D(ex, a), D(ex, b),
			   y);
}

KERNEL(cu_embedding) /* ids, table */
{
	KERNEL_VARS;
	const struct dtf_shape *st = &g->nodes[b].shape;
	dtf_cuda_embedding(ctx, (size_t)dtf_shape_numel(&g->nodes[a].shape),
			   (int)st->d[0], (int)st->d[1],
			   (const int32_t *)D(ex, a), D(ex, b), y);
}

KERNEL(cu_embedding_grad) /* dy, ids -> dtable */
{
	KERNEL_VARS;
	dtf_cuda_embedding_grad(ctx, (size_t)dtf_shape_numel(&g->nodes[b].shape),
				(int)n->shape.d[0], (int)n->shape.d[1], D(ex, a),
				(const int32_t *)D(ex, b), y);
}

/* SLICE (forward or concat's gradient) and SLICE_GRAD: (outer, inner)
 * views as the CPU's */
static void slice_view(const struct dtf_shape *big, int axis, int64_t begin,
		       const struct dtf_shape *cut, size_t *outer,
		       size_t *inner, size_t *off, size_t *len)
{
	size_t o = 1;
	for (int k = 0; k < axis; k++)
		o *= (size_t)big->d[k];
	size_t after = (size_t)dtf_shape_numel(big) / o / (size_t)big->d[axis];
	*outer = o;
	*inner = (size_t)dtf_shape_numel(big) / o;
	*off = (size_t)begin * after;
	*len = (size_t)dtf_shape_numel(cut) / o;
}

KERNEL(cu_slice)
{
	KERNEL_VARS;
	size_t outer, inner, off, len;
	slice_view(&g->nodes[a].shape, n->a.cat.axis, n->a.cat.begin,
		   &n->shape, &outer, &inner, &off, &len);
	dtf_cuda_slice(ctx, outer, inner, off, len, D(ex, a), y);
}

KERNEL(cu_slice_grad)
{
	KERNEL_VARS;
	size_t outer, inner, off, len;
	slice_view(&n->shape, n->a.cat.axis, n->a.cat.begin,
		   &g->nodes[a].shape, &outer, &inner, &off, &len);
	dtf_cuda_slice_grad(ctx, outer, inner, off, len, D(ex, a), y);
}

/* ---- planning: the plan column of the kernel table ------------------- */

static int plan_conv2d(struct dtf_cuda_exec *ex, int i)
{
	const struct dtf_node *n = &ex->g->nodes[i];
	int rc = dtf_cuda_conv2d_plan(ex->ctx, &n->a.win.g, &ex->x[i].conv);
	if (rc < 0) {
		char msg[768];
		snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
		return dtf_error(rc == -DTF_ERR_CONFIG ? DTF_ERR_CONFIG
						       : DTF_ERR_RUNTIME,
				 "node '%s': %s", n->name, msg);
	}
	return 0;
}

static int plan_pool(struct dtf_cuda_exec *ex, int i)
{
	return dtf_cuda_pool_plan(ex->ctx, &ex->g->nodes[i].a.win.g,
				  &ex->x[i].pool);
}

static int plan_bias_add_grad(struct dtf_cuda_exec *ex, int i)
{
	const struct dtf_graph *g = ex->g;
	const struct dtf_shape *s = &g->nodes[g->nodes[i].inputs[0]].shape;
	int c = (int)dtf_shape_numel(&g->nodes[i].shape);
	dtf_cuda_ctx_need(ex->ctx, 0, 0,
			  dtf_cuda_bias_add_grad_scratch(
				  (size_t)dtf_shape_numel(s) / (size_t)c, c));
	return 0;
}

static int plan_layer_norm_grad_gamma(struct dtf_cuda_exec *ex, int i)
{
	const struct dtf_graph *g = ex->g;
	const struct dtf_shape *s = &g->nodes[g->nodes[i].inputs[0]].shape;
	size_t rows = (size_t)dtf_shape_numel(s) / (size_t)s->d[s->rank - 1];
	dtf_cuda_ctx_need(ex->ctx, 0, 0,
			  dtf_cuda_layer_norm_grad_gamma_scratch(rows));
	return 0;
}

/* (b, t, c) of the qkv input q (b, t, 3c) of an attention node */
static void attn_dims(const struct dtf_graph *g, int q, int *b, int *t, int *c)
{
	const struct dtf_shape *s = &g->nodes[q].shape;
	*b = (int)s->d[0];
	*t = (int)s->d[1];
	*c = (int)(s->d[2] / 3);
}

KERNEL(cu_causal_self_attention) /* qkv */
{
	KERNEL_VARS;
	int nb, t, ch;
	attn_dims(g, a, &nb, &t, &ch);
	dtf_cuda_causal_self_attention(ctx, nb, t, ch, n->a.attn.heads, D(ex, a),
				       y);
}

KERNEL(cu_causal_self_attention_grad) /* qkv, dy */
{
	KERNEL_VARS;
	int nb, t, ch;
	attn_dims(g, a, &nb, &t, &ch);
	dtf_cuda_causal_self_attention_grad(ctx, nb, t, ch, n->a.attn.heads,
					    D(ex, a), D(ex, b), y);
}

static int plan_attention_grad(struct dtf_cuda_exec *ex, int i)
{
	const struct dtf_node *n = &ex->g->nodes[i];
	int nb, t, ch;
	attn_dims(ex->g, n->inputs[0], &nb, &t, &ch);
	dtf_cuda_ctx_need(ex->ctx, 0, 0,
			  dtf_cuda_attention_grad_scratch(nb, t, n->a.attn.heads));
	return 0;
}

/*
 * The CUDA kernel table, indexed by the op: plan (optional: cuDNN plans,
 * scratch), run, and for an op without a CUDA kernel the reason, which
 * dtf_cuda_exec_new's error and `dtf-train --dry-run` give by name.  One
 * entry per row of the op table, CUDA_<ID>: an op added there without a
 * kernel or a NOT_ON_CUDA entry here does not compile.
 */
struct cuda_kernel {
	int (*plan)(struct dtf_cuda_exec *ex, int i);
	void (*run)(struct dtf_cuda_exec *ex, int i, const struct dtf_exec_ctx *c,
		    int set, enum dtf_cuda_stats stats);
	const char *why; /* run == NULL: why the op is not on this backend */
};
#define NOT_ON_CUDA(why) {NULL, NULL, why}
#define NO_KERNEL_YET NOT_ON_CUDA("no CUDA kernel yet")
#define CUDA_INPUT {NULL, cu_nothing, NULL}
#define CUDA_VARIABLE {NULL, cu_nothing, NULL}
#define CUDA_CONV2D {plan_conv2d, cu_conv2d, NULL}
#define CUDA_CONV2D_BACKPROP_INPUT {plan_conv2d, cu_conv2d_backprop_input, NULL}
#define CUDA_CONV2D_BACKPROP_FILTER {plan_conv2d, cu_conv2d_backprop_filter, NULL}
#define CUDA_MAX_POOL2D {plan_pool, cu_max_pool2d, NULL}
#define CUDA_MAX_POOL2D_GRAD {plan_pool, cu_max_pool2d_grad, NULL}
#define CUDA_MATMUL {NULL, cu_matmul, NULL}
#define CUDA_BIAS_ADD {NULL, cu_bias_add, NULL}
#define CUDA_BIAS_ADD_GRAD {plan_bias_add_grad, cu_bias_add_grad, NULL}
#define CUDA_RELU {NULL, cu_relu, NULL}
#define CUDA_RELU_GRAD {NULL, cu_relu_grad, NULL}
#define CUDA_DROPOUT {NULL, cu_dropout, NULL}
#define CUDA_DROPOUT_GRAD {NULL, cu_dropout, NULL}
#define CUDA_RESHAPE {NULL, cu_nothing, NULL}
#define CUDA_ADD {NULL, cu_add, NULL}
#define CUDA_SPARSE_SOFTMAX_XENT {NULL, cu_sparse_xent, NULL}
#define CUDA_SPARSE_SOFTMAX_XENT_GRAD {NULL, cu_sparse_xent_grad, NULL}
#define CUDA_DEPTHWISE_CONV2D NO_KERNEL_YET
#define CUDA_DEPTHWISE_CONV2D_BACKPROP_INPUT NO_KERNEL_YET
#define CUDA_DEPTHWISE_CONV2D_BACKPROP_FILTER NO_KERNEL_YET
#define CUDA_AVG_POOL2D NO_KERNEL_YET
#define CUDA_AVG_POOL2D_GRAD NO_KERNEL_YET
#define CUDA_GLOBAL_AVG_POOL NO_KERNEL_YET
#define CUDA_GLOBAL_AVG_POOL_GRAD NO_KERNEL_YET
#define CUDA_BATCH_NORM NO_KERNEL_YET
#define CUDA_BATCH_NORM_GRAD_INPUT NO_KERNEL_YET
#define CUDA_BATCH_NORM_GRAD_GAMMA NO_KERNEL_YET
#define CUDA_LAYER_NORM {NULL, cu_layer_norm, NULL}
#define CUDA_LAYER_NORM_GRAD_INPUT {NULL, cu_layer_norm_grad_input, NULL}
#define CUDA_LAYER_NORM_GRAD_GAMMA {plan_layer_norm_grad_gamma, cu_layer_norm_grad_gamma, NULL}
#define CUDA_MULTIPLY NO_KERNEL_YET
#define CUDA_CONCAT NO_KERNEL_YET
#define CUDA_SLICE {NULL, cu_slice, NULL}
#define CUDA_SLICE_GRAD {NULL, cu_slice_grad, NULL}
#define CUDA_LEAKY_RELU NO_KERNEL_YET
#define CUDA_LEAKY_RELU_GRAD NO_KERNEL_YET
#define CUDA_ELU NO_KERNEL_YET
#define CUDA_ELU_GRAD NO_KERNEL_YET
#define CUDA_GELU {NULL, cu_gelu, NULL}
#define CUDA_GELU_GRAD {NULL, cu_gelu_grad, NULL}
#define CUDA_TANH NO_KERNEL_YET
#define CUDA_TANH_GRAD NO_KERNEL_YET
#define CUDA_SIGMOID NO_KERNEL_YET
#define CUDA_SIGMOID_GRAD NO_KERNEL_YET
#define CUDA_SOFTMAX NO_KERNEL_YET
#define CUDA_SOFTMAX_GRAD NO_KERNEL_YET
#define CUDA_IDENTITY NO_KERNEL_YET
#define CUDA_SOFTMAX_XENT NO_KERNEL_YET
#define CUDA_SOFTMAX_XENT_GRAD NO_KERNEL_YET
#define CUDA_SIGMOID_XENT NO_KERNEL_YET
#define CUDA_SIGMOID_XENT_GRAD NO_KERNEL_YET
#define CUDA_MSE NO_KERNEL_YET
#define CUDA_MSE_GRAD NO_KERNEL_YET
#define CUDA_EMBEDDING {NULL, cu_embedding, NULL}
#define CUDA_EMBEDDING_GRAD {NULL, cu_embedding_grad, NULL}
#define CUDA_CAUSAL_SELF_ATTENTION {NULL, cu_causal_self_attention, NULL}
#define CUDA_CAUSAL_SELF_ATTENTION_GRAD \
	{plan_attention_grad, cu_causal_self_attention_grad, NULL}
static const struct cuda_kernel cuda_kernels[] = {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) \
	[DTF_OP_##id] = CUDA_##id,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
};
_Static_assert(sizeof(cuda_kernels) / sizeof(cuda_kernels[0]) == DTF_OP_COUNT_,
	       "CUDA kernel table out of step with enum dtf_op");

/* Plans and scratch needs of every node. */
static int plan_nodes(struct dtf_cuda_exec *ex)
{
	const struct dtf_graph *g = ex->g;
	int rc;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		const struct cuda_kernel *k = &cuda_kernels[n->op];
		if (!k->run)
			return dtf_error(DTF_ERR_CONFIG,
					 "node '%s': op %s is not on the cuda backend (%s)",
					 n->name, dtf_op_name(n->op), k->why);
		if (k->plan && (rc = k->plan(ex, i)) < 0)
			return rc;
	}
	return 0;
}

const char *dtf_cuda_op_missing(enum dtf_op op)
{
	return cuda_kernels[op].run ? NULL : cuda_kernels[op].why;
}

int dtf_cuda_graph_missing(const struct dtf_graph *g, char *buf, size_t size)
{
	int seen[DTF_OP_COUNT_] = {0}, count = 0;
	size_t off = 0;
	if (size)
		buf[0] = '\0';
	for (int i = 0; i < g->nnodes; i++) {
		enum dtf_op op = g->nodes[i].op;
		if (cuda_kernels[op].run || seen[op])
			continue;
		seen[op] = 1;
		count++;
		if (off < size)
			off += (size_t)snprintf(buf + off, size - off, "%s%s",
						count > 1 ? ", " : "",
						dtf_op_name(op));
	}
	return count;
}

int dtf_cuda_exec_new(struct dtf_cuda_ctx *ctx,
		      const struct dtf_cuda_exec_opts *o,
		      struct dtf_cuda_exec **out)
{
	const struct dtf_graph *g = o->g;
	int rc;
	*out = NULL;
	struct dtf_cuda_exec *ex = dtf_calloc(1, sizeof(*ex));
	if (!ex)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	ex->ctx = ctx;
	ex->g = g;
	ex->nparams = g->nparams;
	ex->nstats = o->nstats;
	ex->ngrads = g->nparams + o->nstats;
	ex->h_params = o->params;
	ex->h_grads = o->grads;
	ex->nfeatures = o->nfeatures;
	ex->loss_end = g->loss >= 0 ? g->loss + 1 : g->nforward;
	ex->x = dtf_calloc((size_t)g->nnodes, sizeof(*ex->x));
	ex->feat_bytes = dtf_calloc((size_t)o->nfeatures + 1, sizeof(size_t));
	for (int s = 0; s < NSETS; s++) {
		ex->h_feed[s] = dtf_calloc((size_t)o->nfeatures + 1, sizeof(void *));
		ex->d_feed[s] = dtf_calloc((size_t)o->nfeatures + 1, sizeof(void *));
	}
	if (!ex->x || !ex->feat_bytes || !ex->h_feed[0] || !ex->h_feed[1] ||
	    !ex->d_feed[0] || !ex->d_feed[1]) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = plan_nodes(ex)) < 0)
		goto fail;

	/* one input set: every feature of one batch, then the ids */
	ex->set_bytes = 0;
	for (int f = 0; f < o->nfeatures; f++) {
		ex->feat_bytes[f] = o->feature_bytes[f] * (size_t)g->batch;
		ex->set_bytes += align_up(ex->feat_bytes[f]);
	}
	size_t ids_off = ex->set_bytes;
	ex->set_bytes += align_up((size_t)g->batch * sizeof(uint64_t));

	size_t off_params = align_up(o->arena_bytes);
	size_t off_grads = off_params + align_up(ex->nparams * sizeof(float));
	size_t off_slots = off_grads + align_up(ex->ngrads * sizeof(float));
	size_t off_sets = off_slots + align_up(o->optimizer_slots * sizeof(float));
	size_t off_eval = off_sets + NSETS * ex->set_bytes;
	ex->dev_bytes = off_eval + align_up(2 * sizeof(double));
	if ((rc = dtf_cuda_malloc(ctx, ex->dev_bytes, (void **)&ex->dev)) < 0)
		goto fail;
	ex->d_arena = ex->dev;
	ex->d_params = (float *)(ex->dev + off_params);
	ex->d_grads = (float *)(ex->dev + off_grads);
	ex->d_slots = o->optimizer_slots ? (float *)(ex->dev + off_slots) : NULL;
	ex->nslot_floats = o->optimizer_slots;
	ex->d_eval = (double *)(ex->dev + off_eval);
	if ((rc = dtf_cuda_host_alloc(ctx, NSETS * ex->set_bytes,
				      (void **)&ex->h_staging)) < 0)
		goto fail;
	for (int s = 0; s < NSETS; s++) {
		ex->d_sets[s] = ex->dev + off_sets + (size_t)s * ex->set_bytes;
		char *h = ex->h_staging + (size_t)s * ex->set_bytes;
		size_t off = 0;
		for (int f = 0; f < o->nfeatures; f++) {
			ex->h_feed[s][f] = h + off;
			ex->d_feed[s][f] = ex->d_sets[s] + off;
			off += align_up(ex->feat_bytes[f]);
		}
		ex->h_ids[s] = (uint64_t *)(h + ids_off);
		ex->d_ids[s] = (uint64_t *)(ex->d_sets[s] + ids_off);
	}

	/* translate every node's buffer */
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_INPUT) {
			ex->x[i].d = ex->d_feed[0][n->a.in.feature];
			continue;
		}
		if (n->op == DTF_OP_RESHAPE) {
			ex->x[i].d = ex->x[n->inputs[0]].d;
			continue;
		}
		ex->x[i].d = translate(ex, o, n->data, node_bytes(n));
		if (!ex->x[i].d) {
			rc = dtf_error(DTF_ERR_RUNTIME,
				       "node '%s': its buffer is outside the plan (a bug)",
				       n->name);
			goto fail;
		}
	}
	if ((rc = dtf_cuda_ctx_reserve(ctx)) < 0)
		goto fail;
	if (o->grads) {
		if ((rc = dtf_cuda_host_register(ctx, o->grads,
						 ex->ngrads * sizeof(float))) < 0)
			goto fail;
		ex->grads_registered = 1;
	}
	*out = ex;
	return 0;
fail:
	dtf_cuda_exec_free(ex);
	return rc;
}

void dtf_cuda_exec_free(struct dtf_cuda_exec *ex)
{
	if (!ex)
		return;
	if (ex->ctx && (ex->dev || ex->h_staging))
		dtf_cuda_sync(ex->ctx);
	if (ex->grads_registered)
		dtf_cuda_host_unregister(ex->ctx, ex->h_grads);
	if (ex->h_staging)
		dtf_cuda_host_free(ex->ctx, ex->h_staging);
	if (ex->dev)
		dtf_cuda_free(ex->ctx, ex->dev);
	for (int s = 0; s < NSETS; s++) {
		dtf_free(ex->h_feed[s]);
		dtf_free(ex->d_feed[s]);
	}
	dtf_free(ex->feat_bytes);
	dtf_free(ex->x);
	dtf_free(ex);
}

size_t dtf_cuda_exec_device_bytes(const struct dtf_cuda_exec *ex)
{
	return ex->dev_bytes + dtf_cuda_ctx_scratch_bytes(ex->ctx);
}

void *const *dtf_cuda_exec_feed(struct dtf_cuda_exec *ex, int set)
{
	return ex->h_feed[set];
}

uint64_t *dtf_cuda_exec_ids(struct dtf_cuda_exec *ex, int set)
{
	return ex->h_ids[set];
}

int dtf_cuda_exec_staging_ready(struct dtf_cuda_exec *ex, int set)
{
	if (!ex->uploaded[set])
		return 0;
	ex->uploaded[set] = 0;
	return dtf_cuda_event_sync(ex->ctx, E_COPIED(set));
}

void dtf_cuda_exec_upload(struct dtf_cuda_exec *ex, int set)
{
	struct dtf_cuda_ctx *ctx = ex->ctx;
	/* one copy: the set is contiguous on both sides */
	dtf_cuda_stream_wait(ctx, DTF_CUDA_COPY, E_USED(set));
	dtf_cuda_copy_async(ctx, DTF_CUDA_COPY, ex->d_sets[set],
			    ex->h_staging + (size_t)set * ex->set_bytes,
			    ex->set_bytes);
	dtf_cuda_event_record(ctx, DTF_CUDA_COPY, E_COPIED(set));
	ex->uploaded[set] = 1;
}

void dtf_cuda_exec_run(struct dtf_cuda_exec *ex, int set,
		       const struct dtf_exec_ctx *c, int backward,
		       enum dtf_cuda_stats stats)
{
	struct dtf_cuda_ctx *ctx = ex->ctx;
	const struct dtf_graph *g = ex->g;
	/* inputs (and reshapes of them) read device set `set` */
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_INPUT)
			ex->x[i].d = ex->d_feed[set][n->a.in.feature];
		else if (n->op == DTF_OP_RESHAPE)
			ex->x[i].d = ex->x[n->inputs[0]].d;
	}
	dtf_cuda_stream_wait(ctx, DTF_CUDA_COMPUTE, E_COPIED(set));
	for (int i = 0; i < ex->loss_end; i++)
		cuda_kernels[g->nodes[i].op].run(ex, i, c, set, stats);
	if (backward)
		for (int i = g->nforward; i < g->nnodes; i++)
			cuda_kernels[g->nodes[i].op].run(ex, i, c, set, stats);
	if (g->logits >= 0 && g->labels >= 0) {
		size_t rows;
		int classes, per;
		dtf_graph_xent_dims(g, g->logits, &rows, &classes, &per);
		int step = stats == DTF_CUDA_STATS_STEP;
		dtf_cuda_count_correct(ctx, rows, classes, D(ex, g->logits),
				       (const int32_t *)D(ex, g->labels),
				       (size_t)c->valid * (size_t)per, per,
				       step && ex->nstats >= 2
					       ? ex->d_grads + ex->nparams + 1
					       : NULL,
				       step ? NULL : &ex->d_eval[1]);
	}
	if (stats == DTF_CUDA_STATS_STEP && ex->nstats >= 3)
		dtf_cuda_fill(ctx, ex->d_grads + ex->nparams + 2, 1,
			      (float)c->valid);
	/* after the last reader of the set (count_correct reads labels) */
	dtf_cuda_event_record(ctx, DTF_CUDA_COMPUTE, E_USED(set));
}

void dtf_cuda_exec_download_grads(struct dtf_cuda_exec *ex)
{
	dtf_cuda_copy_async(ex->ctx, DTF_CUDA_COMPUTE, ex->h_grads, ex->d_grads,
			    ex->nparams * sizeof(float));
}

void dtf_cuda_exec_upload_grads(struct dtf_cuda_exec *ex)
{
	dtf_cuda_copy_async(ex->ctx, DTF_CUDA_COMPUTE, ex->d_grads, ex->h_grads,
			    ex->nparams * sizeof(float));
}

void dtf_cuda_exec_download_stats(struct dtf_cuda_exec *ex, float *dst)
{
	dtf_cuda_copy_async(ex->ctx, DTF_CUDA_COMPUTE, dst,
			    ex->d_grads + ex->nparams,
			    ex->nstats * sizeof(float));
}

int dtf_cuda_exec_wait(struct dtf_cuda_exec *ex)
{
	return dtf_cuda_sync(ex->ctx);
}

void dtf_cuda_exec_apply(struct dtf_cuda_exec *ex,
			 const struct dtf_backend_update *u)
{
	/* optimizer.c's arithmetic: step size in double, update in float */
	size_t n = ex->nparams;
	double lr = u->lr;
	if (u->adam) {
		double t = (double)u->iterations;
		float step = (float)(lr * sqrt(1.0 - pow(u->beta_2, t)) /
				     (1.0 - pow(u->beta_1, t)));
		dtf_cuda_adam(ex->ctx, n, ex->d_params, ex->d_grads, ex->d_slots,
			      ex->d_slots + n, step, (float)u->beta_1,
			      (float)u->beta_2, (float)u->epsilon);
	} else {
		dtf_cuda_sgd(ex->ctx, n, ex->d_params, ex->d_grads,
			     u->momentum != 0.0 ? ex->d_slots : NULL,
			     (float)lr, (float)u->momentum, u->nesterov);
	}
}

int dtf_cuda_exec_upload_params(struct dtf_cuda_exec *ex)
{
	return dtf_cuda_upload(ex->ctx, ex->d_params, ex->h_params,
			       ex->nparams * sizeof(float));
}

int dtf_cuda_exec_download_params(struct dtf_cuda_exec *ex)
{
	return dtf_cuda_download(ex->ctx, ex->h_params, ex->d_params,
				 ex->nparams * sizeof(float));
}

int dtf_cuda_exec_upload_slots(struct dtf_cuda_exec *ex, const float *slots)
{
	if (!ex->nslot_floats)
		return 0;
	return dtf_cuda_upload(ex->ctx, ex->d_slots, slots,
			       ex->nslot_floats * sizeof(float));
}

int dtf_cuda_exec_download_slots(struct dtf_cuda_exec *ex, float *slots)
{
	if (!ex->nslot_floats)
		return 0;
	return dtf_cuda_download(ex->ctx, slots, ex->d_slots,
				 ex->nslot_floats * sizeof(float));
}

int dtf_cuda_exec_eval_totals(struct dtf_cuda_exec *ex, double out[2])
{
	int rc = dtf_cuda_download(ex->ctx, out, ex->d_eval, 2 * sizeof(double));
	if (rc < 0)
		return rc;
	static const double zeros[2] = {0.0, 0.0};
	return dtf_cuda_upload(ex->ctx, ex->d_eval, zeros, sizeof(zeros));
}

int dtf_cuda_exec_read_node(struct dtf_cuda_exec *ex, int node, void *dst)
{
	return dtf_cuda_download(ex->ctx, dst, ex->x[node].d,
				 node_bytes(&ex->g->nodes[node]));
}
