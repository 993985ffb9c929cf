/*
 * graph.c - graph construction, shape inference and topological order.
 *
 * Node ids are indices into one growing array; inputs refer to ids.  The
 * array only grows while building (no step ever builds), so its reallocation
 * is a build-time cost.
 */
#include "graph/graph.h"
#include "graph/graph_priv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"

/* The generic columns of the op table (graph.h); the gradient column is
 * autodiff.c's, the kernels are each backend's. */
static const struct {
	const char *name;
	int ninputs;
	int inplace;
	enum dtf_shape_rule shape;
	enum dtf_flops_basis flops;
	int factor;
} op_table[] = {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) \
	{#name, nin, inplace, DTF_SHAPE_##shape, DTF_FLOPS_##flops, factor},
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
};
_Static_assert(sizeof(op_table) / sizeof(op_table[0]) == DTF_OP_COUNT_,
	       "op table out of step with enum dtf_op");

const char *dtf_op_name(enum dtf_op op) { return op_table[op].name; }
int dtf_op_ninputs(enum dtf_op op) { return op_table[op].ninputs; }
int dtf_op_inplace_input(enum dtf_op op) { return op_table[op].inplace; }
enum dtf_shape_rule dtf_op_shape_rule(enum dtf_op op) { return op_table[op].shape; }
enum dtf_flops_basis dtf_op_flops_basis(enum dtf_op op) { return op_table[op].flops; }
int dtf_op_flops_factor(enum dtf_op op) { return op_table[op].factor; }

int64_t dtf_shape_numel(const struct dtf_shape *s)
{
	int64_t n = 1;
	for (int i = 0; i < s->rank; i++)
		n *= s->d[i];
	return n;
}

char *dtf_shape_str(const struct dtf_shape *s, char *buf, size_t size)
{
	size_t off = 0;
	off += snprintf(buf + off, size - off, "(");
	for (int i = 0; i < s->rank && off < size; i++)
		off += snprintf(buf + off, size - off, "%s%lld", i ? ", " : "",
				(long long)s->d[i]);
	if (off < size)
		snprintf(buf + off, size - off, ")");
	return buf;
}

int dtf_graph_init(struct dtf_graph *g, int batch)
{
	memset(g, 0, sizeof(*g));
	g->batch = batch;
	g->loss = g->logits = g->labels = -1;
	g->cap = 64;
	g->nodes = dtf_calloc((size_t)g->cap, sizeof(*g->nodes));
	if (!g->nodes)
		return dtf_error(DTF_ERR_NOMEM, "out of memory building graph");
	return 0;
}

void dtf_graph_deinit(struct dtf_graph *g)
{
	dtf_free(g->nodes);
	dtf_free(g->var_grad);
	memset(g, 0, sizeof(*g));
}

int dtf_graph_find(const struct dtf_graph *g, const char *name)
{
	for (int i = 0; i < g->nnodes; i++)
		if (strcmp(g->nodes[i].name, name) == 0)
			return i;
	return -1;
}

/* Append a node with inputs in[0 .. the op's count); they must already
 * exist.  Returns its id. */
static int add_node_v(struct dtf_graph *g, enum dtf_op op, const char *name,
		      const int *in)
{
	if (name[0] && dtf_graph_find(g, name) >= 0)
		return dtf_error(DTF_ERR_GRAPH, "duplicate node name '%s'",
				 name);
	if (g->nnodes == g->cap) {
		int cap = g->cap * 2;
		struct dtf_node *n =
			dtf_realloc(g->nodes, (size_t)cap * sizeof(*n));
		if (!n)
			return dtf_error(DTF_ERR_NOMEM,
					 "out of memory building graph");
		g->nodes = n;
		g->cap = cap;
	}
	int id = g->nnodes++;
	struct dtf_node *n = &g->nodes[id];
	memset(n, 0, sizeof(*n));
	n->op = op;
	n->layer = -1;
	snprintf(n->name, sizeof(n->name), "%s", name);
	for (int i = 0; i < DTF_MAX_INPUTS; i++)
		n->inputs[i] = i < op_table[op].ninputs ? in[i] : -1;
	n->dtype = DTF_FLOAT32;
	for (int i = 0; i < op_table[op].ninputs; i++) {
		DTF_ASSERT(n->inputs[i] >= 0 && n->inputs[i] < id);
		n->requires_grad |= g->nodes[n->inputs[i]].requires_grad;
	}
	return id;
}

