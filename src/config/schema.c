/*
 * schema.c - the schema tables of the job language, the model's layers
 * apart (schema_layers.c): data (features, train/eval files, augment),
 * model (input, loss, metrics), train (optimizer, schedule, weight decay,
 * scaling), strategy, memory, logging, checkpoint, fault and the top-level
 * job; with the checks that one section can make alone.
 */
#include "config/walk.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "data/example.h"

/* ---- data.features ---------------------------------------------------------- */

#define FEAT(m) offsetof(struct dtf_feature_spec, m)

static const struct enum_name feature_types[] = {
	{"bytes", DTF_FEATURE_BYTES},
	{"float", DTF_FEATURE_FLOAT},
	{"int64", DTF_FEATURE_INT64},
	{NULL, 0},
};

static const struct enum_name decodes[] = {
	{"uint8", DTF_DECODE_UINT8},
	{"int8", DTF_DECODE_INT8},
	{"float32", DTF_DECODE_FLOAT32},
	{"float16", DTF_DECODE_FLOAT16},
	{NULL, 0},
};

static const struct enum_name feature_dtypes[] = {
	{"float32", DTF_FLOAT32},
	{"int32", DTF_INT32},
	{NULL, 0},
};

static int read_shape(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *val, const char *path)
{
	struct dtf_feature_spec *f = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_fail(c, val, path,
				    "expected a list of positive integers ([] for a "
				    "scalar), got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n > DTF_MAX_RANK)
		return dtf_cfg_fail(c, val, path, "at most %d dimensions, got %ld",
				    DTF_MAX_RANK, n);
	int64_t numel = 1;
	for (long i = 0; i < n; i++) {
		int64_t d = 0;
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_int(c, it, ipath, F_POS, 1, INT32_MAX, &d);
		if (rc)
			return rc;
		numel *= d;
		if (numel > INT32_MAX)
			return dtf_cfg_fail(c, it, ipath,
					    "one example of the feature would have more "
					    "than 2^31 elements");
		f->shape[i] = d;
	}
	f->rank = (int)n;
	return 0;
}

static int check_feature(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *map, const char *path)
{
	struct dtf_feature_spec *f = base;
	char sub[PATH_MAX_];

	if (f->type == DTF_FEATURE_BYTES && f->decode == DTF_DECODE_NONE)
		return dtf_cfg_fail(c, key, path,
				    "missing required key 'decode' (a bytes feature "
				    "needs one of uint8, int8, float16, float32)");
	if (f->type != DTF_FEATURE_BYTES && f->decode != DTF_DECODE_NONE) {
		dtf_cfg_join_path(sub, path, "decode");
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "decode"), sub,
				    "only a bytes feature has a decode");
	}
	/* the output dtype: int64 lists are ids (int32), float lists
	 * float32; a bytes feature is float32 unless `dtype: int32` asks for
	 * its uint8 or int8 values as integer ids */
	const yaml_node_t *dt = dtf_ytree_get(c->t, map, "dtype");
	dtf_cfg_join_path(sub, path, "dtype");
	if (!dt)
		f->dtype = f->type == DTF_FEATURE_INT64 ? DTF_INT32 : DTF_FLOAT32;
	else if (f->type == DTF_FEATURE_INT64 && f->dtype != DTF_INT32)
		return dtf_cfg_fail(c, dt, sub,
				    "an int64 feature decodes to int32 (ids)");
	else if (f->type == DTF_FEATURE_FLOAT && f->dtype != DTF_FLOAT32)
		return dtf_cfg_fail(c, dt, sub,
				    "a float feature decodes to float32");
	else if (f->type == DTF_FEATURE_BYTES && f->dtype == DTF_INT32 &&
		 f->decode != DTF_DECODE_UINT8 && f->decode != DTF_DECODE_INT8)
		return dtf_cfg_fail(c, dt, sub,
				    "int32 output needs decode: uint8 or int8 "
				    "(integer ids), not %s",
				    f->decode == DTF_DECODE_FLOAT32 ? "float32"
								    : "float16");
	if (f->type == DTF_FEATURE_BYTES && f->dtype == DTF_INT32) {
		static const char *const keys[] = {"scale", "offset"};
		for (int k = 0; k < 2; k++) {
			const yaml_node_t *kn = dtf_ytree_get(c->t, map, keys[k]);
			if (!kn)
				continue;
			dtf_cfg_join_path(sub, path, keys[k]);
			return dtf_cfg_fail(c, kn, sub,
					    "%s applies to float32 output; ids "
					    "(dtype: int32) are the raw values",
					    keys[k]);
		}
	}
	if (f->max_length > 0) {
		dtf_cfg_join_path(sub, path, "max_length");
		const yaml_node_t *ml = dtf_ytree_get(c->t, map, "max_length");
		if (f->type == DTF_FEATURE_BYTES)
			return dtf_cfg_fail(c, ml, sub,
					    "only a float or int64 list can have a "
					    "variable length");
		if (f->max_length > INT32_MAX)
			return dtf_cfg_fail(c, ml, sub, "at most %d", INT32_MAX);
		if (f->rank < 0) {
			f->rank = 1;
			f->shape[0] = f->max_length;
		} else if (f->rank != 1 || f->shape[0] != f->max_length) {
			dtf_cfg_join_path(sub, path, "shape");
			return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "shape"), sub,
					    "a variable-length feature has shape "
					    "[max_length] ([%lld]); leave shape out",
					    (long long)f->max_length);
		}
	} else if (f->rank < 0) {
		return dtf_cfg_fail(c, key, path, "missing required key 'shape'");
	}
	if (f->has_default && f->dtype == DTF_INT32 &&
	    f->default_value != (double)(int32_t)f->default_value) {
		dtf_cfg_join_path(sub, path, "default");
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "default"), sub,
				    "an int32 feature's default must be an integer "
				    "in the int32 range");
	}
	return 0;
}

static int read_default(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_feature_spec *f = base;
	double d = 0;
	int rc = dtf_cfg_read_num(c, val, path, 0, 1, &d);
	if (rc)
		return rc;
	f->has_default = 1;
	f->default_value = d;
	return 0;
}

