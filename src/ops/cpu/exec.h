/*
 * exec.h - run a planned graph on the CPU backend.
 *
 * Planning (mem/plan.h) has given every node a buffer; executing is a walk
 * over the nodes in order calling one kernel each, with no allocation.  The
 * kernels come from a table indexed by the op (exec.c: cpu_<name> for every
 * row of graph.h's op table); these reference kernels are the oracle the
 * fast path (fast_exec.h) is tested against.
 */
#ifndef DTF_OPS_CPU_EXEC_H
#define DTF_OPS_CPU_EXEC_H

#include <stdint.h>

#include "core/rng.h"
#include "graph/graph.h"

struct dtf_fast_plan;

struct dtf_exec_ctx {
	int training;      /* 0: dropout is the identity (inference) */
	uint64_t step;     /* global step, salts the dropout masks */
	const uint64_t *example_ids; /* (batch) ids of the rows, for dropout */
	int valid;         /* rows of the batch that hold examples */
	float loss_scale;  /* the loss is sum over rows * loss_scale; TF's
			      1 / global batch */
	struct dtf_philox_key dropout_key;
	float *workspace;  /* g->workspace floats */
	double loss_sum;   /* out: unscaled sum of per-example losses */
	const struct dtf_fast_plan *fast; /* fast CPU path (ops/cpu/fast_exec.h),
					     or NULL for the reference kernels */
};

/*
 * Correct predictions among the first `valid` rows of the last forward
 * pass (node buffers on the host), for the graph's loss: sparse int
 * labels or one-hot float labels, k == 1 accuracy (argmax, first maximum
 * wins: Keras's accuracy), k > 1 TF's in_top_k (ties at the k-th place count);
 * sparse logits (n, ..., classes): each example counts the fraction of
 * its positions that are right (dtf_graph_xent_dims).  sigmoid_cross_entropy:
 * Keras's binary_accuracy summed over rows (k ignored).
 * mean_squared_error: 0 (no accuracy for a regression).
 */
double dtf_graph_count_correct(const struct dtf_graph *g, int valid, int k);

/* The dropout salt of node n at global step `step` (the layer's salt mixed
 * with the step); every backend uses this one. */
uint32_t dtf_exec_dropout_salt(const struct dtf_node *n, uint64_t step);

/* Run nodes [from, to).  Forward: [0, g->nforward); backward:
 * [g->nforward, g->nnodes). */
void dtf_exec_range(const struct dtf_graph *g, int from, int to,
		    struct dtf_exec_ctx *ctx);

/* Forward pass up to and including the loss. */
void dtf_exec_forward(const struct dtf_graph *g, struct dtf_exec_ctx *ctx);

/* Backward pass (after forward with the same ctx). */
void dtf_exec_backward(const struct dtf_graph *g, struct dtf_exec_ctx *ctx);

/* Backward pass calling after(arg, i) once node i has run, for every
 * backward node in order: how distribute/ starts a gradient bucket's allreduce
 * as soon as its last gradient is written, while backward goes on. */
void dtf_exec_backward_hook(const struct dtf_graph *g, struct dtf_exec_ctx *ctx,
			    void (*after)(void *arg, int node), void *arg);

#endif
