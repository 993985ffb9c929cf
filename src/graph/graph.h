/*
 * graph.h - the model as a DAG of ops, its shapes, and its gradient.
 *
 * Building computes nothing (ggml's rule): a constructor records the op, its
 * inputs and attributes, infers the output shape, and returns the new node's
 * id.  Nodes are appended in an order where every input precedes its
 * consumers, so node order is a topological order; dtf_graph_toposort()
 * checks and restores that for graphs whose nodes were declared in any
 * order.  dtf_graph_backward() appends the gradient ops (reverse-mode
 * autodiff) to the same graph: each op's gradient rule, named in its row of
 * the op table, emits more nodes.  Shapes are NHWC for images, (rows, features) for dense layers;
 * dimension 0 is the per-replica batch.
 *
 * Variables live outside the node buffers, in one flat float32 parameter
 * vector (and one gradient vector of the same layout), so the gradient
 * allreduce and the optimizer each walk one array.
 */
#ifndef DTF_GRAPH_GRAPH_H
#define DTF_GRAPH_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"
#include "data/feature.h"
#include "graph/window.h"

/*
 * The op table.  One row per op, and what is generic about the op:
 *
 *   X(ID, name, inputs, inplace, shape, flops, factor, grad)
 *
 *   ID       the enum: DTF_OP_<ID>
 *   name     as written in job files and summaries ("conv2d"); also names
 *            the op's CPU reference kernel, cpu_<name> in ops/cpu/exec.c
 *   inputs   how many inputs it takes (DTF_MAX_INPUTS at most)
 *   inplace  which input its output may overwrite (same shape, every
 *            element read before it is written), or -1: the memory
 *            planner's rule (mem/plan.c)
 *   shape    how its output shape follows (enum dtf_shape_rule below);
 *            the constructor applies it for forward ops, the gradient rule
 *            for gradient ops
 *   flops,   its FLOP rule: the count dtf_graph_node_flops() returns is
 *   factor   factor times the basis (enum dtf_flops_basis below); e.g.
 *            sigmoid 3 per element (exp, add, divide), tanh_grad 3
 *            (multiply, subtract, multiply), softmax 5 (max, subtract,
 *            exp, sum, scale), softmax_grad 4 (dot, subtract, multiply),
 *            batch/layer norm 5 per input element (mean 1, variance 2,
 *            affine 2), their input gradients 11 (statistics 3, sums 3,
 *            dx 5), sparse softmax cross entropy 4 (max, subtract, exp,
 *            sum), the dense losses 6 (sigmoid: max, multiply, subtract,
 *            exp, log1p, add), mean squared error 3 (subtract,
 *            multiply-add), embedding 0 (a gather), its gradient 1 per
 *            element of dy (one add into the table), causal self-attention
 *            4 per B*T*T*C (its two products Q K^T and P V over the full
 *            T x T square, as nanoGPT's MFU estimate and the composition
 *            with batch_matmul count them, though the kernels compute only
 *            the causal half; softmax not counted), its gradient 10 (Q K^T
 *            recomputed, dP, dQ, dK, dV)
 *   grad     its gradient rule: the function of graph/autodiff.c that
 *            emits the nodes of its inputs' gradients, or NULL for an op
 *            that is itself a gradient (never differentiated)
 *
 * Adding an op:
 *   1. one row here and its constructor dtf_graph_<name>() in graph/ops.c, which checks the
 *      inputs and applies the shape rule;
 *   2. one kernel per backend: cpu_<name> in ops/cpu/exec.c (the reference
 *      walk, compile-checked against this table), a fast kernel in
 *      ops/cpu/fast_exec.c's table or NULL (the reference runs), and an
 *      entry in ops/cuda/exec_cuda.c's table -- a kernel or NOT_ON_CUDA
 *      ("why"), which `dtf-train --dry-run` reports by name;
 *   3. one gradient rule grad_<...> in graph/autodiff.c (named in the row;
 *      its gradient ops get rows of their own with grad NULL);
 *   4. one finite-difference test of the gradient in tests/test_graph.c
 *      (and the op in tests/test_ops.c against a plain loop).
 */
