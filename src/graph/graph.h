/*
 * graph.h - the model as a DAG of ops, its shapes, and its gradient.
 *
 * Building computes nothing (ggml's rule): a constructor records the op, its
 * inputs and attributes, infers the output shape, and returns the new node's
 * id.  Nodes are appended in an order where every input precedes its
 * consumers, so node order is a topological order; dtf_graph_toposort()
 * checks and restores that for graphs whose nodes were declared in any
 * order.  dtf_graph_backward() appends the gradient ops (reverse-mode
 * autodiff) to the same graph: it is a switch over the op that emits more
 * nodes.  Shapes are NHWC for images, (rows, features) for dense layers;
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
#include "ops/cpu/kernels.h"

/* X(NAME, "name", number of inputs) */
#define DTF_OPS(X)                                                      \
	X(INPUT, "input", 0)                                            \
	X(VARIABLE, "variable", 0)                                      \
	X(CONV2D, "conv2d", 2)                                          \
	X(CONV2D_BACKPROP_INPUT, "conv2d_backprop_input", 2)            \
	X(CONV2D_BACKPROP_FILTER, "conv2d_backprop_filter", 2)          \
	X(MAX_POOL2D, "max_pool2d", 1)                                  \
	X(MAX_POOL2D_GRAD, "max_pool2d_grad", 2)                        \
	X(MATMUL, "matmul", 2)                                          \
	X(BIAS_ADD, "bias_add", 2)                                      \
	X(BIAS_ADD_GRAD, "bias_add_grad", 1)                            \
	X(RELU, "relu", 1)                                              \
	X(RELU_GRAD, "relu_grad", 2)                                    \
	X(DROPOUT, "dropout", 1)                                        \
	X(DROPOUT_GRAD, "dropout_grad", 1)                              \
	X(RESHAPE, "reshape", 1)                                        \
	X(ADD, "add", 2)                                                \
	X(SPARSE_SOFTMAX_XENT, "sparse_softmax_cross_entropy", 2)       \
	X(SPARSE_SOFTMAX_XENT_GRAD, "sparse_softmax_cross_entropy_grad", 2)

enum dtf_op {
#define DTF_X_OP(id, name, nin) DTF_OP_##id,
	DTF_OPS(DTF_X_OP)
#undef DTF_X_OP
	DTF_OP_COUNT_
};

/* The op's name as written in job files and summaries. */
const char *dtf_op_name(enum dtf_op op);

#define DTF_MAX_INPUTS 2

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
		struct { /* CONV2D*, MAX_POOL2D* */
			struct dtf_window_geom g;
		} win;
		struct { /* MATMUL */
			int trans_a, trans_b;
		} mm;
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
	int loss;         /* SPARSE_SOFTMAX_XENT node, or -1 */
	int logits;       /* logits node of the loss, or -1 */
	int labels;       /* labels input node, or -1 */
	int nforward;     /* nodes [0, nforward) are the forward pass */
	int *var_grad;    /* per node: id of its total gradient, or -1;
			     filled by dtf_graph_backward */
	size_t workspace; /* floats of kernel workspace (max over nodes) */
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
/* x (..., c) + b (c). */
int dtf_graph_bias_add(struct dtf_graph *g, const char *name, int x, int b);
int dtf_graph_relu(struct dtf_graph *g, const char *name, int x);
int dtf_graph_dropout(struct dtf_graph *g, const char *name, int x,
		      float rate);
/* Keep dimension 0, flatten the rest. */
int dtf_graph_flatten(struct dtf_graph *g, const char *name, int x);
/* logits (n, classes) float32, labels (n) int32 -> scalar loss. */
int dtf_graph_sparse_softmax_xent(struct dtf_graph *g, const char *name,
				  int logits, int labels);

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
 * he_uniform l = sqrt(6 / fan_in); truncated_normal(mean, stddev) redraws
 * beyond two standard deviations (the .8796... factor is the stddev of a
 * unit normal truncated at 2, which Keras's variance scaling divides out).
 */
void dtf_graph_init_params(const struct dtf_graph *g, uint64_t seed,
			   float *params);

#endif
