/*
 * plan.c - liveness and naive memory planning (plan.h).
 *
 * compute_offsets() is the whole planner: it walks the nodes in execution
 * order, keeping one record per buffer (size, offset, the last node that
 * reads it), and a free list of the arena's holes sorted by offset.  Nodes
 * that share a buffer (reshape aliases, in-place ops) point to the same
 * record, whose last reader is the latest reader of any of them.  Nothing
 * here depends on the data, so a plan can be measured for a summary
 * without allocating it.
 */
#include "mem/plan.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#define NONE SIZE_MAX

static size_t align_up(size_t n)
{
	return (n + DTF_ALIGN - 1) / DTF_ALIGN * DTF_ALIGN;
}

static size_t node_bytes(const struct dtf_node *n)
{
	size_t elem = 4; /* float32 and int32 */
	return align_up((size_t)dtf_shape_numel(&n->shape) * elem);
}

/* var_of[i]: the variable whose total gradient node i is, or -1. */
static int *var_grad_owner(const struct dtf_graph *g, int with_grads)
{
	int *var_of = dtf_malloc((size_t)(g->nnodes ? g->nnodes : 1) *
				 sizeof(int));
	if (!var_of)
		return NULL;
	for (int i = 0; i < g->nnodes; i++)
		var_of[i] = -1;
	if (with_grads && g->var_grad)
		for (int v = 0; v < g->nforward; v++)
			if (g->var_grad[v] >= 0)
				var_of[g->var_grad[v]] = v;
	return var_of;
}

static int is_input_of(const struct dtf_node *n, int j)
{
	for (int k = 0; k < DTF_MAX_INPUTS; k++)
		if (n->inputs[k] == j)
			return 1;
	return 0;
}

/* ---- free list ------------------------------------------------------- */

struct hole {
	size_t off, size;
};

struct arena_plan {
	struct hole *holes; /* sorted by offset, never adjacent */
	int nholes;
	size_t end;         /* bytes used so far */
};

static size_t arena_alloc(struct arena_plan *a, size_t size)
{
	int best = -1;
	for (int i = 0; i < a->nholes; i++)
		if (a->holes[i].size >= size &&
		    (best < 0 || a->holes[i].size < a->holes[best].size))
			best = i;
	if (best >= 0) {
		size_t off = a->holes[best].off;
		a->holes[best].off += size;
		a->holes[best].size -= size;
		if (a->holes[best].size == 0) {
			memmove(&a->holes[best], &a->holes[best + 1],
				(size_t)(a->nholes - best - 1) *
					sizeof(*a->holes));
			a->nholes--;
		}
		return off;
	}
	/* grow: a hole at the end is extended rather than skipped */
	if (a->nholes &&
	    a->holes[a->nholes - 1].off + a->holes[a->nholes - 1].size ==
		    a->end) {
		size_t off = a->holes[--a->nholes].off;
		a->end = off + size;
		return off;
	}
	size_t off = a->end;
	a->end += size;
	return off;
}

static void arena_free(struct arena_plan *a, size_t off, size_t size)
{
	int i = 0;
	while (i < a->nholes && a->holes[i].off < off)
		i++;
	memmove(&a->holes[i + 1], &a->holes[i],
		(size_t)(a->nholes - i) * sizeof(*a->holes));
	a->holes[i] = (struct hole){off, size};
	a->nholes++;
	if (i + 1 < a->nholes &&
	    a->holes[i].off + a->holes[i].size == a->holes[i + 1].off) {
		a->holes[i].size += a->holes[i + 1].size;
		memmove(&a->holes[i + 1], &a->holes[i + 2],
			(size_t)(a->nholes - i - 2) * sizeof(*a->holes));
		a->nholes--;
	}
	if (i > 0 && a->holes[i - 1].off + a->holes[i - 1].size ==
			     a->holes[i].off) {
		a->holes[i - 1].size += a->holes[i].size;
		memmove(&a->holes[i], &a->holes[i + 1],
			(size_t)(a->nholes - i - 1) * sizeof(*a->holes));
		a->nholes--;
	}
}

/* ---- the planner ------------------------------------------------------- */

/*
 * offset[i] (bytes after the workspace) for every node that lives in the
 * arena, NONE for variables, variable gradients (with_grads) and reshapes
 * (which alias their input).  *total: arena bytes without the workspace.
 */
