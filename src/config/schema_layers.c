/*
 * schema_layers.c - the schema of model.layers (a list of {kind: {attrs}})
 * and model.graph (a mapping of node names to {op: {inputs, attrs}}): the
 * attribute tables of every layer kind and graph op, their custom readers
 * (padding, inputs, shapes, initializers, constant values) and checks.
 */
#include "config/walk.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"

/* ---- model.layers and model.graph ---------------------------------------- */

#define LAY(m) offsetof(struct dtf_layer, m)

static const struct enum_name paddings[] = {
	{"valid", 0}, /* DTF_PAD_VALID */
	{"same", 1},  /* DTF_PAD_SAME */
	{NULL, 0},
};

static const struct enum_name activations[] = {
	{"none", DTF_ACT_NONE},
	{"linear", DTF_ACT_NONE},
	{"relu", DTF_ACT_RELU},
	{"leaky_relu", DTF_ACT_LEAKY_RELU},
	{"elu", DTF_ACT_ELU},
	{"gelu", DTF_ACT_GELU},
	{"tanh", DTF_ACT_TANH},
	{"sigmoid", DTF_ACT_SIGMOID},
	{"softmax", DTF_ACT_SOFTMAX},
	{NULL, 0},
};

static const struct enum_name dtypes[] = {
	{"float32", 0},
	{NULL, 0},
};

static const struct enum_name groups[] = {
	{"auto", DTF_GROUP_AUTO},
	{"kernel", DTF_GROUP_KERNEL},
	{"bias", DTF_GROUP_BIAS},
	{"norm", DTF_GROUP_NORM},
	{NULL, 0},
};

/* Explicit padding: [pad_h, pad_w] (both sides) or [top, bottom, left,
 * right] (TF's explicit paddings without the batch and channel pairs). */
#define DTF_PAD_EXPLICIT_ 2

static int read_padding(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];

	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_read_enum(c, val, path, paddings, &l->padding);
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n != 2 && n != 4)
		return dtf_cfg_fail(c, val, path,
				    "expected valid, same, [pad_h, pad_w] or [top, "
				    "bottom, left, right], got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	int64_t v[4];
	for (long i = 0; i < n; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_int(c, it, ipath, F_NONNEG, 0, 1 << 16, &v[i]);
		if (rc)
			return rc;
	}
	if (n == 2) {
		v[3] = v[2] = v[1];
		v[1] = v[0];
	}
	for (int i = 0; i < 4; i++)
		l->pads[i] = (int)v[i];
	l->padding = DTF_PAD_EXPLICIT_;
	return 0;
}

