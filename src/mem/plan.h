/*
 * plan.h - give every node of a graph its buffer, in one arena reserved once.
 *
 * Variables point into the caller's parameter vector, the total gradient of
 * each variable into the caller's gradient vector (same layout, so the
 * allreduce and the optimizer walk one array and update in place), reshapes
 * alias their input, and every other activation and gradient is a
 * DTF_ALIGN-aligned offset into one arena, allocated once.  After planning,
 * running the graph allocates nothing.
 *
 * Two planners:
 *  - liveness (default): the nodes run in id order (forward up to the
 *    loss, then the backward nodes), as exec.c runs them.  A buffer is
 *    free again once the last node that reads it has run, and a later node
 *    takes a free block (best fit, neighbours merged; the arena grows only
 *    when no block fits).  Elementwise ops that allow it write over an
 *    input whose last reader they are (in place): relu, bias_add, add and
 *    multiply (first input), dropout, identity, leaky_relu, elu, gelu,
 *    tanh, sigmoid, softmax, and the elementwise gradients (relu_grad,
 *    dropout_grad, leaky_relu_grad, elu_grad, gelu_grad, tanh_grad,
 *    sigmoid_grad: dx over dy).  The inputs are placed before any other
 *    node and live for the whole step, wherever they sit in node order:
 *    the pipeline fills them before the first node runs (the labels input
 *    comes after the layers).  The logits and the loss stay live from
 *    their node to the end of the step, because the trainer reads them
 *    after the backward pass.
 *  - naive: one buffer per node, all live for the whole step (the
 *    baseline the liveness planner is measured against; job key
 *    memory.planner: naive).
 * Both give bit-identical results: kernels fully write their outputs and
 * never read them, in-place kernels read and write the same element.
 */
#ifndef DTF_MEM_PLAN_H
#define DTF_MEM_PLAN_H

#include <stddef.h>

#include "config/job.h"
#include "graph/graph.h"

struct dtf_plan {
	void *arena;         /* owned; one allocation */
	size_t arena_bytes;  /* activations, gradients and workspace */
	float *workspace;    /* the CPU kernels' scratch (the
				largest conv2d im2col block) inside
				the arena */
	size_t naive_bytes;  /* what the naive planner needs for this graph */
};

/* What a plan takes, in bytes, without allocating it. */
struct dtf_plan_stats {
	size_t naive_bytes;   /* one buffer per node, workspace included */
	size_t planned_bytes; /* the chosen planner's arena */
	size_t workspace_bytes;
	int inplace;          /* nodes written over one of their inputs */
};

/*
 * Assign g->nodes[i].data for every node with the liveness planner.
 * params and grads hold g->nparams floats each (grads may be NULL for a
 * forward-only graph; then variable gradients get arena buffers too).
 * Gradient slots of variables that the loss does not reach are zeroed.
 * workspace_floats: the backend's scratch (plan->workspace, at the start
 * of the arena), as the backend sizes it for g (ops/backend.h:
 * dtf_backend_cpu_workspace); the planner knows no kernel.
 * Errors: DTF_ERR_NOMEM.
 */
int dtf_plan_graph(struct dtf_graph *g, float *params, float *grads,
		   size_t workspace_floats, struct dtf_plan *plan);

/* The same with a chosen planner. */
int dtf_plan_graph_with(struct dtf_graph *g, enum dtf_planner_kind kind,
			float *params, float *grads, size_t workspace_floats,
			struct dtf_plan *plan);

/* Sizes of the plan for g (with_grads: variable gradients live in the
 * gradient vector, as in training; workspace_floats as above).  Errors:
 * DTF_ERR_NOMEM. */
int dtf_plan_measure(const struct dtf_graph *g, enum dtf_planner_kind kind,
		     int with_grads, size_t workspace_floats,
		     struct dtf_plan_stats *st);

/*
 * Debugging aid (job key memory.poison, and the planner tests): fill the
 * whole arena - activations, gradients, workspace - with quiet NaN, except
 * the buffers of the INPUT nodes (which the pipeline has already filled).
 * Called after the batch is fed and before dtf_exec_forward, it makes a
 * node that reads a buffer before any node of this step wrote it (a
 * planner or kernel bug) turn the loss or a gradient into NaN instead of
 * silently reading the previous step's values.
 */
void dtf_plan_poison(const struct dtf_graph *g, struct dtf_plan *plan);

void dtf_plan_deinit(struct dtf_plan *plan);

#endif
