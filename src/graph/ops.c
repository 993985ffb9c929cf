/*
 * ops.c - constructors of the wider op set (windows with dilation and
 * explicit padding, depthwise conv2d, average pooling, normalization,
 * elementwise and shape ops, activations, dense losses) and forward FLOPs
 * per node.
 *
 * Same rules as graph.c: a constructor checks its inputs' shapes, records
 * op and attributes, infers the output shape, and computes nothing.  A
 * shape error names both nodes and both shapes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph.h"
#include "graph/graph_priv.h"

static const struct dtf_shape *S(const struct dtf_graph *g, int id)
{
	return &g->nodes[id].shape;
}

static int node1(struct dtf_graph *g, enum dtf_op op, const char *name,
		 int x, const struct dtf_shape *shape)
{
	/* copy first: `shape` may point into g->nodes, which appending
	 * may move */
	struct dtf_shape s = *shape;
	int in[DTF_MAX_INPUTS] = {x, -1, -1, -1, -1};
	int id = dtf_graph_append_node(g, op, name, in);
	if (id >= 0)
		g->nodes[id].shape = s;
	return id;
}

static int node2(struct dtf_graph *g, enum dtf_op op, const char *name,
		 int a, int b, const struct dtf_shape *shape)
{
	struct dtf_shape s = *shape; /* as in node1 */
	int in[DTF_MAX_INPUTS] = {a, b, -1, -1, -1};
	int id = dtf_graph_append_node(g, op, name, in);
	if (id >= 0)
		g->nodes[id].shape = s;
	return id;
}

static int same_shape(const struct dtf_shape *a, const struct dtf_shape *b)
{
	if (a->rank != b->rank)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->d[i] != b->d[i])
			return 0;
	return 1;
}

static int is_float(const struct dtf_graph *g, int id)
{
	return g->nodes[id].dtype == DTF_FLOAT32;
}

/* ---- windows ------------------------------------------------------------ */

static int window_geom(const struct dtf_graph *g, const char *op, int x,
		       int w, int kh, int kw, int o,
		       const struct dtf_conv_attrs *a,
		       struct dtf_window_geom *geom)
{
	const struct dtf_shape *sx = S(g, x);
	char what[160];
	if (sx->rank != 4) {
		snprintf(what, sizeof(what), "%s needs a 4-D NHWC input", op);
		return dtf_graph_shape_error(g, what, x, -1);
	}
	*geom = (struct dtf_window_geom){
		.n = (int)sx->d[0], .h = (int)sx->d[1], .w = (int)sx->d[2],
		.c = (int)sx->d[3], .kh = kh, .kw = kw, .o = o,
		.stride_h = a->stride_h ? a->stride_h : 1,
		.stride_w = a->stride_w ? a->stride_w : 1,
		.dilation_h = a->dilation_h ? a->dilation_h : 1,
		.dilation_w = a->dilation_w ? a->dilation_w : 1,
		.pad_top = a->pad_top, .pad_left = a->pad_left,
		.pad_bottom = a->pad_bottom, .pad_right = a->pad_right};
	if (a->stride_h < 0 || a->stride_w < 0 || a->dilation_h < 0 ||
	    a->dilation_w < 0)
		return dtf_error(DTF_ERR_GRAPH,
				 "%s: strides and dilations must be >= 1", op);
	if (a->padding == DTF_PAD_EXPLICIT &&
	    (a->pad_top < 0 || a->pad_bottom < 0 || a->pad_left < 0 ||
	     a->pad_right < 0))
		return dtf_error(DTF_ERR_GRAPH,
				 "%s: explicit padding must be >= 0", op);
	if (dtf_window_geom_finish(geom, a->padding) < 0) {
		snprintf(what, sizeof(what),
			 "%s window (%d, %d) dilated by (%d, %d) is larger than its padded input",
			 op, kh, kw, geom->dilation_h, geom->dilation_w);
		return dtf_graph_shape_error(g, what, x, w);
	}
	return 0;
}