#define DTF_OPS(X) \
	X(INPUT,                            input,                             0, -1, FEED,     ZERO,      0,  grad_none)             \
	X(VARIABLE,                         variable,                          0, -1, PARAM,    ZERO,      0,  grad_none)             \
	X(CONV2D,                           conv2d,                            2, -1, WINDOW,   CONV,      1,  grad_conv2d)           \
	X(CONV2D_BACKPROP_INPUT,            conv2d_backprop_input,             2, -1, GRAD,     CONV,      1,  NULL)                  \
	X(CONV2D_BACKPROP_FILTER,           conv2d_backprop_filter,            2, -1, GRAD,     CONV,      1,  NULL)                  \
	X(MAX_POOL2D,                       max_pool2d,                        1, -1, WINDOW,   POOL,      1,  grad_max_pool2d)       \
	X(MAX_POOL2D_GRAD,                  max_pool2d_grad,                   2, -1, GRAD,     POOL,      1,  NULL)                  \
	X(MATMUL,                           matmul,                            2, -1, MATMUL,   MATMUL,    1,  grad_matmul)           \
	X(BIAS_ADD,                         bias_add,                          2, 0,  SAME,     OUT,       1,  grad_bias_add)         \
	X(BIAS_ADD_GRAD,                    bias_add_grad,                     1, -1, GRAD,     IN0,       1,  NULL)                  \
	X(RELU,                             relu,                              1, 0,  SAME,     OUT,       1,  grad_relu)             \
	X(RELU_GRAD,                        relu_grad,                         2, 0,  GRAD,     OUT,       1,  NULL)                  \
	X(DROPOUT,                          dropout,                           1, 0,  SAME,     OUT,       1,  grad_dropout)          \
	X(DROPOUT_GRAD,                     dropout_grad,                      1, 0,  GRAD,     OUT,       1,  NULL)                  \
	X(RESHAPE,                          reshape,                           1, -1, RESHAPE,  ZERO,      0,  grad_reshape)          \
	X(ADD,                              add,                               2, 0,  SAME,     OUT,       1,  grad_add)              \
	X(SPARSE_SOFTMAX_XENT,              sparse_softmax_cross_entropy,      2, -1, SCALAR,   IN0,       4,  grad_sparse_xent)      \
	X(SPARSE_SOFTMAX_XENT_GRAD,         sparse_softmax_cross_entropy_grad, 2, -1, GRAD,     IN0,       6,  NULL)                  \
	X(DEPTHWISE_CONV2D,                 depthwise_conv2d,                  2, -1, WINDOW,   DWCONV,    1,  grad_depthwise_conv2d) \
	X(DEPTHWISE_CONV2D_BACKPROP_INPUT,  depthwise_conv2d_backprop_input,   2, -1, GRAD,     DWCONV,    1,  NULL)                  \
	X(DEPTHWISE_CONV2D_BACKPROP_FILTER, depthwise_conv2d_backprop_filter,  2, -1, GRAD,     DWCONV,    1,  NULL)                  \
	X(AVG_POOL2D,                       avg_pool2d,                        1, -1, WINDOW,   POOL,      1,  grad_avg_pool2d)       \
	X(AVG_POOL2D_GRAD,                  avg_pool2d_grad,                   1, -1, GRAD,     POOL,      1,  NULL)                  \
	X(GLOBAL_AVG_POOL,                  global_avg_pool,                   1, -1, CHANNELS, IN0,       1,  grad_global_avg_pool)  \
	X(GLOBAL_AVG_POOL_GRAD,             global_avg_pool_grad,              1, -1, GRAD,     OUT,       1,  NULL)                  \
	X(BATCH_NORM,                       batch_norm,                        5, -1, SAME,     IN0,       5,  grad_norm)             \
	X(BATCH_NORM_GRAD_INPUT,            batch_norm_grad_input,             3, -1, GRAD,     OUT,       11, NULL)                  \
	X(BATCH_NORM_GRAD_GAMMA,            batch_norm_grad_gamma,             2, -1, GRAD,     IN0,       5,  NULL)                  \
	X(LAYER_NORM,                       layer_norm,                        3, -1, SAME,     IN0,       5,  grad_norm)             \
	X(LAYER_NORM_GRAD_INPUT,            layer_norm_grad_input,             3, -1, GRAD,     OUT,       11, NULL)                  \
	X(LAYER_NORM_GRAD_GAMMA,            layer_norm_grad_gamma,             2, -1, GRAD,     IN0,       5,  NULL)                  \
	X(MULTIPLY,                         multiply,                          2, 0,  SAME,     OUT,       1,  grad_multiply)         \
	X(CONCAT,                           concat,                            2, -1, CONCAT,   ZERO,      0,  grad_concat)           \
	X(SLICE,                            slice,                             1, -1, SLICE,    ZERO,      0,  grad_slice)            \
	X(SLICE_GRAD,                       slice_grad,                        1, -1, GRAD,     ZERO,      0,  NULL)                  \
	X(LEAKY_RELU,                       leaky_relu,                        1, 0,  SAME,     OUT,       1,  grad_act_input)        \
	X(LEAKY_RELU_GRAD,                  leaky_relu_grad,                   2, 0,  GRAD,     OUT,       2,  NULL)                  \
	X(ELU,                              elu,                               1, 0,  SAME,     OUT,       2,  grad_act_input)        \
	X(ELU_GRAD,                         elu_grad,                          2, 0,  GRAD,     OUT,       3,  NULL)                  \
	X(GELU,                             gelu,                              1, 0,  SAME,     GELU,      0,  grad_act_input)        \
	X(GELU_GRAD,                        gelu_grad,                         2, 0,  GRAD,     GELU_GRAD, 0,  NULL)                  \
	X(TANH,                             tanh,                              1, 0,  SAME,     OUT,       1,  grad_act_output)       \
	X(TANH_GRAD,                        tanh_grad,                         2, 0,  GRAD,     OUT,       3,  NULL)                  \
	X(SIGMOID,                          sigmoid,                           1, 0,  SAME,     OUT,       3,  grad_act_output)       \
	X(SIGMOID_GRAD,                     sigmoid_grad,                      2, 0,  GRAD,     OUT,       3,  NULL)                  \
	X(SOFTMAX,                          softmax,                           1, 0,  SAME,     OUT,       5,  grad_act_output)       \
	X(SOFTMAX_GRAD,                     softmax_grad,                      2, -1, GRAD,     OUT,       4,  NULL)                  \
	X(IDENTITY,                         identity,                          1, 0,  SAME,     ZERO,      0,  grad_identity)         \
	X(SOFTMAX_XENT,                     softmax_cross_entropy,             2, -1, SCALAR,   IN0,       6,  grad_dense_loss)       \
	X(SOFTMAX_XENT_GRAD,                softmax_cross_entropy_grad,        2, -1, GRAD,     IN0,       6,  NULL)                  \
	X(SIGMOID_XENT,                     sigmoid_cross_entropy,             2, -1, SCALAR,   IN0,       6,  grad_dense_loss)       \
	X(SIGMOID_XENT_GRAD,                sigmoid_cross_entropy_grad,        2, -1, GRAD,     IN0,       6,  NULL)                  \
	X(MSE,                              mean_squared_error,                2, -1, SCALAR,   IN0,       3,  grad_dense_loss)       \
	X(MSE_GRAD,                         mean_squared_error_grad,           2, -1, GRAD,     IN0,       3,  NULL)                  \
	X(EMBEDDING,                        embedding,                         2, -1, GATHER,   ZERO,      0,  grad_embedding)        \
	X(EMBEDDING_GRAD,                   embedding_grad,                    2, -1, GRAD,     IN0,       1,  NULL)                  \
	X(TRANSPOSE,                        transpose,                         1, -1, TRANSPOSE, ZERO,     0,  grad_transpose)        \
	X(BATCH_MATMUL,                     batch_matmul,                      2, -1, BATCH_MATMUL, BATCH_MATMUL, 1, grad_batch_matmul)  \
	X(CAUSAL_SELF_ATTENTION,            causal_self_attention,             1, -1, ATTENTION, ATTENTION, 4, grad_attention)       \
	X(CAUSAL_SELF_ATTENTION_GRAD,       causal_self_attention_grad,        2, -1, GRAD,     ATTENTION, 10, NULL)

