/*
 * lower.c - the job's model (layers or graph form) to graph ops.
 *
 * Layers are lowered in file order; a layer's inputs are the previous
 * layer, or the earlier layers and features it names.  Graph-form nodes
 * may be declared in any order: their names are resolved, a depth-first
 * walk from each node in file order puts them in dependency order (so a
 * file already in that order keeps it) and finds cycles, then the nodes
 * are built in that order.  Errors from the graph constructors are
 * re-reported with the layer's or node's position in the job file.
 */
#include "graph/lower.h"

#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "graph/lower_priv.h"

static int layer_error(const struct dtf_layer *l, int rc)
{
	if (rc == -DTF_ERR_NOMEM)
		return rc;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
	return dtf_error(DTF_ERR_CONFIG, "%s: %s '%s': %s", l->where,
			 l->op_form ? "node" : "layer", l->name, msg);
}

static int unsupported(const struct dtf_layer *l, const char *what)
{
	return dtf_error(DTF_ERR_GRAPH, "%s is not supported", what);
}

/* Apply a unary op of the activation kind `act` to x. */
static int apply_activation(struct dtf_graph *g, const char *name, int x,
			    enum dtf_activation act, float alpha,
			    int approximate)
{
	switch (act) {
	case DTF_ACT_NONE:
		return x;
	case DTF_ACT_RELU:
		return dtf_graph_relu(g, name, x);
	case DTF_ACT_LEAKY_RELU:
		return dtf_graph_leaky_relu(g, name, x, alpha);
	case DTF_ACT_ELU:
		return dtf_graph_elu(g, name, x, alpha);
	case DTF_ACT_GELU:
		return dtf_graph_gelu(g, name, x, approximate);
	case DTF_ACT_TANH:
		return dtf_graph_tanh(g, name, x);
	case DTF_ACT_SIGMOID:
		return dtf_graph_sigmoid(g, name, x);
	case DTF_ACT_SOFTMAX:
		return dtf_graph_softmax(g, name, x);
	}
	return x;
}

/* The `activation:` of a conv2d, depthwise_conv2d or dense layer, with
 * Keras's defaults for the parameterised ones. */
static int activation(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	static const char *const names[] = {
		"", "relu", "leaky_relu", "elu", "gelu", "tanh", "sigmoid",
		"softmax"};
	if (l->activation == DTF_ACT_NONE)
		return x;
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/%s", l->name, names[l->activation]);
	return apply_activation(g, name, x, l->activation,
				l->activation == DTF_ACT_ELU ? 1.0f : 0.3f, 0);
}

static const float one_f = 1.0f, zero_f = 0.0f;

/* "<layer>/<what>" variable with the given initialiser and group. */
static int layer_var(struct dtf_graph *g, const struct dtf_layer *l,
		     const char *what, const struct dtf_shape *s,
		     enum dtf_init_kind init, enum dtf_var_group group)
{
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/%s", l->name, what);
	struct dtf_var_opts o = {.init = {.kind = init}, .trainable = 1,
				 .group = group};
	return dtf_graph_variable_ex(g, name, s, &o);
}

/* A constant of ones or zeros standing for gamma / beta that Keras would
 * not create (scale: false, center: false). */
static int layer_const(struct dtf_graph *g, const struct dtf_layer *l,
		       const char *what, const struct dtf_shape *s,
		       const float *value)
{
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/%s", l->name, what);
	struct dtf_var_opts o = {.constant = 1, .values = value, .nvalues = 1};
	return dtf_graph_variable_ex(g, name, s, &o);
}

static int bias(struct dtf_graph *g, const struct dtf_layer *l, int x, int c)
{
	if (!l->use_bias)
		return x;
	char name[2 * DTF_NAME_MAX];
	struct dtf_shape s = {1, {c}};
	int b = layer_var(g, l, "bias", &s, DTF_INIT_KIND_ZEROS, DTF_GROUP_BIAS);
	if (b < 0)
		return b;
	snprintf(name, sizeof(name), "%s/bias_add", l->name);
	return dtf_graph_bias_add(g, name, x, b);
}