static const struct field feature_fields[] = {
	{.key = "type", .type = T_ENUM, .flags = F_REQUIRED,
	 .off = FEAT(type), .names = feature_types},
	{.key = "decode", .type = T_ENUM, .off = FEAT(decode),
	 .def = DTF_DECODE_NONE, .names = decodes},
	{.key = "shape", .type = T_CUSTOM, .read = read_shape},
	{.key = "dtype", .type = T_ENUM, .off = FEAT(dtype),
	 .def = DTF_FLOAT32, .names = feature_dtypes},
	{.key = "scale", .type = T_FLOAT, .off = FEAT(scale), .def = 1.0},
	{.key = "offset", .type = T_FLOAT, .off = FEAT(offset), .def = 0.0},
	{.key = "max_length", .type = T_I64, .flags = F_NONNEG,
	 .off = FEAT(max_length), .def = 0},
	{.key = "pad_value", .type = T_FLOAT, .off = FEAT(pad_value),
	 .def = 0.0},
	{.key = "default", .type = T_CUSTOM, .read = read_default},
};

static const struct section feature_section = {
	feature_fields, NFIELDS(feature_fields), -1, check_feature};


static int read_features(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;

	char sub[PATH_MAX_];
	void *arr;
	int n = 0;
	int rc_ = dtf_cfg_mapping_array(c, val, path,
					"a mapping of feature names to {type, shape, ...}",
					sizeof(*job->data.features), &arr, &n);
	if (rc_ < 0)
		return rc_;
	job->data.features = arr;
	job->data.nfeatures = n;
	if (n > DTF_EXAMPLE_MAX_FEATURES)
		return dtf_cfg_fail(c, val, path, "%d features; at most %d are supported",
				    n, DTF_EXAMPLE_MAX_FEATURES);
	for (int i = 0; i < n; i++) {
		const yaml_node_t *k, *v;
		dtf_cfg_mapping_pair(c, val, i, &k, &v);
		struct dtf_feature_spec *f = &job->data.features[i];
		const char *name;
		int rc = dtf_cfg_read_str(c, k, path, DTF_NAME_MAX, &name);
		if (rc)
			return rc;
		dtf_cfg_join_path(sub, path, name);
		for (int j = 0; j < i; j++)
			if (!strcmp(job->data.features[j].name, name))
				return dtf_cfg_fail(c, k, sub, "duplicate feature name");
		snprintf(f->name, sizeof(f->name), "%s", name);
		dtf_cfg_apply_defaults(&feature_section, f);
		f->rank = -1; /* "shape not given" until read_shape */
		rc = dtf_cfg_read_section(c, &feature_section, f, k, v, sub);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- model.loss, model.metrics ------------------------------------------- */

#define JOB(m) offsetof(struct dtf_job, m)

static const struct field xent_fields[] = {
	{.key = "logits", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
};

static const struct field dense_xent_fields[] = {
	{.key = "logits", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
	{.key = "label_smoothing", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = JOB(model.label_smoothing), .def = 0},
};

static const struct field mse_fields[] = {
	{.key = "predictions", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_logits), .size = DTF_NAME_MAX,
	 .slot = SLOT_LOGITS},
	{.key = "labels", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(model.loss_labels), .size = DTF_NAME_MAX,
	 .slot = SLOT_LABELS},
};

static int check_smoothing(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	if (job->model.label_smoothing > 1)
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "label_smoothing"),
				    path, "label_smoothing must be in [0, 1], got %g",
				    (double)job->model.label_smoothing);
	return 0;
}

static const struct section xent_section = {
	xent_fields, NFIELDS(xent_fields), -1, NULL};
static const struct section dense_xent_section = {
	dense_xent_fields, NFIELDS(dense_xent_fields), -1, check_smoothing};
static const struct section sigmoid_xent_section = {
	xent_fields, NFIELDS(xent_fields), -1, NULL};
static const struct section mse_section = {
	mse_fields, NFIELDS(mse_fields), -1, NULL};

static const struct choice losses[] = {
	{"sparse_softmax_cross_entropy", DTF_LOSS_SPARSE_SOFTMAX_XENT,
	 &xent_section},
	{"softmax_cross_entropy", DTF_LOSS_SOFTMAX_XENT, &dense_xent_section},
	{"sigmoid_cross_entropy", DTF_LOSS_SIGMOID_XENT, &sigmoid_xent_section},
	{"mean_squared_error", DTF_LOSS_MSE, &mse_section},
};

static int read_loss(struct ctx *c, void *base, const yaml_node_t *key,
		     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = dtf_cfg_read_choice(c, val, path, "loss", losses, NFIELDS(losses),
				     &ch, &kind, &attrs);
	if (rc)
		return rc;
	job->model.loss = (enum dtf_loss_kind)ch->value;
	dtf_ytree_where(c->t, dtf_ytree_blame(c->t, key, val),
			job->model.loss_where,
			sizeof(job->model.loss_where));
	dtf_cfg_join_path(sub, path, ch->name);
	return dtf_cfg_read_section(c, ch->attrs, job, kind, attrs, sub);
}

static const struct field top_k_fields[] = {
	{.key = "k", .type = T_INT, .flags = F_POS, .off = JOB(model.metric_top_k),
	 .def = 5},
};

static const struct section top_k_section = {
	top_k_fields, NFIELDS(top_k_fields), -1, NULL};

static const struct choice metrics[] = {
	{"accuracy", 0, NULL},
	{"top_k_accuracy", 1, &top_k_section},
};

static int read_metrics(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_fail(c, val, path, "expected a list of metric names, "
				    "got %s", dtf_cfg_describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	for (long i = 0; i < n; i++) {
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const yaml_node_t *kind = NULL, *attrs = NULL;
		const struct choice *ch;
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		int rc = dtf_cfg_read_choice(c, it, ipath, "metric", metrics,
					     NFIELDS(metrics), &ch, &kind, &attrs);
		if (rc)
			return rc;
		if (ch->value == 0) {
			job->model.metric_accuracy = 1;
			continue;
		}
		char sub[PATH_MAX_];
		dtf_cfg_join_path(sub, ipath, ch->name);
		const yaml_node_t *k = attrs && attrs->type == YAML_MAPPING_NODE
					       ? dtf_ytree_get(c->t, attrs, "k")
					       : NULL;
		dtf_ytree_where(c->t, k ? k : it, job->model.metric_top_k_where,
				sizeof(job->model.metric_top_k_where));
		dtf_cfg_apply_defaults(ch->attrs, job);
		if ((rc = dtf_cfg_read_section(c, ch->attrs, job, kind, attrs, sub)))
			return rc;
	}
	return 0;
}

/* ---- train.optimizer ------------------------------------------------------- */

static const struct field sgd_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.01},
	{.key = "momentum", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.momentum), .def = 0.0},
	{.key = "nesterov", .type = T_BOOL, .off = JOB(train.nesterov),
	 .def = 0},
};