/* How an op's output shape follows from its inputs and attributes. */
enum dtf_shape_rule {
	DTF_SHAPE_FEED,     /* input: the feature's shape behind the batch */
	DTF_SHAPE_PARAM,    /* variable: as declared */
	DTF_SHAPE_SAME,     /* input 0's shape (elementwise, normalization) */
	DTF_SHAPE_WINDOW,   /* (n, oh, ow, o or c) from the window geometry */
	DTF_SHAPE_MATMUL,   /* a (..., k) times b (k, n): (..., n); a gradient
			       (trans_a) (k, n) from a (..., k), dy (..., n) */
	DTF_SHAPE_CHANNELS, /* (n, c) of an (n, h, w, c) input */
	DTF_SHAPE_RESHAPE,  /* the target shape, one -1 inferred */
	DTF_SHAPE_CONCAT,   /* input 0's shape, the axis summed with input 1's */
	DTF_SHAPE_SLICE,    /* input 0's shape, `size` along the axis */
	DTF_SHAPE_TRANSPOSE, /* input 0's dimensions in the order of perm */
	DTF_SHAPE_BATCH_MATMUL, /* (..., m, n) from a (..., m, k), b (..., k, n),
				   adjoints applied */
	DTF_SHAPE_SCALAR,   /* a loss: rank 0 */
	DTF_SHAPE_GATHER,   /* embedding: ids' shape (n, ...) with the table's
			       row length appended: (n, ..., d) */
	DTF_SHAPE_ATTENTION, /* (b, t, c) of a (b, t, 3c) input */
	DTF_SHAPE_GRAD,     /* a gradient: the shape of the forward tensor it
			       is the gradient of, set by the gradient rule */
};

