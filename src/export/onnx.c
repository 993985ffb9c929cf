/*
 * onnx.c - the inference graph as an ONNX ModelProto (export.h).
 *
 * Field numbers and enum values are those of onnx/onnx.proto (IR version
 * 8); op semantics those of the ONNX operator documents at opset 17.  The
 * message is written with data/pb.h's writer, in one pass over the forward
 * nodes the logits depend on, in graph order (a topological order, as
 * ONNX requires).  Each dtf op becomes the ONNX nodes of its row in
 * `rules` below, a table built from graph.h's op table: a new op row with
 * no ONNX_<name> entry here does not compile.
 *
 * Layout: dtf tensors are NHWC, ONNX's Conv, MaxPool, AveragePool and
 * BatchNormalization take the channels at axis 1, so those ops are
 * wrapped in Transposes (onnxruntime folds the pairs that cancel).
 * Tensor names: a node's output is its graph node name (a variable's
 * initializer too), the logits are model.loss's logits name, the helper
 * tensors of a lowering are "<node>:<what>".
 */
#include "export/export.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "data/pb.h"
#include "dtf_config.h"

/* onnx.proto field numbers */
enum {
	MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2,
	MODEL_PRODUCER_VERSION = 3, MODEL_DOC_STRING = 6, MODEL_GRAPH = 7,
	MODEL_OPSET_IMPORT = 8,
	OPSET_DOMAIN = 1, OPSET_VERSION = 2,
	GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5,
	GRAPH_INPUT = 11, GRAPH_OUTPUT = 12,
	NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4,
	NODE_ATTRIBUTE = 5,
	ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20,
	TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8,
	TENSOR_RAW_DATA = 9,
	VALUE_NAME = 1, VALUE_TYPE = 2,
	TYPE_TENSOR = 1, TTENSOR_ELEM_TYPE = 1, TTENSOR_SHAPE = 2,
	SHAPE_DIM = 1, DIM_VALUE = 1, DIM_PARAM = 2,
};
/* AttributeProto.AttributeType */
enum { ATYPE_FLOAT = 1, ATYPE_INT = 2, ATYPE_INTS = 7 };
/* TensorProto.DataType */
enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_INT32 = 6, T_INT64 = 7,
       T_FLOAT16 = 10 };

#define TNAME (2 * DTF_NAME_MAX + 32)

struct ox {
	struct dtf_pb_writer *w; /* positioned inside GraphProto */
	const struct dtf_job *job;
	const struct dtf_graph *g;
	const float *params;
	char (*name)[TNAME]; /* per node: its output tensor */
	char tmp[4][TNAME];  /* helper tensor names of the node in hand */
};

/* ---- message pieces ---------------------------------------------------- */

static void node_begin(struct ox *x, const char *op, const char *name,
		       const char *const *in, int nin, const char *out)
{
	struct dtf_pb_writer *w = x->w;
	dtf_pb_begin(w, GRAPH_NODE);
	for (int i = 0; i < nin; i++)
		dtf_pb_string(w, NODE_INPUT, in[i]);
	dtf_pb_string(w, NODE_OUTPUT, out);
	dtf_pb_string(w, NODE_NAME, name);
	dtf_pb_string(w, NODE_OP_TYPE, op);
}

static void node_end(struct ox *x)
{
	dtf_pb_end(x->w);
}

/* A node without attributes. */
static void node(struct ox *x, const char *op, const char *name,
		 const char *const *in, int nin, const char *out)
{
	node_begin(x, op, name, in, nin, out);
	node_end(x);
}

static void attr_int(struct ox *x, const char *name, int64_t v)
{
	dtf_pb_begin(x->w, NODE_ATTRIBUTE);
	dtf_pb_string(x->w, ATTR_NAME, name);
	dtf_pb_varint(x->w, ATTR_TYPE, ATYPE_INT);
	dtf_pb_varint(x->w, ATTR_I, (uint64_t)v);
	dtf_pb_end(x->w);
}

