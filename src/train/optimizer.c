/*
 * optimizer.c - SGD (momentum, Nesterov), Adam, AdamW, RMSprop; L2 weight
 * decay and global-norm clipping (optimizer.h).  Each update loops over the
 * trainable segments; the loops are plain so the compiler vectorises them.
 */
#include "train/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "graph/graph.h"
#include "ops/cpu/fast.h"

int dtf_optimizer_init(struct dtf_optimizer *opt, const struct dtf_job *job,
		       size_t n)
{
	memset(opt, 0, sizeof(*opt));
	opt->kind = job->train.optimizer;
	opt->momentum = job->train.momentum;
	opt->nesterov = job->train.nesterov;
	opt->beta_1 = job->train.beta_1;
	opt->beta_2 = job->train.beta_2;
	opt->epsilon = job->train.epsilon;
	opt->rho = job->train.rho;
	opt->centered = job->train.centered;
	opt->weight_decay = job->train.weight_decay;
	opt->decoupled_decay =
		opt->kind == DTF_OPT_ADAMW ? job->train.decoupled_decay : 0;
	opt->clipnorm = job->train.clipnorm;
	opt->n = n;
	switch (opt->kind) {
	case DTF_OPT_SGD:
		opt->nslots = opt->momentum != 0.0;
		break;
	case DTF_OPT_ADAM:
	case DTF_OPT_ADAMW:
		opt->nslots = 2;
		break;
	case DTF_OPT_RMSPROP:
		opt->nslots = 1 + opt->centered + (opt->momentum != 0.0);
		break;
	}
	if (opt->nslots && n) {
		opt->slots = dtf_alloc_aligned((size_t)opt->nslots * n *
					       sizeof(float));
		if (!opt->slots)
			return dtf_error(DTF_ERR_NOMEM,
					 "out of memory for optimizer state");
	}
	return 0;
}

void dtf_optimizer_deinit(struct dtf_optimizer *opt)
{
	dtf_free(opt->slots);
	dtf_free(opt->segs);
	memset(opt, 0, sizeof(*opt));
}

int dtf_optimizer_set_segments(struct dtf_optimizer *opt,
			       const struct dtf_opt_segment *segs, int nsegs)
{
	struct dtf_opt_segment *s =
		dtf_malloc((size_t)(nsegs ? nsegs : 1) * sizeof(*s));
	if (!s)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < nsegs; i++)
		DTF_ASSERT(segs[i].offset + segs[i].count <= opt->n);
	memcpy(s, segs, (size_t)nsegs * sizeof(*s));
	dtf_free(opt->segs);
	opt->segs = s;
	opt->nsegs = nsegs;
	return 0;
}

int dtf_optimizer_segments_from_graph(struct dtf_optimizer *opt,
				      const struct dtf_job *job,
				      const struct dtf_graph *g)
{
	int nv = 0;
	for (int i = 0; i < g->nnodes; i++)
		nv += g->nodes[i].op == DTF_OP_VARIABLE;
	struct dtf_opt_segment *segs =
		dtf_malloc((size_t)(nv ? nv : 1) * sizeof(*segs));
	if (!segs)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	int k = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const struct dtf_node *n = &g->nodes[i];
		if (n->op != DTF_OP_VARIABLE)
			continue;
		segs[k++] = (struct dtf_opt_segment){
			.offset = n->a.var.offset,
			.count = (size_t)dtf_shape_numel(&n->shape),
			.trainable = n->a.var.trainable,
			.decay = n->a.var.trainable &&
				 ((job->train.decay_groups >>
				   dtf_graph_var_group(n)) & 1),
			.no_grad = n->a.var.trainable && g->var_grad &&
				   g->var_grad[i] < 0};
	}
	int rc = dtf_optimizer_set_segments(opt, segs, k);
	dtf_free(segs);
	return rc;
}

int dtf_optimizer_init_part(struct dtf_optimizer *part,
			    const struct dtf_optimizer *whole,
			    const struct dtf_job *job,
			    const struct dtf_opt_range *from, int nfrom)
{
	struct dtf_opt_segment all = {0, whole->n, 1, 1, 0};
	const struct dtf_opt_segment *ws = whole->segs ? whole->segs : &all;
	int nws = whole->segs ? whole->nsegs : 1;
	size_t n = 0;
	int cap = 0;
	for (int i = 0; i < nfrom; i++) {
		DTF_ASSERT(from[i].off + from[i].n <= whole->n);
		n += from[i].n;
		cap += nws; /* at most every segment in every range */
	}
	int rc = dtf_optimizer_init(part, job, n);
	if (rc < 0)
		return rc;
	struct dtf_opt_segment *segs =
		dtf_malloc((size_t)(cap ? cap : 1) * sizeof(*segs));
	if (!segs) {
		dtf_optimizer_deinit(part);
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	}
	int k = 0;
	size_t at = 0;
	for (int i = 0; i < nfrom; i++) {
		size_t lo = from[i].off, hi = from[i].off + from[i].n;
		for (int j = 0; j < nws; j++) {
			size_t a = ws[j].offset > lo ? ws[j].offset : lo;
			size_t b = ws[j].offset + ws[j].count < hi
					   ? ws[j].offset + ws[j].count
					   : hi;
			if (a < b)
				segs[k++] = (struct dtf_opt_segment){
					.offset = at + (a - lo),
					.count = b - a,
					.trainable = ws[j].trainable,
					.decay = ws[j].decay,
					.no_grad = ws[j].no_grad};
		}
		at += from[i].n;
	}
	rc = dtf_optimizer_set_segments(part, segs, k);
	dtf_free(segs);
	if (rc < 0)
		dtf_optimizer_deinit(part);
	return rc;
}