/* What dtf_graph_node_flops() multiplies an op's factor with. */
enum dtf_flops_basis {
	DTF_FLOPS_ZERO,      /* data movement: 0 */
	DTF_FLOPS_OUT,       /* per output element */
	DTF_FLOPS_IN0,       /* per element of input 0 */
	DTF_FLOPS_CONV,      /* 2 per multiply-add: 2 n oh ow o kh kw c */
	DTF_FLOPS_DWCONV,    /* 2 n oh ow o kh kw (o = c * multiplier) */
	DTF_FLOPS_POOL,      /* 1 per window tap: n oh ow c kh kw */
	DTF_FLOPS_MATMUL,    /* 2 m n k (dtf_graph_matmul_dims) */
	DTF_FLOPS_BATCH_MATMUL, /* 2 batch m n k, +1 per output with alpha != 1 */
	DTF_FLOPS_GELU,      /* per output element: 5 (erf form), 9 (tanh) */
	DTF_FLOPS_GELU_GRAD, /* per output element: 9 (erf form), 14 (tanh) */
	DTF_FLOPS_ATTENTION, /* b t t c of a (b, t, 3c) input 0 */
};

enum dtf_op {
#define DTF_X_OP(id, name, nin, inplace, shape, flops, factor, grad) DTF_OP_##id,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
	DTF_OP_COUNT_
};

/* The op's name as written in job files and summaries. */
const char *dtf_op_name(enum dtf_op op);
/* The columns of the op's row: inputs, in-place input (or -1), shape rule,
 * FLOP basis and factor. */
int dtf_op_ninputs(enum dtf_op op);
int dtf_op_inplace_input(enum dtf_op op);
enum dtf_shape_rule dtf_op_shape_rule(enum dtf_op op);
enum dtf_flops_basis dtf_op_flops_basis(enum dtf_op op);
int dtf_op_flops_factor(enum dtf_op op);

/* batch_norm has the most: x, gamma, beta, moving_mean, moving_var.
 * Inputs past the op's count are -1. */
#define DTF_MAX_INPUTS 5

struct dtf_shape {
	int rank;
	int64_t d[DTF_MAX_RANK];
};

int64_t dtf_shape_numel(const struct dtf_shape *s);
/* "(32, 28, 28, 1)" into buf; returns buf. */
char *dtf_shape_str(const struct dtf_shape *s, char *buf, size_t size);

enum dtf_init {
	DTF_INIT_ZEROS = 0,
	DTF_INIT_GLOROT_UNIFORM,
};

struct dtf_node {
	enum dtf_op op;
	char name[2 * DTF_NAME_MAX];
	int inputs[DTF_MAX_INPUTS];
	struct dtf_shape shape;
	enum dtf_dtype dtype;
	int requires_grad; /* depends on a trainable variable */
	int backward;      /* appended by dtf_graph_backward */
	int layer;         /* index of the job layer it lowers, or -1 */
	union {
		struct { /* CONV2D*, DEPTHWISE_CONV2D*, MAX_POOL2D*,
			    AVG_POOL2D* */
			struct dtf_window_geom g;
		} win;
		struct { /* MATMUL (alpha unused); BATCH_MATMUL (TF's adj_x,
			    adj_y; c = alpha op(a) op(b)) */
			int trans_a, trans_b;
			float alpha;
		} mm;
		struct { /* TRANSPOSE: output axis i is input axis perm[i] */
			int perm[DTF_MAX_RANK];
		} tr;
		struct { /* SOFTMAX: causal mask of the last two axes */
			int causal;
		} sm;
		struct { /* DROPOUT* */
			float rate;
			uint32_t salt; /* FNV-1a of the node name; mixed
					  with the step */
		} drop;
		struct { /* VARIABLE */
			size_t offset; /* floats into the parameter vector */
			enum dtf_init init;
			int fan_in, fan_out;
			int trainable;
			/* dtf_graph_variable_ex: the initialiser (init_ex
			 * set), weight-decay group, constant values */
			int init_ex;
			struct dtf_init_spec spec;
			enum dtf_var_group group;
			int constant;         /* a `constant` node */
			const float *values;  /* borrowed; nvalues == 1:
						 fill */
			int64_t nvalues;
		} var;
		struct { /* INPUT */
			int feature; /* index into the job's features */
		} in;
		struct { /* LEAKY_RELU*, ELU* (alpha); GELU* (approximate) */
			float alpha;
			int approximate;
		} act;
		struct { /* BATCH_NORM*, LAYER_NORM* */
			float epsilon;
			float momentum; /* BATCH_NORM: of the moving averages */
		} norm;
		struct { /* CONCAT (axis); SLICE, SLICE_GRAD (axis, first
			    index along it; concat's gradient is a SLICE
			    too) */
			int axis;
			int64_t begin;
		} cat;
		struct { /* SOFTMAX_XENT* */
			float label_smoothing;
		} loss;
		struct { /* CAUSAL_SELF_ATTENTION* */
			int heads;
		} attn;
	} a;
	/* Set by planning: the node's output. VARIABLE nodes point into the
	 * parameter vector, RESHAPE nodes alias their input, gradients of
	 * variables point into the gradient vector. */
	void *data;
};