static void attr_float(struct ox *x, const char *name, float v)
{
	dtf_pb_begin(x->w, NODE_ATTRIBUTE);
	dtf_pb_string(x->w, ATTR_NAME, name);
	dtf_pb_varint(x->w, ATTR_TYPE, ATYPE_FLOAT);
	dtf_pb_float(x->w, ATTR_F, v);
	dtf_pb_end(x->w);
}

static void attr_ints(struct ox *x, const char *name, const int64_t *v, int n)
{
	dtf_pb_begin(x->w, NODE_ATTRIBUTE);
	dtf_pb_string(x->w, ATTR_NAME, name);
	dtf_pb_varint(x->w, ATTR_TYPE, ATYPE_INTS);
	for (int i = 0; i < n; i++)
		dtf_pb_varint(x->w, ATTR_INTS, (uint64_t)v[i]);
	dtf_pb_end(x->w);
}

/* A float32 initializer of shape dims[0..rank) (rank 0: a scalar). */
static void init_f32(struct ox *x, const char *name, const int64_t *dims,
		     int rank, const float *v, size_t n)
{
	dtf_pb_begin(x->w, GRAPH_INITIALIZER);
	for (int i = 0; i < rank; i++)
		dtf_pb_varint(x->w, TENSOR_DIMS, (uint64_t)dims[i]);
	dtf_pb_varint(x->w, TENSOR_DATA_TYPE, T_FLOAT);
	dtf_pb_string(x->w, TENSOR_NAME, name);
	dtf_pb_floats_le(x->w, TENSOR_RAW_DATA, v, n);
	dtf_pb_end(x->w);
}

static void init_scalar(struct ox *x, const char *name, float v)
{
	init_f32(x, name, NULL, 0, &v, 1);
}

/* A 1-D int64 initializer (shapes for Reshape). */
static void init_i64(struct ox *x, const char *name, const int64_t *v, int n)
{
	uint8_t raw[8 * DTF_MAX_RANK];
	for (int i = 0; i < n; i++)
		for (int b = 0; b < 8; b++)
			raw[8 * i + b] = (uint8_t)((uint64_t)v[i] >> (8 * b));
	dtf_pb_begin(x->w, GRAPH_INITIALIZER);
	dtf_pb_varint(x->w, TENSOR_DIMS, (uint64_t)n);
	dtf_pb_varint(x->w, TENSOR_DATA_TYPE, T_INT64);
	dtf_pb_string(x->w, TENSOR_NAME, name);
	dtf_pb_bytes(x->w, TENSOR_RAW_DATA, raw, (size_t)n * 8);
	dtf_pb_end(x->w);
}

/* A graph input or output: a tensor of `elem` with dimension 0 the
 * symbolic "batch" and the rest of s. */
static void value_info(struct ox *x, int field, const char *name, int elem,
		       const struct dtf_shape *s)
{
	struct dtf_pb_writer *w = x->w;
	dtf_pb_begin(w, field);
	dtf_pb_string(w, VALUE_NAME, name);
	dtf_pb_begin(w, VALUE_TYPE);
	dtf_pb_begin(w, TYPE_TENSOR);
	dtf_pb_varint(w, TTENSOR_ELEM_TYPE, (uint64_t)elem);
	dtf_pb_begin(w, TTENSOR_SHAPE);
	for (int i = 0; i < s->rank; i++) {
		dtf_pb_begin(w, SHAPE_DIM);
		if (i == 0)
			dtf_pb_string(w, DIM_PARAM, "batch");
		else
			dtf_pb_varint(w, DIM_VALUE, (uint64_t)s->d[i]);
		dtf_pb_end(w);
	}
	dtf_pb_end(w);
	dtf_pb_end(w);
	dtf_pb_end(w);
	dtf_pb_end(w);
}

/* ---- per op ------------------------------------------------------------ */

static const struct dtf_node *nd(const struct ox *x, int id)
{
	return &x->g->nodes[id];
}

/* The tensor of input k of node id. */
static const char *in(const struct ox *x, int id, int k)
{
	return x->name[nd(x, id)->inputs[k]];
}