static const struct field adam_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "beta_1", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_1), .def = 0.9},
	{.key = "beta_2", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_2), .def = 0.999},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
};

static const struct field adamw_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "weight_decay", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.decoupled_decay), .def = 0.004},
	{.key = "beta_1", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_1), .def = 0.9},
	{.key = "beta_2", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.beta_2), .def = 0.999},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
};

static const struct field rmsprop_fields[] = {
	{.key = "learning_rate", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.learning_rate), .def = 0.001},
	{.key = "rho", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.rho), .def = 0.9},
	{.key = "momentum", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.momentum), .def = 0.0},
	{.key = "epsilon", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(train.epsilon), .def = 1e-7},
	{.key = "centered", .type = T_BOOL, .off = JOB(train.centered),
	 .def = 0},
};

static const struct section sgd_section = {
	sgd_fields, NFIELDS(sgd_fields), -1, NULL};
static const struct section adam_section = {
	adam_fields, NFIELDS(adam_fields), -1, NULL};
static const struct section adamw_section = {
	adamw_fields, NFIELDS(adamw_fields), -1, NULL};
static const struct section rmsprop_section = {
	rmsprop_fields, NFIELDS(rmsprop_fields), -1, NULL};

static const struct choice optimizers[] = {
	{"sgd", DTF_OPT_SGD, &sgd_section},
	{"adam", DTF_OPT_ADAM, &adam_section},
	{"adamw", DTF_OPT_ADAMW, &adamw_section},
	{"rmsprop", DTF_OPT_RMSPROP, &rmsprop_section},
};

static int read_optimizer(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = dtf_cfg_read_choice(c, val, path, "optimizer", optimizers,
				     NFIELDS(optimizers), &ch, &kind, &attrs);
	if (rc)
		return rc;
	job->train.optimizer = (enum dtf_optimizer_kind)ch->value;
	/* each optimizer's own defaults (e.g. adam's learning rate) over
	 * those of another */
	job->train.momentum = 0;
	job->train.epsilon = 1e-7;
	dtf_cfg_apply_defaults(ch->attrs, job);
	dtf_cfg_join_path(sub, path, ch->name);
	return dtf_cfg_read_section(c, ch->attrs, job, kind, attrs, sub);
}

/* ---- train.schedule, train.weight_decay ------------------------------------ */

#define SCHED(m) JOB(train.schedule.m)

/* What `val` is, a list by its length ("a list of 3 items"). */
static const char *describe_len(const yaml_node_t *val, char *buf,
				size_t size)
{
	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_describe(val, buf, size);
	long len = val->data.sequence.items.top - val->data.sequence.items.start;
	if (len == 0)
		snprintf(buf, size, "an empty list");
	else
		snprintf(buf, size, "a list of %ld item%s", len,
			 len == 1 ? "" : "s");
	return buf;
}

static int read_i64_list(struct ctx *c, const yaml_node_t *val,
			 const char *path, int max, int64_t *out, int *n)
{
	char buf[80], ipath[PATH_MAX_];
	long len = val->type == YAML_SEQUENCE_NODE
			   ? val->data.sequence.items.top -
				     val->data.sequence.items.start
			   : -1;
	if (len < 1 || len > max)
		return dtf_cfg_fail(c, val, path,
				    "expected a list of 1 to %d increasing steps, got %s",
				    max, describe_len(val, buf, sizeof(buf)));
	for (long i = 0; i < len; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_int(c, it, ipath, F_POS, 1, INT64_MAX, &out[i]);
		if (rc)
			return rc;
		if (i && out[i] <= out[i - 1])
			return dtf_cfg_fail(c, it, ipath,
					    "boundaries must increase, got %lld after "
					    "%lld",
					    (long long)out[i], (long long)out[i - 1]);
	}
	*n = (int)len;
	return 0;
}

static int read_boundaries(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	return read_i64_list(c, val, path, DTF_SCHED_MAX_PIECES,
			     job->train.schedule.boundaries,
			     &job->train.schedule.nboundaries);
}

static int read_sched_values(struct ctx *c, void *base,
			     const yaml_node_t *key, const yaml_node_t *val,
			     const char *path)
{
	struct dtf_job *job = base;
	struct dtf_schedule_spec *s = &job->train.schedule;
	char buf[80], ipath[PATH_MAX_];
	long len = val->type == YAML_SEQUENCE_NODE
			   ? val->data.sequence.items.top -
				     val->data.sequence.items.start
			   : -1;
	if (len < 2 || len > DTF_SCHED_MAX_PIECES + 1)
		return dtf_cfg_fail(c, val, path,
				    "expected a list of 2 to %d learning rates (one more "
				    "than boundaries), got %s",
				    DTF_SCHED_MAX_PIECES + 1,
				    describe_len(val, buf, sizeof(buf)));
	for (long i = 0; i < len; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_num(c, it, ipath, F_NONNEG, 0, &s->values[i]);
		if (rc)
			return rc;
	}
	/* the count is checked against the boundaries afterwards */
	s->values[DTF_SCHED_MAX_PIECES] = (double)len;
	return 0;
}

#define WARMUP_FIELD                                                   	{.key = "warmup_steps", .type = T_I64, .flags = F_NONNEG,      	 .off = SCHED(warmup_steps), .def = 0}

static const struct field sched_constant_fields[] = {WARMUP_FIELD};
/* boundaries and values are required: check_piecewise says so, with
 * what the other one asks for */
static const struct field sched_piecewise_fields[] = {
	{.key = "boundaries", .type = T_CUSTOM, .read = read_boundaries},
	{.key = "values", .type = T_CUSTOM, .read = read_sched_values},
	WARMUP_FIELD,
};
static const struct field sched_exponential_fields[] = {
	{.key = "decay_steps", .type = T_I64, .flags = F_REQUIRED | F_POS,
	 .off = SCHED(decay_steps)},
	{.key = "decay_rate", .type = T_DOUBLE, .flags = F_REQUIRED | F_POS,
	 .off = SCHED(decay_rate)},
	{.key = "staircase", .type = T_BOOL, .off = SCHED(staircase),
	 .def = 0},
	WARMUP_FIELD,
};
/* cosine_decay's decay_steps: positive; left out (0 inside), the run's
 * steps less the warmup */
