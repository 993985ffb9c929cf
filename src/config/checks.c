/*
 * checks.c - the checks that need the whole job, run after the walk while
 * the tree is still there to give positions: every name a layer, node,
 * input, loss or augment names exists (with "did you mean"), layers or
 * graph but not both, the labels' type fits the loss.
 */
#include "config/walk.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"

/* ---- checks across sections ---------------------------------------------------- */

static const char *feature_name_at(const void *table, int i)
{
	return ((const struct dtf_feature_spec *)table)[i].name;
}

static const char *layer_name_at(const void *table, int i)
{
	return ((const struct dtf_layer *)table)[i].name;
}

static const struct dtf_feature_spec *find_feature(const struct dtf_job *job,
						   const char *name)
{
	for (int i = 0; i < job->data.nfeatures; i++)
		if (!strcmp(job->data.features[i].name, name))
			return &job->data.features[i];
	return NULL;
}

/* Layers (or graph nodes) [0, nl) and then the features, as one table
 * for suggestions. */
struct name_space {
	const struct dtf_layer *l;
	int nl;
	const struct dtf_feature_spec *f;
	int nf;
};

static const char *space_name_at(const void *table, int i)
{
	const struct name_space *ns = table;
	return i < ns->nl ? ns->l[i].name : ns->f[i - ns->nl].name;
}