static int kernel(struct dtf_graph *g, const struct dtf_layer *l,
		  const struct dtf_shape *ks)
{
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/kernel", l->name);
	struct dtf_var_opts o = {.init = l->init, .trainable = 1,
				 .group = DTF_GROUP_KERNEL};
	return dtf_graph_variable_ex(g, name, ks, &o);
}

static int need_inputs(const struct dtf_layer *l, int nin, int lo, int hi)
{
	if (nin >= lo && nin <= hi)
		return 0;
	if (lo == hi)
		return dtf_error(DTF_ERR_GRAPH, "%s takes %d input%s, got %d",
				 dtf_layer_kind_name(l->kind), lo,
				 lo == 1 ? "" : "s", nin);
	return dtf_error(DTF_ERR_GRAPH, "%s takes %d to %d inputs, got %d",
			 dtf_layer_kind_name(l->kind), lo, hi, nin);
}

static struct dtf_conv_attrs conv_attrs(const struct dtf_layer *l)
{
	return (struct dtf_conv_attrs){
		.stride_h = l->stride_h, .stride_w = l->stride_w,
		.dilation_h = l->dilation_h, .dilation_w = l->dilation_w,
		.padding = (enum dtf_padding)l->padding,
		.pad_top = l->pads[0], .pad_bottom = l->pads[1],
		.pad_left = l->pads[2], .pad_right = l->pads[3]};
}

/* batch_norm / layer_norm with their own variables "<name>/gamma", beta,
 * moving_mean, moving_variance (Keras names and initialisers); with
 * center / scale false, beta / gamma are constants. */
static int lower_norm(struct dtf_graph *g, const struct dtf_layer *l,
		      const char *name, int x)
{
	const struct dtf_shape *sx = &g->nodes[x].shape;
	if (sx->rank < 2)
		return dtf_error(DTF_ERR_GRAPH,
				 "%s needs an input of rank 2 or more, got rank %d",
				 dtf_layer_kind_name(l->kind), sx->rank);
	struct dtf_shape s = {1, {sx->d[sx->rank - 1]}};
	int gamma = l->scale ? layer_var(g, l, "gamma", &s, DTF_INIT_KIND_ONES,
					 DTF_GROUP_NORM)
			     : layer_const(g, l, "gamma", &s, &one_f);
	if (gamma < 0)
		return gamma;
	int beta = l->center ? layer_var(g, l, "beta", &s, DTF_INIT_KIND_ZEROS,
					 DTF_GROUP_NORM)
			     : layer_const(g, l, "beta", &s, &zero_f);
	if (beta < 0)
		return beta;
	if (l->kind == DTF_LAYER_LAYER_NORM)
		return dtf_graph_layer_norm(g, name, x, gamma, beta, l->epsilon);
	int mean = layer_var(g, l, "moving_mean", &s, DTF_INIT_KIND_ZEROS,
			     DTF_GROUP_NORM);
	if (mean < 0)
		return mean;
	int var = layer_var(g, l, "moving_variance", &s, DTF_INIT_KIND_ONES,
			    DTF_GROUP_NORM);
	if (var < 0)
		return var;
	return dtf_graph_batch_norm(g, name, x, gamma, beta, mean, var,
				    l->momentum, l->epsilon);
}

/* add, multiply, concat of two or more inputs: a left-to-right chain whose
 * last link carries `name`. */
static int lower_nary(struct dtf_graph *g, const struct dtf_layer *l,
		      const char *name, const int *in, int nin)
{
	int rc = need_inputs(l, nin, 2, DTF_LAYER_MAX_INPUTS);
	if (rc < 0)
		return rc;
	int y = in[0];
	for (int k = 1; k < nin; k++) {
		char link[2 * DTF_NAME_MAX];
		if (k == nin - 1)
			snprintf(link, sizeof(link), "%s", name);
		else
			snprintf(link, sizeof(link), "%s/%d", name, k);
		if (l->kind == DTF_LAYER_ADD)
			y = dtf_graph_add(g, link, y, in[k]);
		else if (l->kind == DTF_LAYER_MULTIPLY)
			y = dtf_graph_multiply(g, link, y, in[k]);
		else
			y = dtf_graph_concat(g, link, y, in[k], l->axis);
		if (y < 0)
			return y;
	}
	return y;
}

