/*
 * plan.h - give every node of a graph its buffer, in one arena reserved once.
 *
 * Variables point into the caller's parameter vector, the total gradient of
 * each variable into the caller's gradient vector (same layout), reshapes
 * alias their input, and every other node gets a DTF_ALIGN-aligned slice of
 * one arena.  After planning, running the graph allocates nothing.
 * This first planner keeps every buffer alive for the whole step (no reuse);
 * it is the baseline a liveness planner is measured against.
 */
#ifndef DTF_MEM_PLAN_H
#define DTF_MEM_PLAN_H

#include <stddef.h>

#include "graph/graph.h"

struct dtf_plan {
	void *arena;         /* owned; one allocation */
	size_t arena_bytes;  /* activations, gradients and workspace */
	float *workspace;    /* g->workspace floats inside the arena */
};

/*
 * Assign g->nodes[i].data for every node.  params and grads hold
 * g->nparams floats each (grads may be NULL for a forward-only graph).
 * Gradient slots of variables that the loss does not reach are zeroed.
 * Errors: DTF_ERR_NOMEM.
 */
int dtf_plan_graph(struct dtf_graph *g, float *params, float *grads,
		   struct dtf_plan *plan);

void dtf_plan_deinit(struct dtf_plan *plan);

#endif