static int add_node(struct dtf_graph *g, enum dtf_op op, const char *name,
		    int in0, int in1)
{
	int in[DTF_MAX_INPUTS] = {in0, in1, -1, -1, -1};
	return add_node_v(g, op, name, in);
}

static int shape_error(const struct dtf_graph *g, const char *what, int a,
		       int b)
{
	char sa[96], sb[96];
	const struct dtf_node *na = &g->nodes[a];
	if (b < 0)
		return dtf_error(DTF_ERR_GRAPH, "%s: '%s' has shape %s", what,
				 na->name,
				 dtf_shape_str(&na->shape, sa, sizeof(sa)));
	const struct dtf_node *nb = &g->nodes[b];
	return dtf_error(DTF_ERR_GRAPH, "%s: '%s' has shape %s but '%s' has shape %s",
			 what, na->name, dtf_shape_str(&na->shape, sa, sizeof(sa)),
			 nb->name, dtf_shape_str(&nb->shape, sb, sizeof(sb)));
}

int dtf_graph_input(struct dtf_graph *g, const char *name, int feature,
		    const struct dtf_feature_spec *spec)
{
	int id = add_node(g, DTF_OP_INPUT, name, -1, -1);
	if (id < 0)
		return id;
	struct dtf_node *n = &g->nodes[id];
	n->shape.rank = spec->rank + 1;
	n->shape.d[0] = g->batch;
	for (int i = 0; i < spec->rank; i++)
		n->shape.d[i + 1] = spec->shape[i];
	n->dtype = spec->dtype;
	n->a.in.feature = feature;
	return id;
}

int dtf_graph_variable(struct dtf_graph *g, const char *name,
		       const struct dtf_shape *shape, enum dtf_init init,
		       int fan_in, int fan_out)
{
	int id = add_node(g, DTF_OP_VARIABLE, name, -1, -1);
	if (id < 0)
		return id;
	struct dtf_node *n = &g->nodes[id];
	n->shape = *shape;
	n->requires_grad = 1;
	n->a.var.offset = g->nparams;
	n->a.var.init = init;
	n->a.var.fan_in = fan_in;
	n->a.var.fan_out = fan_out;
	n->a.var.trainable = 1;
	/* keep each variable 16-float aligned inside the vector (64 bytes) */
	size_t numel = (size_t)dtf_shape_numel(shape);
	g->nparams += (numel + 15) / 16 * 16;
	return id;
}

int dtf_graph_variable_ex(struct dtf_graph *g, const char *name,
			  const struct dtf_shape *shape,
			  const struct dtf_var_opts *o)
{
	int64_t numel = dtf_shape_numel(shape);
	if (numel > ((int64_t)1 << 34))
		return dtf_error(DTF_ERR_GRAPH,
				 "variable '%s' has %lld elements (more than 2^34)",
				 name, (long long)numel);
	int id = dtf_graph_variable(g, name, shape, DTF_INIT_ZEROS, 0, 0);
	if (id < 0)
		return id;
	struct dtf_node *n = &g->nodes[id];
	n->a.var.init_ex = 1;
	n->a.var.spec = o->init;
	n->a.var.trainable = o->trainable && !o->constant;
	n->requires_grad = n->a.var.trainable;
	n->a.var.group = o->group;
	n->a.var.constant = o->constant;
	n->a.var.values = o->values;
	n->a.var.nvalues = o->nvalues;
	return id;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);
	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

enum dtf_var_group dtf_graph_var_group(const struct dtf_node *n)
{
	if (n->a.var.group != DTF_GROUP_AUTO)
		return n->a.var.group;
	if (ends_with(n->name, "gamma") || ends_with(n->name, "beta") ||
	    ends_with(n->name, "moving_mean") ||
	    ends_with(n->name, "moving_variance"))
		return DTF_GROUP_NORM;
	return n->shape.rank <= 1 ? DTF_GROUP_BIAS : DTF_GROUP_KERNEL;
}