/* "<node>:<what>" into helper slot k. */
static const char *tmp(struct ox *x, int k, int id, const char *what)
{
	snprintf(x->tmp[k], TNAME, "%s:%s", nd(x, id)->name, what);
	return x->tmp[k];
}

static const int64_t to_nchw[] = {0, 3, 1, 2}, to_nhwc[] = {0, 2, 3, 1};

static void transpose(struct ox *x, const char *name, const char *src,
		      const char *dst, const int64_t *perm, int n)
{
	node_begin(x, "Transpose", name, &src, 1, dst);
	attr_ints(x, "perm", perm, n);
	node_end(x);
}

/* One ONNX node op(inputs of id) -> id's tensor, no attributes. */
static int emit_plain(struct ox *x, int id, const char *op)
{
	const char *ins[DTF_MAX_INPUTS];
	int nin = dtf_op_ninputs(nd(x, id)->op);
	for (int k = 0; k < nin; k++)
		ins[k] = in(x, id, k);
	node(x, op, nd(x, id)->name, ins, nin, x->name[id]);
	return 0;
}

static int emit_input(struct ox *x, int id)
{
	const struct dtf_node *n = nd(x, id);
	const struct dtf_feature_spec *f =
		&x->job->data.features[n->a.in.feature];
	int elem = T_FLOAT;
	if (f->type == DTF_FEATURE_INT64)
		elem = T_INT64;
	else if (f->type == DTF_FEATURE_BYTES)
		elem = f->decode == DTF_DECODE_UINT8	 ? T_UINT8
		       : f->decode == DTF_DECODE_INT8	 ? T_INT8
		       : f->decode == DTF_DECODE_FLOAT16 ? T_FLOAT16
							 : T_FLOAT;
	int scaled = f->scale != 1.0f || f->offset != 0.0f;
	if (f->max_length > 0 && scaled)
		return dtf_error(DTF_ERR_GRAPH,
				 "feature '%s' is a variable-length list (max_length) with scale or offset: its padding is not scaled, which the exported model cannot tell from the values",
				 f->name);
	value_info(x, GRAPH_INPUT, f->name, elem, &n->shape);
	const char *cur = f->name;
	if (f->dtype == DTF_INT32) { /* ids: int64 values, or token bytes
					(dtype: int32), never scaled */
		const char *dst = tmp(x, 0, id, "ids");
		node_begin(x, "Cast", dst, &cur, 1, dst);
		attr_int(x, "to", T_INT32);
		node_end(x);
		snprintf(x->name[id], TNAME, "%s", dst);
		return 0;
	}
	if (elem != T_FLOAT) {
		const char *dst = tmp(x, 0, id, "float");
		node_begin(x, "Cast", dst, &cur, 1, dst);
		attr_int(x, "to", T_FLOAT);
		node_end(x);
		cur = dst;
	}
	if (f->scale != 1.0f) {
		const char *c = tmp(x, 1, id, "scale");
		init_scalar(x, c, f->scale);
		const char *ins[2] = {cur, c};
		const char *dst = tmp(x, 2, id, "scaled");
		node(x, "Mul", dst, ins, 2, dst);
		cur = dst;
	}
	if (f->offset != 0.0f) {
		const char *c = tmp(x, 1, id, "offset");
		init_scalar(x, c, f->offset);
		const char *ins[2] = {cur, c};
		const char *dst = tmp(x, 3, id, "decoded");
		node(x, "Add", dst, ins, 2, dst);
		cur = dst;
	}
	snprintf(x->name[id], TNAME, "%s", cur);
	return 0;
}

static int emit_variable(struct ox *x, int id)
{
	const struct dtf_node *n = nd(x, id);
	init_f32(x, n->name, n->shape.d, n->shape.rank,
		 x->params + n->a.var.offset,
		 (size_t)dtf_shape_numel(&n->shape));
	return 0;
}

/* Conv, MaxPool or AveragePool on NCHW between two Transposes; `w` the
 * OIHW weight (conv) or NULL; group for conv. */