static int compute_offsets(const struct dtf_graph *g,
			   enum dtf_planner_kind kind, int with_grads,
			   size_t *offset, size_t *total,
			   size_t *naive, int *ninplace)
{
	int n = g->nnodes, rc = 0;
	int *var_of = var_grad_owner(g, with_grads);
	int *lastread = dtf_malloc((size_t)(n + 1) * sizeof(int));
	int *buf = dtf_malloc((size_t)(n + 1) * sizeof(int)); /* node -> buf */
	int *buf_last = dtf_malloc((size_t)(n + 1) * sizeof(int));
	size_t *buf_size = dtf_malloc((size_t)(n + 1) * sizeof(size_t));
	size_t *buf_off = dtf_malloc((size_t)(n + 1) * sizeof(size_t));
	struct arena_plan a = {
		.holes = dtf_malloc((size_t)(n + 2) * sizeof(struct hole))};
	if (!var_of || !lastread || !buf || !buf_last || !buf_size ||
	    !buf_off || !a.holes) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory planning memory");
		goto out;
	}
	/* the last node that reads each node's output */
	for (int i = 0; i < n; i++)
		lastread[i] = -1;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < DTF_MAX_INPUTS; k++) {
			int j = g->nodes[i].inputs[k];
			if (j >= 0 && j < n && i > lastread[j])
				lastread[j] = i;
		}
	/* live for the whole step: read by the trainer after backward */
	int pinned_until = n; /* past every node */
	if (g->logits >= 0)
		lastread[g->logits] = pinned_until;
	if (g->labels >= 0)
		lastread[g->labels] = pinned_until;
	if (g->loss >= 0)
		lastread[g->loss] = pinned_until;
	for (int i = 0; i < n; i++)
		if (g->nodes[i].op == DTF_OP_INPUT)
			lastread[i] = pinned_until;

	*naive = 0;
	*ninplace = 0;
	int nbuf = 0;
	/* The inputs are written by the pipeline before the first node
	 * runs, wherever they sit in node order (a labels input comes after
	 * the layers): their buffers are taken first and live for the whole
	 * step, so no node's buffer overlaps them. */
	for (int i = 0; i < n; i++) {
		const struct dtf_node *nd = &g->nodes[i];
		offset[i] = NONE;
		buf[i] = -1;
		if (nd->op != DTF_OP_INPUT)
			continue;
		size_t bytes = node_bytes(nd);
		int b = nbuf++;
		*naive += bytes;
		buf_size[b] = bytes;
		buf_last[b] = pinned_until;
		buf_off[b] = kind == DTF_PLANNER_LIVENESS
				     ? arena_alloc(&a, bytes)
				     : (a.end += bytes) - bytes;
		buf[i] = b;
		offset[i] = buf_off[b];
	}
	for (int i = 0; i < n; i++) {
		const struct dtf_node *nd = &g->nodes[i];
		if (nd->op == DTF_OP_INPUT)
			continue; /* placed above */
		offset[i] = NONE;
		buf[i] = -1;
		if (nd->op == DTF_OP_VARIABLE || var_of[i] >= 0)
			continue;
		if (nd->op == DTF_OP_RESHAPE) {
			int b = buf[nd->inputs[0]];
			buf[i] = b;
			if (b < 0)
				continue;
			if (lastread[i] > buf_last[b])
				buf_last[b] = lastread[i];
			if (kind == DTF_PLANNER_LIVENESS && buf_last[b] <= i) {
				arena_free(&a, buf_off[b], buf_size[b]);
				buf_last[b] = -2;
			}
			continue;
		}
		size_t bytes = node_bytes(nd);
		*naive += bytes;
		int b = -1;
		int k = kind == DTF_PLANNER_LIVENESS ? dtf_op_inplace_input(nd->op) : -1;
		if (k >= 0 && nd->inputs[k] >= 0) {
			int ib = buf[nd->inputs[k]];
			if (ib >= 0 && buf_last[ib] == i &&
			    buf_size[ib] >= bytes &&
			    g->nodes[nd->inputs[k]].op != DTF_OP_INPUT &&
			    !(k > 0 && is_input_of(nd, nd->inputs[0]) &&
			      buf[nd->inputs[0]] == ib)) {
				b = ib;
				(*ninplace)++;
			}
		}
		if (b < 0) {
			b = nbuf++;
			buf_size[b] = bytes;
			buf_last[b] = -1;
			buf_off[b] = kind == DTF_PLANNER_LIVENESS
					     ? arena_alloc(&a, bytes)
					     : (a.end += bytes) - bytes;
		}
		buf[i] = b;
		if (lastread[i] > buf_last[b] || buf_last[b] == i)
			buf_last[b] = lastread[i] > i ? lastread[i] : i;
		offset[i] = buf_off[b];
		if (kind != DTF_PLANNER_LIVENESS)
			continue;
		/* free what node i was the last to read (and its own
		 * buffer if nothing reads it) */
		for (int kk = 0; kk < DTF_MAX_INPUTS; kk++) {
			int j = nd->inputs[kk];
			if (j < 0 || buf[j] < 0 || buf[j] == b)
				continue;
			int jb = buf[j];
			if (buf_last[jb] == i) {
				arena_free(&a, buf_off[jb], buf_size[jb]);
				buf_last[jb] = -2; /* freed */
			}
		}
		if (buf_last[b] <= i) {
			arena_free(&a, buf_off[b], buf_size[b]);
			buf_last[b] = -2;
		}
	}
	/* reshapes share their input's offset */
	for (int i = 0; i < n; i++)
		if (g->nodes[i].op == DTF_OP_RESHAPE && buf[i] >= 0)
			offset[i] = NONE;
	*total = a.end;