/* inputs: [a, b] (or one name): earlier layers, graph nodes or features. */
static int read_inputs(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	const char *s;

	if (val->type == YAML_SCALAR_NODE && !dtf_ytree_is_null(val)) {
		int rc = dtf_cfg_read_str(c, val, path, DTF_NAME_MAX, &s);
		if (rc)
			return rc;
		snprintf(l->inputs[0], DTF_NAME_MAX, "%s", s);
		dtf_ytree_where(c->t, val, l->input_where[0], DTF_WHERE_MAX);
		l->ninputs = 1;
		return 0;
	}
	long n = val->type == YAML_SEQUENCE_NODE
			 ? val->data.sequence.items.top -
				   val->data.sequence.items.start
			 : 0;
	if (n < 1 || n > DTF_LAYER_MAX_INPUTS)
		return dtf_cfg_fail(c, val, path,
				    "expected a list of 1 to %d node names, got %s",
				    DTF_LAYER_MAX_INPUTS,
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	for (long i = 0; i < n; i++) {
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		int rc = dtf_cfg_read_str(c, it, ipath, DTF_NAME_MAX, &s);
		if (rc)
			return rc;
		snprintf(l->inputs[i], DTF_NAME_MAX, "%s", s);
		dtf_ytree_where(c->t, it, l->input_where[i], DTF_WHERE_MAX);
	}
	l->ninputs = (int)n;
	return 0;
}

/* A shape: list of positive integers; `reshape` allows one -1, variables
 * and constants allow [] (a scalar). */
static int read_layer_shape(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	int allow_infer = l->kind == DTF_LAYER_RESHAPE, inferred = 0;

	if (val->type != YAML_SEQUENCE_NODE)
		return dtf_cfg_fail(c, val, path,
				    "expected a list of positive integers, got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	long n = val->data.sequence.items.top - val->data.sequence.items.start;
	if (n > DTF_MAX_RANK - (allow_infer ? 1 : 0))
		return dtf_cfg_fail(c, val, path, "at most %d dimensions, got %ld",
				    DTF_MAX_RANK - (allow_infer ? 1 : 0), n);
	int64_t numel = 1;
	for (long i = 0; i < n; i++) {
		int64_t d = 0;
		dtf_cfg_path_fmt(ipath, "%s[%ld]", path, i);
		const yaml_node_t *it = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const char *s = dtf_ytree_text(it);
		if (allow_infer && s && !strcmp(s, "-1")) {
			if (inferred++)
				return dtf_cfg_fail(c, it, ipath,
						    "only one dimension may be -1");
			l->shape[i] = -1;
			continue;
		}
		int rc = dtf_cfg_read_int(c, it, ipath, F_POS, 1, INT32_MAX, &d);
		if (rc)
			return rc;
		numel *= d;
		if (numel > ((int64_t)1 << 34))
			return dtf_cfg_fail(c, it, ipath,
					    "the shape has more than 2^34 elements");
		l->shape[i] = d;
	}
	l->shape_rank = (int)n;
	return 0;
}

/* initializer: a name, or {constant: {value: v}} / {truncated_normal:
 * {mean: m, stddev: s}} / {random_normal: {mean: m, stddev: s}}. */
static const struct field init_constant_fields[] = {
	{.key = "value", .type = T_FLOAT, .off = LAY(init.value), .def = 0},
};
static const struct field init_normal_fields[] = {
	{.key = "mean", .type = T_FLOAT, .off = LAY(init.mean), .def = 0},
	{.key = "stddev", .type = T_FLOAT, .flags = F_POS,
	 .off = LAY(init.stddev), .def = 0.05},
};
static const struct section init_constant_section = {
	init_constant_fields, NFIELDS(init_constant_fields), -1, NULL};
static const struct section init_normal_section = {
	init_normal_fields, NFIELDS(init_normal_fields), -1, NULL};

static const struct choice initializers[] = {
	{"zeros", DTF_INIT_KIND_ZEROS, NULL},
	{"ones", DTF_INIT_KIND_ONES, NULL},
	{"constant", DTF_INIT_KIND_CONSTANT, &init_constant_section},
	{"glorot_uniform", DTF_INIT_KIND_GLOROT_UNIFORM, NULL},
	{"glorot_normal", DTF_INIT_KIND_GLOROT_NORMAL, NULL},
	{"he_normal", DTF_INIT_KIND_HE_NORMAL, NULL},
	{"he_uniform", DTF_INIT_KIND_HE_UNIFORM, NULL},
	{"truncated_normal", DTF_INIT_KIND_TRUNCATED_NORMAL,
	 &init_normal_section},
	{"random_normal", DTF_INIT_KIND_RANDOM_NORMAL, &init_normal_section},
};

static int read_initializer(struct ctx *c, void *base, const yaml_node_t *key,
			    const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	const yaml_node_t *kind, *attrs;
	const struct choice *ch;
	char sub[PATH_MAX_];
	int rc = dtf_cfg_read_choice(c, val, path, "initializer", initializers,
				     NFIELDS(initializers), &ch, &kind, &attrs);
	if (rc)
		return rc;
	l->init.kind = (enum dtf_init_kind)ch->value;
	l->init_given = 1;
	if (!ch->attrs) {
		if (attrs && !dtf_ytree_is_null(attrs))
			return dtf_cfg_fail(c, attrs, path,
					    "initializer '%s' takes no attributes",
					    ch->name);
		return 0;
	}
	dtf_cfg_apply_defaults(ch->attrs, l);
	dtf_cfg_join_path(sub, path, ch->name);
	return dtf_cfg_read_section(c, ch->attrs, l, kind, attrs, sub);
}

/* constant value: a number or a flat list of numbers (owned by the job) */
static int read_values(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_layer *l = base;
	char buf[80], ipath[PATH_MAX_];
	long n = 1;
	int list = val->type == YAML_SEQUENCE_NODE;
	if (list)
		n = val->data.sequence.items.top - val->data.sequence.items.start;
	else if (val->type != YAML_SCALAR_NODE)
		return dtf_cfg_fail(c, val, path,
				    "expected a number or a list of numbers, got %s",
				    dtf_cfg_describe(val, buf, sizeof(buf)));
	if (n < 1 || n > (1 << 24))
		return dtf_cfg_fail(c, val, path, "expected 1 to 2^24 numbers, got %ld",
				    n);
	dtf_free(l->values);
	l->values = dtf_malloc((size_t)n * sizeof(float));
	if (!l->values)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	l->nvalues = n;
	for (long i = 0; i < n; i++) {
		const yaml_node_t *it =
			list ? yaml_document_get_node(
				       &c->t->doc,
				       val->data.sequence.items.start[i])
			     : val;
		double d = 0;
		dtf_cfg_path_fmt(ipath, list ? "%s[%ld]" : "%s", path, i);
		int rc = dtf_cfg_read_num(c, it, ipath, 0, 1, &d);
		if (rc)
			return rc;
		l->values[i] = (float)d;
	}
	return 0;
}

#define NAME_FIELD                                                     \
	{.key = "name", .type = T_STR, .off = LAY(name),               \
	 .size = DTF_NAME_MAX}
#define INPUTS_FIELD {.key = "inputs", .type = T_CUSTOM, .read = read_inputs}
#define INPUTS_REQ                                                     \
	{.key = "inputs", .type = T_CUSTOM, .flags = F_REQUIRED,       \
	 .read = read_inputs}
#define STRIDES_FIELD(d)                                               \
	{.key = "strides", .type = T_PAIR, .off = LAY(stride_h),       \
	 .off2 = LAY(stride_w), .def = d}
#define DILATION_FIELD                                                 \
	{.key = "dilation", .type = T_PAIR, .off = LAY(dilation_h),    \
	 .off2 = LAY(dilation_w), .def = 1}
#define PADDING_FIELD                                                  \
	{.key = "padding", .type = T_CUSTOM, .read = read_padding}
#define USE_BIAS_FIELD                                                 \
	{.key = "use_bias", .type = T_BOOL, .off = LAY(use_bias), .def = 1}
#define ACTIVATION_FIELD                                               \
	{.key = "activation", .type = T_ENUM, .off = LAY(activation),  \
	 .def = DTF_ACT_NONE, .names = activations}
#define KERNEL_INIT_FIELD                                              \
	{.key = "kernel_initializer", .type = T_CUSTOM,                \
	 .read = read_initializer}
#define KERNEL_FIELD                                                   \
	{.key = "kernel", .type = T_PAIR, .flags = F_REQUIRED,         \
	 .off = LAY(kernel_h), .off2 = LAY(kernel_w)}
#define POOL_FIELDS                                                    \
	{.key = "size", .type = T_PAIR, .off = LAY(size_h),            \
	 .off2 = LAY(size_w), .def = 2},                               \
		STRIDES_FIELD(0), PADDING_FIELD

static const struct field conv2d_fields[] = {
	{.key = "filters", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(filters)},
	KERNEL_FIELD, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
};

static const struct field depthwise_fields[] = {
	KERNEL_FIELD, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
	{.key = "depth_multiplier", .type = T_INT, .flags = F_POS,
	 .off = LAY(depth_multiplier), .def = 1},
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
};

/* strides default to the window size: 0 until then */
static const struct field pool_fields[] = {POOL_FIELDS, NAME_FIELD,
					   INPUTS_FIELD};

static const struct field dense_fields[] = {
	{.key = "units", .type = T_INT, .flags = F_POS, .off = LAY(units)},
	USE_BIAS_FIELD, ACTIVATION_FIELD, KERNEL_INIT_FIELD, NAME_FIELD,
	INPUTS_FIELD,
	{.key = "tied_to", .type = T_STR, .off = LAY(tied_to),
	 .size = DTF_NAME_MAX},
};

/* The GPT's layers (nanoGPT, GPT-2): embeddings and kernels default to
 * random_normal with stddev 0.02 (GPT-2's initializer_range; Keras's
 * Embedding would draw uniform in [-0.05, 0.05]). */
#define GPT_INIT_FIELD(k)                                              \
	{.key = k, .type = T_CUSTOM, .read = read_initializer}

static const struct field embedding_fields[] = {
	{.key = "input_dim", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(input_dim)},
	{.key = "output_dim", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(output_dim)},
	GPT_INIT_FIELD("embeddings_initializer"), NAME_FIELD, INPUTS_FIELD,
};

static const struct field position_embedding_fields[] = {
	{.key = "length", .type = T_INT, .flags = F_POS, .off = LAY(length)},
	GPT_INIT_FIELD("embeddings_initializer"), NAME_FIELD, INPUTS_FIELD,
};

static const struct field transformer_block_fields[] = {
	{.key = "heads", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(heads)},
	{.key = "hidden", .type = T_INT, .flags = F_POS, .off = LAY(hidden)},
	{.key = "dropout", .type = T_FLOAT, .flags = F_UNIT, .off = LAY(rate),
	 .def = 0},
	{.key = "epsilon", .type = T_FLOAT, .flags = F_POS,
	 .off = LAY(epsilon), .def = 1e-5},
	{.key = "fused_attention", .type = T_BOOL,
	 .off = LAY(fused_attention), .def = 1},
	GPT_INIT_FIELD("kernel_initializer"), NAME_FIELD, INPUTS_FIELD,
};

static const struct field dropout_fields[] = {
	{.key = "rate", .type = T_FLOAT, .flags = F_REQUIRED | F_UNIT,
	 .off = LAY(rate)},
	NAME_FIELD, INPUTS_FIELD,
};

#define NORM_FIELDS                                                    \
	{.key = "epsilon", .type = T_FLOAT, .flags = F_POS,            \
	 .off = LAY(epsilon), .def = 1e-3},                            \
		{.key = "center", .type = T_BOOL, .off = LAY(center),  \
		 .def = 1},                                            \
		{.key = "scale", .type = T_BOOL, .off = LAY(scale),    \
		 .def = 1}

static const struct field batch_norm_fields[] = {
	{.key = "momentum", .type = T_FLOAT, .flags = F_UNIT,
	 .off = LAY(momentum), .def = 0.99},
	NORM_FIELDS, NAME_FIELD, INPUTS_FIELD,
};

static const struct field layer_norm_fields[] = {NORM_FIELDS, NAME_FIELD,
						 INPUTS_FIELD};

static const struct field axis_fields[] = {
	{.key = "axis", .type = T_INT, .off = LAY(axis), .def = -1},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field reshape_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_layer_shape},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field leaky_relu_fields[] = {
	{.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = LAY(alpha), .def = 0.3},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field elu_fields[] = {
	{.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
	 .off = LAY(alpha), .def = 1.0},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field gelu_fields[] = {
	{.key = "approximate", .type = T_BOOL, .off = LAY(approximate),
	 .def = 0},
	NAME_FIELD, INPUTS_FIELD,
};

static const struct field plain_fields[] = {NAME_FIELD, INPUTS_FIELD};

#define SLICE_FIELDS                                                   \
	{.key = "axis", .type = T_INT, .off = LAY(axis), .def = -1},   \
		{.key = "begin", .type = T_I64, .flags = F_REQUIRED | F_NONNEG, \
		 .off = LAY(begin)},                                   \
		{.key = "size", .type = T_I64, .off = LAY(size), .def = -1}
static const struct field slice_fields[] = {SLICE_FIELDS, NAME_FIELD,
					    INPUTS_FIELD};

/* graph form: the mapping key is the name; ops take explicit inputs */
static const struct field op_conv_fields[] = {
	INPUTS_REQ, STRIDES_FIELD(1), DILATION_FIELD, PADDING_FIELD,
};
static const struct field op_pool_fields[] = {INPUTS_REQ, POOL_FIELDS};
static const struct field op_plain_fields[] = {INPUTS_REQ};
static const struct field op_matmul_fields[] = {
	INPUTS_REQ, {.key = "transpose_b", .type = T_BOOL,
		     .off = LAY(transpose_b), .def = 0},
};
static const struct field op_slice_fields[] = {INPUTS_REQ, SLICE_FIELDS};
static const struct field op_dropout_fields[] = {
	INPUTS_REQ,
	{.key = "rate", .type = T_FLOAT, .flags = F_REQUIRED | F_UNIT,
	 .off = LAY(rate)},
};
static const struct field op_batch_norm_fields[] = {
	INPUTS_REQ,
	{.key = "momentum", .type = T_FLOAT, .flags = F_UNIT,
	 .off = LAY(momentum), .def = 0.99},
	NORM_FIELDS,
};
static const struct field op_layer_norm_fields[] = {INPUTS_REQ,
						    NORM_FIELDS};
static const struct field op_axis_fields[] = {
	INPUTS_REQ, {.key = "axis", .type = T_INT, .off = LAY(axis), .def = -1},
};
static const struct field op_reshape_fields[] = {
	INPUTS_REQ, {.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
		     .read = read_layer_shape},
};
static const struct field op_leaky_relu_fields[] = {
	INPUTS_REQ, {.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
		     .off = LAY(alpha), .def = 0.3},
};
static const struct field op_elu_fields[] = {
	INPUTS_REQ, {.key = "alpha", .type = T_FLOAT, .flags = F_NONNEG,
		     .off = LAY(alpha), .def = 1.0},
};
static const struct field op_gelu_fields[] = {
	INPUTS_REQ, {.key = "approximate", .type = T_BOOL,
		     .off = LAY(approximate), .def = 0},
};
static const struct field op_attention_fields[] = {
	INPUTS_REQ,
	{.key = "heads", .type = T_INT, .flags = F_REQUIRED | F_POS,
	 .off = LAY(heads)},
	{.key = "dropout", .type = T_FLOAT, .flags = F_UNIT, .off = LAY(rate),
	 .def = 0},
};
static const struct field variable_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .flags = F_REQUIRED,
	 .read = read_layer_shape},
	{.key = "dtype", .type = T_ENUM, .names = dtypes,
	 .off = LAY(approximate) /* scratch: float32 only */},
	{.key = "initializer", .type = T_CUSTOM, .read = read_initializer},
	{.key = "trainable", .type = T_BOOL, .off = LAY(trainable), .def = 1},
	{.key = "group", .type = T_ENUM, .off = LAY(group),
	 .def = DTF_GROUP_AUTO, .names = groups},
};
static const struct field constant_fields[] = {
	{.key = "shape", .type = T_CUSTOM, .read = read_layer_shape},
	{.key = "dtype", .type = T_ENUM, .names = dtypes,
	 .off = LAY(approximate)},
	{.key = "value", .type = T_CUSTOM, .read = read_values},
	{.key = "fill", .type = T_FLOAT, .off = LAY(fill), .def = 0},
};

static int check_pool(struct ctx *c, void *base, const yaml_node_t *key,
		      const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->stride_h) {
		l->stride_h = l->size_h;
		l->stride_w = l->size_w;
	}
	return 0;
}

static int check_constant(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	const yaml_node_t *vn = dtf_ytree_get(c->t, map, "value");
	const yaml_node_t *fn = dtf_ytree_get(c->t, map, "fill");
	const yaml_node_t *sn = dtf_ytree_get(c->t, map, "shape");
	if (vn && fn)
		return dtf_cfg_fail(c, fn, path, "give value or fill, not both");
	if (!vn && !fn)
		return dtf_cfg_fail(c, key, path, "missing required key 'value' (or "
				    "'fill' with a shape)");
	if (fn && !sn)
		return dtf_cfg_fail(c, key, path, "missing required key 'shape' "
				    "(fill needs one)");
	if (vn && !sn) {
		l->shape_rank = 1;
		l->shape[0] = l->nvalues;
		return 0;
	}
	if (vn) {
		int64_t numel = 1;
		for (int i = 0; i < l->shape_rank; i++)
			numel *= l->shape[i];
		if (numel != l->nvalues && l->nvalues != 1)
			return dtf_cfg_fail(c, vn, path,
					    "%lld values for a shape of %lld elements",
					    (long long)l->nvalues, (long long)numel);
	}
	return 0;
}

static int check_variable(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->init_given)
		l->init.kind = l->shape_rank >= 2 ? DTF_INIT_KIND_GLOROT_UNIFORM
						  : DTF_INIT_KIND_ZEROS;
	return 0;
}