const char *dtf_optimizer_slot_name(const struct dtf_optimizer *opt, int k)
{
	switch (opt->kind) {
	case DTF_OPT_SGD:
		return "momentum";
	case DTF_OPT_ADAM:
	case DTF_OPT_ADAMW:
		return k == 0 ? "m" : "v";
	case DTF_OPT_RMSPROP:
		if (k == 0)
			return "rms";
		return k == 1 && opt->centered ? "mg" : "momentum";
	}
	return "?";
}

void dtf_optimizer_set_pool(struct dtf_optimizer *opt, struct dtf_pool *pool)
{
	opt->pool = pool;
	opt->fast = 1;
}

int dtf_optimizer_nonfinite(const struct dtf_optimizer *opt, const float *g,
			    size_t n)
{
	return dtf_fast_nonfinite(opt && opt->fast ? opt->pool : NULL, n, g);
}

/* ---- one segment of each optimizer ------------------------------------ */

static void sgd(struct dtf_optimizer *opt, size_t off, size_t n,
		float *restrict p, const float *restrict g, float lr)
{
	if (!opt->nslots) {
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * g[i];
		return;
	}
	float mu = (float)opt->momentum;
	float *restrict v = opt->slots + off;
	if (opt->nesterov) {
		for (size_t i = 0; i < n; i++) {
			v[i] = mu * v[i] - lr * g[i];
			p[i] += mu * v[i] - lr * g[i];
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			v[i] = mu * v[i] - lr * g[i];
			p[i] += v[i];
		}
	}
}

static void adam(struct dtf_optimizer *opt, size_t off, size_t n,
		 float *restrict p, const float *restrict g, double lr)
{
	double t = (double)opt->iterations;
	float step = (float)(lr * sqrt(1.0 - pow(opt->beta_2, t)) /
			     (1.0 - pow(opt->beta_1, t)));
	float b1 = (float)opt->beta_1, b2 = (float)opt->beta_2;
	float eps = (float)opt->epsilon;
	float *restrict m = opt->slots + off;
	float *restrict v = opt->slots + opt->n + off;
	if (opt->fast) {
		dtf_fast_adam(opt->pool, n, p, g, m, v, step, b1, b2, eps);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		m[i] = b1 * m[i] + (1.0f - b1) * g[i];
		v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
		p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
	}
}

static void rmsprop(struct dtf_optimizer *opt, size_t off, size_t n,
		    float *restrict p, const float *restrict g, float lr)
{
	float rho = (float)opt->rho, eps = (float)opt->epsilon;
	float mu = (float)opt->momentum;
	float *restrict ms = opt->slots + off;
	float *restrict mg = opt->centered ? opt->slots + opt->n + off : NULL;
	float *restrict mom =
		mu != 0.0f ? opt->slots + (size_t)(1 + opt->centered) * opt->n +
				     off
			   : NULL;
	for (size_t i = 0; i < n; i++) {
		ms[i] = rho * ms[i] + (1.0f - rho) * g[i] * g[i];
		float den = ms[i] + eps;
		if (mg) {
			mg[i] = rho * mg[i] + (1.0f - rho) * g[i];
			den = ms[i] - mg[i] * mg[i] + eps;
		}
		float inc = lr * g[i] / sqrtf(den);
		if (mom) {
			mom[i] = mu * mom[i] + inc;
			p[i] -= mom[i];
		} else {
			p[i] -= inc;
		}
	}
}

/* What an operation touches: the trainable segments, the decayed ones, or
 * those without a gradient. */
enum { NEED_TRAINABLE, NEED_DECAY, NEED_NO_GRAD };

/* The part of segment sg inside range r that an operation touches (`need`:
 * trainable; decayed too; without a gradient too): [*off, *off + *cnt); 0
 * when empty. */
static int part(const struct dtf_opt_segment *sg, const struct dtf_opt_range *r,
		int need, size_t *off, size_t *cnt)
{
	if (!sg->trainable || (need == NEED_DECAY && !sg->decay) ||
	    (need == NEED_NO_GRAD && !sg->no_grad))
		return 0;
	size_t lo = sg->offset > r->off ? sg->offset : r->off;
	size_t e1 = sg->offset + sg->count, e2 = r->off + r->n;
	size_t hi = e1 < e2 ? e1 : e2;
	*off = lo;
	*cnt = hi > lo ? hi - lo : 0;
	return *cnt > 0;
}