static int read_cosine_decay_steps(struct ctx *c, void *base,
				   const yaml_node_t *key,
				   const yaml_node_t *val, const char *path)
{
	struct dtf_schedule_spec *s = &((struct dtf_job *)base)->train.schedule;
	int rc = dtf_cfg_read_int(c, val, path, F_NONNEG, 0, INT64_MAX,
				  &s->decay_steps);
	if (rc == 0 && s->decay_steps == 0)
		return dtf_cfg_fail(c, val, path,
				    "expected a positive number of steps, got 0\n"
				    "HINT: leave decay_steps out to decay over the "
				    "run's steps less the warmup");
	return rc;
}

/* cosine_decay's alpha, the final rate as a fraction of learning_rate */
static int read_cosine_alpha(struct ctx *c, void *base, const yaml_node_t *key,
			     const yaml_node_t *val, const char *path)
{
	struct dtf_schedule_spec *s = &((struct dtf_job *)base)->train.schedule;
	char buf[80];
	double a;
	int rc = dtf_cfg_read_num(c, val, path, F_NONNEG, 0, &a);
	if (rc == 0 && a > 1)
		return dtf_cfg_fail(c, val, path,
				    "expected a number from 0 to 1 (the final rate "
				    "as a fraction of learning_rate), got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	if (rc == 0)
		s->alpha = a;
	return rc;
}

static const struct field sched_cosine_fields[] = {
	{.key = "decay_steps", .type = T_CUSTOM,
	 .read = read_cosine_decay_steps},
	{.key = "alpha", .type = T_CUSTOM, .read = read_cosine_alpha},
	WARMUP_FIELD,
};

static int check_piecewise(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *map, const char *path)
{
	struct dtf_schedule_spec *s = &((struct dtf_job *)base)->train.schedule;
	int nvalues = (int)s->values[DTF_SCHED_MAX_PIECES];
	s->values[DTF_SCHED_MAX_PIECES] = 0;
	char vpath[PATH_MAX_];
	const yaml_node_t *at = key ? key : map;
	/* neither list is empty when given: 0 is a missing key */
	if (!s->nboundaries && !nvalues)
		return dtf_cfg_fail(c, at, path,
				    "missing required keys 'boundaries' (the steps "
				    "where the rate changes) and 'values' (one more "
				    "learning rate than boundaries)");
	if (!s->nboundaries)
		return dtf_cfg_fail(c, at, path,
				    "missing required key 'boundaries' (the steps "
				    "where the rate changes: %d for the %d values)",
				    nvalues - 1, nvalues);
	if (!nvalues)
		return dtf_cfg_fail(c, at, path,
				    "missing required key 'values' (the learning "
				    "rates: %d for the %d boundar%s)",
				    s->nboundaries + 1, s->nboundaries,
				    s->nboundaries == 1 ? "y" : "ies");
	dtf_cfg_join_path(vpath, path, "values");
	if (nvalues != s->nboundaries + 1)
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "values"), vpath,
				    "%d values for %d boundar%s: give %d (one more "
				    "value than boundaries)",
				    nvalues, s->nboundaries,
				    s->nboundaries == 1 ? "y" : "ies",
				    s->nboundaries + 1);
	return 0;
}

static const struct section sched_constant_section = {
	sched_constant_fields, NFIELDS(sched_constant_fields), -1, NULL};
static const struct section sched_piecewise_section = {
	sched_piecewise_fields, NFIELDS(sched_piecewise_fields), -1,
	check_piecewise};
static const struct section sched_exponential_section = {
	sched_exponential_fields, NFIELDS(sched_exponential_fields), -1, NULL};
static const struct section sched_cosine_section = {
	sched_cosine_fields, NFIELDS(sched_cosine_fields), -1, NULL};

static const struct choice schedules[] = {
	{"constant", DTF_SCHED_CONSTANT, &sched_constant_section},
	{"piecewise_constant", DTF_SCHED_PIECEWISE_CONSTANT,
	 &sched_piecewise_section},
	{"exponential_decay", DTF_SCHED_EXPONENTIAL_DECAY,
	 &sched_exponential_section},
	{"cosine_decay", DTF_SCHED_COSINE_DECAY, &sched_cosine_section},
};

static int read_schedule(struct ctx *c, void *base, const yaml_node_t *key,
			 const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = dtf_cfg_read_choice(c, val, path, "schedule", schedules,
				     NFIELDS(schedules), &ch, &kind, &attrs);
	if (rc)
		return rc;
	memset(&job->train.schedule, 0, sizeof(job->train.schedule));
	job->train.schedule.kind = (enum dtf_schedule_kind)ch->value;
	dtf_cfg_apply_defaults(ch->attrs, job);
	dtf_cfg_join_path(sub, path, ch->name);
	return dtf_cfg_read_section(c, ch->attrs, job, kind, attrs, sub);
}

static int read_decay_groups(struct ctx *c, void *base, const yaml_node_t *key,
			     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];
	static const struct enum_name names[] = {
		{"kernel", DTF_GROUP_KERNEL},
		{"bias", DTF_GROUP_BIAS},
		{"norm", DTF_GROUP_NORM},
		{NULL, 0},
	};
	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_fail(c, val, path, "expected a list of groups (kernel, "
				    "bias, norm), got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	job->train.decay_groups = 0;
	for (long i = 0; i < n; i++) {
		int g;
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_enum(c, it, ipath, names, &g);
		if (rc)
			return rc;
		job->train.decay_groups |= 1 << g;
	}
	return 0;
}

static const struct field weight_decay_fields[] = {
	{.key = "rate", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.weight_decay), .def = 0},
	{.key = "groups", .type = T_CUSTOM, .read = read_decay_groups},
};

static const struct section weight_decay_section = {
	weight_decay_fields, NFIELDS(weight_decay_fields), -1, NULL};