/* dense: units, unless tied_to gives them (the table's vocabulary) */
static int check_dense(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->units && !l->tied_to[0])
		return dtf_cfg_fail(c, key, path,
				    "missing required key 'units' (or 'tied_to')");
	return 0;
}

/* The GPT layers' default initializer: random_normal(0, 0.02). */
static int check_gpt_init(struct ctx *c, void *base, const yaml_node_t *key,
			  const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	if (!l->init_given) {
		l->init.kind = DTF_INIT_KIND_RANDOM_NORMAL;
		l->init.mean = 0;
		l->init.stddev = 0.02f;
	}
	return 0;
}

/* attention dropout: the key is read so that a rate other than 0 is an
 * error at its place, not ignored */
static int check_attention(struct ctx *c, void *base, const yaml_node_t *key,
			   const yaml_node_t *map, const char *path)
{
	struct dtf_layer *l = base;
	const yaml_node_t *dn = dtf_ytree_get(c->t, map, "dropout");
	if (l->rate != 0.0f)
		return dtf_cfg_fail(c, dn ? dn : key, path,
				    "dropout %g is not implemented (only 0)",
				    l->rate);
	return 0;
}

#define SECTION(id, fields, check)                                     \
	static const struct section id = {fields, NFIELDS(fields), -1, check}