static void windowed(struct ox *x, int id, const char *op, const char *w,
		     int group)
{
	const struct dtf_node *n = nd(x, id);
	const struct dtf_window_geom *g = &n->a.win.g;
	const char *xin = tmp(x, 0, id, "nchw_in");
	transpose(x, xin, in(x, id, 0), xin, to_nchw, 4);
	const char *ins[2] = {xin, w};
	const char *y = tmp(x, 2, id, "nchw_out");
	node_begin(x, op, y, ins, w ? 2 : 1, y);
	int64_t k[2] = {g->kh, g->kw}, s[2] = {g->stride_h, g->stride_w};
	int64_t pads[4] = {g->pad_top, g->pad_left, g->pad_bottom,
			   g->pad_right};
	attr_ints(x, "kernel_shape", k, 2);
	attr_ints(x, "strides", s, 2);
	attr_ints(x, "pads", pads, 4);
	if (w) {
		int64_t d[2] = {g->dilation_h, g->dilation_w};
		attr_ints(x, "dilations", d, 2);
		attr_int(x, "group", group);
	}
	if (!strcmp(op, "AveragePool")) /* TF: padding cells not counted */
		attr_int(x, "count_include_pad", 0);
	node_end(x);
	transpose(x, n->name, y, x->name[id], to_nhwc, 4);
}

static int emit_conv2d(struct ox *x, int id)
{
	/* TF's HWIO kernel (kh, kw, c, o) -> ONNX's OIHW */
	static const int64_t hwio_to_oihw[] = {3, 2, 0, 1};
	const char *w = tmp(x, 1, id, "oihw");
	transpose(x, w, in(x, id, 1), w, hwio_to_oihw, 4);
	windowed(x, id, "Conv", w, 1);
	return 0;
}

static int emit_depthwise_conv2d(struct ox *x, int id)
{
	/* TF's (kh, kw, c, m), output channel ci * m + j: ONNX's grouped
	 * Conv, group c, weight (c * m, 1, kh, kw) */
	static const int64_t perm[] = {2, 3, 0, 1};
	const struct dtf_window_geom *g = &nd(x, id)->a.win.g;
	const struct dtf_shape *ws = &nd(x, nd(x, id)->inputs[1])->shape;
	char cmhw[TNAME], shape[TNAME];
	snprintf(cmhw, sizeof(cmhw), "%s:cmhw", nd(x, id)->name);
	snprintf(shape, sizeof(shape), "%s:oihw_shape", nd(x, id)->name);
	transpose(x, cmhw, in(x, id, 1), cmhw, perm, 4);
	int64_t dims[4] = {ws->d[2] * ws->d[3], 1, ws->d[0], ws->d[1]};
	init_i64(x, shape, dims, 4);
	const char *w = tmp(x, 1, id, "oihw");
	const char *ins[2] = {cmhw, shape};
	node(x, "Reshape", w, ins, 2, w);
	windowed(x, id, "Conv", w, g->c);
	return 0;
}

static int emit_max_pool2d(struct ox *x, int id)
{
	windowed(x, id, "MaxPool", NULL, 0);
	return 0;
}

static int emit_avg_pool2d(struct ox *x, int id)
{
	windowed(x, id, "AveragePool", NULL, 0);
	return 0;
}

static int emit_global_avg_pool(struct ox *x, int id)
{
	static const int64_t axes[] = {1, 2};
	const char *src = in(x, id, 0);
	node_begin(x, "ReduceMean", nd(x, id)->name, &src, 1, x->name[id]);
	attr_ints(x, "axes", axes, 2);
	attr_int(x, "keepdims", 0);
	node_end(x);
	return 0;
}

static int emit_matmul(struct ox *x, int id)
{
	static const int64_t swap[] = {1, 0};
	const struct dtf_node *n = nd(x, id);
	const char *ins[2] = {in(x, id, 0), in(x, id, 1)};
	if (n->a.mm.trans_a) {
		ins[0] = tmp(x, 0, id, "a_t");
		transpose(x, ins[0], in(x, id, 0), ins[0], swap, 2);
	}
	if (n->a.mm.trans_b) {
		ins[1] = tmp(x, 1, id, "b_t");
		transpose(x, ins[1], in(x, id, 1), ins[1], swap, 2);
	}
	node(x, "MatMul", n->name, ins, 2, x->name[id]);
	return 0;
}

