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
	return dtf_error(DTF_ERR_GRAPH, "%s is not supported yet", what);
}

static int activation(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	char name[2 * DTF_NAME_MAX];
	switch (l->activation) {
	case DTF_ACT_NONE:
		return x;
	case DTF_ACT_RELU:
		snprintf(name, sizeof(name), "%s/relu", l->name);
		return dtf_graph_relu(g, name, x);
	default:
		return unsupported(l, "this activation");
	}
}

static int bias(struct dtf_graph *g, const struct dtf_layer *l, int x, int c)
{
	if (!l->use_bias)
		return x;
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/bias", l->name);
	struct dtf_shape s = {1, {c}};
	struct dtf_var_opts o = {.init = {.kind = DTF_INIT_KIND_ZEROS},
				 .trainable = 1,
				 .group = DTF_GROUP_BIAS};
	int b = dtf_graph_variable_ex(g, name, &s, &o);
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

/* Ops shared by both forms; `name` is the output node's name. */
static int lower_common(struct dtf_graph *g, const struct dtf_layer *l,
			const char *name, const int *in, int nin)
{
	int rc, x = in[0];
	switch (l->kind) {
	case DTF_LAYER_MAX_POOL2D:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		if (l->padding > DTF_PAD_SAME)
			return unsupported(l, "explicit padding for max_pool2d");
		return dtf_graph_max_pool2d(g, name, x, l->size_h, l->size_w,
					    l->stride_h, l->stride_w,
					    (enum dtf_padding)l->padding);
	case DTF_LAYER_FLATTEN:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return dtf_graph_flatten(g, name, x);
	case DTF_LAYER_DROPOUT:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return dtf_graph_dropout(g, name, x, l->rate);
	case DTF_LAYER_RELU:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return dtf_graph_relu(g, name, x);
	case DTF_LAYER_IDENTITY:
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		return x;
	default:
		return dtf_error(DTF_ERR_GRAPH, "%s is not supported yet",
				 dtf_layer_kind_name(l->kind));
	}
}

static int lower_layer(struct dtf_graph *g, const struct dtf_layer *l,
		       const int *in, int nin)
{
	char name[2 * DTF_NAME_MAX];
	int x = in[0], w, y, rc;
	const struct dtf_shape *sx = &g->nodes[x].shape;

	switch (l->kind) {
	case DTF_LAYER_CONV2D: {
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		if (sx->rank != 4)
			return dtf_error(DTF_ERR_GRAPH,
					 "conv2d needs a 4-D (batch, height, width, channels) input, got rank %d",
					 sx->rank);
		if (l->padding > DTF_PAD_SAME || l->dilation_h != 1 ||
		    l->dilation_w != 1)
			return unsupported(l, "conv2d with dilation or explicit padding");
		int c = (int)sx->d[3];
		struct dtf_shape ks = {4, {l->kernel_h, l->kernel_w, c, l->filters}};
		if ((w = kernel(g, l, &ks)) < 0)
			return w;
		snprintf(name, sizeof(name), "%s/conv2d", l->name);
		y = dtf_graph_conv2d(g, name, x, w, l->stride_h, l->stride_w,
				     (enum dtf_padding)l->padding);
		if (y < 0)
			return y;
		y = bias(g, l, y, l->filters);
		return y < 0 ? y : activation(g, l, y);
	}
	case DTF_LAYER_DENSE: {
		if ((rc = need_inputs(l, nin, 1, 1)) < 0)
			return rc;
		if (sx->rank != 2)
			return dtf_error(DTF_ERR_GRAPH,
					 "dense needs a 2-D (batch, features) input, got rank %d (add a flatten layer before it)",
					 sx->rank);
		int units_in = (int)sx->d[1];
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
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		if (l->padding > DTF_PAD_SAME || l->dilation_h != 1 ||
		    l->dilation_w != 1)
			return unsupported(l, "conv2d with dilation or explicit padding");
		return dtf_graph_conv2d(g, l->name, in[0], in[1], l->stride_h,
					l->stride_w,
					(enum dtf_padding)l->padding);
	case DTF_LAYER_MATMUL:
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_matmul(g, l->name, in[0], in[1]);
	case DTF_LAYER_BIAS_ADD:
		if ((rc = need_inputs(l, nin, 2, 2)) < 0)
			return rc;
		return dtf_graph_bias_add(g, l->name, in[0], in[1]);
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
	if (job->model.input[0] &&
	    (prev = feature_node(job, g, job->model.input)) < 0)
		return prev;
	for (int li = 0; li < job->model.nlayers; li++) {
		const struct dtf_layer *l = &job->model.layers[li];
		int in[DTF_LAYER_MAX_INPUTS], nin = l->ninputs;
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
		int x = lower_layer(g, l, in, nin);
		if (x < 0)
			return layer_error(l, x);
		for (int i = first; i < g->nnodes; i++)
			g->nodes[i].layer = li;
		out[li] = prev = x;
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
		int in[DTF_LAYER_MAX_INPUTS];
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
	int labels = feature_node(job, g, job->model.loss_labels);
	if (labels < 0) {
		rc = labels;
		goto out_fail;
	}
	rc = dtf_graph_sparse_softmax_xent(g, "loss", logits, labels);
	if (rc < 0) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
		rc = dtf_error(DTF_ERR_CONFIG, "%s: model.loss: %s",
			       job->model.loss_where, msg);
		goto out_fail;
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