SECTION(conv2d_section, conv2d_fields, NULL);
SECTION(depthwise_section, depthwise_fields, NULL);
SECTION(pool_section, pool_fields, check_pool);
SECTION(dense_section, dense_fields, check_dense);
SECTION(embedding_section, embedding_fields, check_gpt_init);
SECTION(position_embedding_section, position_embedding_fields,
	check_gpt_init);
SECTION(transformer_block_section, transformer_block_fields,
	check_gpt_init);
SECTION(dropout_section, dropout_fields, NULL);
SECTION(batch_norm_section, batch_norm_fields, NULL);
SECTION(layer_norm_section, layer_norm_fields, NULL);
SECTION(axis_section, axis_fields, NULL);
SECTION(reshape_section, reshape_fields, NULL);
SECTION(leaky_relu_section, leaky_relu_fields, NULL);
SECTION(elu_section, elu_fields, NULL);
SECTION(gelu_section, gelu_fields, NULL);
SECTION(plain_section, plain_fields, NULL);
SECTION(slice_section, slice_fields, NULL);
SECTION(op_slice_section, op_slice_fields, NULL);
SECTION(op_conv_section, op_conv_fields, NULL);
SECTION(op_pool_section, op_pool_fields, check_pool);
SECTION(op_plain_section, op_plain_fields, NULL);
SECTION(op_matmul_section, op_matmul_fields, NULL);
SECTION(op_dropout_section, op_dropout_fields, NULL);
SECTION(op_batch_norm_section, op_batch_norm_fields, NULL);
SECTION(op_layer_norm_section, op_layer_norm_fields, NULL);
SECTION(op_axis_section, op_axis_fields, NULL);
SECTION(op_reshape_section, op_reshape_fields, NULL);
SECTION(op_leaky_relu_section, op_leaky_relu_fields, NULL);
SECTION(op_elu_section, op_elu_fields, NULL);
SECTION(op_gelu_section, op_gelu_fields, NULL);
SECTION(op_attention_section, op_attention_fields, check_attention);
SECTION(variable_section, variable_fields, check_variable);
SECTION(constant_section, constant_fields, check_constant);