struct dtf_graph {
	struct dtf_node *nodes;
	int nnodes, cap;
	int batch;        /* per-replica batch: dimension 0 of inputs */
	size_t nparams;   /* floats in the parameter vector */
	int loss;         /* the loss node, or -1; its op says which loss
			     (SPARSE_SOFTMAX_XENT, SOFTMAX_XENT, SIGMOID_XENT,
			     MSE) */
	int logits;       /* logits (predictions for MSE) node of the loss,
			     or -1 */
	int labels;       /* labels node of the loss, or -1: int32 (batch)
			     for SPARSE_SOFTMAX_XENT, float32 of the logits'
			     shape otherwise */
	int nforward;     /* nodes [0, nforward) are the forward pass */
	int *var_grad;    /* per node: id of its total gradient, or -1;
			     filled by dtf_graph_backward */
};

/* Empty graph for per-replica batch `batch`.  Errors: DTF_ERR_NOMEM. */
int dtf_graph_init(struct dtf_graph *g, int batch);
void dtf_graph_deinit(struct dtf_graph *g);

/* The id of the node called `name`, or -1. */
int dtf_graph_find(const struct dtf_graph *g, const char *name);

/*
 * Constructors.  Each returns the new node id (>= 0) or a negative
 * DTF_ERR_GRAPH / DTF_ERR_NOMEM; a shape error names both nodes and both
 * shapes.  `name` must be unique (DTF_ERR_GRAPH otherwise).
 */
int dtf_graph_input(struct dtf_graph *g, const char *name, int feature,
		    const struct dtf_feature_spec *spec);
/* A variable of `shape` appended to the parameter vector. */
int dtf_graph_variable(struct dtf_graph *g, const char *name,
		       const struct dtf_shape *shape, enum dtf_init init,
		       int fan_in, int fan_out);
/* Options of dtf_graph_variable_ex. */
struct dtf_var_opts {
	struct dtf_init_spec init;
	int trainable;           /* 0: not updated, no gradient */
	enum dtf_var_group group; /* DTF_GROUP_AUTO: see dtf_graph_var_group */
	int constant;            /* a constant: non-trainable, not a param */
	const float *values;     /* constant values (numel of shape, or 1 to
				    fill); borrowed, must outlive the graph */
	int64_t nvalues;
};

/* A variable (or constant) of `shape` appended to the parameter vector,
 * initialised as o->init says (fans from the shape, Keras's rule). */
int dtf_graph_variable_ex(struct dtf_graph *g, const char *name,
			  const struct dtf_shape *shape,
			  const struct dtf_var_opts *o);

/* The weight-decay group of variable node n: as given, else NORM for
 * names ending in gamma, beta, moving_mean or moving_variance, BIAS for
 * rank <= 1, KERNEL otherwise. */
enum dtf_var_group dtf_graph_var_group(const struct dtf_node *n);

/* Keras's fans of a variable shape: rank 0: 1, 1; rank 1: d0, d0; rank 2:
 * d0, d1; rank k > 2: receptive field (product of the first k-2) times
 * d[k-2] and d[k-1]. */
void dtf_graph_fans(const struct dtf_shape *s, double *fan_in,
		    double *fan_out);

/* x (n, h, w, c), w (kh, kw, c, o).  `geom` gives strides and dilation;
 * its other fields are filled here. */
int dtf_graph_conv2d(struct dtf_graph *g, const char *name, int x, int w,
		     int stride_h, int stride_w, enum dtf_padding padding);
int dtf_graph_max_pool2d(struct dtf_graph *g, const char *name, int x,
			 int size_h, int size_w, int stride_h, int stride_w,
			 enum dtf_padding padding);
/* x (n, k) times w (k, m). */
int dtf_graph_matmul(struct dtf_graph *g, const char *name, int x, int w);
/*
 * Dense over the last axis (tf.matmul of a batch of rows, Keras Dense on
 * rank >= 2): x float32 (..., k) of rank >= 2 times w (k, n) gives
 * (..., n); with transpose_b, w is (n, k) and x is multiplied by w^T
 * (tf.matmul(x, w, transpose_b=True)), so an output head can share an
 * embedding table (vocab, d).  Every operand is viewed as the 2-D matrix
 * (numel / last dimension, last dimension): one sgemm.
 */
int dtf_graph_matmul_ex(struct dtf_graph *g, const char *name, int x, int w,
			int transpose_b);
/* The sgemm of a MATMUL node: c (m, n) = op(a) (m, k) op(b) (k, n), each
 * operand viewed as (numel / last dimension, last dimension). */
void dtf_graph_matmul_dims(const struct dtf_graph *g, const struct dtf_node *n,
			   int *m, int *cols, int *k);
/* x (..., c) + b (c).  (A BIAS_ADD node made by dtf_graph_add may carry
 * a b of several trailing dimensions: its kernels view x as (rows,
 * numel(b)).) */