int dtf_graph_conv2d_ex(struct dtf_graph *g, const char *name, int x, int w,
			const struct dtf_conv_attrs *a)
{
	const struct dtf_shape *sx = S(g, x), *sw = S(g, w);
	if (sx->rank != 4)
		return dtf_graph_shape_error(g, "conv2d needs a 4-D NHWC input", x, -1);
	if (sw->rank != 4 || sw->d[2] != sx->d[3])
		return dtf_graph_shape_error(g, "conv2d filter (kh, kw, c, o) must match the input channels",
					     x, w);
	struct dtf_window_geom geom;
	int rc = window_geom(g, "conv2d", x, w, (int)sw->d[0], (int)sw->d[1],
			     (int)sw->d[3], a, &geom);
	if (rc < 0)
		return rc;
	struct dtf_shape s = {4, {geom.n, geom.oh, geom.ow, geom.o}};
	int id = node2(g, DTF_OP_CONV2D, name, x, w, &s);
	if (id >= 0)
		g->nodes[id].a.win.g = geom;
	return id;
}

int dtf_graph_depthwise_conv2d(struct dtf_graph *g, const char *name, int x,
			       int w, const struct dtf_conv_attrs *a)
{
	const struct dtf_shape *sx = S(g, x), *sw = S(g, w);
	if (sx->rank != 4)
		return dtf_graph_shape_error(g, "depthwise_conv2d needs a 4-D NHWC input",
					     x, -1);
	if (sw->rank != 4 || sw->d[2] != sx->d[3] || sw->d[3] < 1)
		return dtf_graph_shape_error(g, "depthwise_conv2d filter (kh, kw, c, multiplier) must match the input channels",
					     x, w);
	struct dtf_window_geom geom;
	int rc = window_geom(g, "depthwise_conv2d", x, w, (int)sw->d[0],
			     (int)sw->d[1], (int)(sw->d[2] * sw->d[3]), a, &geom);
	if (rc < 0)
		return rc;
	struct dtf_shape s = {4, {geom.n, geom.oh, geom.ow, geom.o}};
	int id = node2(g, DTF_OP_DEPTHWISE_CONV2D, name, x, w, &s);
	if (id >= 0)
		g->nodes[id].a.win.g = geom;
	return id;
}

int dtf_graph_avg_pool2d(struct dtf_graph *g, const char *name, int x,
			 int size_h, int size_w, int stride_h, int stride_w,
			 enum dtf_padding padding)
{
	struct dtf_conv_attrs a = {.stride_h = stride_h, .stride_w = stride_w,
				   .padding = padding};
	if (stride_h < 1 || stride_w < 1 || size_h < 1 || size_w < 1)
		return dtf_error(DTF_ERR_GRAPH,
				 "avg_pool2d '%s': size and strides must be >= 1",
				 name);
	struct dtf_window_geom geom;
	int rc = window_geom(g, "avg_pool2d", x, -1, size_h, size_w,
			     x >= 0 && S(g, x)->rank == 4 ? (int)S(g, x)->d[3] : 0,
			     &a, &geom);
	if (rc < 0)
		return rc;
	struct dtf_shape s = {4, {geom.n, geom.oh, geom.ow, geom.c}};
	int id = node1(g, DTF_OP_AVG_POOL2D, name, x, &s);
	if (id >= 0)
		g->nodes[id].a.win.g = geom;
	return id;
}

int dtf_graph_global_avg_pool(struct dtf_graph *g, const char *name, int x)
{
	const struct dtf_shape *sx = S(g, x);
	if (sx->rank != 4)
		return dtf_graph_shape_error(g, "global_avg_pool needs a 4-D NHWC input",
					     x, -1);
	struct dtf_shape s = {2, {sx->d[0], sx->d[3]}};
	return node1(g, DTF_OP_GLOBAL_AVG_POOL, name, x, &s);
}

/* ---- normalization ------------------------------------------------------ */