/* Ops shared by both forms; `name` is the output node's name. */
static int lower_common(struct dtf_graph *g, const struct dtf_layer *l,
			const char *name, const int *in, int nin)
{
	int rc, x = in[0];
	switch (l->kind) {
	case DTF_LAYER_ADD:
	case DTF_LAYER_MULTIPLY:
	case DTF_LAYER_CONCAT:
		return lower_nary(g, l, name, in, nin);
	default:
		break;
	}
	if ((rc = need_inputs(l, nin, 1, 1)) < 0)
		return rc;
	switch (l->kind) {
	case DTF_LAYER_MAX_POOL2D:
	case DTF_LAYER_AVG_POOL2D:
		if (l->padding > DTF_PAD_SAME)
			return unsupported(l, "explicit padding for pooling (use valid or same)");
		return (l->kind == DTF_LAYER_MAX_POOL2D ? dtf_graph_max_pool2d
							: dtf_graph_avg_pool2d)(
			g, name, x, l->size_h, l->size_w, l->stride_h,
			l->stride_w, (enum dtf_padding)l->padding);
	case DTF_LAYER_GLOBAL_AVG_POOL:
		return dtf_graph_global_avg_pool(g, name, x);
	case DTF_LAYER_FLATTEN:
		return dtf_graph_flatten(g, name, x);
	case DTF_LAYER_RESHAPE: {
		int64_t dims[DTF_MAX_RANK];
		dims[0] = g->nodes[x].shape.d[0];
		for (int i = 0; i < l->shape_rank; i++)
			dims[i + 1] = l->shape[i];
		return dtf_graph_reshape(g, name, x, dims, l->shape_rank + 1);
	}
	case DTF_LAYER_DROPOUT:
		return dtf_graph_dropout(g, name, x, l->rate);
	case DTF_LAYER_BATCH_NORM:
	case DTF_LAYER_LAYER_NORM:
		return lower_norm(g, l, name, x);
	case DTF_LAYER_RELU:
		return dtf_graph_relu(g, name, x);
	case DTF_LAYER_LEAKY_RELU:
		return dtf_graph_leaky_relu(g, name, x, l->alpha);
	case DTF_LAYER_ELU:
		return dtf_graph_elu(g, name, x, l->alpha);
	case DTF_LAYER_GELU:
		return dtf_graph_gelu(g, name, x, l->approximate);
	case DTF_LAYER_TANH:
		return dtf_graph_tanh(g, name, x);
	case DTF_LAYER_SIGMOID:
		return dtf_graph_sigmoid(g, name, x);
	case DTF_LAYER_SOFTMAX: {
		int rank = g->nodes[x].shape.rank;
		if (l->axis != -1 && l->axis != rank - 1)
			return unsupported(l, "softmax over an axis other than the last");
		return dtf_graph_softmax_ex(g, name, x, l->causal);
	}
	case DTF_LAYER_IDENTITY:
		return dtf_graph_identity(g, name, x);
	case DTF_LAYER_SLICE:
		return dtf_graph_slice(g, name, x, l->axis, l->begin, l->size);
	default:
		return dtf_error(DTF_ERR_GRAPH, "%s is not an op here",
				 dtf_layer_kind_name(l->kind));
	}
}