int dtf_graph_bias_add(struct dtf_graph *g, const char *name, int x, int b);
int dtf_graph_relu(struct dtf_graph *g, const char *name, int x);
int dtf_graph_dropout(struct dtf_graph *g, const char *name, int x,
		      float rate);
/* Keep dimension 0, flatten the rest. */
int dtf_graph_flatten(struct dtf_graph *g, const char *name, int x);
/*
 * logits float32 (n, ..., classes), labels int32 (n, ...) -> scalar loss
 * (TF's sparse_softmax_cross_entropy_with_logits, then a mean).  With
 * positions (n, t, classes) an example's loss is the mean over its t
 * positions, so the loss of a batch is the mean over all n * t (PyTorch's
 * cross_entropy over the flattened logits); accuracy likewise counts the
 * fraction of an example's positions whose argmax is the label.
 */
int dtf_graph_sparse_softmax_xent(struct dtf_graph *g, const char *name,
				  int logits, int labels);
/* The rows of a sparse loss's logits node: (rows, classes) with classes
 * the last dimension, per = rows / n positions of one example. */
/* Positions per example of g's loss: the `per` of dtf_graph_xent_dims for
 * a sparse softmax cross-entropy (t of (n, t, classes) logits), else 1. */
int dtf_graph_loss_positions(const struct dtf_graph *g);
void dtf_graph_xent_dims(const struct dtf_graph *g, int logits, size_t *rows,
			 int *classes, int *per);

/* ---- the wider op set --------------------------------------------------
 * Defaults named here are Keras's unless said otherwise; the job language
 * supplies them when a key is absent. */
#define DTF_BATCH_NORM_MOMENTUM 0.99f /* Keras BatchNormalization */
#define DTF_BATCH_NORM_EPSILON 1e-3f  /* Keras BatchNormalization */
#define DTF_LAYER_NORM_EPSILON 1e-3f  /* Keras LayerNormalization */
#define DTF_ELU_ALPHA 1.0f            /* Keras ELU, tf.nn.elu */
#define DTF_LEAKY_RELU_ALPHA 0.2f        /* tf.nn.leaky_relu */

/* Window attributes of conv2d and depthwise_conv2d (TF's tf.nn.conv2d):
 * strides and dilations >= 1 (0 is read as 1); for DTF_PAD_EXPLICIT the
 * four pads (>= 0, may be asymmetric), ignored otherwise. */
struct dtf_conv_attrs {
	int stride_h, stride_w;
	int dilation_h, dilation_w;
	enum dtf_padding padding;
	int pad_top, pad_bottom, pad_left, pad_right;
};

/* x (n, h, w, c) conv w (kh, kw, c, o) -> (n, oh, ow, o).  A bias
 * (Keras's use_bias) is a separate dtf_graph_bias_add on the result. */
int dtf_graph_conv2d_ex(struct dtf_graph *g, const char *name, int x, int w,
			const struct dtf_conv_attrs *a);
/* x (n, h, w, c), w (kh, kw, c, m) -> (n, oh, ow, c*m); TF's
 * depthwise_conv2d (channel multiplier m). */
int dtf_graph_depthwise_conv2d(struct dtf_graph *g, const char *name, int x,
			       int w, const struct dtf_conv_attrs *a);
/* TF's avg_pool2d (padding cells excluded from each window's count). */
int dtf_graph_avg_pool2d(struct dtf_graph *g, const char *name, int x,
			 int size_h, int size_w, int stride_h, int stride_w,
			 enum dtf_padding padding);
/* x (n, h, w, c) -> (n, c): the mean over h and w (Keras's
 * GlobalAveragePooling2D). */
int dtf_graph_global_avg_pool(struct dtf_graph *g, const char *name, int x);
/*
 * Batch normalization over every axis but the last: x (..., c); gamma,
 * beta, moving_mean, moving_var all (c).  moving_mean and moving_var must
 * be VARIABLE nodes no other node uses yet: this marks them non-trainable
 * (a.var.trainable = 0: they stay in the parameter vector, are saved and
 * initialised like any variable, get no gradient).  In training
 * (exec ctx.training) the batch statistics normalize and the moving
 * averages are updated in place with `momentum`
 * (the CPU kernel: dtf_cpu_batch_norm_train); in inference the moving statistics
 * normalize.  The lowering initialises gamma and moving_var to ones, beta
 * and moving_mean to zeros (Keras).  The gradient assumes training mode.
 */
int dtf_graph_batch_norm(struct dtf_graph *g, const char *name, int x,
			 int gamma, int beta, int moving_mean, int moving_var,
			 float momentum, float epsilon);
/* Normalize each row over the last axis: x (..., c), gamma, beta (c). */
int dtf_graph_layer_norm(struct dtf_graph *g, const char *name, int x,
			 int gamma, int beta, float epsilon);