void dtf_graph_fans(const struct dtf_shape *s, double *fan_in,
		    double *fan_out)
{
	if (s->rank == 0) {
		*fan_in = *fan_out = 1;
	} else if (s->rank == 1) {
		*fan_in = *fan_out = (double)s->d[0];
	} else {
		double rf = 1;
		for (int i = 0; i < s->rank - 2; i++)
			rf *= (double)s->d[i];
		*fan_in = rf * (double)s->d[s->rank - 2];
		*fan_out = rf * (double)s->d[s->rank - 1];
	}
}

int dtf_graph_conv2d(struct dtf_graph *g, const char *name, int x, int w,
		     int stride_h, int stride_w, enum dtf_padding padding)
{
	struct dtf_conv_attrs a = {.stride_h = stride_h, .stride_w = stride_w,
				   .dilation_h = 1, .dilation_w = 1,
				   .padding = padding};
	return dtf_graph_conv2d_ex(g, name, x, w, &a);
}

int dtf_graph_max_pool2d(struct dtf_graph *g, const char *name, int x,
			 int size_h, int size_w, int stride_h, int stride_w,
			 enum dtf_padding padding)
{
	const struct dtf_node *nx = &g->nodes[x];
	if (nx->shape.rank != 4)
		return shape_error(g, "max_pool2d needs a 4-D NHWC input", x, -1);
	struct dtf_window_geom geom = {
		.n = (int)nx->shape.d[0], .h = (int)nx->shape.d[1],
		.w = (int)nx->shape.d[2], .c = (int)nx->shape.d[3],
		.kh = size_h, .kw = size_w, .o = (int)nx->shape.d[3],
		.stride_h = stride_h, .stride_w = stride_w,
		.dilation_h = 1, .dilation_w = 1};
	if (dtf_window_geom_finish(&geom, padding) < 0)
		return shape_error(g, "max_pool2d window larger than its input",
				   x, -1);
	int id = add_node(g, DTF_OP_MAX_POOL2D, name, x, -1);
	if (id < 0)
		return id;
	struct dtf_node *n = &g->nodes[id];
	n->a.win.g = geom;
	n->shape = (struct dtf_shape){4, {geom.n, geom.oh, geom.ow, geom.c}};
	return id;
}

int dtf_graph_matmul(struct dtf_graph *g, const char *name, int x, int w)
{
	return dtf_graph_matmul_ex(g, name, x, w, 0);
}

int dtf_graph_matmul_ex(struct dtf_graph *g, const char *name, int x, int w,
			int transpose_b)
{
	const struct dtf_node *nx = &g->nodes[x], *nw = &g->nodes[w];
	if (nx->shape.rank < 2 || nx->dtype != DTF_FLOAT32)
		return shape_error(g, "dense needs a float32 input of rank 2 or more (batch, ..., features)",
				   x, -1);
	int64_t k = nx->shape.d[nx->shape.rank - 1];
	if (nw->shape.rank != 2 || nw->dtype != DTF_FLOAT32 ||
	    nw->shape.d[transpose_b ? 1 : 0] != k)
		return shape_error(g, transpose_b
					      ? "matmul with transpose_b needs a (units, features) weight whose features match the input's last dimension"
					      : "matmul inner dimensions differ",
				   x, w);
	/* add_node may move g->nodes: nx and nw are not read after it */
	struct dtf_shape s = nx->shape;
	s.d[s.rank - 1] = nw->shape.d[transpose_b ? 0 : 1];
	int id = add_node(g, DTF_OP_MATMUL, name, x, w);
	if (id < 0)
		return id;
	g->nodes[id].shape = s;
	g->nodes[id].a.mm.trans_b = transpose_b != 0;
	return id;
}

void dtf_graph_matmul_dims(const struct dtf_graph *g, const struct dtf_node *n,
			   int *m, int *cols, int *k)
{
	const struct dtf_shape *sa = &g->nodes[n->inputs[0]].shape;
	int64_t alast = sa->d[sa->rank - 1];
	int64_t arows = alast ? dtf_shape_numel(sa) / alast : 0;
	*cols = (int)n->shape.d[n->shape.rank - 1];
	*m = *cols ? (int)(dtf_shape_numel(&n->shape) / *cols) : 0;
	*k = (int)(n->a.mm.trans_a ? arows : alast);
}