/* weight_decay: 1e-4, or {rate: 1e-4, groups: [kernel, norm]} */
static int read_weight_decay(struct ctx *c, void *base, const yaml_node_t *key,
			     const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	if (val->type == YAML_SCALAR_NODE)
		return dtf_cfg_read_num(c, val, path, F_NONNEG, 0,
					&job->train.weight_decay);
	return dtf_cfg_read_section(c, &weight_decay_section, job, key, val, path);
}

/* ---- top level -------------------------------------------------------------- */

static int check_train(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	int have_global = job->train.batch_size > 0;
	int have_replica = job->train.per_replica_batch_size > 0;
	if (have_global && have_replica)
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map,
						     "per_replica_batch_size"),
				    path,
				    "give batch_size (global) or "
				    "per_replica_batch_size, not both");
	if (!have_global && !have_replica)
		return dtf_cfg_fail(c, key, path,
				    "missing required key 'batch_size' (or "
				    "'per_replica_batch_size')");
	const yaml_node_t *b = dtf_ytree_get(
		c->t, map, have_replica ? "per_replica_batch_size" : "batch_size");
	if (job->train.per_replica_batch_size > DTF_BATCH_MAX) {
		char sub[PATH_MAX_];
		dtf_cfg_join_path(sub, path, "per_replica_batch_size");
		return dtf_cfg_fail(c, b, sub, "%lld is more than %d",
				    (long long)job->train.per_replica_batch_size,
				    DTF_BATCH_MAX);
	}
	/* the batch errors found later (they need the number of ranks)
	 * point at the batch size given */
	if (b)
		dtf_ytree_where(c->t, b, job->train.where,
				sizeof(job->train.where));
	/* and clipnorm's, where the ps ranks rule it out */
	const yaml_node_t *cn = dtf_ytree_get(c->t, map, "clipnorm");
	if (cn)
		dtf_ytree_where(c->t, cn, job->train.clipnorm_where,
				sizeof(job->train.clipnorm_where));
	return 0;
}

static const struct field augment_fields[] = {
	{.key = "feature", .type = T_STR, .flags = F_REQUIRED,
	 .off = JOB(data.augment.feature), .size = DTF_NAME_MAX},
	{.key = "crop_padding", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(data.augment.crop_padding), .def = 0},
	{.key = "flip_left_right", .type = T_BOOL,
	 .off = JOB(data.augment.flip_left_right), .def = 0},
};

static const struct section augment_section = {
	augment_fields, NFIELDS(augment_fields), -1, NULL};

static const struct enum_name compressions[] = {
	{"none", DTF_COMPRESSION_NONE},
	{"gzip", DTF_COMPRESSION_GZIP},
	{"zlib", DTF_COMPRESSION_ZLIB},
	{NULL, 0},
};

static const struct field data_train_fields[] = {
	{.key = "files", .type = T_STRDUP, .flags = F_REQUIRED,
	 .off = JOB(data.train_files)},
	{.key = "shuffle_buffer", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(data.shuffle_buffer), .def = 0},
	{.key = "drop_remainder", .type = T_BOOL,
	 .off = JOB(data.drop_remainder), .def = 1},
	{.key = "augment", .type = T_SECTION, .sub = &augment_section},
	/* -1: data.compression's (check_data) */
	{.key = "compression", .type = T_ENUM, .off = JOB(data.train_compression),
	 .def = -1, .names = compressions},
};

static const struct field data_eval_fields[] = {
	{.key = "files", .type = T_STRDUP, .flags = F_REQUIRED,
	 .off = JOB(data.eval_files)},
	{.key = "compression", .type = T_ENUM, .off = JOB(data.eval_compression),
	 .def = -1, .names = compressions},
};

static int check_data_train(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	char sub[PATH_MAX_];
	if (!job->data.drop_remainder) {
		dtf_cfg_join_path(sub, path, "drop_remainder");
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "drop_remainder"), sub,
				    "training needs full batches: only true is "
				    "supported (the last short batch of each epoch "
				    "is dropped); eval batches are never dropped");
	}
	return 0;
}

static const struct section data_train_section = {
	data_train_fields, NFIELDS(data_train_fields), -1, check_data_train};
static const struct section data_eval_section = {
	data_eval_fields, NFIELDS(data_eval_fields), -1, NULL};

static const struct enum_name shard_policies[] = {
	{"auto", DTF_SHARD_AUTO},
	{"file", DTF_SHARD_FILE},
	{"data", DTF_SHARD_DATA},
	{"off", DTF_SHARD_OFF},
	{NULL, 0},
};

static const struct enum_name on_errors[] = {
	{"fail", DTF_ON_ERROR_FAIL},
	{"skip", DTF_ON_ERROR_SKIP},
	{NULL, 0},
};

static const struct field data_fields[] = {
	{.key = "train", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &data_train_section},
	{.key = "shard_policy", .type = T_ENUM, .off = JOB(data.read.shard_policy),
	 .def = DTF_SHARD_AUTO, .names = shard_policies},
	{.key = "cycle_length", .type = T_INT, .flags = F_POS,
	 .off = JOB(data.read.cycle_length), .def = 1, .max = DTF_READ_MAX},
	{.key = "block_length", .type = T_INT, .flags = F_POS,
	 .off = JOB(data.read.block_length), .def = 1},
	{.key = "compression", .type = T_ENUM, .off = JOB(data.read.compression),
	 .def = DTF_COMPRESSION_NONE, .names = compressions},
	{.key = "on_error", .type = T_ENUM, .off = JOB(data.read.on_error),
	 .def = DTF_ON_ERROR_FAIL, .names = on_errors},
	{.key = "prefetch", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(data.read.prefetch), .def = 2, .max = DTF_READ_MAX},
	{.key = "eval", .type = T_SECTION, .sub = &data_eval_section},
	{.key = "features", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_features},
};

static const struct field model_fields[] = {
	{.key = "input", .type = T_STR, .off = JOB(model.input),
	 .size = DTF_NAME_MAX, .slot = SLOT_INPUT},
	{.key = "layers", .type = T_CUSTOM, .read = dtf_cfg_read_layers,
	 .slot = SLOT_LAYERS},
	{.key = "graph", .type = T_CUSTOM, .read = dtf_cfg_read_graph,
	 .slot = SLOT_GRAPH},
	{.key = "loss", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_loss},
	{.key = "metrics", .type = T_CUSTOM, .read = read_metrics},
};