out:
	dtf_free(var_of);
	dtf_free(lastread);
	dtf_free(buf);
	dtf_free(buf_last);
	dtf_free(buf_size);
	dtf_free(buf_off);
	dtf_free(a.holes);
	return rc;
}

int dtf_plan_measure(const struct dtf_graph *g, enum dtf_planner_kind kind,
		     int with_grads, size_t workspace_floats,
		     struct dtf_plan_stats *st)
{
	memset(st, 0, sizeof(*st));
	size_t *offset = dtf_malloc((size_t)(g->nnodes + 1) * sizeof(size_t));
	if (!offset)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	size_t total = 0, naive = 0;
	int rc = compute_offsets(g, kind, with_grads, offset, &total, &naive,
				 &st->inplace);
	dtf_free(offset);
	st->workspace_bytes = align_up(workspace_floats * sizeof(float));
	st->naive_bytes = naive + st->workspace_bytes;
	st->planned_bytes = total + st->workspace_bytes;
	return rc;
}

int dtf_plan_graph_with(struct dtf_graph *g, enum dtf_planner_kind kind,
			float *params, float *grads, size_t workspace_floats,
			struct dtf_plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	size_t *offset = dtf_malloc((size_t)(g->nnodes + 1) * sizeof(size_t));
	int *var_of = var_grad_owner(g, grads != NULL);
	int rc = 0, ninplace;
	if (!offset || !var_of) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	size_t total, naive;
	if ((rc = compute_offsets(g, kind, grads != NULL, offset, &total,
				  &naive, &ninplace)) < 0)
		goto out;
	size_t ws = align_up(workspace_floats * sizeof(float));
	plan->arena = dtf_alloc_aligned(ws + total ? ws + total : DTF_ALIGN);
	if (!plan->arena) {
		rc = dtf_error(DTF_ERR_NOMEM,
			       "out of memory: the graph needs %zu MB of activations",
			       (ws + total) >> 20);
		goto out;
	}
	plan->arena_bytes = ws + total;
	plan->naive_bytes = ws + naive;
	plan->workspace = (float *)plan->arena;
	char *base = (char *)plan->arena + ws;
	if (grads)
		memset(grads, 0, g->nparams * sizeof(float));
	for (int i = 0; i < g->nnodes; i++) {
		struct dtf_node *n = &g->nodes[i];
		if (n->op == DTF_OP_VARIABLE)
			n->data = params + n->a.var.offset;
		else if (n->op == DTF_OP_RESHAPE)
			n->data = g->nodes[n->inputs[0]].data;
		else if (var_of[i] >= 0)
			n->data = grads + g->nodes[var_of[i]].a.var.offset;
		else
			n->data = base + offset[i];
	}
out:
	dtf_free(offset);
	dtf_free(var_of);
	return rc;
}

int dtf_plan_graph(struct dtf_graph *g, float *params, float *grads,
		   size_t workspace_floats, struct dtf_plan *plan)
{
	return dtf_plan_graph_with(g, DTF_PLANNER_LIVENESS, params, grads,
				   workspace_floats, plan);
}

void dtf_plan_poison(const struct dtf_graph *g, struct dtf_plan *plan)
{
	char *lo = plan->arena, *hi = lo + plan->arena_bytes;
	char *p = lo;
	if (!lo)
		return;
	while (p < hi) {
		/* the input buffer starting at or before p that covers it,
		 * else the nearest one above p */
		char *next = hi;
		int covered = 0;
		for (int i = 0; i < g->nnodes && !covered; i++) {
			const struct dtf_node *n = &g->nodes[i];
			char *d = n->data;
			if (n->op != DTF_OP_INPUT || d < lo || d >= hi)
				continue;
			char *e = d + node_bytes(n);
			if (d <= p && p < e) {
				p = e;
				covered = 1;
			} else if (d > p && d < next) {
				next = d;
			}
		}
		if (covered)
			continue;
		/* DTF_ALIGN-aligned offsets and sizes: whole floats */
		for (float *f = (float *)p; (char *)f < next; f++)
			*f = NAN;
		p = next;
	}
}

void dtf_plan_deinit(struct dtf_plan *plan)
{
	dtf_free(plan->arena);
	memset(plan, 0, sizeof(*plan));
}