int dtf_graph_bias_add(struct dtf_graph *g, const char *name, int x, int b)
{
	const struct dtf_node *nx = &g->nodes[x], *nb = &g->nodes[b];
	if (nb->shape.rank != 1 ||
	    nb->shape.d[0] != nx->shape.d[nx->shape.rank - 1])
		return shape_error(g, "bias must match the last dimension", x, b);
	int id = add_node(g, DTF_OP_BIAS_ADD, name, x, b);
	if (id < 0)
		return id;
	g->nodes[id].shape = g->nodes[x].shape;
	return id;
}

static int unary_same_shape(struct dtf_graph *g, enum dtf_op op,
			    const char *name, int x)
{
	int id = add_node(g, op, name, x, -1);
	if (id < 0)
		return id;
	g->nodes[id].shape = g->nodes[x].shape;
	return id;
}

int dtf_graph_relu(struct dtf_graph *g, const char *name, int x)
{
	return unary_same_shape(g, DTF_OP_RELU, name, x);
}

int dtf_graph_dropout(struct dtf_graph *g, const char *name, int x,
		      float rate)
{
	int id = unary_same_shape(g, DTF_OP_DROPOUT, name, x);
	if (id < 0)
		return id;
	g->nodes[id].a.drop.rate = rate;
	/* from the name, so the layers and graph forms of a model (and any
	 * order of declaration) drop the same units */
	uint32_t h = 2166136261u;
	for (const char *c = name; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	g->nodes[id].a.drop.salt = h;
	return id;
}

int dtf_graph_flatten(struct dtf_graph *g, const char *name, int x)
{
	int id = add_node(g, DTF_OP_RESHAPE, name, x, -1);
	if (id < 0)
		return id;
	const struct dtf_shape *s = &g->nodes[x].shape;
	g->nodes[id].shape =
		(struct dtf_shape){2, {s->d[0], dtf_shape_numel(s) / s->d[0]}};
	g->nodes[id].dtype = g->nodes[x].dtype;
	return id;
}

int dtf_graph_sparse_softmax_xent(struct dtf_graph *g, const char *name,
				  int logits, int labels)
{
	const struct dtf_node *nl = &g->nodes[logits], *ny = &g->nodes[labels];
	if (nl->shape.rank < 2 || nl->dtype != DTF_FLOAT32)
		return shape_error(g, "sparse_softmax_cross_entropy needs float32 logits of shape (batch, ..., classes)",
				   logits, -1);
	int ok = ny->dtype == DTF_INT32 && ny->shape.rank == nl->shape.rank - 1;
	for (int i = 0; ok && i < ny->shape.rank; i++)
		ok = ny->shape.d[i] == nl->shape.d[i];
	if (!ok)
		return shape_error(g, nl->shape.rank == 2
					      ? "sparse_softmax_cross_entropy needs int64 labels of shape (batch)"
					      : "sparse_softmax_cross_entropy needs int32 labels of the logits' shape without the classes",
				   labels, logits);
	int id = add_node(g, DTF_OP_SPARSE_SOFTMAX_XENT, name, logits, labels);
	if (id < 0)
		return id;
	g->nodes[id].shape = (struct dtf_shape){0, {0}};
	g->loss = id;
	g->logits = logits;
	g->labels = labels;
	return id;
}

void dtf_graph_xent_dims(const struct dtf_graph *g, int logits, size_t *rows,
			 int *classes, int *per)
{
	const struct dtf_shape *s = &g->nodes[logits].shape;
	int64_t c = s->d[s->rank - 1];
	*classes = (int)c;
	*rows = c ? (size_t)(dtf_shape_numel(s) / c) : 0;
	*per = s->d[0] ? (int)(*rows / (size_t)s->d[0]) : 1;
	if (*per < 1)
		*per = 1;
}

int dtf_graph_loss_positions(const struct dtf_graph *g)
{
	size_t rows;
	int classes, per = 1;
	if (g->loss >= 0 && g->nodes[g->loss].op == DTF_OP_SPARSE_SOFTMAX_XENT)
		dtf_graph_xent_dims(g, g->logits, &rows, &classes, &per);
	return per;
}

size_t dtf_graph_num_params(const struct dtf_graph *g)
{
	size_t n = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i].op == DTF_OP_VARIABLE &&
		    g->nodes[i].a.var.trainable)
			n += (size_t)dtf_shape_numel(&g->nodes[i].shape);
	return n;
}