/* Names of every kind, indexed by enum dtf_layer_kind. */
static const char *const kind_names[] = {
	"conv2d", "max_pool2d", "flatten", "dense", "dropout", "relu",
	"depthwise_conv2d", "avg_pool2d", "global_avg_pool", "batch_norm",
	"layer_norm", "add", "multiply", "concat", "reshape", "leaky_relu",
	"elu", "gelu", "tanh", "sigmoid", "softmax", "identity", "variable",
	"constant", "matmul", "bias_add", "embedding", "causal_self_attention",
	"slice", "position_embedding", "transformer_block",
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) ==
		       DTF_LAYER_COUNT_,
	       "kind_names out of step with enum dtf_layer_kind");

/* model.layers items */
static const struct choice layer_kinds[] = {
	{"conv2d", DTF_LAYER_CONV2D, &conv2d_section},
	{"depthwise_conv2d", DTF_LAYER_DEPTHWISE_CONV2D, &depthwise_section},
	{"max_pool2d", DTF_LAYER_MAX_POOL2D, &pool_section},
	{"avg_pool2d", DTF_LAYER_AVG_POOL2D, &pool_section},
	{"global_avg_pool", DTF_LAYER_GLOBAL_AVG_POOL, &plain_section},
	{"flatten", DTF_LAYER_FLATTEN, &plain_section},
	{"reshape", DTF_LAYER_RESHAPE, &reshape_section},
	{"dense", DTF_LAYER_DENSE, &dense_section},
	{"dropout", DTF_LAYER_DROPOUT, &dropout_section},
	{"batch_norm", DTF_LAYER_BATCH_NORM, &batch_norm_section},
	{"layer_norm", DTF_LAYER_LAYER_NORM, &layer_norm_section},
	{"add", DTF_LAYER_ADD, &plain_section},
	{"multiply", DTF_LAYER_MULTIPLY, &plain_section},
	{"concat", DTF_LAYER_CONCAT, &axis_section},
	{"relu", DTF_LAYER_RELU, &plain_section},
	{"leaky_relu", DTF_LAYER_LEAKY_RELU, &leaky_relu_section},
	{"elu", DTF_LAYER_ELU, &elu_section},
	{"gelu", DTF_LAYER_GELU, &gelu_section},
	{"tanh", DTF_LAYER_TANH, &plain_section},
	{"sigmoid", DTF_LAYER_SIGMOID, &plain_section},
	{"softmax", DTF_LAYER_SOFTMAX, &axis_section},
	{"identity", DTF_LAYER_IDENTITY, &plain_section},
	{"slice", DTF_LAYER_SLICE, &slice_section},
	{"embedding", DTF_LAYER_EMBEDDING, &embedding_section},
	{"position_embedding", DTF_LAYER_POSITION_EMBEDDING,
	 &position_embedding_section},
	{"transformer_block", DTF_LAYER_TRANSFORMER_BLOCK,
	 &transformer_block_section},
};

