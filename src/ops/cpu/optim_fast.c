/*
 * optim_fast.c - the Adam update as one vectorized pass split over the
 * pool's threads, and the gradients' NaN/Inf check the same way.
 *
 * Same float operations in the same order as the reference loop in
 * train/optimizer.c (no FMA contraction: this file is compiled in ISO C
 * mode, where GCC does not contract), and IEEE sqrt and division are
 * correctly rounded in every vector width, so the result is bit-identical
 * to the reference.
 */
#include "ops/cpu/fast.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/finite.h"
#include "ops/cpu/simd.h"

/* The reference loop: the scalar tail and the baseline build. */
static void adam_scalar(size_t n, float *restrict p, const float *restrict g,
			float *restrict m, float *restrict v, float step,
			float b1, float b2, float eps)
{
	for (size_t i = 0; i < n; i++) {
		m[i] = b1 * m[i] + (1.0f - b1) * g[i];
		v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
		p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
	}
}

#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/adam_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/adam_isa.h"
#undef DTF_VW
#endif

static void adam_vec(size_t n, float *restrict p, const float *restrict g,
		     float *restrict m, float *restrict v, float step,
		     float b1, float b2, float eps)
{
#if defined(DTF_T512)
	if (dtf_cpu_isa() == DTF_ISA_AVX512) {
		adam_512(n, p, g, m, v, step, b1, b2, eps);
		return;
	}
	if (dtf_cpu_isa() == DTF_ISA_AVX2) {
		adam_256(n, p, g, m, v, step, b1, b2, eps);
		return;
	}
#endif
	adam_scalar(n, p, g, m, v, step, b1, b2, eps);
}

struct adam_job {
	size_t n;
	float *p, *m, *v;
	const float *g;
	float step, b1, b2, eps;
};

static void adam_task(void *arg, int tid, int nt)
{
	const struct adam_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->n, 16, tid, nt, &lo, &hi);
	if (hi > lo)
		adam_vec(hi - lo, j->p + lo, j->g + lo, j->m + lo, j->v + lo,
			 j->step, j->b1, j->b2, j->eps);
}

void dtf_fast_adam(struct dtf_pool *p, size_t n, float *params,
		   const float *grads, float *m, float *v, float step, float b1,
		   float b2, float eps)
{
	struct adam_job j = {n, params, m, v, grads, step, b1, b2, eps};
	dtf_pool_run(p, adam_task, &j);
}

/* ---- non-finite check ---------------------------------------------------- */

/* the loop of core/finite.h, per ISA */
#if defined(DTF_T512)
DTF_T512 static uint32_t nonfinite_run_512(size_t n, const float *restrict x)
{
	return dtf_nonfinite_body(n, x);
}
DTF_T256 static uint32_t nonfinite_run_256(size_t n, const float *restrict x)
{
	return dtf_nonfinite_body(n, x);
}
#endif

static uint32_t nonfinite_run(size_t n, const float *restrict x)
{
#if defined(DTF_T512)
	if (dtf_cpu_isa() == DTF_ISA_AVX512)
		return nonfinite_run_512(n, x);
	if (dtf_cpu_isa() == DTF_ISA_AVX2)
		return nonfinite_run_256(n, x);
#endif
	return dtf_nonfinite_body(n, x);
}

struct nonfinite_job {
	size_t n;
	const float *x;
	atomic_uint bad;
};

static void nonfinite_task(void *arg, int tid, int nt)
{
	struct nonfinite_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->n, 16, tid, nt, &lo, &hi);
	if (hi > lo && nonfinite_run(hi - lo, j->x + lo))
		atomic_fetch_or(&j->bad, 1u);
}

int dtf_fast_nonfinite(struct dtf_pool *p, size_t n, const float *x)
{
	struct nonfinite_job j = {.n = n, .x = x};
	atomic_init(&j.bad, 0u);
	if (n < ((size_t)1 << 16))
		p = NULL; /* not worth a wake-up */
	dtf_pool_run(p, nonfinite_task, &j);
	return atomic_load(&j.bad) != 0;
}