/* The GPT layers (graph/lower_gpt.c); dense with tied_to. */
static int lower_gpt_layer(const struct dtf_job *job, struct dtf_graph *g,
			   const struct dtf_layer *l, const int *in, int nin)
{
	int rc = need_inputs(l, nin, 1, 1);
	if (rc < 0)
		return rc;
	if (l->kind == DTF_LAYER_EMBEDDING)
		return dtf_lower_embedding(g, l, in[0]);
	if (l->kind == DTF_LAYER_POSITION_EMBEDDING)
		return dtf_lower_position_embedding(g, l, in[0]);
	if (l->kind == DTF_LAYER_TRANSFORMER_BLOCK) {
		int nblocks = 0;
		for (int i = 0; i < job->model.nlayers; i++)
			nblocks += job->model.layers[i].kind ==
				   DTF_LAYER_TRANSFORMER_BLOCK;
		return dtf_lower_transformer_block(g, l, in[0], nblocks);
	}
	/* dense tied_to an earlier embedding layer */
	const struct dtf_layer *tied = NULL;
	for (const struct dtf_layer *t = job->model.layers; t < l; t++)
		if (!strcmp(t->name, l->tied_to))
			tied = t;
	if (!tied || tied->kind != DTF_LAYER_EMBEDDING)
		return dtf_error(DTF_ERR_GRAPH,
				 "tied_to: '%s' names no earlier embedding layer",
				 l->tied_to);
	int y = dtf_lower_tied_dense(g, l, tied, in[0]);
	return y < 0 ? y : activation(g, l, y);
}

static int lower_layer(const struct dtf_job *job, struct dtf_graph *g,
		       const struct dtf_layer *l, const int *in, int nin)
{
	char name[2 * DTF_NAME_MAX];
	int x = in[0], w, y, rc;
	const struct dtf_shape *sx = &g->nodes[x].shape;

	switch (l->kind) {
	case DTF_LAYER_EMBEDDING:
	case DTF_LAYER_POSITION_EMBEDDING:
	case DTF_LAYER_TRANSFORMER_BLOCK:
		return lower_gpt_layer(job, g, l, in, nin);
	case DTF_LAYER_CONV2D:
	case DTF_LAYER_DEPTHWISE_CONV2D: {
		int depthwise = l->kind == DTF_LAYER_DEPTHWISE_CONV2D;
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		if (sx->rank != 4)
			return dtf_error(DTF_ERR_GRAPH,
					 "%s needs a 4-D (batch, height, width, channels) input, got rank %d",
					 dtf_layer_kind_name(l->kind), sx->rank);
		int c = (int)sx->d[3];
		int out = depthwise ? c * l->depth_multiplier : l->filters;
		struct dtf_shape ks = {4, {l->kernel_h, l->kernel_w, c,
					   depthwise ? l->depth_multiplier
						     : l->filters}};
		if ((w = kernel(g, l, &ks)) < 0)
			return w;
		struct dtf_conv_attrs a = conv_attrs(l);
		snprintf(name, sizeof(name), "%s/%s", l->name,
			 depthwise ? "depthwise" : "conv2d");
		y = depthwise ? dtf_graph_depthwise_conv2d(g, name, x, w, &a)
			      : dtf_graph_conv2d_ex(g, name, x, w, &a);
		if (y < 0)
			return y;
		y = bias(g, l, y, out);
		return y < 0 ? y : activation(g, l, y);
	}
	case DTF_LAYER_DENSE: {
		if (l->tied_to[0])
			return lower_gpt_layer(job, g, l, in, nin);
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		if (sx->rank < 2)
			return dtf_error(DTF_ERR_GRAPH,
					 "dense needs an input of rank 2 or more (batch, ..., features), got rank %d",
					 sx->rank);
		/* over the last axis, as Keras's Dense on (batch, time,
		 * channels) */
		int units_in = (int)sx->d[sx->rank - 1];
		struct dtf_shape ks = {2, {units_in, l->units}};
		if ((w = kernel(g, l, &ks)) < 0)
			return w;
		snprintf(name, sizeof(name), "%s/matmul", l->name);
		y = dtf_graph_matmul(g, name, x, w);
		if (y < 0)
			return y;
		y = bias(g, l, y, l->units);
		return y < 0 ? y : activation(g, l, y);
	}
	default:
		return lower_common(g, l, l->name, in, nin);
	}
}