/* learning_rate_scaling: none | linear | {linear: {warmup_steps: N}} */
static const struct field linear_scaling_fields[] = {
	{.key = "warmup_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.lr_warmup_steps), .def = 0},
};

static const struct section linear_scaling_section = {
	linear_scaling_fields, NFIELDS(linear_scaling_fields), -1, NULL};

static const struct choice lr_scalings[] = {
	{"none", DTF_LR_SCALING_NONE, NULL},
	{"linear", DTF_LR_SCALING_LINEAR, &linear_scaling_section},
};

static int read_lr_scaling(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];

	int rc = dtf_cfg_read_choice(c, val, path, "learning rate scaling",
				     lr_scalings, NFIELDS(lr_scalings), &ch, &kind,
				     &attrs);
	if (rc)
		return rc;
	job->train.lr_scaling = ch->value;
	if (!ch->attrs) {
		if (attrs && !dtf_ytree_is_null(attrs))
			return dtf_cfg_fail(c, attrs, path, "'%s' takes no settings",
					    ch->name);
		return 0;
	}
	dtf_cfg_join_path(sub, path, ch->name);
	return dtf_cfg_read_section(c, ch->attrs, job, kind, attrs, sub);
}

static const struct enum_name nonfinite_actions[] = {
	{"fail", DTF_NONFINITE_FAIL},
	{"skip", DTF_NONFINITE_SKIP},
	{NULL, 0},
};

static const struct field train_fields[] = {
	{.key = "batch_size", .type = T_I64, .flags = F_POS,
	 .off = JOB(train.batch_size), .def = 0},
	{.key = "per_replica_batch_size", .type = T_I64, .flags = F_POS,
	 .off = JOB(train.per_replica_batch_size), .def = 0},
	{.key = "epochs", .type = T_INT, .flags = F_POS,
	 .off = JOB(train.epochs), .def = 1},
	{.key = "max_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.max_steps), .def = 0},
	{.key = "optimizer", .type = T_CUSTOM, .read = read_optimizer},
	{.key = "schedule", .type = T_CUSTOM, .read = read_schedule},
	{.key = "weight_decay", .type = T_CUSTOM, .read = read_weight_decay},
	{.key = "clipnorm", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(train.clipnorm), .def = 0},
	{.key = "eval_every_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(train.eval_every_steps), .def = 0},
	{.key = "stop_at_accuracy", .type = T_DOUBLE, .flags = F_UNIT,
	 .off = JOB(train.stop_at_accuracy), .def = 0},
	{.key = "accumulate_steps", .type = T_INT, .flags = F_POS,
	 .off = JOB(train.accumulate_steps), .def = 1},
	{.key = "learning_rate_scaling", .type = T_CUSTOM,
	 .read = read_lr_scaling},
	{.key = "on_nonfinite", .type = T_ENUM, .off = JOB(train.on_nonfinite),
	 .def = DTF_NONFINITE_FAIL, .names = nonfinite_actions},
};

static const struct enum_name strategies[] = {
	{"one_device", DTF_STRATEGY_ONE_DEVICE},
	{"mirrored", DTF_STRATEGY_MIRRORED},
	{"multi_worker_mirrored", DTF_STRATEGY_MULTI_WORKER_MIRRORED},
	{"central_storage", DTF_STRATEGY_CENTRAL_STORAGE},
	{"parameter_server", DTF_STRATEGY_PARAMETER_SERVER},
	{NULL, 0},
};

static const struct enum_name grad_compressions[] = {
	{"none", DTF_GRAD_COMPRESSION_NONE},
	{"fp16", DTF_GRAD_COMPRESSION_FP16},
	{"bf16", DTF_GRAD_COMPRESSION_BF16},
	{NULL, 0},
};

static const struct enum_name comm_implementations[] = {
	{"auto", DTF_COMM_IMPL_AUTO},
	{"mpi", DTF_COMM_IMPL_MPI},
	{"shared_memory", DTF_COMM_IMPL_SHARED_MEMORY},
	{NULL, 0},
};

static const struct field communication_fields[] = {
	{.key = "bucket_mb", .type = T_DOUBLE, .flags = F_POS,
	 .off = JOB(strategy.bucket_mb), .def = 25},
	{.key = "compression", .type = T_ENUM, .off = JOB(strategy.compression),
	 .def = DTF_GRAD_COMPRESSION_NONE, .names = grad_compressions},
	{.key = "overlap", .type = T_BOOL, .off = JOB(strategy.overlap),
	 .def = 1},
	{.key = "hierarchical", .type = T_BOOL,
	 .off = JOB(strategy.hierarchical), .def = 0},
	{.key = "implementation", .type = T_ENUM,
	 .off = JOB(strategy.implementation), .def = DTF_COMM_IMPL_AUTO,
	 .names = comm_implementations},
};

static const struct section communication_section = {
	communication_fields, NFIELDS(communication_fields), -1, NULL};

static const struct field strategy_fields[] = {
	{.key = "type", .type = T_ENUM, .off = JOB(strategy.type),
	 .def = DTF_STRATEGY_MULTI_WORKER_MIRRORED, .names = strategies},
	{.key = "num_ps", .type = T_INT, .flags = F_POS,
	 .off = JOB(strategy.num_ps), .def = 1},
	{.key = "sync", .type = T_BOOL, .off = JOB(strategy.sync), .def = 1},
	{.key = "max_staleness", .type = T_INT, .flags = F_NONNEG,
	 .off = JOB(strategy.max_staleness), .def = 4},
	{.key = "communication", .type = T_SECTION,
	 .sub = &communication_section},
};

static const struct enum_name planners[] = {
	{"liveness", DTF_PLANNER_LIVENESS},
	{"naive", DTF_PLANNER_NAIVE},
	{NULL, 0},
};

static const struct field memory_fields[] = {
	{.key = "planner", .type = T_ENUM, .off = JOB(memory.planner),
	 .def = DTF_PLANNER_LIVENESS, .names = planners},
	{.key = "poison", .type = T_BOOL, .off = JOB(memory.poison), .def = 0},
};

/* logging.trace_steps: [from, to], 1-based steps, from <= to. */
static int read_trace_steps(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_];
	int64_t v[2];
	if (val->type == YAML_SEQUENCE_NODE &&
	    val->data.sequence.items.top - val->data.sequence.items.start != 2) {
		long k = (long)(val->data.sequence.items.top -
				val->data.sequence.items.start);
		return dtf_cfg_fail(c, val, path,
				    "expected a list [from, to] of two step numbers, got a list of %ld item%s",
				    k, k == 1 ? "" : "s");
	}
	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_fail(c, val, path,
				    "expected a list [from, to] of two step numbers, got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	for (int i = 0; i < 2; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%d]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_int(c, it, ipath, F_POS, 1, INT64_MAX, &v[i]);
		if (rc)
			return rc;
	}
	if (v[1] < v[0])
		return dtf_cfg_fail(c, val, path,
				    "the last step %lld comes before the first %lld",
				    (long long)v[1], (long long)v[0]);
	job->logging.trace_steps[0] = v[0];
	job->logging.trace_steps[1] = v[1];
	return 0;
}

static const struct enum_name devices[] = {
	{"auto", DTF_DEVICE_AUTO},
	{"cpu", DTF_DEVICE_CPU},
	{"cuda", DTF_DEVICE_CUDA},
	{NULL, 0},
};

static const struct enum_name precisions[] = {
	{"fp32", DTF_PRECISION_FP32},
	{"tf32", DTF_PRECISION_TF32},
	{NULL, 0},
};

static const struct field logging_fields[] = {
	{.key = "every_steps", .type = T_I64, .flags = F_POS,
	 .off = JOB(logging.every_steps), .def = 100},
	{.key = "dir", .type = T_STRDUP, .off = JOB(logging.dir)},
	{.key = "tensorboard", .type = T_BOOL, .off = JOB(logging.tensorboard),
	 .def = 1},
	{.key = "trace", .type = T_STRDUP, .off = JOB(logging.trace)},
	{.key = "trace_steps", .type = T_CUSTOM, .read = read_trace_steps},
};

static const struct enum_name resume_modes[] = {
	{"never", 0}, {"auto", 1}, {NULL, 0},
};

static const struct field checkpoint_fields[] = {
	{.key = "dir", .type = T_STRDUP, .off = JOB(checkpoint.dir)},
	{.key = "every_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(checkpoint.every_steps), .def = 0},
	{.key = "every_seconds", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(checkpoint.every_seconds), .def = 0},
	{.key = "keep", .type = T_INT, .flags = F_POS,
	 .off = JOB(checkpoint.keep), .def = 5},
	{.key = "resume", .type = T_ENUM, .off = JOB(checkpoint.resume),
	 .def = 0, .names = resume_modes},
};

static const struct field fault_fields[] = {
	{.key = "timeout_seconds", .type = T_DOUBLE, .flags = F_NONNEG,
	 .off = JOB(fault.timeout_seconds), .def = 300},
	{.key = "straggler_window_steps", .type = T_I64, .flags = F_NONNEG,
	 .off = JOB(fault.straggler_window_steps), .def = 50},
	{.key = "straggler_windows", .type = T_INT, .flags = F_POS,
	 .off = JOB(fault.straggler_windows), .def = 3},
	{.key = "straggler_factor", .type = T_DOUBLE,
	 .off = JOB(fault.straggler_factor), .def = 1.5},
};

static int check_fault(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *map, const char *path)
{
	(void)key;
	struct dtf_job *job = base;
	char sub[PATH_MAX_];
	if (!(job->fault.straggler_factor > 1)) {
		dtf_cfg_join_path(sub, path, "straggler_factor");
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "straggler_factor"),
				    sub, "must be more than 1 (a rank is named when it takes that many times the others' median), got %g",
				    job->fault.straggler_factor);
	}
	if (job->fault.straggler_window_steps > 1000000) {
		dtf_cfg_join_path(sub, path, "straggler_window_steps");
		return dtf_cfg_fail(c, dtf_ytree_get(c->t, map, "straggler_window_steps"),
				    sub, "must be at most 1000000 (each rank keeps the window's step times), got %lld",
				    (long long)job->fault.straggler_window_steps);
	}
	return 0;
}

