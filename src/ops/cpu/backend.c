/*
 * backend.c - the CPU backend (ops/backend.h): the reference executor
 * (graph/exec.h), the oracle, and the fast one (graph/fast_exec.h) where a
 * thread pool is given.
 *
 * Batches are read straight into the input nodes' buffers (no copy); the
 * gradients stay in the host vector, which the distribution strategy
 * reduces and updates, so apply, upload and download are absent.
 * Evaluation totals are summed here from each inference forward, in the
 * order the batches run, so they are the same bits as a loop adding them.
 */
#include "ops/backend.h"

#include <math.h>

#include "core/alloc.h"
#include "core/error.h"
#include "ops/cpu/fast_exec.h"
#include "ops/cpu/kernels.h"
#include "mem/plan.h"

struct cpu {
	const struct dtf_graph *g;
	void *const *feed;
	struct dtf_plan *poison;
	struct dtf_fast_plan fast;
	int use_fast;
	int top_k;
	double tot[3]; /* loss sum, correct, top-k correct */
};

void dtf_backend_free(struct dtf_backend *be)
{
	if (!be)
		return;
	be->i->free(be->ctx);
	dtf_free(be);
}

static const char *cpu_describe(void *ctx)
{
	struct cpu *c = ctx;
	return c->use_fast ? "the CPU (fast kernels)"
			   : "the CPU (reference kernels)";
}

static int cpu_prepare(void *ctx, const struct dtf_backend_graph *bg)
{
	struct cpu *c = ctx;
	c->g = bg->g;
	c->feed = bg->feed;
	c->poison = bg->poison;
	c->top_k = bg->top_k;
	if (!bg->pool)
		return 0;
	int rc = dtf_fast_plan_init(&c->fast, bg->g, bg->pool);
	c->use_fast = rc == 0;
	return rc;
}

static int cpu_load(void *ctx, dtf_backend_read_fn read, void *arg,
		    uint64_t *ids, int *count)
{
	struct cpu *c = ctx;
	return read(arg, c->feed, ids, count);
}

static void cpu_forward(void *ctx, struct dtf_exec_ctx *x)
{
	struct cpu *c = ctx;
	x->fast = c->use_fast ? &c->fast : NULL;
	if (c->poison)
		dtf_plan_poison(c->g, c->poison);
	dtf_exec_forward(c->g, x);
	if (x->training)
		return;
	c->tot[0] += x->loss_sum;
	c->tot[1] += dtf_graph_count_correct(c->g, x->valid, 1);
	if (c->top_k)
		c->tot[2] += dtf_graph_count_correct(c->g, x->valid, c->top_k);
}

static int cpu_backward(void *ctx, struct dtf_exec_ctx *x,
			dtf_backend_node_fn after, void *arg)
{
	struct cpu *c = ctx;
	x->fast = c->use_fast ? &c->fast : NULL;
	if (after)
		dtf_exec_backward_hook(c->g, x, after, arg);
	else
		dtf_exec_backward(c->g, x);
	return 0;
}

static void cpu_step_stats(void *ctx, const struct dtf_exec_ctx *x,
			   int count, float *stats)
{
	struct cpu *c = ctx;
	stats[0] += (float)x->loss_sum;
	stats[1] += (float)dtf_graph_count_correct(c->g, count, 1);
	stats[2] += (float)count;
}

static int cpu_eval_totals(void *ctx, double out[3])
{
	struct cpu *c = ctx;
	out[0] = c->tot[0];
	out[1] = c->tot[1];
	out[2] = c->tot[2];
	c->tot[0] = c->tot[1] = c->tot[2] = 0;
	return 0;
}

static void cpu_free(void *ctx)
{
	struct cpu *c = ctx;
	if (!c)
		return;
	dtf_fast_plan_deinit(&c->fast);
	dtf_free(c);
}

static const struct dtf_backend_iface cpu_iface = {
	.name = "cpu",
	.describe = cpu_describe,
	.prepare = cpu_prepare,
	.load = cpu_load,
	.prefetch = NULL,
	.forward = cpu_forward,
	.backward = cpu_backward,
	.checked_backward = 0,
	.step_stats = cpu_step_stats,
	.apply = NULL,
	.upload = NULL,
	.download = NULL,
	.eval_totals = cpu_eval_totals,
	.free = cpu_free,
};

int dtf_backend_cpu_new(struct dtf_backend **out)
{
	*out = NULL;
	struct dtf_backend *be = dtf_calloc(1, sizeof(*be));
	struct cpu *c = dtf_calloc(1, sizeof(*c));
	if (!be || !c) {
		dtf_free(be);
		dtf_free(c);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	be->i = &cpu_iface;
	be->ctx = c;
	*out = be;
	return 0;
}