static int lower_op(struct dtf_graph *g, const struct dtf_layer *l,
		    const int *in, int nin)
{
	int rc;
	struct dtf_shape s = {l->shape_rank, {0}};
	for (int i = 0; i < l->shape_rank; i++)
		s.d[i] = l->shape[i];

	switch (l->kind) {
	case DTF_LAYER_VARIABLE: {
		struct dtf_var_opts o = {.init = l->init,
					 .trainable = l->trainable,
					 .group = l->group};
		return dtf_graph_variable_ex(g, l->name, &s, &o);
	}
	case DTF_LAYER_CONSTANT: {
		struct dtf_var_opts o = {.constant = 1,
					 .values = l->values ? l->values
							     : &l->fill,
					 .nvalues = l->values ? l->nvalues : 1};
		return dtf_graph_variable_ex(g, l->name, &s, &o);
	}
	case DTF_LAYER_CONV2D:
	case DTF_LAYER_DEPTHWISE_CONV2D: {
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		struct dtf_conv_attrs a = conv_attrs(l);
		return l->kind == DTF_LAYER_CONV2D
			       ? dtf_graph_conv2d_ex(g, l->name, in[0], in[1], &a)
			       : dtf_graph_depthwise_conv2d(g, l->name, in[0],
							    in[1], &a);
	}
	case DTF_LAYER_MATMUL:
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_matmul_ex(g, l->name, in[0], in[1],
					   l->transpose_b);
	case DTF_LAYER_BIAS_ADD:
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_bias_add(g, l->name, in[0], in[1]);
	case DTF_LAYER_TRANSPOSE:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return dtf_graph_transpose(g, l->name, in[0], l->perm,
					   l->perm_rank);
	case DTF_LAYER_BATCH_MATMUL:
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_batch_matmul(g, l->name, in[0], in[1],
					      l->transpose_a, l->transpose_b,
					      l->alpha);
	case DTF_LAYER_EMBEDDING: /* inputs: [ids, table] */
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_embedding(g, l->name, in[0], in[1]);
	case DTF_LAYER_CAUSAL_SELF_ATTENTION: /* inputs: [qkv] */
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return dtf_graph_causal_self_attention(g, l->name, in[0],
						       l->heads, l->rate);
	default:
		return lower_common(g, l, l->name, in, nin);
	}
}

static int find_feature(const struct dtf_job *job, const char *name)
{
	for (int i = 0; i < job->data.nfeatures; i++)
		if (strcmp(job->data.features[i].name, name) == 0)
			return i;
	return -1;
}

/* The input node of feature `name`, made on first use; -1 if no such
 * feature (config checked the names, so this is a bug then). */
static int feature_node(const struct dtf_job *job, struct dtf_graph *g,
			const char *name)
{
	int id = dtf_graph_find(g, name);
	if (id >= 0)
		return id;
	int fi = find_feature(job, name);
	if (fi < 0)
		return dtf_error(DTF_ERR_CONFIG, "'%s' is not a feature", name);
	return dtf_graph_input(g, name, fi, &job->data.features[fi]);
}

static int lower_layers(const struct dtf_job *job, struct dtf_graph *g,
			int *out)
{
	int prev = -1;
	int fi = find_feature(job, job->model.input);
	if (fi >= 0 && job->data.features[fi].dtype != DTF_FLOAT32 &&
	    !(job->model.nlayers > 0 && job->model.layers[0].ninputs == 0 &&
	      (job->model.layers[0].kind == DTF_LAYER_EMBEDDING ||
	       job->model.layers[0].kind == DTF_LAYER_SLICE)))
		return dtf_error(DTF_ERR_CONFIG,
				 "model.input: feature '%s' is int32 (ids); the model input must be a float32 feature, or ids for a first layer that is an embedding or a slice",
				 job->model.input);
	if (job->model.input[0] &&
	    (prev = feature_node(job, g, job->model.input)) < 0)
		return prev;
	int logits = -1;
	for (int li = 0; li < job->model.nlayers; li++) {
		const struct dtf_layer *l = &job->model.layers[li];
		int in[DTF_LAYER_MAX_INPUTS] = {0}, nin = l->ninputs;
		if (nin == 0) {
			in[0] = prev;
			nin = 1;
		}
		for (int k = 0; k < l->ninputs; k++) {
			in[k] = -1;
			for (int j = 0; j < li && in[k] < 0; j++)
				if (!strcmp(job->model.layers[j].name,
					    l->inputs[k]))
					in[k] = out[j];
			if (in[k] < 0 &&
			    (in[k] = feature_node(job, g, l->inputs[k])) < 0)
				return layer_error(l, in[k]);
		}
		int first = g->nnodes;
		int x = lower_layer(job, g, l, in, nin);
		if (x < 0)
			return layer_error(l, x);
		for (int i = first; i < g->nnodes; i++)
			g->nodes[i].layer = li;
		out[li] = prev = x;
		if (logits >= 0)
			return dtf_error(DTF_ERR_CONFIG,
					 "%s: layer '%s' comes after the logits layer '%s' and could never be trained",
					 l->where, l->name, job->model.loss_logits);
		if (strcmp(l->name, job->model.loss_logits) == 0)
			logits = x;
	}
	return 0;
}