static int emit_add(struct ox *x, int id)
{
	return emit_plain(x, id, "Add"); /* bias_add: broadcast over the
					    last axis, as numpy's rule */
}

static int emit_relu(struct ox *x, int id)
{
	return emit_plain(x, id, "Relu");
}

static int emit_multiply(struct ox *x, int id)
{
	return emit_plain(x, id, "Mul");
}

static int emit_tanh(struct ox *x, int id)
{
	return emit_plain(x, id, "Tanh");
}

static int emit_sigmoid(struct ox *x, int id)
{
	return emit_plain(x, id, "Sigmoid");
}

static int emit_identity(struct ox *x, int id)
{
	return emit_plain(x, id, "Identity");
}

/* Dropout is the identity in inference: no node, the input's tensor. */
static int emit_dropout(struct ox *x, int id)
{
	const char *src = in(x, id, 0); /* another node's: no overlap */
	memcpy(x->name[id], src, strlen(src) + 1);
	return 0;
}

static int emit_reshape(struct ox *x, int id)
{
	const struct dtf_node *n = nd(x, id);
	int64_t dims[DTF_MAX_RANK];
	dims[0] = 0; /* Reshape: 0 keeps the input's dimension (the batch) */
	for (int i = 1; i < n->shape.rank; i++)
		dims[i] = n->shape.d[i];
	const char *shape = tmp(x, 0, id, "shape");
	init_i64(x, shape, dims, n->shape.rank);
	const char *ins[2] = {in(x, id, 0), shape};
	node(x, "Reshape", n->name, ins, 2, x->name[id]);
	return 0;
}

static int emit_concat(struct ox *x, int id)
{
	const char *ins[2] = {in(x, id, 0), in(x, id, 1)};
	node_begin(x, "Concat", nd(x, id)->name, ins, 2, x->name[id]);
	attr_int(x, "axis", nd(x, id)->a.cat.axis);
	node_end(x);
	return 0;
}

/* tf.slice along one axis: Slice with starts, ends, axes initializers */
static int emit_slice(struct ox *x, int id)
{
	const struct dtf_node *n = nd(x, id);
	int64_t b = n->a.cat.begin, ax = n->a.cat.axis;
	int64_t e = b + n->shape.d[ax];
	const char *ins[4] = {in(x, id, 0), tmp(x, 0, id, "starts"),
			      tmp(x, 1, id, "ends"), tmp(x, 2, id, "axes")};
	init_i64(x, ins[1], &b, 1);
	init_i64(x, ins[2], &e, 1);
	init_i64(x, ins[3], &ax, 1);
	node(x, "Slice", n->name, ins, 4, x->name[id]);
	return 0;
}

static int emit_batch_norm(struct ox *x, int id)
{
	/* BatchNormalization (inference: training_mode 0) normalizes over
	 * axis 1: the channels (last axis of x) are moved there and back */
	const struct dtf_node *n = nd(x, id);
	int r = n->shape.rank;
	int64_t fwd[DTF_MAX_RANK], back[DTF_MAX_RANK];
	fwd[0] = back[0] = 0;
	fwd[1] = r - 1;
	for (int i = 2; i < r; i++)
		fwd[i] = i - 1;
	for (int i = 1; i < r - 1; i++)
		back[i] = i + 1;
	back[r - 1] = 1;
	const char *src = in(x, id, 0);
	if (r > 2) {
		src = tmp(x, 0, id, "channels_first");
		transpose(x, src, in(x, id, 0), src, fwd, r);
	}
	const char *ins[5] = {src, in(x, id, 1), in(x, id, 2), in(x, id, 3),
			      in(x, id, 4)};
	const char *y = r > 2 ? tmp(x, 1, id, "normalized") : x->name[id];
	node_begin(x, "BatchNormalization", r > 2 ? y : n->name, ins, 5, y);
	attr_float(x, "epsilon", n->a.norm.epsilon);
	attr_float(x, "momentum", n->a.norm.momentum);
	node_end(x);
	if (r > 2)
		transpose(x, n->name, y, x->name[id], back, r);
	return 0;
}