/* model.graph nodes */
static const struct choice op_kinds[] = {
	{"variable", DTF_LAYER_VARIABLE, &variable_section},
	{"constant", DTF_LAYER_CONSTANT, &constant_section},
	{"conv2d", DTF_LAYER_CONV2D, &op_conv_section},
	{"depthwise_conv2d", DTF_LAYER_DEPTHWISE_CONV2D, &op_conv_section},
	{"matmul", DTF_LAYER_MATMUL, &op_matmul_section},
	{"bias_add", DTF_LAYER_BIAS_ADD, &op_plain_section},
	{"embedding", DTF_LAYER_EMBEDDING, &op_plain_section},
	{"causal_self_attention", DTF_LAYER_CAUSAL_SELF_ATTENTION,
	 &op_attention_section},
	{"max_pool2d", DTF_LAYER_MAX_POOL2D, &op_pool_section},
	{"avg_pool2d", DTF_LAYER_AVG_POOL2D, &op_pool_section},
	{"global_avg_pool", DTF_LAYER_GLOBAL_AVG_POOL, &op_plain_section},
	{"flatten", DTF_LAYER_FLATTEN, &op_plain_section},
	{"reshape", DTF_LAYER_RESHAPE, &op_reshape_section},
	{"dropout", DTF_LAYER_DROPOUT, &op_dropout_section},
	{"batch_norm", DTF_LAYER_BATCH_NORM, &op_batch_norm_section},
	{"layer_norm", DTF_LAYER_LAYER_NORM, &op_layer_norm_section},
	{"add", DTF_LAYER_ADD, &op_plain_section},
	{"multiply", DTF_LAYER_MULTIPLY, &op_plain_section},
	{"concat", DTF_LAYER_CONCAT, &op_axis_section},
	{"relu", DTF_LAYER_RELU, &op_plain_section},
	{"leaky_relu", DTF_LAYER_LEAKY_RELU, &op_leaky_relu_section},
	{"elu", DTF_LAYER_ELU, &op_elu_section},
	{"gelu", DTF_LAYER_GELU, &op_gelu_section},
	{"tanh", DTF_LAYER_TANH, &op_plain_section},
	{"sigmoid", DTF_LAYER_SIGMOID, &op_plain_section},
	{"softmax", DTF_LAYER_SOFTMAX, &op_axis_section},
	{"identity", DTF_LAYER_IDENTITY, &op_plain_section},
	{"slice", DTF_LAYER_SLICE, &op_slice_section},
};