static const struct section checkpoint_section = {
	checkpoint_fields, NFIELDS(checkpoint_fields), -1, NULL};
static const struct section fault_section = {
	fault_fields, NFIELDS(fault_fields), -1, check_fault};

/* data.train.compression and data.eval.compression default to
 * data.compression, whichever order the keys come in. */
static int check_data(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	if (job->data.train_compression < 0)
		job->data.train_compression = (int)job->data.read.compression;
	if (job->data.eval_compression < 0)
		job->data.eval_compression = (int)job->data.read.compression;
	/* for the errors that need the files and the ranks */
	const yaml_node_t *sp = map ? dtf_ytree_get(c->t, map, "shard_policy") : NULL;
	if (sp)
		dtf_ytree_where(c->t, sp, job->data.shard_policy_where,
				sizeof(job->data.shard_policy_where));
	(void)key;
	(void)path;
	return 0;
}

static const struct section data_section = {
	data_fields, NFIELDS(data_fields), -1, check_data};
static const struct section model_section = {
	model_fields, NFIELDS(model_fields), -1, NULL};
static const struct section train_section = {
	train_fields, NFIELDS(train_fields), (long)JOB(train.where),
	check_train};
/* strategy.communication.implementation shared_memory where the job alone
 * rules it out (distribute/strategy.c checks the rest, which depends on the
 * ranks: several nodes, device cuda, and names the position kept in
 * implementation_where): a job error at the key, caught by --dry-run as
 * well. */
