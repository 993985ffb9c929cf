/*
 * lower.c - layers to ops.  Errors from the graph constructors are
 * re-reported with the layer's position in the job file.
 */
#include "graph/lower.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

static int layer_error(const struct dtf_layer *l, int rc)
{
	if (rc == -DTF_ERR_NOMEM)
		return rc;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
	return dtf_error(DTF_ERR_CONFIG, "%s: layer '%s': %s", l->where,
			 l->name, msg);
}

static int activation(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	char name[2 * DTF_NAME_MAX];
	if (l->activation == DTF_ACT_RELU) {
		snprintf(name, sizeof(name), "%s/relu", l->name);
		return dtf_graph_relu(g, name, x);
	}
	return x;
}

static int bias(struct dtf_graph *g, const struct dtf_layer *l, int x, int c)
{
	if (!l->use_bias)
		return x;
	char name[2 * DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%s/bias", l->name);
	struct dtf_shape s = {1, {c}};
	int b = dtf_graph_variable(g, name, &s, DTF_INIT_ZEROS, 0, 0);
	if (b < 0)
		return b;
	snprintf(name, sizeof(name), "%s/bias_add", l->name);
	return dtf_graph_bias_add(g, name, x, b);
}

static int lower_layer(struct dtf_graph *g, const struct dtf_layer *l, int x)
{
	char name[2 * DTF_NAME_MAX];
	const struct dtf_shape *sx = &g->nodes[x].shape;
	int w, y;

	switch (l->kind) {
	case DTF_LAYER_CONV2D: {
		if (sx->rank != 4)
			return dtf_error(DTF_ERR_GRAPH,
					 "conv2d needs a 4-D (batch, height, width, channels) input, got rank %d",
					 sx->rank);
		int c = (int)sx->d[3];
		struct dtf_shape ks = {4, {l->kernel_h, l->kernel_w, c, l->filters}};
		snprintf(name, sizeof(name), "%s/kernel", l->name);
		w = dtf_graph_variable(g, name, &ks, DTF_INIT_GLOROT_UNIFORM,
				       l->kernel_h * l->kernel_w * c,
				       l->kernel_h * l->kernel_w * l->filters);
		if (w < 0)
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
		if (sx->rank != 2)
			return dtf_error(DTF_ERR_GRAPH,
					 "dense needs a 2-D (batch, features) input, got rank %d (add a flatten layer before it)",
					 sx->rank);
		int in = (int)sx->d[1];
		struct dtf_shape ks = {2, {in, l->units}};
		snprintf(name, sizeof(name), "%s/kernel", l->name);
		w = dtf_graph_variable(g, name, &ks, DTF_INIT_GLOROT_UNIFORM,
				       in, l->units);
		if (w < 0)
			return w;
		snprintf(name, sizeof(name), "%s/matmul", l->name);
		y = dtf_graph_matmul(g, name, x, w);
		if (y < 0)
			return y;
		y = bias(g, l, y, l->units);
		return y < 0 ? y : activation(g, l, y);
	}
	case DTF_LAYER_MAX_POOL2D:
		return dtf_graph_max_pool2d(g, l->name, x, l->size_h, l->size_w,
					    l->stride_h, l->stride_w,
					    (enum dtf_padding)l->padding);
	case DTF_LAYER_FLATTEN:
		return dtf_graph_flatten(g, l->name, x);
	case DTF_LAYER_DROPOUT:
		return dtf_graph_dropout(g, l->name, x, l->rate);
	case DTF_LAYER_RELU:
		return dtf_graph_relu(g, l->name, x);
	default:
		return dtf_error(DTF_ERR_GRAPH, "layer kind %d not supported",
				 (int)l->kind);
	}
}

static int find_feature(const struct dtf_job *job, const char *name)
{
	for (int i = 0; i < job->data.nfeatures; i++)
		if (strcmp(job->data.features[i].name, name) == 0)
			return i;
	return -1;
}

int dtf_graph_lower_model(const struct dtf_job *job, int batch,
			  struct dtf_graph *g, int *layer_out)
{
	int rc = dtf_graph_init(g, batch);
	if (rc < 0)
		return rc;
	int fi = find_feature(job, job->model.input);
	if (fi < 0) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "model.input: '%s' is not a feature in data.features",
			       job->model.input);
		goto out_fail;
	}
	if (job->data.features[fi].dtype != DTF_FLOAT32) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "model.input: feature '%s' is int64; the model input must be a float or bytes feature",
			       job->model.input);
		goto out_fail;
	}
	int x = dtf_graph_input(g, job->data.features[fi].name, fi,
				&job->data.features[fi]);
	if (x < 0) {
		rc = x;
		goto out_fail;
	}
	int logits = -1;
	for (int li = 0; li < job->model.nlayers; li++) {
		const struct dtf_layer *l = &job->model.layers[li];
		int first = g->nnodes;
		x = lower_layer(g, l, x);
		if (x < 0) {
			rc = layer_error(l, x);
			goto out_fail;
		}
		for (int i = first; i < g->nnodes; i++)
			g->nodes[i].layer = li;
		if (layer_out)
			layer_out[li] = x;
		if (logits >= 0) {
			rc = dtf_error(DTF_ERR_CONFIG,
				       "%s: layer '%s' comes after the logits layer '%s' and could never be trained",
				       l->where, l->name, job->model.loss_logits);
			goto out_fail;
		}
		if (strcmp(l->name, job->model.loss_logits) == 0)
			logits = x;
	}
	if (logits < 0) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "%s: model.loss: logits '%s' names no layer",
			       job->model.loss_where, job->model.loss_logits);
		goto out_fail;
	}
	int li = find_feature(job, job->model.loss_labels);
	if (li < 0) {
		rc = dtf_error(DTF_ERR_CONFIG,
			       "%s: model.loss: labels '%s' is not a feature",
			       job->model.loss_where, job->model.loss_labels);
		goto out_fail;
	}
	int labels = dtf_graph_input(g, job->data.features[li].name, li,
				     &job->data.features[li]);
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
	g->nforward = g->nnodes;
	return 0;
out_fail:
	dtf_graph_deinit(g);
	return rc;
}