/* Defaults that are not in the attribute tables. */
static void layer_defaults(struct dtf_layer *l)
{
	l->use_bias = 1;
	l->trainable = 1;
	l->dilation_h = l->dilation_w = 1;
	l->depth_multiplier = 1;
	l->axis = -1;
	l->center = l->scale = 1;
	l->init.kind = DTF_INIT_KIND_GLOROT_UNIFORM;
	l->init.stddev = 0.05f;
}

/* The node a layer's name came from: its `name` value, else the item. */
static const yaml_node_t *layer_name_node(struct ctx *c, const yaml_node_t *item)
{
	if (item->type == YAML_MAPPING_NODE &&
	    item->data.mapping.pairs.top > item->data.mapping.pairs.start) {
		const yaml_node_t *attrs = yaml_document_get_node(
			&c->t->doc, item->data.mapping.pairs.start[0].value);
		const yaml_node_t *n = dtf_ytree_get(c->t, attrs, "name");
		if (n)
			return n;
	}
	return item;
}

int dtf_cfg_read_layers(struct ctx *c, void *base, const yaml_node_t *key,
			const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;
	char buf[80], ipath[PATH_MAX_], apath[PATH_MAX_];
	int count[DTF_LAYER_COUNT_] = {0};

	if (val->type != YAML_SEQUENCE_NODE ||
	    val->data.sequence.items.top == val->data.sequence.items.start)
		return dtf_cfg_fail(c, val, path, "expected a non-empty list of layers, "
				    "got %s", dtf_cfg_describe_empty(val, buf, sizeof(buf)));
	int n = (int)(val->data.sequence.items.top -
		      val->data.sequence.items.start);
	job->model.layers = dtf_calloc((size_t)n, sizeof(*job->model.layers));
	if (!job->model.layers)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	job->model.nlayers = n;
	for (int i = 0; i < n; i++) {
		const yaml_node_t *item = yaml_document_get_node(
			&c->t->doc, val->data.sequence.items.start[i]);
		const yaml_node_t *kind, *attrs;
		const struct choice *ch;
		struct dtf_layer *l = &job->model.layers[i];

		dtf_cfg_path_fmt(ipath, "%s[%d]", path, i);
		int rc = dtf_cfg_read_choice(c, item, ipath, "layer kind", layer_kinds,
					     NFIELDS(layer_kinds), &ch, &kind, &attrs);
		if (rc)
			return rc;
		l->kind = (enum dtf_layer_kind)ch->value;
		dtf_ytree_where(c->t, item, l->where, sizeof(l->where));
		layer_defaults(l);
		dtf_cfg_apply_defaults(ch->attrs, l);
		dtf_cfg_join_path(apath, ipath, ch->name);
		rc = dtf_cfg_read_section(c, ch->attrs, l, kind, attrs, apath);
		if (rc)
			return rc;
		/* Keras numbering: the n-th layer of a kind is <kind>_<n>,
		 * whether or not the others are named */
		count[l->kind]++;
		if (!l->name[0])
			snprintf(l->name, sizeof(l->name), "%s_%d", ch->name,
				 count[l->kind]);
	}
	for (int i = 1; i < n; i++) {
		for (int j = 0; j < i; j++) {
			if (strcmp(job->model.layers[i].name,
				   job->model.layers[j].name))
				continue;
			dtf_cfg_path_fmt(ipath, "%s[%d]", path, i);
			const yaml_node_t *item = yaml_document_get_node(
				&c->t->doc, val->data.sequence.items.start[i]);
			return dtf_cfg_fail(c, layer_name_node(c, item), ipath,
					    "duplicate layer name '%s' (also layer %d "
					    "at %s)",
					    job->model.layers[i].name, j,
					    job->model.layers[j].where);
		}
	}
	return 0;
}