size_t dtf_graph_num_nontrainable(const struct dtf_graph *g)
{
	size_t n = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i].op == DTF_OP_VARIABLE &&
		    !g->nodes[i].a.var.trainable &&
		    !g->nodes[i].a.var.constant)
			n += (size_t)dtf_shape_numel(&g->nodes[i].shape);
	return n;
}

/* Keras's variance scaling divides a truncated normal's stddev by this, the
 * stddev of a unit normal truncated to [-2, 2]. */
#define TRUNC_STDDEV 0.87962566103423978

static uint64_t fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static void init_variable(const struct dtf_node *n, struct dtf_philox_key key,
			  float *p)
{
	size_t numel = (size_t)dtf_shape_numel(&n->shape);
	uint64_t h = fnv1a64(n->name);
	uint32_t a = (uint32_t)h, b = (uint32_t)(h >> 32);
	struct dtf_init_spec spec = n->a.var.spec;
	double fan_in, fan_out;
	if (!n->a.var.init_ex) {
		spec.kind = n->a.var.init == DTF_INIT_GLOROT_UNIFORM
				    ? DTF_INIT_KIND_GLOROT_UNIFORM
				    : DTF_INIT_KIND_ZEROS;
		fan_in = n->a.var.fan_in;
		fan_out = n->a.var.fan_out;
	} else {
		dtf_graph_fans(&n->shape, &fan_in, &fan_out);
	}
	if (n->a.var.constant) {
		for (size_t i = 0; i < numel; i++)
			p[i] = n->a.var.nvalues == 1 ? n->a.var.values[0]
						     : n->a.var.values[i];
		return;
	}
	float l;
	switch (spec.kind) {
	case DTF_INIT_KIND_ZEROS:
		memset(p, 0, numel * sizeof(float));
		break;
	case DTF_INIT_KIND_ONES:
	case DTF_INIT_KIND_CONSTANT: {
		float v = spec.kind == DTF_INIT_KIND_ONES ? 1.0f : spec.value;
		for (size_t i = 0; i < numel; i++)
			p[i] = v;
		break;
	}
	case DTF_INIT_KIND_GLOROT_UNIFORM:
		l = (float)sqrt(6.0 / (fan_in + fan_out));
		dtf_rng_uniform(key, a, b, 0, -l, l, p, numel);
		break;
	case DTF_INIT_KIND_HE_UNIFORM:
		l = (float)sqrt(6.0 / fan_in);
		dtf_rng_uniform(key, a, b, 0, -l, l, p, numel);
		break;
	case DTF_INIT_KIND_GLOROT_NORMAL:
		dtf_rng_normal(key, a, b, 0, 0.0f,
			       (float)(sqrt(2.0 / (fan_in + fan_out)) /
				       TRUNC_STDDEV),
			       1, p, numel);
		break;
	case DTF_INIT_KIND_HE_NORMAL:
		dtf_rng_normal(key, a, b, 0, 0.0f,
			       (float)(sqrt(2.0 / fan_in) / TRUNC_STDDEV), 1, p,
			       numel);
		break;
	case DTF_INIT_KIND_TRUNCATED_NORMAL:
		dtf_rng_normal(key, a, b, 0, spec.mean, spec.stddev, 1, p,
			       numel);
		break;
	case DTF_INIT_KIND_RANDOM_NORMAL:
		dtf_rng_normal(key, a, b, 0, spec.mean, spec.stddev, 0, p,
			       numel);
		break;
	}
}

void dtf_graph_init_params(const struct dtf_graph *g, uint64_t seed,
			   float *params)
{
	struct dtf_philox_key key = dtf_philox_make_key(seed, DTF_RNG_INIT);
	memset(params, 0, g->nparams * sizeof(float));
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_VARIABLE)
			init_variable(n, key, params + n->a.var.offset);
	}
}

/* ---- topological order ------------------------------------------------- */