static int check_strategy(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_job *job = base;
	const yaml_node_t *comm = map ? dtf_ytree_get(c->t, map, "communication") : NULL;
	const yaml_node_t *n = comm ? dtf_ytree_get(c->t, comm, "implementation") : NULL;
	const yaml_node_t *type = map ? dtf_ytree_get(c->t, map, "type") : NULL;
	if (n)
		dtf_ytree_where(c->t, n, job->strategy.implementation_where,
				sizeof(job->strategy.implementation_where));
	if (type)
		dtf_ytree_where(c->t, type, job->strategy.type_where,
				sizeof(job->strategy.type_where));
	const yaml_node_t *nps = map ? dtf_ytree_get(c->t, map, "num_ps") : NULL;
	if (nps)
		dtf_ytree_where(c->t, nps, job->strategy.num_ps_where,
				sizeof(job->strategy.num_ps_where));
	const yaml_node_t *h = comm ? dtf_ytree_get(c->t, comm, "hierarchical") : NULL;
	if (job->strategy.hierarchical &&
	    job->strategy.type != DTF_STRATEGY_MULTI_WORKER_MIRRORED) {
		char sub[PATH_MAX_];
		dtf_cfg_path_fmt(sub, "%s.communication.hierarchical", path);
		return dtf_cfg_fail(c, h ? h : key, sub,
				    "applies to multi_worker_mirrored only, not %s\n"
				    "HINT: set strategy.type: multi_worker_mirrored, or remove hierarchical",
				    dtf_strategy_name(job->strategy.type));
	}
	/* the options of one kind of strategy, given to another: no effect */
	int ps = job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER;
	const yaml_node_t *cz = comm ? dtf_ytree_get(c->t, comm, "compression") : NULL;
	if (ps && job->strategy.compression != DTF_GRAD_COMPRESSION_NONE) {
		char sub[PATH_MAX_];
		dtf_cfg_path_fmt(sub, "%s.communication.compression", path);
		return dtf_cfg_fail(c, cz ? cz : key, sub,
				    "applies to the allreduce strategies and central_storage, not parameter_server (its pushes and pulls are float32)\n"
				    "HINT: remove compression, or use another strategy");
	}
	static const char *const ps_only[] = {"sync", "max_staleness"};
	for (int i = 0; i < 2 && !ps && map; i++) {
		const yaml_node_t *k = dtf_ytree_get(c->t, map, ps_only[i]);
		if (!k)
			continue;
		char sub[PATH_MAX_];
		dtf_cfg_path_fmt(sub, "%s.%s", path, ps_only[i]);
		return dtf_cfg_fail(c, k, sub,
				    "applies to parameter_server only, not %s\n"
				    "HINT: set strategy.type: parameter_server, or remove %s",
				    dtf_strategy_name(job->strategy.type),
				    ps_only[i]);
	}
	if (job->strategy.implementation != DTF_COMM_IMPL_SHARED_MEMORY || !map)
		return 0;
	const char *why = NULL;
	if (job->strategy.type == DTF_STRATEGY_CENTRAL_STORAGE)
		why = "central_storage";
	else if (job->strategy.type == DTF_STRATEGY_PARAMETER_SERVER)
		why = "parameter_server";
	else if (job->strategy.compression != DTF_GRAD_COMPRESSION_NONE)
		why = "compression";
	else if (job->strategy.hierarchical)
		why = "hierarchical";
	if (!why)
		return 0;
	char sub[PATH_MAX_];
	dtf_cfg_path_fmt(sub, "%s.communication.implementation", path);
	return dtf_cfg_fail(c, n ? n : key, sub,
			    "shared_memory reduces the gradients of mirrored or multi_worker_mirrored replicas on one node, on the CPU, without compression or hierarchical; not with %s\n"
			    "HINT: use implementation auto (shared memory where it applies, MPI elsewhere) or mpi",
			    why);
}

static const struct section strategy_section = {
	strategy_fields, NFIELDS(strategy_fields), -1, check_strategy};
static const struct section memory_section = {
	memory_fields, NFIELDS(memory_fields), -1, NULL};
static const struct section logging_section = {
	logging_fields, NFIELDS(logging_fields), -1, NULL};

static const struct field job_fields[] = {
	{.key = "name", .type = T_STR, .off = JOB(name),
	 .size = sizeof(((struct dtf_job *)0)->name)},
	{.key = "seed", .type = T_U64, .off = JOB(seed), .def = 42},
	{.key = "data", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &data_section},
	{.key = "model", .type = T_SECTION, .flags = F_REQUIRED | F_SLOT_KEY,
	 .sub = &model_section, .slot = SLOT_MODEL},
	{.key = "train", .type = T_SECTION, .flags = F_REQUIRED,
	 .sub = &train_section},
	{.key = "strategy", .type = T_SECTION, .sub = &strategy_section},
	{.key = "memory", .type = T_SECTION, .sub = &memory_section},
	{.key = "logging", .type = T_SECTION, .sub = &logging_section},
	{.key = "device", .type = T_ENUM, .off = JOB(device.kind),
	 .def = DTF_DEVICE_AUTO, .names = devices},
	{.key = "precision", .type = T_ENUM, .off = JOB(device.precision),
	 .def = DTF_PRECISION_FP32, .names = precisions},
	{.key = "allow_gpu_sharing", .type = T_BOOL,
	 .off = JOB(device.allow_gpu_sharing), .def = 0},
	{.key = "checkpoint", .type = T_SECTION, .sub = &checkpoint_section},
	{.key = "fault", .type = T_SECTION, .sub = &fault_section},
};

static const struct section job_section = {
	job_fields, NFIELDS(job_fields), -1, NULL};

/* ---- the whole job -------------------------------------------------------- */

/* Defaults not in a table: the name, and sgd's settings over adam's. */
int dtf_cfg_job_defaults(struct dtf_job *job, const char *file)
{
	job->path = dtf_strdup(file);
	if (!job->path)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	dtf_cfg_apply_defaults(&job_section, job);
	dtf_cfg_apply_defaults(&adam_section, job);
	dtf_cfg_apply_defaults(&sgd_section, job);
	job->train.optimizer = DTF_OPT_SGD;
	job->train.rho = 0.9;
	job->train.decoupled_decay = 0.004;
	job->train.decay_groups = 1 << DTF_GROUP_KERNEL;

	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	size_t len = strlen(base);
	const char *dot = strrchr(base, '.');
	if (dot && dot != base)
		len = (size_t)(dot - base);
	if (len >= sizeof(job->name))
		len = sizeof(job->name) - 1;
	memcpy(job->name, base, len);
	job->name[len] = '\0';
	return 0;
}

int dtf_cfg_read_job(struct ctx *c)
{
	return dtf_cfg_read_section(c, &job_section, c->job, NULL,
				    dtf_ytree_root(c->t), "");
}

const char *dtf_cfg_loss_name(int kind)
{
	return losses[kind].name;
}

const char *dtf_strategy_name(enum dtf_strategy_kind k)
{
	for (int i = 0; strategies[i].name; i++)
		if (strategies[i].value == (int)k)
			return strategies[i].name;
	return "?";
}
