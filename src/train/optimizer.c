/*
 * optimizer.c - SGD (momentum, Nesterov) and Adam, Keras semantics.
 * The loops are plain so the compiler vectorises them.
 */
#include "train/optimizer.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
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
	opt->n = n;
	size_t nslots = opt->kind == DTF_OPT_ADAM ? 2 * n
			: opt->momentum != 0.0	  ? n
						  : 0;
	if (nslots) {
		opt->slots = dtf_alloc_aligned(nslots * sizeof(float));
		if (!opt->slots)
			return dtf_error(DTF_ERR_NOMEM,
					 "out of memory for optimizer state");
	}
	return 0;
}

void dtf_optimizer_deinit(struct dtf_optimizer *opt)
{
	dtf_free(opt->slots);
	memset(opt, 0, sizeof(*opt));
}

void dtf_optimizer_set_pool(struct dtf_optimizer *opt, struct dtf_pool *pool)
{
	opt->pool = pool;
	opt->fast = 1;
}

static void sgd(struct dtf_optimizer *opt, float *restrict p,
		const float *restrict g, float lr)
{
	size_t n = opt->n;
	if (!opt->slots) {
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * g[i];
		return;
	}
	float mu = (float)opt->momentum;
	float *restrict v = opt->slots;
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

static void adam(struct dtf_optimizer *opt, float *restrict p,
		 const float *restrict g, double lr)
{
	size_t n = opt->n;
	double t = (double)opt->iterations;
	float step = (float)(lr * sqrt(1.0 - pow(opt->beta_2, t)) /
			     (1.0 - pow(opt->beta_1, t)));
	float b1 = (float)opt->beta_1, b2 = (float)opt->beta_2;
	float eps = (float)opt->epsilon;
	float *restrict m = opt->slots, *restrict v = opt->slots + n;
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

void dtf_optimizer_apply(struct dtf_optimizer *opt, float *params,
			 const float *grads, double lr)
{
	opt->iterations++;
	if (opt->kind == DTF_OPT_ADAM)
		adam(opt, params, grads, lr);
	else
		sgd(opt, params, grads, (float)lr);
}