static int report_cycle(const struct dtf_graph *g, const int *indeg)
{
	/* Every node left with indegree > 0 lies on or after a cycle; walk
	 * inputs that are still unresolved until a node repeats. */
	int start = -1;
	for (int i = 0; i < g->nnodes && start < 0; i++)
		if (indeg[i] > 0)
			start = i;
	char path[1024] = "";
	int *seen = dtf_calloc((size_t)g->nnodes, sizeof(int));
	if (!seen)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int cur = start;
	while (!seen[cur]) {
		seen[cur] = 1;
		const struct dtf_node *n = &g->nodes[cur];
		for (int k = 0; k < op_table[n->op].ninputs; k++)
			if (indeg[n->inputs[k]] > 0) {
				cur = n->inputs[k];
				break;
			}
	}
	/* cur is on the cycle: print it following inputs, reversed so
	 * arrows point from producer to consumer */
	int ids[256], len = 0, c = cur;
	do {
		ids[len++] = c;
		const struct dtf_node *n = &g->nodes[c];
		for (int k = 0; k < op_table[n->op].ninputs; k++)
			if (indeg[n->inputs[k]] > 0) {
				c = n->inputs[k];
				break;
			}
	} while (c != cur && len < 255);
	size_t off = 0;
	for (int i = len - 1; i >= 0 && off < sizeof(path); i--)
		off += snprintf(path + off, sizeof(path) - off, "%s -> ",
				g->nodes[ids[i]].name);
	if (off < sizeof(path))
		snprintf(path + off, sizeof(path) - off, "%s",
			 g->nodes[ids[len - 1]].name);
	dtf_free(seen);
	return dtf_error(DTF_ERR_GRAPH, "the graph has a cycle: %s", path);
}

int dtf_graph_toposort(struct dtf_graph *g)
{
	int n = g->nnodes, rc = 0;
	int *indeg = dtf_calloc((size_t)n, sizeof(int));
	int *order = dtf_calloc((size_t)n, sizeof(int));
	int *newid = dtf_calloc((size_t)n, sizeof(int));
	struct dtf_node *sorted = dtf_calloc((size_t)g->cap, sizeof(*sorted));
	if (!indeg || !order || !newid || !sorted) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	for (int i = 0; i < n; i++)
		indeg[i] = op_table[g->nodes[i].op].ninputs;
	/* Stable Kahn: repeatedly take the lowest-numbered ready node.  O(n^2)
	 * in the worst case, fine for graphs of thousands of nodes. */
	int done = 0;
	char *taken = (char *)newid; /* reuse as a flag array first */
	memset(taken, 0, (size_t)n * sizeof(int));
	while (done < n) {
		int pick = -1;
		for (int i = 0; i < n && pick < 0; i++)
			if (!taken[i] && indeg[i] == 0)
				pick = i;
		if (pick < 0) {
			rc = report_cycle(g, indeg);
			goto out_free;
		}
		taken[pick] = 1;
		order[done++] = pick;
		for (int j = 0; j < n; j++) {
			const struct dtf_node *nj = &g->nodes[j];
			for (int k = 0; k < op_table[nj->op].ninputs; k++)
				if (nj->inputs[k] == pick)
					indeg[j]--;
		}
	}
	for (int i = 0; i < n; i++)
		newid[order[i]] = i;
	for (int i = 0; i < n; i++) {
		sorted[i] = g->nodes[order[i]];
		for (int k = 0; k < op_table[sorted[i].op].ninputs; k++)
			sorted[i].inputs[k] = newid[sorted[i].inputs[k]];
	}
	if (g->loss >= 0)
		g->loss = newid[g->loss];
	if (g->logits >= 0)
		g->logits = newid[g->logits];
	if (g->labels >= 0)
		g->labels = newid[g->labels];
	dtf_free(g->nodes);
	g->nodes = sorted;
	sorted = NULL;
out_free:
	dtf_free(sorted);
	dtf_free(newid);
	dtf_free(order);
	dtf_free(indeg);
	return rc;
}

/* ---- for the other graph files (graph_priv.h) --------------------------- */

int dtf_graph_append_node(struct dtf_graph *g, enum dtf_op op,
			  const char *name, const int *in)
{
	return add_node_v(g, op, name, in);
}

int dtf_graph_shape_error(const struct dtf_graph *g, const char *what, int a,
			  int b)
{
	return shape_error(g, what, a, b);
}