/* v must be a (c) vector matching the last dimension of x. */
static int check_channel_vector(const struct dtf_graph *g, const char *op,
				const char *what, int x, int v)
{
	const struct dtf_shape *sx = S(g, x), *sv = S(g, v);
	if (sv->rank == 1 && sx->rank >= 1 && sv->d[0] == sx->d[sx->rank - 1] &&
	    is_float(g, v))
		return 0;
	char msg[160];
	snprintf(msg, sizeof(msg),
		 "%s %s must be a float32 vector of the input's last dimension",
		 op, what);
	return dtf_graph_shape_error(g, msg, x, v);
}

int dtf_graph_batch_norm(struct dtf_graph *g, const char *name, int x,
			 int gamma, int beta, int moving_mean, int moving_var,
			 float momentum, float epsilon)
{
	const struct dtf_shape *sx = S(g, x);
	int rc;
	if (sx->rank < 2 || !is_float(g, x))
		return dtf_graph_shape_error(g, "batch_norm needs a float32 input of rank >= 2",
					     x, -1);
	if ((rc = check_channel_vector(g, "batch_norm", "gamma", x, gamma)) < 0 ||
	    (rc = check_channel_vector(g, "batch_norm", "beta", x, beta)) < 0 ||
	    (rc = check_channel_vector(g, "batch_norm", "moving_mean", x, moving_mean)) < 0 ||
	    (rc = check_channel_vector(g, "batch_norm", "moving_var", x, moving_var)) < 0)
		return rc;
	if (!(epsilon > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
		return dtf_error(DTF_ERR_GRAPH,
				 "batch_norm '%s': epsilon must be > 0 and momentum in [0, 1] (got %g, %g)",
				 name, epsilon, momentum);
	int stats[2] = {moving_mean, moving_var};
	for (int k = 0; k < 2; k++) {
		const struct dtf_node *v = &g->nodes[stats[k]];
		if (v->op != DTF_OP_VARIABLE)
			return dtf_error(DTF_ERR_GRAPH,
					 "batch_norm '%s': the moving statistics '%s' must be a variable, not %s",
					 name, v->name, dtf_op_name(v->op));
		for (int i = 0; i < g->nnodes; i++)
			for (int j = 0; j < dtf_op_ninputs(g->nodes[i].op); j++)
				if (g->nodes[i].inputs[j] == stats[k])
					return dtf_error(DTF_ERR_GRAPH,
							 "batch_norm '%s': the moving statistics '%s' are already used by '%s'",
							 name, v->name, g->nodes[i].name);
	}
	if (moving_mean == moving_var)
		return dtf_error(DTF_ERR_GRAPH,
				 "batch_norm '%s': moving_mean and moving_var are the same variable '%s'",
				 name, g->nodes[moving_mean].name);
	for (int k = 0; k < 2; k++) {
		g->nodes[stats[k]].a.var.trainable = 0;
		g->nodes[stats[k]].requires_grad = 0;
	}
	int in[DTF_MAX_INPUTS] = {x, gamma, beta, moving_mean, moving_var};
	struct dtf_shape shape = *sx; /* g->nodes may move */
	int id = dtf_graph_append_node(g, DTF_OP_BATCH_NORM, name, in);
	if (id < 0)
		return id;
	g->nodes[id].shape = shape;
	g->nodes[id].a.norm.epsilon = epsilon;
	g->nodes[id].a.norm.momentum = momentum;
	return id;
}

int dtf_graph_layer_norm(struct dtf_graph *g, const char *name, int x,
			 int gamma, int beta, float epsilon)
{
	const struct dtf_shape *sx = S(g, x);
	int rc;
	if (sx->rank < 2 || !is_float(g, x))
		return dtf_graph_shape_error(g, "layer_norm needs a float32 input of rank >= 2",
					     x, -1);
	if ((rc = check_channel_vector(g, "layer_norm", "gamma", x, gamma)) < 0 ||
	    (rc = check_channel_vector(g, "layer_norm", "beta", x, beta)) < 0)
		return rc;
	if (!(epsilon > 0.0f))
		return dtf_error(DTF_ERR_GRAPH,
				 "layer_norm '%s': epsilon must be > 0 (got %g)",
				 name, epsilon);
	int in[DTF_MAX_INPUTS] = {x, gamma, beta, -1, -1};
	struct dtf_shape shape = *sx; /* g->nodes may move */
	int id = dtf_graph_append_node(g, DTF_OP_LAYER_NORM, name, in);
	if (id < 0)
		return id;
	g->nodes[id].shape = shape;
	g->nodes[id].a.norm.epsilon = epsilon;
	return id;
}

/* ---- embedding ---------------------------------------------------------- */

int dtf_graph_embedding(struct dtf_graph *g, const char *name, int ids,
			int table)
{
	const struct dtf_shape *si = S(g, ids), *st = S(g, table);
	if (g->nodes[ids].dtype != DTF_INT32 || si->rank < 1 ||
	    si->rank >= DTF_MAX_RANK)
		return dtf_graph_shape_error(g, "embedding needs int32 ids (an int64 feature, or a bytes feature with dtype: int32) of rank 1 to 7",
					     ids, -1);
	if (!is_float(g, table) || st->rank != 2 || st->d[0] < 1 || st->d[1] < 1)
		return dtf_graph_shape_error(g, "embedding needs a float32 table of shape (vocab, d)",
					     table, -1);
	struct dtf_shape s = *si; /* g->nodes may move */
	s.d[s.rank++] = st->d[1];
	return node2(g, DTF_OP_EMBEDDING, name, ids, table, &s);
}

/* ---- elementwise and shape ---------------------------------------------- */

/* Is b's shape the trailing dimensions of a's (rank of b below a's)? */
static int is_suffix(const struct dtf_shape *a, const struct dtf_shape *b)
{
	if (b->rank < 1 || b->rank >= a->rank)
		return 0;
	for (int i = 0; i < b->rank; i++)
		if (b->d[i] != a->d[a->rank - b->rank + i])
			return 0;
	return 1;
}

int dtf_graph_add(struct dtf_graph *g, const char *name, int a, int b)
{
	if (!is_float(g, a) || !is_float(g, b))
		return dtf_graph_shape_error(g, "add needs float32 inputs", a, b);
	if (same_shape(S(g, a), S(g, b)))
		return node2(g, DTF_OP_ADD, name, a, b, S(g, a));
	/* a tensor of the other's trailing dimensions, on either side:
	 * bias_add broadcast over the leading ones (a (c) bias, a (t, c)
	 * position embedding over (n, t, c)) */
	const struct dtf_shape *sa = S(g, a), *sb = S(g, b);
	if (is_suffix(sa, sb))
		return node2(g, DTF_OP_BIAS_ADD, name, a, b, sa);
	if (is_suffix(sb, sa))
		return node2(g, DTF_OP_BIAS_ADD, name, b, a, sb);
	return dtf_graph_shape_error(g, "add needs inputs of the same shape (or one of the other's trailing dimensions, broadcast)",
				     a, b);
}

int dtf_graph_multiply(struct dtf_graph *g, const char *name, int a, int b)
{
	if (!is_float(g, a) || !is_float(g, b) || !same_shape(S(g, a), S(g, b)))
		return dtf_graph_shape_error(g, "multiply needs float32 inputs of the same shape",
					     a, b);
	return node2(g, DTF_OP_MULTIPLY, name, a, b, S(g, a));
}

int dtf_graph_concat(struct dtf_graph *g, const char *name, int a, int b,
		     int axis)
{
	const struct dtf_shape *sa = S(g, a), *sb = S(g, b);
	int ax = axis < 0 ? axis + sa->rank : axis;
	if (ax < 1 || ax >= sa->rank)
		return dtf_error(DTF_ERR_GRAPH,
				 "concat '%s': axis %d is out of range for '%s' of rank %d (axis 0, the batch, cannot be concatenated)",
				 name, axis, g->nodes[a].name, sa->rank);
	int ok = is_float(g, a) && is_float(g, b) && sa->rank == sb->rank;
	for (int i = 0; ok && i < sa->rank; i++)
		ok = i == ax || sa->d[i] == sb->d[i];
	if (!ok) {
		char what[128];
		snprintf(what, sizeof(what),
			 "concat along axis %d needs float32 inputs that match on every other axis",
			 ax);
		return dtf_graph_shape_error(g, what, a, b);
	}
	struct dtf_shape s = *sa;
	s.d[ax] = sa->d[ax] + sb->d[ax];
	int id = node2(g, DTF_OP_CONCAT, name, a, b, &s);
	if (id >= 0)
		g->nodes[id].a.cat.axis = ax;
	return id;
}

int dtf_graph_slice(struct dtf_graph *g, const char *name, int x, int axis,
		    int64_t begin, int64_t size)
{
	const struct dtf_shape *sx = S(g, x);
	enum dtf_dtype dt = g->nodes[x].dtype;
	int ax = axis < 0 ? axis + sx->rank : axis;
	char have[96];
	if (ax < 1 || ax >= sx->rank)
		return dtf_error(DTF_ERR_GRAPH,
				 "slice '%s': axis %d is out of range for '%s' of rank %d (axis 0, the batch, cannot be sliced)",
				 name, axis, g->nodes[x].name, sx->rank);
	if (dt != DTF_FLOAT32 && dt != DTF_INT32)
		return dtf_graph_shape_error(g, "slice needs a float32 or int32 input",
					     x, -1);
	int64_t len = sx->d[ax];
	if (size == -1)
		size = len - begin;
	if (begin < 0 || size < 1 || begin + size > len)
		return dtf_error(DTF_ERR_GRAPH,
				 "slice '%s': begin %lld, size %lld do not fit axis %d of '%s' %s (begin >= 0, size >= 1 or -1, begin + size <= %lld)",
				 name, (long long)begin, (long long)size, ax,
				 g->nodes[x].name,
				 dtf_shape_str(sx, have, sizeof(have)),
				 (long long)len);
	struct dtf_shape s = *sx;
	s.d[ax] = size;
	int id = node1(g, DTF_OP_SLICE, name, x, &s);
	if (id < 0)
		return id;
	g->nodes[id].dtype = dt;
	g->nodes[id].a.cat.axis = ax;
	g->nodes[id].a.cat.begin = begin;
	return id;
}

int dtf_graph_reshape(struct dtf_graph *g, const char *name, int x,
		      const int64_t *dims, int rank)
{
	const struct dtf_shape *sx = S(g, x);
	char want[160] = "(";
	size_t off = 1;
	for (int i = 0; i < rank && off < sizeof(want); i++)
		off += snprintf(want + off, sizeof(want) - off, "%s%lld",
				i ? ", " : "", (long long)dims[i]);
	if (off < sizeof(want))
		snprintf(want + off, sizeof(want) - off, ")");
	if (rank < 1 || rank > DTF_MAX_RANK)
		return dtf_error(DTF_ERR_GRAPH,
				 "reshape '%s': target shape %s must have 1 to %d dimensions",
				 name, want, DTF_MAX_RANK);
	struct dtf_shape s = {rank, {0}};
	int infer = -1;
	int64_t known = 1;
	for (int i = 0; i < rank; i++) {
		if (dims[i] == -1 && infer < 0) {
			infer = i;
			continue;
		}
		if (dims[i] < 1)
			return dtf_error(DTF_ERR_GRAPH,
					 "reshape '%s': target shape %s: dimensions must be >= 1, with at most one -1",
					 name, want);
		s.d[i] = dims[i];
		known *= dims[i];
	}
	int64_t numel = dtf_shape_numel(sx);
	char have[96];
	if (infer >= 0) {
		if (numel % known != 0)
			return dtf_error(DTF_ERR_GRAPH,
					 "reshape '%s': '%s' of shape %s (%lld elements) cannot be reshaped to %s",
					 name, g->nodes[x].name,
					 dtf_shape_str(sx, have, sizeof(have)),
					 (long long)numel, want);
		s.d[infer] = numel / known;
	} else if (known != numel) {
		return dtf_error(DTF_ERR_GRAPH,
				 "reshape '%s': '%s' of shape %s (%lld elements) cannot be reshaped to %s (%lld elements)",
				 name, g->nodes[x].name,
				 dtf_shape_str(sx, have, sizeof(have)),
				 (long long)numel, want, (long long)known);
	}
	if (s.d[0] != sx->d[0])
		return dtf_error(DTF_ERR_GRAPH,
				 "reshape '%s': dimension 0 of %s must stay the batch %lld of '%s' %s",
				 name, want, (long long)sx->d[0],
				 g->nodes[x].name,
				 dtf_shape_str(sx, have, sizeof(have)));
	int id = node1(g, DTF_OP_RESHAPE, name, x, &s);
	if (id >= 0)
		g->nodes[id].dtype = g->nodes[x].dtype;
	return id;
}

static int activation(struct dtf_graph *g, enum dtf_op op, const char *name,
		      int x)
{
	if (!is_float(g, x)) {
		char what[96];
		snprintf(what, sizeof(what), "%s needs a float32 input",
			 dtf_op_name(op));
		return dtf_graph_shape_error(g, what, x, -1);
	}
	return node1(g, op, name, x, S(g, x));
}

int dtf_graph_leaky_relu(struct dtf_graph *g, const char *name, int x,
			 float alpha)
{
	int id = activation(g, DTF_OP_LEAKY_RELU, name, x);
	if (id >= 0)
		g->nodes[id].a.act.alpha = alpha;
	return id;
}

int dtf_graph_elu(struct dtf_graph *g, const char *name, int x, float alpha)
{
	int id = activation(g, DTF_OP_ELU, name, x);
	if (id >= 0)
		g->nodes[id].a.act.alpha = alpha;
	return id;
}

int dtf_graph_gelu(struct dtf_graph *g, const char *name, int x,
		   int approximate)
{
	int id = activation(g, DTF_OP_GELU, name, x);
	if (id >= 0)
		g->nodes[id].a.act.approximate = approximate != 0;
	return id;
}

int dtf_graph_tanh(struct dtf_graph *g, const char *name, int x)
{
	return activation(g, DTF_OP_TANH, name, x);
}

int dtf_graph_sigmoid(struct dtf_graph *g, const char *name, int x)
{
	return activation(g, DTF_OP_SIGMOID, name, x);
}

int dtf_graph_softmax(struct dtf_graph *g, const char *name, int x)
{
	if (S(g, x)->rank < 1)
		return dtf_graph_shape_error(g, "softmax needs an input of rank >= 1",
					     x, -1);
	return activation(g, DTF_OP_SOFTMAX, name, x);
}

int dtf_graph_identity(struct dtf_graph *g, const char *name, int x)
{
	return activation(g, DTF_OP_IDENTITY, name, x);
}

/* ---- losses ------------------------------------------------------------- */

static int dense_loss(struct dtf_graph *g, enum dtf_op op, const char *name,
		      int logits, int labels, int need_rank2)
{
	const struct dtf_shape *sl = S(g, logits), *sy = S(g, labels);
	char what[160];
	if (sl->rank < 1 || (need_rank2 && sl->rank != 2) || !is_float(g, logits)) {
		snprintf(what, sizeof(what), "%s needs float32 logits of shape %s",
			 dtf_op_name(op), need_rank2 ? "(batch, classes)" : "(batch, ...)");
		return dtf_graph_shape_error(g, what, logits, -1);
	}
	if (!is_float(g, labels) || !same_shape(sl, sy)) {
		snprintf(what, sizeof(what),
			 "%s needs float32 labels of the logits' shape",
			 dtf_op_name(op));
		return dtf_graph_shape_error(g, what, labels, logits);
	}
	struct dtf_shape s = {0, {0}};
	int id = node2(g, op, name, logits, labels, &s);
	if (id < 0)
		return id;
	g->loss = id;
	g->logits = logits;
	g->labels = labels;
	return id;
}

int dtf_graph_softmax_xent(struct dtf_graph *g, const char *name, int logits,
			   int labels, float label_smoothing)
{
	if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
		return dtf_error(DTF_ERR_GRAPH,
				 "softmax_cross_entropy '%s': label_smoothing must be in [0, 1] (got %g)",
				 name, label_smoothing);
	int id = dense_loss(g, DTF_OP_SOFTMAX_XENT, name, logits, labels, 1);
	if (id >= 0)
		g->nodes[id].a.loss.label_smoothing = label_smoothing;
	return id;
}

int dtf_graph_sigmoid_xent(struct dtf_graph *g, const char *name, int logits,
			   int labels)
{
	return dense_loss(g, DTF_OP_SIGMOID_XENT, name, logits, labels, 0);
}

int dtf_graph_mean_squared_error(struct dtf_graph *g, const char *name,
				 int predictions, int labels)
{
	return dense_loss(g, DTF_OP_MSE, name, predictions, labels, 0);
}

/* ---- attention ---------------------------------------------------------- */

int dtf_graph_causal_self_attention(struct dtf_graph *g, const char *name,
				    int qkv, int heads, float dropout)
{
	const struct dtf_shape *sq = S(g, qkv);
	if (sq->rank != 3 || !is_float(g, qkv) || sq->d[2] % 3 != 0 ||
	    sq->d[2] == 0)
		return dtf_graph_shape_error(g, "causal_self_attention needs a float32 qkv input of shape (batch, time, 3 * channels)",
					     qkv, -1);
	int64_t c = sq->d[2] / 3;
	if (heads < 1 || c % heads != 0)
		return dtf_error(DTF_ERR_GRAPH,
				 "causal_self_attention '%s': heads (%d) must be >= 1 and divide the channels (%lld)",
				 name, heads, (long long)c);
	if (dropout != 0.0f)
		return dtf_error(DTF_ERR_GRAPH,
				 "causal_self_attention '%s': dropout %g is not implemented (only 0)",
				 name, dropout);
	struct dtf_shape s = {3, {sq->d[0], sq->d[1], c}};
	int id = node1(g, DTF_OP_CAUSAL_SELF_ATTENTION, name, qkv, &s);
	if (id >= 0)
		g->nodes[id].a.attn.heads = heads;
	return id;
}

/* ---- FLOPs -------------------------------------------------------------- */

int64_t dtf_graph_node_flops(const struct dtf_graph *g, int id)
{
	const struct dtf_node *n = &g->nodes[id];
	const struct dtf_window_geom *w = &n->a.win.g;
	int64_t out = dtf_shape_numel(&n->shape);
	int64_t in0 = n->inputs[0] >= 0 ? dtf_shape_numel(S(g, n->inputs[0])) : 0;
	int64_t win_out = (int64_t)w->n * w->oh * w->ow;
	int64_t f = dtf_op_flops_factor(n->op);

	/* the FLOP rule of the op's row (graph.h): factor times the basis */
	switch (dtf_op_flops_basis(n->op)) {
	case DTF_FLOPS_ZERO:
		return 0;
	case DTF_FLOPS_OUT:
		return f * out;
	case DTF_FLOPS_IN0:
		return f * in0;
	case DTF_FLOPS_CONV:
		return f * 2 * win_out * w->o * w->kh * w->kw * w->c;
	case DTF_FLOPS_DWCONV:
		return f * 2 * win_out * w->o * w->kh * w->kw;
	case DTF_FLOPS_POOL:
		return f * win_out * w->c * w->kh * w->kw;
	case DTF_FLOPS_MATMUL: {
		int m, cols, k;
		dtf_graph_matmul_dims(g, n, &m, &cols, &k);
		return f * 2 * (int64_t)m * cols * k;
	}
	case DTF_FLOPS_GELU: /* erf form: scale, erf, add, 2 multiplies */
		return (n->a.act.approximate ? 9 : 5) * out;
	case DTF_FLOPS_GELU_GRAD:
		return (n->a.act.approximate ? 14 : 9) * out;
	case DTF_FLOPS_ATTENTION: {
		const struct dtf_shape *sq = S(g, n->inputs[0]);
		return f * sq->d[0] * sq->d[1] * sq->d[1] * (sq->d[2] / 3);
	}
	}
	return 0;
}