/*
 * Embedding lookup (tf.nn.embedding_lookup, Keras Embedding): ids int32
 * (n, ...) of rank >= 1, table float32 (vocab, d) -> (n, ..., d), row
 * ids[p] of the table for each position p.  The ids come from an int64
 * feature or a bytes feature decoded with `dtype: int32`.  An id outside
 * [0, vocab) gives a row of NaN (the kernels cannot fail; the loss then
 * goes non-finite, as for an out-of-range label) and no gradient.  The
 * table's gradient (EMBEDDING_GRAD, inputs dy and ids) is a scatter-add:
 * zero, then dy of each position added into row ids[p] in position order,
 * so it has the same bits on every backend and thread count.
 */
int dtf_graph_embedding(struct dtf_graph *g, const char *name, int ids,
			int table);
/* a + b of the same shape; a tensor of the other's trailing dimensions
 * on either side (a (c) vector, a (t, c) position embedding under
 * (n, t, c)) is broadcast over the other's leading axes (numpy's rule
 * without size-1 axes; emitted as bias_add, whose gradient sums dy over
 * those axes). */
int dtf_graph_add(struct dtf_graph *g, const char *name, int a, int b);
/* a * b elementwise, same shape. */
int dtf_graph_multiply(struct dtf_graph *g, const char *name, int a, int b);
/* Concatenate a and b along `axis` (negative counts from the end; not the
 * batch axis 0); every other dimension must match (TF's concat). */
int dtf_graph_concat(struct dtf_graph *g, const char *name, int a, int b,
		     int axis);
/*
 * x[..., begin:begin+size, ...] along `axis` (negative counts from the
 * end; not the batch axis 0), tf.slice with one axis cut: x float32 or
 * int32 (the output has x's dtype), 0 <= begin, size >= 1 (or -1: to the
 * end), begin + size <= the axis' length.  A GPT's inputs and labels are
 * two slices of one int32 token window.  The gradient (float32 only) is
 * SLICE_GRAD: dy placed at `begin` in zeros of x's shape (TF's Pad).
 */
int dtf_graph_slice(struct dtf_graph *g, const char *name, int x, int axis,
		    int64_t begin, int64_t size);
/* tf.reshape to dims[0..rank), the batch dimension included; at most one
 * entry is -1 (inferred).  Dimension 0 must stay the batch. */
int dtf_graph_reshape(struct dtf_graph *g, const char *name, int x,
		      const int64_t *dims, int rank);
int dtf_graph_leaky_relu(struct dtf_graph *g, const char *name, int x,
			 float alpha);
int dtf_graph_elu(struct dtf_graph *g, const char *name, int x, float alpha);
/* approximate: 0 erf form (TF's default), 1 tanh approximation. */
int dtf_graph_gelu(struct dtf_graph *g, const char *name, int x,
		   int approximate);
int dtf_graph_tanh(struct dtf_graph *g, const char *name, int x);
int dtf_graph_sigmoid(struct dtf_graph *g, const char *name, int x);
/* Softmax over the last axis. */
int dtf_graph_softmax(struct dtf_graph *g, const char *name, int x);
/*
 * Softmax over the last axis of x (..., tq, tk) (rank >= 2) with, when
 * causal, the mask of a decoder's self-attention: element (..., i, j)
 * with j > i gets probability 0 (a lower-triangular mask, as
 * tf.linalg.band_part(ones, -1, 0) or PyTorch's is_causal, aligned at the
 * top left); row i is the softmax of its first i + 1 entries.  The
 * gradient is softmax_grad's (0 where masked).
 */
int dtf_graph_softmax_ex(struct dtf_graph *g, const char *name, int x,
			 int causal);
/*
 * tf.transpose(x, perm): output axis i is input axis perm[i]; perm is a
 * permutation of 0 .. rank - 1 (rank = x's, up to DTF_MAX_RANK) that
 * keeps the batch first (perm[0] == 0).  x float32.  The gradient is the
 * transpose by the inverse permutation.  No FLOPs (data movement).
 */
int dtf_graph_transpose(struct dtf_graph *g, const char *name, int x,
			const int *perm, int rank);
/*
 * tf.linalg.matmul on batches (TF's BatchMatMulV2 without broadcasting):
 * a (..., m, k) and b (..., k, n) float32 of the same rank >= 3 and the
 * same leading (batch) dimensions give c (..., m, n) = alpha op(a) op(b);
 * adj_a: a is (..., k, m) and op(a) its transpose on the last two axes
 * (TF's adj_x / transpose_a), adj_b likewise (adj_y / transpose_b).
 * alpha scales the product (1: none), e.g. attention's 1 / sqrt(d).
 * FLOPs 2 batch m n k (+ batch m n for alpha != 1).
 */
int dtf_graph_batch_matmul(struct dtf_graph *g, const char *name, int a,
			   int b, int adj_a, int adj_b, float alpha);