/* ---- graph form ------------------------------------------------------- */

/* Index of the node named `name` in the job's graph, or -1 (a feature). */
static int node_index(const struct dtf_job *job, const char *name)
{
	for (int i = 0; i < job->model.nnodes; i++)
		if (!strcmp(job->model.nodes[i].name, name))
			return i;
	return -1;
}

/*
 * Depth-first walk from node v: append v to order[] after its inputs.
 * state: 0 unvisited, 1 on the stack, 2 done; stack[] holds the path.
 * On a back edge, report the cycle as "a -> b -> ... -> a" (producer to
 * consumer) at the position of the node that closes it.
 */
static int visit(const struct dtf_job *job, int v, char *state, int *stack,
		 int depth, int *order, int *norder)
{
	const struct dtf_layer *l = &job->model.nodes[v];
	state[v] = 1;
	stack[depth] = v;
	for (int k = 0; k < l->ninputs; k++) {
		int u = node_index(job, l->inputs[k]);
		if (u < 0 || state[u] == 2)
			continue;
		if (state[u] == 1) {
			/* stack[s..depth] is u ... v, each the input of the
			 * next; v consumes u: the cycle u -> ... -> v -> u */
			int s = depth;
			while (stack[s] != u)
				s--;
			/* printed producer first: reverse the walk order,
			 * which went from consumers to their inputs */
			char rev[1024];
			size_t off = 0;
			for (int i = depth; i >= s && off < sizeof(rev); i--)
				off += (size_t)snprintf(
					rev + off, sizeof(rev) - off, "%s -> ",
					job->model.nodes[stack[i]].name);
			if (off < sizeof(rev))
				snprintf(rev + off, sizeof(rev) - off, "%s",
					 job->model.nodes[stack[depth]].name);
			return dtf_error(DTF_ERR_CONFIG,
					 "%s: model.graph.%s: the graph has a cycle: %s",
					 l->input_where[k], l->name, rev);
		}
		int rc = visit(job, u, state, stack, depth + 1, order, norder);
		if (rc < 0)
			return rc;
	}
	state[v] = 2;
	order[(*norder)++] = v;
	return 0;
}

static int lower_graph(const struct dtf_job *job, struct dtf_graph *g,
		       int *out)
{
	int n = job->model.nnodes, rc = 0, norder = 0;
	char *state = dtf_calloc((size_t)n, 1);
	int *stack = dtf_calloc((size_t)n, sizeof(int));
	int *order = dtf_calloc((size_t)n, sizeof(int));
	if (!state || !stack || !order) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int v = 0; v < n && rc == 0; v++)
		if (!state[v])
			rc = visit(job, v, state, stack, 0, order, &norder);
	for (int i = 0; i < n && rc == 0; i++) {
		int v = order[i];
		const struct dtf_layer *l = &job->model.nodes[v];
		int in[DTF_LAYER_MAX_INPUTS] = {0};
		for (int k = 0; k < l->ninputs; k++) {
			int u = node_index(job, l->inputs[k]);
			in[k] = u >= 0 ? out[u]
				       : feature_node(job, g, l->inputs[k]);
			if (in[k] < 0) {
				rc = layer_error(l, in[k]);
				goto out;
			}
		}
		int first = g->nnodes;
		int x = lower_op(g, l, in, l->ninputs);
		if (x < 0) {
			rc = layer_error(l, x);
			goto out;
		}
		for (int j = first; j < g->nnodes; j++)
			g->nodes[j].layer = v;
		out[v] = x;
	}