/* embedding(ids, table) = tf.gather(table, ids): Gather(table, ids) on
 * axis 0 (ONNX Gather: an index out of range is an error there, a NaN row
 * in dtf-train). */
static int emit_embedding(struct ox *x, int id)
{
	const char *ins[2] = {in(x, id, 1), in(x, id, 0)};
	node_begin(x, "Gather", nd(x, id)->name, ins, 2, x->name[id]);
	attr_int(x, "axis", 0);
	node_end(x);
	return 0;
}

static int emit_layer_norm(struct ox *x, int id)
{
	const struct dtf_node *n = nd(x, id);
	const char *ins[3] = {in(x, id, 0), in(x, id, 1), in(x, id, 2)};
	node_begin(x, "LayerNormalization", n->name, ins, 3, x->name[id]);
	attr_int(x, "axis", -1);
	attr_float(x, "epsilon", n->a.norm.epsilon);
	node_end(x);
	return 0;
}

static int emit_leaky_relu(struct ox *x, int id)
{
	const char *src = in(x, id, 0);
	node_begin(x, "LeakyRelu", nd(x, id)->name, &src, 1, x->name[id]);
	attr_float(x, "alpha", nd(x, id)->a.act.alpha);
	node_end(x);
	return 0;
}

static int emit_elu(struct ox *x, int id)
{
	const char *src = in(x, id, 0);
	node_begin(x, "Elu", nd(x, id)->name, &src, 1, x->name[id]);
	attr_float(x, "alpha", nd(x, id)->a.act.alpha);
	node_end(x);
	return 0;
}

static int emit_softmax(struct ox *x, int id)
{
	const char *src = in(x, id, 0);
	node_begin(x, "Softmax", nd(x, id)->name, &src, 1, x->name[id]);
	attr_int(x, "axis", -1);
	node_end(x);
	return 0;
}

/* a op b -> "<node>:<what>" in buf */
static const char *binary(struct ox *x, int id, const char *op,
			  const char *a, const char *b, const char *what,
			  char *buf)
{
	snprintf(buf, TNAME, "%s:%s", nd(x, id)->name, what);
	const char *ins[2] = {a, b};
	node(x, op, buf, ins, 2, buf);
	return buf;
}