/* The gemms of a BATCH_MATMUL node: batch products c (m, n) = alpha
 * op(a) (m, k) op(b) (k, n). */
void dtf_graph_batch_matmul_dims(const struct dtf_graph *g,
				 const struct dtf_node *n, int *batch, int *m,
				 int *cols, int *k);
int dtf_graph_identity(struct dtf_graph *g, const char *name, int x);
/* Losses: each returns a scalar node and becomes g->loss.
 * logits (n, classes), labels float32 (n, classes) one-hot; Keras's
 * label_smoothing in [0, 1]. */
int dtf_graph_softmax_xent(struct dtf_graph *g, const char *name, int logits,
			   int labels, float label_smoothing);
/* logits and float32 labels of the same shape (n, ...). */
int dtf_graph_sigmoid_xent(struct dtf_graph *g, const char *name, int logits,
			   int labels);
/* predictions and float32 labels of the same shape (n, ...). */
int dtf_graph_mean_squared_error(struct dtf_graph *g, const char *name,
				 int predictions, int labels);

/*
 * Multi-head causal self-attention, the core of GPT-2's (nanoGPT's)
 * CausalSelfAttention without its two projections: qkv float32 (b, t, 3c)
 * holds q in columns [0, c), k in [c, 2c), v in [2c, 3c); head h of each
 * is its columns h*d .. (h+1)*d - 1, d = c / heads.  Output (b, t, c),
 * the heads' results side by side in the same column order:
 *     y[n, i, h] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) v_j
 * (the causal mask: query i sees keys 0..i).  heads >= 1 must divide c.
 * dropout is the rate on the attention probabilities: only 0 (no
 * dropout) is implemented, anything else is DTF_ERR_GRAPH.  Its gradient
 * CAUSAL_SELF_ATTENTION_GRAD (inputs qkv, dy; output dqkv of qkv's shape)
 * recomputes the probabilities (FlashAttention's backward), so the
 * forward saves nothing.
 */
int dtf_graph_causal_self_attention(struct dtf_graph *g, const char *name,
				    int qkv, int heads, float dropout);

/*
 * Forward FLOPs of node `id` for its whole per-replica batch (divide by
 * g->batch for one example); works for backward nodes too.  Convention:
 * a multiply-add is 2 FLOPs (conv2d: 2*n*oh*ow*o*kh*kw*c; matmul:
 * 2*m*n*k), any other arithmetic operation, comparison or transcendental
 * function 1 per element it is applied to (relu 1, sigmoid 3, softmax 5 per
 * element...; pooling 1 per window tap); data movement (variables,
 * inputs, reshape, identity, concat, slice) 0.
 */
int64_t dtf_graph_node_flops(const struct dtf_graph *g, int id);

/*
 * Check that node order is topological; if it is not, reorder the nodes
 * (Kahn's algorithm, stable) and remap every input id.  A cycle is
 * DTF_ERR_GRAPH with the cycle path "a -> b -> c -> a".
 */
int dtf_graph_toposort(struct dtf_graph *g);

/*
 * Reverse-mode autodiff from g->loss: append gradient nodes and fill
 * g->var_grad.  Errors: DTF_ERR_GRAPH when the loss depends on no trainable
 * variable, DTF_ERR_NOMEM.
 */
int dtf_graph_backward(struct dtf_graph *g);

/* Trainable parameter count and the count of a single node's variables. */
size_t dtf_graph_num_params(const struct dtf_graph *g);
/* Parameters of non-trainable variables (moving statistics), constants
 * excluded. */
size_t dtf_graph_num_nontrainable(const struct dtf_graph *g);

/*
 * Initialise the parameter vector params[0..nparams) from the seed: each
 * variable draws from the Philox stream (seed, DTF_RNG_INIT) named by the
 * 64-bit FNV-1a hash of its name (a = low, b = high 32 bits), so every rank
 * computes the same values, and a variable's values do not depend on the
 * order or number of the other variables (the layers and graph forms of a
 * model start equal).  Initialisers as in Keras: glorot_uniform U(-l, l),
 * l = sqrt(6 / (fan_in + fan_out)); glorot_normal truncated normal with
 * stddev sqrt(2 / (fan_in + fan_out)) / .87962566103423978; he_normal
 * truncated normal, stddev sqrt(2 / fan_in) / .87962566103423978;
 * he_uniform l = sqrt(6 / fan_in); random_normal(mean, stddev) a plain
 * normal (Keras RandomNormal; nanoGPT's N(0, 0.02)); truncated_normal(mean,
 * stddev) redraws beyond two standard deviations (the .8796... factor is the stddev of a
 * unit normal truncated at 2, which Keras's variance scaling divides out).
 */
void dtf_graph_init_params(const struct dtf_graph *g, uint64_t seed,
			   float *params);

#endif