out:
	dtf_free(state);
	dtf_free(stack);
	dtf_free(order);
	return rc;
}

int dtf_graph_lower_model(const struct dtf_job *job, int batch,
			  struct dtf_graph *g, int *layer_out)
{
	int graph = job->model.nnodes > 0;
	int n = graph ? job->model.nnodes : job->model.nlayers;
	const struct dtf_layer *ls = graph ? job->model.nodes
					   : job->model.layers;
	int *out = dtf_malloc((size_t)(n + 1) * sizeof(int));
	if (!out)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int rc = dtf_graph_init(g, batch);
	if (rc < 0)
		goto out_free;
	rc = graph ? lower_graph(job, g, out) : lower_layers(job, g, out);
	if (rc < 0)
		goto out_fail;
	int logits = -1;
	for (int i = 0; i < n; i++)
		if (strcmp(ls[i].name, job->model.loss_logits) == 0)
			logits = out[i];
	if (logits < 0) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "%s: model.loss: logits '%s' names no %s",
			       job->model.loss_where, job->model.loss_logits,
			       graph ? "node" : "layer");
		goto out_fail;
	}
	/* a node or layer (a slice of a token window), else a feature */
	int labels = -1;
	for (int i = 0; i < n && labels < 0; i++)
		if (strcmp(ls[i].name, job->model.loss_labels) == 0)
			labels = out[i];
	if (labels < 0)
		labels = feature_node(job, g, job->model.loss_labels);
	if (labels < 0) {
		rc = labels;
		goto out_fail;
	}
	switch (job->model.loss) {
	case DTF_LOSS_SPARSE_SOFTMAX_XENT:
		rc = dtf_graph_sparse_softmax_xent(g, "loss", logits, labels);
		break;
	case DTF_LOSS_SOFTMAX_XENT:
		rc = dtf_graph_softmax_xent(g, "loss", logits, labels,
					    job->model.label_smoothing);
		break;
	case DTF_LOSS_SIGMOID_XENT:
		rc = dtf_graph_sigmoid_xent(g, "loss", logits, labels);
		break;
	case DTF_LOSS_MSE:
		rc = dtf_graph_mean_squared_error(g, "loss", logits, labels);
		break;
	}
	if (rc < 0) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
		rc = dtf_error(DTF_ERR_CONFIG, "%s: model.loss: %s",
			       job->model.loss_where, msg);
		goto out_fail;
	}
	/* top-k of k >= classes is 1 whatever the model does */
	if (job->model.metric_top_k &&
	    (job->model.loss == DTF_LOSS_SPARSE_SOFTMAX_XENT ||
	     job->model.loss == DTF_LOSS_SOFTMAX_XENT)) {
		const struct dtf_shape *s = &g->nodes[logits].shape;
		int64_t classes = s->d[s->rank - 1];
		if (job->model.metric_top_k >= classes) {
			rc = dtf_error(DTF_ERR_CONFIG,
				       "%s: model.metrics: top_k_accuracy's k %d is not below the %lld classes of '%s': it would be 1 whatever the model predicts\n"
				       "HINT: k from 1 to %lld",
				       job->model.metric_top_k_where,
				       job->model.metric_top_k,
				       (long long)classes, job->model.loss_logits,
				       (long long)(classes - 1));
			goto out_fail;
		}
	}
	if (!g->nodes[g->loss].requires_grad) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "%s: model.loss: the loss does not depend on any trainable variable (every variable it reaches has trainable: false, or the logits '%s' come from inputs and constants only)",
			       job->model.loss_where, job->model.loss_logits);
		goto out_fail;
	}
	g->nforward = g->nnodes;
	if (layer_out)
		memcpy(layer_out, out, (size_t)n * sizeof(int));
	dtf_free(out);
	return 0;
out_fail:
	dtf_graph_deinit(g);
out_free:
	dtf_free(out);
	return rc;
}