/* model.graph: {name: {op: {inputs: [...], attrs}}, ...} in any order. */
int dtf_cfg_read_graph(struct ctx *c, void *base, const yaml_node_t *key,
		       const yaml_node_t *val, const char *path)
{
	struct dtf_job *job = base;

	char npath[PATH_MAX_], apath[PATH_MAX_];
	void *arr;
	int n = 0;
	int rc_ = dtf_cfg_mapping_array(c, val, path,
					"a mapping of node names to {op: {inputs: [...], ...}}",
					sizeof(*job->model.nodes), &arr, &n);
	if (rc_ < 0)
		return rc_;
	job->model.nodes = arr;
	job->model.nnodes = n;
	for (int i = 0; i < n; i++) {
		const yaml_node_t *k, *v;
		dtf_cfg_mapping_pair(c, val, i, &k, &v);
		struct dtf_layer *l = &job->model.nodes[i];
		const yaml_node_t *kind, *attrs;
		const struct choice *ch;
		const char *name;
		int rc = dtf_cfg_read_str(c, k, path, DTF_NAME_MAX, &name);
		if (rc)
			return rc;
		dtf_cfg_join_path(npath, path, name);
		for (int j = 0; j < i; j++)
			if (!strcmp(job->model.nodes[j].name, name))
				return dtf_cfg_fail(c, k, npath,
						    "duplicate node name '%s' (also "
						    "at %s)",
						    name, job->model.nodes[j].where);
		snprintf(l->name, sizeof(l->name), "%s", name);
		dtf_ytree_where(c->t, k, l->where, sizeof(l->where));
		l->op_form = 1;
		rc = dtf_cfg_read_choice(c, v, npath, "op", op_kinds, NFIELDS(op_kinds),
					 &ch, &kind, &attrs);
		if (rc)
			return rc;
		l->kind = (enum dtf_layer_kind)ch->value;
		layer_defaults(l);
		dtf_cfg_apply_defaults(ch->attrs, l);
		dtf_cfg_join_path(apath, npath, ch->name);
		rc = dtf_cfg_read_section(c, ch->attrs, l, kind, attrs, apath);
		if (rc)
			return rc;
	}
	return 0;
}

const char *dtf_layer_kind_name(enum dtf_layer_kind k)
{
	return (unsigned)k < DTF_LAYER_COUNT_ ? kind_names[k] : "?";
}