/* every nonempty part: segments outer, ranges inner */
#define PARTS(need, off, cnt)                                                \
	for (int si_ = 0; si_ < nsegs; si_++)                                 \
		for (int ri_ = 0; ri_ < nranges; ri_++)                       \
			if (part(&segs[si_], &ranges[ri_], need, &off, &cnt))

/* sum of g[i]^2 in double over 8 interleaved partial sums (element i into
 * sum i % 8), added pairwise at the end: one chain of dependent double
 * adds over the whole model was 3% of a GPT training step. */
static double sum_squares(const float *restrict g, size_t n)
{
	double s[8] = {0};
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			s[k] += (double)g[i + k] * g[i + k];
	for (int k = 0; i < n; i++, k++)
		s[k] += (double)g[i] * g[i];
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void dtf_optimizer_apply(struct dtf_optimizer *opt, float *params,
			 float *grads, double lr)
{
	struct dtf_opt_range all = {0, opt->n};
	dtf_optimizer_apply_ranges(opt, params, grads, lr, &all, 1);
}

void dtf_optimizer_apply_ranges(struct dtf_optimizer *opt, float *params,
				float *grads, double lr,
				const struct dtf_opt_range *ranges,
				int nranges)
{
	struct dtf_opt_segment all = {0, opt->n, 1, 1, 0};
	const struct dtf_opt_segment *segs = opt->segs ? opt->segs : &all;
	int nsegs = opt->segs ? opt->nsegs : 1;
	size_t off, cnt;

	opt->iterations++;
	if (opt->weight_decay > 0) {
		float wd = (float)opt->weight_decay;
		PARTS(NEED_DECAY, off, cnt) {
			float *restrict g = grads + off;
			const float *restrict p = params + off;
			for (size_t i = 0; i < cnt; i++)
				g[i] += wd * p[i];
		}
	}
	opt->last_norm = 0;
	if (opt->clipnorm > 0) {
		double sq = 0;
		PARTS(NEED_TRAINABLE, off, cnt)
			sq += sum_squares(grads + off, cnt);
		opt->last_norm = sqrt(sq);
		if (opt->last_norm > opt->clipnorm) {
			float scale = (float)(opt->clipnorm / opt->last_norm);
			PARTS(NEED_TRAINABLE, off, cnt) {
				float *g = grads + off;
				for (size_t i = 0; i < cnt; i++)
					g[i] *= scale;
			}
		}
	}
	if (opt->decoupled_decay > 0) {
		float f = (float)(lr * opt->decoupled_decay);
		PARTS(NEED_DECAY, off, cnt) {
			float *restrict p = params + off;
			for (size_t i = 0; i < cnt; i++)
				p[i] -= f * p[i];
		}
	}
	PARTS(NEED_TRAINABLE, off, cnt) {
		switch (opt->kind) {
		case DTF_OPT_SGD:
			sgd(opt, off, cnt, params + off, grads + off, (float)lr);
			break;
		case DTF_OPT_ADAM:
		case DTF_OPT_ADAMW:
			adam(opt, off, cnt, params + off, grads + off, lr);
			break;
		case DTF_OPT_RMSPROP:
			rmsprop(opt, off, cnt, params + off, grads + off,
				(float)lr);
			break;
		}
	}
	/* the zeros backward never writes, as they were: else the L2 term
	 * would stay in them, added to again and summed over the replicas
	 * at the next step */
	PARTS(NEED_NO_GRAD, off, cnt)
		memset(grads + off, 0, cnt * sizeof(float));
}

void dtf_optimizer_describe(const struct dtf_job *job, char *buf, size_t size)
{
	static const char *const names[] = {"sgd", "adam", "adamw", "rmsprop"};
	int k = (int)job->train.optimizer;
	size_t at = 0;
#define ADD(...) dtf_log_append(buf, size, &at, __VA_ARGS__)
	ADD("%s lr %g (", k >= 0 && k < 4 ? names[k] : "?", job->train.learning_rate);
	switch (job->train.optimizer) {
	case DTF_OPT_SGD:
		ADD("momentum %g%s", job->train.momentum, job->train.nesterov ? ", nesterov" : "");
		break;
	case DTF_OPT_ADAM:
	case DTF_OPT_ADAMW:
		ADD("beta_1 %g, beta_2 %g, epsilon %g", job->train.beta_1, job->train.beta_2,
		    job->train.epsilon);
		if (job->train.optimizer == DTF_OPT_ADAMW)
			ADD(", weight_decay %g", job->train.decoupled_decay);
		break;
	case DTF_OPT_RMSPROP:
		ADD("rho %g, momentum %g, epsilon %g%s", job->train.rho, job->train.momentum,
		    job->train.epsilon, job->train.centered ? ", centered" : "");
		break;
	}
	if (job->train.weight_decay > 0)
		ADD("; L2 weight decay %g", job->train.weight_decay);
	if (job->train.clipnorm > 0)
		ADD("; clipnorm %g", job->train.clipnorm);
	ADD(")");
#undef ADD
	if (size > 0 && at >= size)
		buf[size - 1] = '\0';
}