/* Like dtf_cfg_fail() but at a position kept as text ("FILE:LINE:COL"). */
static int fail_at(const char *where, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail_at(const char *where, const char *path, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dtf_error(DTF_ERR_CONFIG, "%s: %s: %s", where, path, msg);
}

/* Every input of every layer / node names something that exists: for
 * layers an earlier layer or a feature, for graph nodes any node or a
 * feature (cycles are found when the graph is built). */
static int check_inputs(const struct dtf_job *job, const struct dtf_layer *ls,
			int n, int graph)
{
	char sug[96], path[PATH_MAX_];
	for (int i = 0; i < n; i++) {
		const struct dtf_layer *l = &ls[i];
		for (int k = 0; k < l->ninputs; k++) {
			const char *want = l->inputs[k];
			int found = find_feature(job, want) != NULL, later = 0;
			for (int j = 0; j < n && !found; j++) {
				if (strcmp(ls[j].name, want))
					continue;
				if (graph || j < i)
					found = 1;
				else
					later = j;
			}
			if (found)
				continue;
			if (graph)
				dtf_cfg_path_fmt(path, "model.graph.%s.%s.inputs[%d]",
						 l->name, dtf_layer_kind_name(l->kind),
						 k);
			else
				dtf_cfg_path_fmt(path, "model.layers[%d].%s.inputs[%d]",
						 i, dtf_layer_kind_name(l->kind), k);
			if (later || (!graph && !strcmp(want, l->name)))
				return fail_at(l->input_where[k], path,
					       "'%s' is not an earlier layer "
					       "(layers may only take inputs "
					       "from layers above them; use "
					       "model.graph for other orders)",
					       want);
			struct name_space ns = {ls, graph ? n : i,
						job->data.features,
						job->data.nfeatures};
			return fail_at(l->input_where[k], path,
				       "'%s' names no %s or feature%s", want,
				       graph ? "node" : "earlier layer",
				       dtf_cfg_suggest(want, &ns, ns.nl + ns.nf,
						       space_name_at, sug,
						       sizeof(sug)));
		}
	}
	return 0;
}

/* data.train.augment names a float image feature [H, W, C] that a crop
 * padding fits (the pipeline checks the same; here it has a position). */
static int check_augment(struct ctx *c)
{
	const struct dtf_augment_spec *a = &c->job->data.augment;
	if (!a->feature[0] || (!a->crop_padding && !a->flip_left_right))
		return 0;
	char sug[96];
	const struct dtf_feature_spec *f = find_feature(c->job, a->feature);
	if (!f)
		return dtf_cfg_fail(c, dtf_cfg_path_node(c, "data.train.augment.feature"),
				    "data.train.augment.feature",
				    "no feature named '%s' in data.features%s",
				    a->feature,
				    dtf_cfg_suggest(a->feature, c->job->data.features,
						    c->job->data.nfeatures, feature_name_at,
						    sug, sizeof(sug)));
	if (f->rank != 3 || f->dtype != DTF_FLOAT32)
		return dtf_cfg_fail(c, dtf_cfg_path_node(c, "data.train.augment.feature"),
				    "data.train.augment.feature",
				    "feature '%s' is not a float image of shape "
				    "[H, W, C]",
				    f->name);
	if (a->crop_padding > f->shape[0] || a->crop_padding > f->shape[1])
		return dtf_cfg_fail(c, dtf_cfg_path_node(c, "data.train.augment.crop_padding"),
				    "data.train.augment.crop_padding",
				    "%d is larger than the image '%s' (%lld x %lld)",
				    a->crop_padding, f->name, (long long)f->shape[0],
				    (long long)f->shape[1]);
	return 0;
}

int dtf_cfg_check_job(struct ctx *c)
{
	const struct dtf_job *job = c->job;
	char sug[96];
	int rc;
	int graph = job->model.nnodes > 0;

	if (job->model.nlayers && graph)
		return dtf_cfg_fail(c, c->slot[SLOT_GRAPH], "model.graph",
				    "give model.layers or model.graph, not both");
	if (!job->model.nlayers && !graph)
		return dtf_cfg_fail(c, c->slot[SLOT_MODEL], "model",
				    "missing required key 'layers' (or 'graph')");
	if (!graph && !job->model.input[0])
		return dtf_cfg_fail(c, c->slot[SLOT_MODEL], "model",
				    "missing required key 'input' (the feature fed "
				    "to the first layer)");
	if (job->model.input[0] && !find_feature(job, job->model.input))
		return dtf_cfg_fail(c, c->slot[SLOT_INPUT], "model.input",
				    "no feature named '%s' in data.features%s",
				    job->model.input,
				    dtf_cfg_suggest(job->model.input, job->data.features,
						    job->data.nfeatures, feature_name_at, sug,
						    sizeof(sug)));
	const struct dtf_feature_spec *in = find_feature(job, job->model.input);
	/* ids feed a first layer that looks them up (embedding) or cuts
	 * them (slice) */
	const struct dtf_layer *l0 = graph ? NULL : &job->model.layers[0];
	int ids_ok = l0 && l0->ninputs == 0 &&
		     (l0->kind == DTF_LAYER_EMBEDDING || l0->kind == DTF_LAYER_SLICE);
	if (in && in->dtype != DTF_FLOAT32 && !ids_ok)
		return dtf_cfg_fail(c, c->slot[SLOT_INPUT], "model.input",
				    "feature '%s' is int32 (ids); the model input must "
				    "be a float32 feature, or ids for a first layer "
				    "that is an embedding or a slice",
				    in->name);
	if ((rc = check_augment(c)) < 0)
		return rc;
	if (job->checkpoint.dir &&
	    job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
		return dtf_cfg_fail(c, dtf_cfg_path_node(c, "checkpoint.dir"), "checkpoint.dir",
				    "checkpoints are not supported with strategy "
				    "parameter_server yet (the ps ranks hold the "
				    "variables and optimizer state)");
	const struct dtf_layer *ls = graph ? job->model.nodes
					   : job->model.layers;
	int n = graph ? job->model.nnodes : job->model.nlayers;
	for (int i = 0; i < n; i++)
		if (find_feature(job, ls[i].name))
			return fail_at(ls[i].where,
				       graph ? "model.graph" : "model.layers",
				       "the name '%s' is both a %s and a "
				       "feature in data.features",
				       ls[i].name, graph ? "node" : "layer");
	if ((rc = check_inputs(job, ls, n, graph)) < 0)
		return rc;
	char lpath[PATH_MAX_], ypath[PATH_MAX_];
	const char *lname = dtf_cfg_loss_name(job->model.loss);
	dtf_cfg_path_fmt(lpath, "model.loss.%s.%s", lname,
			 job->model.loss == DTF_LOSS_MSE ? "predictions" : "logits");
	dtf_cfg_path_fmt(ypath, "model.loss.%s.labels", lname);
	int found = 0;
	for (int i = 0; i < n; i++)
		found |= !strcmp(ls[i].name, job->model.loss_logits);
	if (!found)
		return dtf_cfg_fail(c, c->slot[SLOT_LOGITS], lpath,
				    "no %s named '%s'%s", graph ? "node" : "layer",
				    job->model.loss_logits,
				    dtf_cfg_suggest(job->model.loss_logits, ls, n,
						    layer_name_at, sug, sizeof(sug)));
	/* labels may be a node or layer (a slice of a token window): the
	 * loss's constructor checks its dtype and shape */
	for (int i = 0; i < n; i++)
		if (!strcmp(ls[i].name, job->model.loss_labels))
			return 0;
	const struct dtf_feature_spec *lab =
		find_feature(job, job->model.loss_labels);
	if (!lab)
		return dtf_cfg_fail(c, c->slot[SLOT_LABELS], ypath,
				    "no feature named '%s' in data.features (nor %s)%s",
				    job->model.loss_labels,
				    graph ? "a node" : "a layer",
				    dtf_cfg_suggest(job->model.loss_labels, job->data.features,
						    job->data.nfeatures, feature_name_at, sug,
						    sizeof(sug)));
	int sparse = job->model.loss == DTF_LOSS_SPARSE_SOFTMAX_XENT;
	if (sparse && lab->type != DTF_FEATURE_INT64)
		return dtf_cfg_fail(c, c->slot[SLOT_LABELS], ypath,
				    "feature '%s' is not an int64 feature (class "
				    "labels are)",
				    lab->name);
	if (!sparse && lab->type == DTF_FEATURE_INT64)
		return dtf_cfg_fail(c, c->slot[SLOT_LABELS], ypath,
				    "feature '%s' is int64; %s needs float labels "
				    "(one-hot or targets; use "
				    "sparse_softmax_cross_entropy for class ids)",
				    lab->name, lname);
	return 0;
}