static int emit_gelu(struct ox *x, int id)
{
	/* Opset 17 has no Gelu: 0.5 x (1 + erf(x / sqrt 2)), or with
	 * approximate 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
	const struct dtf_node *n = nd(x, id);
	const char *src = in(x, id, 0);
	char c[4][TNAME], t[8][TNAME];
	const char *names[4] = {"half", "one", "k1", "k2"};
	float vals[4] = {0.5f, 1.0f,
			 n->a.act.approximate ? 0.7978845608028654f
					      : 0.7071067811865476f,
			 0.044715f};
	for (int i = 0; i < (n->a.act.approximate ? 4 : 3); i++) {
		snprintf(c[i], TNAME, "%s:%s", n->name, names[i]);
		init_scalar(x, c[i], vals[i]);
	}
	const char *u;
	if (n->a.act.approximate) {
		const char *x2 = binary(x, id, "Mul", src, src, "x2", t[0]);
		const char *x3 = binary(x, id, "Mul", x2, src, "x3", t[1]);
		const char *kx3 = binary(x, id, "Mul", x3, c[3], "kx3", t[2]);
		const char *s = binary(x, id, "Add", src, kx3, "sum", t[3]);
		u = binary(x, id, "Mul", s, c[2], "u", t[4]);
		snprintf(t[5], TNAME, "%s:tanh", n->name);
		node(x, "Tanh", t[5], &u, 1, t[5]);
	} else {
		u = binary(x, id, "Mul", src, c[2], "u", t[4]);
		snprintf(t[5], TNAME, "%s:erf", n->name);
		node(x, "Erf", t[5], &u, 1, t[5]);
	}
	const char *p = binary(x, id, "Add", t[5], c[1], "one_plus", t[6]);
	const char *hx = binary(x, id, "Mul", src, c[0], "half_x", t[7]);
	const char *ins[2] = {hx, p};
	node(x, "Mul", n->name, ins, 2, x->name[id]);
	return 0;
}

/* ---- the table --------------------------------------------------------- */

typedef int (*emit_fn)(struct ox *x, int id);

struct onnx_rule {
	emit_fn emit;    /* NULL: not exported */
	const char *why; /* why not */
};

#define EMIT(fn) {fn, NULL}
#define NOT_EXPORTED(why) {NULL, why}
#define GRADIENT NOT_EXPORTED("a gradient op (training only)")
#define LOSS NOT_EXPORTED("a loss (the export ends at its logits)")

#define ONNX_input EMIT(emit_input)
#define ONNX_variable EMIT(emit_variable)
#define ONNX_conv2d EMIT(emit_conv2d)
#define ONNX_conv2d_backprop_input GRADIENT
#define ONNX_conv2d_backprop_filter GRADIENT
#define ONNX_max_pool2d EMIT(emit_max_pool2d)
#define ONNX_max_pool2d_grad GRADIENT
#define ONNX_matmul EMIT(emit_matmul)
#define ONNX_bias_add EMIT(emit_add)
#define ONNX_bias_add_grad GRADIENT
#define ONNX_relu EMIT(emit_relu)
#define ONNX_relu_grad GRADIENT
#define ONNX_dropout EMIT(emit_dropout)
#define ONNX_dropout_grad GRADIENT
#define ONNX_reshape EMIT(emit_reshape)
#define ONNX_add EMIT(emit_add)
#define ONNX_sparse_softmax_cross_entropy LOSS
#define ONNX_sparse_softmax_cross_entropy_grad GRADIENT
#define ONNX_depthwise_conv2d EMIT(emit_depthwise_conv2d)
#define ONNX_depthwise_conv2d_backprop_input GRADIENT
#define ONNX_depthwise_conv2d_backprop_filter GRADIENT
#define ONNX_avg_pool2d EMIT(emit_avg_pool2d)
#define ONNX_avg_pool2d_grad GRADIENT
#define ONNX_global_avg_pool EMIT(emit_global_avg_pool)
#define ONNX_global_avg_pool_grad GRADIENT
#define ONNX_batch_norm EMIT(emit_batch_norm)
#define ONNX_batch_norm_grad_input GRADIENT
#define ONNX_batch_norm_grad_gamma GRADIENT
#define ONNX_layer_norm EMIT(emit_layer_norm)
#define ONNX_layer_norm_grad_input GRADIENT
#define ONNX_layer_norm_grad_gamma GRADIENT
#define ONNX_multiply EMIT(emit_multiply)
#define ONNX_concat EMIT(emit_concat)
#define ONNX_slice EMIT(emit_slice)
#define ONNX_slice_grad GRADIENT
#define ONNX_leaky_relu EMIT(emit_leaky_relu)
#define ONNX_leaky_relu_grad GRADIENT
#define ONNX_elu EMIT(emit_elu)
#define ONNX_elu_grad GRADIENT
#define ONNX_gelu EMIT(emit_gelu)
#define ONNX_gelu_grad GRADIENT
#define ONNX_tanh EMIT(emit_tanh)
#define ONNX_tanh_grad GRADIENT
#define ONNX_sigmoid EMIT(emit_sigmoid)
#define ONNX_sigmoid_grad GRADIENT
#define ONNX_softmax EMIT(emit_softmax)
#define ONNX_softmax_grad GRADIENT
#define ONNX_identity EMIT(emit_identity)
#define ONNX_softmax_cross_entropy LOSS
#define ONNX_softmax_cross_entropy_grad GRADIENT
#define ONNX_sigmoid_cross_entropy LOSS
#define ONNX_sigmoid_cross_entropy_grad GRADIENT
#define ONNX_mean_squared_error LOSS
#define ONNX_mean_squared_error_grad GRADIENT
#define ONNX_embedding EMIT(emit_embedding)
#define ONNX_embedding_grad GRADIENT
#define ONNX_causal_self_attention \
	NOT_EXPORTED("no ONNX rule yet (ONNX's Attention is opset 23)")
#define ONNX_causal_self_attention_grad GRADIENT

/* One entry per row of DTF_OPS, in enum order; an op without an
 * ONNX_<name> above is an undeclared identifier here. */
static const struct onnx_rule rules[] = {
#define DTF_X_RULE(id, name, nin, inplace, shape, flops, factor, grad) \
	ONNX_##name,
	DTF_OPS(DTF_X_RULE)
#undef DTF_X_RULE
};
_Static_assert(sizeof(rules) / sizeof(rules[0]) == DTF_OP_COUNT_,
	       "export/onnx.c: one ONNX rule per op of graph.h's table");

/* ---- the model --------------------------------------------------------- */

int dtf_export_onnx(const struct dtf_job *job, const struct dtf_graph *g,
		    const float *params, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (g->logits < 0)
		return dtf_error(DTF_ERR_GRAPH, "the model has no logits to export");
	int rc = 0;
	char *need = dtf_calloc((size_t)g->nnodes, 1);
	struct ox x = {.job = job, .g = g, .params = params,
		       .name = dtf_calloc((size_t)g->nnodes, TNAME)};
	struct dtf_pb_writer w;
	dtf_pb_writer_init(&w);
	x.w = &w;
	if (!need || !x.name) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	/* the nodes the logits depend on (inputs precede their consumers) */
	need[g->logits] = 1;
	for (int i = g->logits; i >= 0; i--)
		if (need[i])
			for (int k = 0; k < dtf_op_ninputs(g->nodes[i].op); k++)
				need[g->nodes[i].inputs[k]] = 1;

	dtf_pb_varint(&w, MODEL_IR_VERSION, DTF_ONNX_IR_VERSION);
	dtf_pb_string(&w, MODEL_PRODUCER_NAME, "dtf-train");
	dtf_pb_string(&w, MODEL_PRODUCER_VERSION, DTF_VERSION);
	dtf_pb_string(&w, MODEL_DOC_STRING, job->name);
	dtf_pb_begin(&w, MODEL_OPSET_IMPORT);
	dtf_pb_string(&w, OPSET_DOMAIN, "");
	dtf_pb_varint(&w, OPSET_VERSION, DTF_ONNX_OPSET);
	dtf_pb_end(&w);
	dtf_pb_begin(&w, MODEL_GRAPH);
	dtf_pb_string(&w, GRAPH_NAME, job->name);
	for (int i = 0; i < g->nnodes && rc == 0; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (!need[i])
			continue;
		snprintf(x.name[i], TNAME, "%s",
			 i == g->logits ? job->model.loss_logits : n->name);
		const struct onnx_rule *r = &rules[n->op];
		if (!r->emit)
			rc = dtf_error(DTF_ERR_GRAPH,
				       "op '%s' (node '%s') has no ONNX form: %s",
				       dtf_op_name(n->op), n->name, r->why);
		else
			rc = r->emit(&x, i);
	}
	if (rc < 0)
		goto out;
	/* the logits as they came out of a removed op (a dropout): name
	 * them */
	if (strcmp(x.name[g->logits], job->model.loss_logits) != 0) {
		const char *src = x.name[g->logits];
		node(&x, "Identity", job->model.loss_logits, &src, 1,
		     job->model.loss_logits);
	}
	value_info(&x, GRAPH_OUTPUT, job->model.loss_logits, T_FLOAT,
		   &g->nodes[g->logits].shape);
	dtf_pb_end(&w);
	if ((rc = dtf_pb_writer_error(&w)) < 0)
		goto out;
	*out = w.buf;
	*len = w.len;
	w.buf = NULL;
out:
	dtf_pb_writer_deinit(&w);
	dtf_free(need);
	dtf_free(x.name);
	return rc;
}
