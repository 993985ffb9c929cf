/*
 * plan.c - the naive planner: one slice per node, all live for the step.
 */
#include "mem/plan.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static size_t node_bytes(const struct dtf_node *n)
{
	size_t elem = 4; /* float32 and int32 */
	size_t bytes = (size_t)dtf_shape_numel(&n->shape) * elem;
	return (bytes + DTF_ALIGN - 1) / DTF_ALIGN * DTF_ALIGN;
}

/* 1 when node i is the total gradient of some variable; *var gets it */
static int is_var_grad(const struct dtf_graph *g, int i, int *var)
{
	if (!g->var_grad)
		return 0;
	for (int v = 0; v < g->nforward; v++)
		if (g->var_grad[v] == i) {
			*var = v;
			return 1;
		}
	return 0;
}

int dtf_plan_graph(struct dtf_graph *g, float *params, float *grads,
		   struct dtf_plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	size_t total = (g->workspace * sizeof(float) + DTF_ALIGN - 1) /
		       DTF_ALIGN * DTF_ALIGN;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		int v;
		if (n->op == DTF_OP_VARIABLE || n->op == DTF_OP_RESHAPE ||
		    (grads && is_var_grad(g, i, &v)))
			continue;
		total += node_bytes(n);
	}
	plan->arena = dtf_alloc_aligned(total);
	if (!plan->arena)
		return dtf_error(DTF_ERR_NOMEM,
				 "out of memory: the graph needs %zu MB of activations",
				 total >> 20);
	plan->arena_bytes = total;
	char *p = plan->arena;
	plan->workspace = (float *)p;
	p += (g->workspace * sizeof(float) + DTF_ALIGN - 1) / DTF_ALIGN *
	     DTF_ALIGN;
	if (grads)
		memset(grads, 0, g->nparams * sizeof(float));
	for (int i = 0; i < g->nnodes; i++) {
		struct dtf_node *n = &g->nodes[i];
		int v;
		if (n->op == DTF_OP_VARIABLE) {
			n->data = params + n->a.var.offset;
		} else if (n->op == DTF_OP_RESHAPE) {
			n->data = g->nodes[n->inputs[0]].data;
		} else if (grads && is_var_grad(g, i, &v)) {
			n->data = grads + g->nodes[v].a.var.offset;
		} else {
			n->data = p;
			p += node_bytes(n);
		}
	}
	return 0;
}

void dtf_plan_deinit(struct dtf_plan *plan)
{
	dtf_free(plan->arena);
	memset(plan, 0, sizeof(*plan));
}
