/*
 * optimizer_ops.c - the optimizer behind struct dtf_update_ops: each
 * member forwards to optimizer.h.  The ranges of a sharded update come as
 * struct dtf_update_range and are copied into the optimizer's own range
 * type once, into a buffer kept for later steps (it grows only when a
 * call brings more ranges than any before).
 */
#include "train/optimizer_ops.h"

#include "core/alloc.h"
#include "core/error.h"
#include "ops/backend.h"

struct ops_ctx {
	struct dtf_optimizer *opt; /* borrowed, or &own */
	struct dtf_optimizer own;  /* part_new's */
	const struct dtf_job *job;
	struct dtf_backend *be;    /* dtf_backend_update_ops: applies */
	struct dtf_opt_range *ranges;
	int cap;
};

static void op_apply(void *ctx, float *params, float *grads, double lr)
{
	struct ops_ctx *c = ctx;
	dtf_optimizer_apply(c->opt, params, grads, lr);
}

static void op_backend_apply(void *ctx, float *params, float *grads,
			     double lr)
{
	struct ops_ctx *c = ctx;
	struct dtf_optimizer *o = c->opt;
	(void)params;
	(void)grads;
	o->iterations++;
	c->be->i->apply(c->be->ctx, &(struct dtf_backend_update){
		.adam = o->kind == DTF_OPT_ADAM, .lr = lr,
		.momentum = o->momentum, .nesterov = o->nesterov,
		.beta_1 = o->beta_1, .beta_2 = o->beta_2,
		.epsilon = o->epsilon, .iterations = o->iterations});
}

static int op_apply_ranges(void *ctx, float *params, float *grads, double lr,
			   const struct dtf_update_range *r, int nr)
{
	struct ops_ctx *c = ctx;
	if (nr > c->cap) {
		struct dtf_opt_range *m = dtf_calloc((size_t)nr, sizeof(*m));
		if (!m)
			return dtf_error(DTF_ERR_NOMEM,
					 "out of memory for the ranges of the update");
		dtf_free(c->ranges);
		c->ranges = m;
		c->cap = nr;
	}
	for (int i = 0; i < nr; i++)
		c->ranges[i] = (struct dtf_opt_range){r[i].off, r[i].n};
	dtf_optimizer_apply_ranges(c->opt, params, grads, lr, c->ranges, nr);
	return 0;
}

static int op_nonfinite(void *ctx, const float *g, size_t n)
{
	struct ops_ctx *c = ctx;
	return dtf_optimizer_nonfinite(c->opt, g, n);
}

static void op_release(void *ctx)
{
	struct ops_ctx *c = ctx;
	dtf_optimizer_deinit(c->opt);
}

static float *op_slot(void *ctx, int k)
{
	struct ops_ctx *c = ctx;
	if (!c->opt->slots || k < 0 || k >= c->opt->nslots)
		return NULL;
	return c->opt->slots + (size_t)k * c->opt->n;
}

static void op_free(void *ctx)
{
	struct ops_ctx *c = ctx;
	if (!c)
		return;
	if (c->opt == &c->own)
		dtf_optimizer_deinit(&c->own);
	dtf_free(c->ranges);
	dtf_free(c);
}

static int op_part_new(void *ctx, const struct dtf_update_range *from,
		       int nfrom, struct dtf_update_ops *out);

static int make(struct dtf_optimizer *opt, const struct dtf_job *job,
		struct dtf_update_ops *out, struct ops_ctx **cp)
{
	struct ops_ctx *c = dtf_calloc(1, sizeof(*c));
	*out = (struct dtf_update_ops){0};
	*cp = c;
	if (!c)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	c->opt = opt ? opt : &c->own;
	c->job = job;
	*out = (struct dtf_update_ops){
		.ctx = c,
		.apply = op_apply,
		.apply_ranges = op_apply_ranges,
		.nonfinite = op_nonfinite,
		.release = op_release,
		.slot = op_slot,
		.part_new = op_part_new,
		.free = op_free,
	};
	*cp = c;
	return 0;
}

static int op_part_new(void *ctx, const struct dtf_update_range *from,
		       int nfrom, struct dtf_update_ops *out)
{
	struct ops_ctx *parent = ctx, *c;
	int rc = make(NULL, parent->job, out, &c);
	if (rc < 0)
		return rc;
	struct dtf_opt_range *r =
		dtf_malloc((size_t)(nfrom ? nfrom : 1) * sizeof(*r));
	if (!r)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < nfrom; i++)
		r[i] = (struct dtf_opt_range){from[i].off, from[i].n};
	rc = dtf_optimizer_init_part(&c->own, parent->opt, parent->job, r,
				     nfrom);
	dtf_free(r);
	return rc;
}

int dtf_optimizer_ops(struct dtf_optimizer *opt, const struct dtf_job *job,
		      struct dtf_update_ops *out)
{
	struct ops_ctx *c;
	return make(opt, job, out, &c);
}

int dtf_backend_update_ops(struct dtf_backend *be, struct dtf_optimizer *opt,
			   const struct dtf_job *job,
			   struct dtf_update_ops *out)
{
	struct ops_ctx *c;
	int rc = make(opt, job, out, &c);
	if (rc < 0)
		return rc;
	DTF_ASSERT(be->i->apply);
	c->be = be;
	out->apply = op_backend_apply;
	out->apply_ranges = NULL;
	out->release = NULL;
	out->part_new = NULL;
	return 0;
}
