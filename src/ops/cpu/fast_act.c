/*
 * fast_act.c - the transformer's elementwise and row kernels over the
 * pool: GELU (tanh form) and its gradient, layer normalization and its two
 * gradients, in AVX-512, AVX2 or NEON lanes (gelu_isa.h, layer_norm_isa.h:
 * one source over vec.h's widths); the reference kernels elsewhere, for
 * GELU's erf form and for rows that are not whole vectors.
 *
 * The references (activation.c, norm.c) work in double; these in float:
 * exp is vmath_isa.h's polynomial, sums are float lanes.  test_fast checks
 * every ISA against the references.
 */
#include "ops/cpu/fast.h"

#include <math.h>
#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/simd.h"

#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/vmath_isa.h"
#include "ops/cpu/gelu_isa.h"
#include "ops/cpu/layer_norm_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/vmath_isa.h"
#include "ops/cpu/gelu_isa.h"
#include "ops/cpu/layer_norm_isa.h"
#elif defined(DTF_NEON)
#define DTF_VW 4
#include "ops/cpu/vec.h"
#include "ops/cpu/vmath_isa.h"
#include "ops/cpu/gelu_isa.h"
#include "ops/cpu/layer_norm_isa.h"
#endif

/* elements per task: a multiple of every width */
#define CHUNK 4096

struct gelu_job {
	size_t n;
	int approximate;
	const float *dy, *x;
	float *y;
};

static void gelu_range(const struct gelu_job *j, size_t lo, size_t hi)
{
	size_t m = hi - lo;
	const float *x = j->x + lo;
	float *y = j->y + lo;
#if defined(DTF_VEC_TILES)
	if (j->approximate && dtf_cpu_isa() != DTF_ISA_GENERIC) {
		if (j->dy)
			DTF_VEC_CALL(gelu_grad_span, (m, j->dy + lo, x, y));
		else
			DTF_VEC_CALL(gelu_span, (m, x, y));
		return;
	}
#endif
	if (j->dy)
		dtf_cpu_gelu_grad(m, j->approximate, j->dy + lo, x, y);
	else
		dtf_cpu_gelu(m, j->approximate, x, y);
}

static void gelu_task(void *arg, int tid, int nt)
{
	const struct gelu_job *j = arg;
	size_t lo, hi;
	dtf_pool_split((j->n + CHUNK - 1) / CHUNK, 1, tid, nt, &lo, &hi);
	lo *= CHUNK;
	hi *= CHUNK;
	if (hi > j->n)
		hi = j->n;
	if (lo < hi)
		gelu_range(j, lo, hi);
}

static void gelu_run(struct dtf_pool *p, const struct gelu_job *j)
{
	if (j->n <= CHUNK)
		p = NULL; /* a few microseconds: not worth a wake-up */
	dtf_pool_run(p, gelu_task, (void *)j);
}

void dtf_fast_gelu(struct dtf_pool *p, size_t n, int approximate,
		   const float *x, float *y)
{
	struct gelu_job j = {n, approximate, NULL, x, y};
	gelu_run(p, &j);
}

void dtf_fast_gelu_grad(struct dtf_pool *p, size_t n, int approximate,
			const float *dy, const float *x, float *dx)
{
	struct gelu_job j = {n, approximate, dy, x, dx};
	gelu_run(p, &j);
}

/* ---- layer_norm ----------------------------------------------------------------- */

enum ln_kind { LN_FORWARD, LN_GRAD_INPUT, LN_GRAD_GAMMA };

struct ln_job {
	enum ln_kind kind;
	size_t rows;
	int c;
	const float *x, *gamma, *beta, *dy;
	float eps;
	float *y, *ws;
};

#if defined(DTF_VEC_TILES)
/* rows of c floats are whole vectors of the ISA in use */
static int ln_vector(int c)
{
#if defined(DTF_T512)
	int w = dtf_cpu_isa() == DTF_ISA_AVX512 ? 16 : 8;
#else
	int w = 4;
#endif
	return dtf_cpu_isa() != DTF_ISA_GENERIC && c % w == 0;
}

static void ln_task(void *arg, int tid, int nt)
{
	const struct ln_job *j = arg;
	size_t lo, hi;
	dtf_pool_split(j->rows, 1, tid, nt, &lo, &hi);
	if (j->kind == LN_GRAD_GAMMA) {
		float *acc = j->ws + (size_t)tid * (size_t)j->c;
		memset(acc, 0, (size_t)j->c * sizeof(float));
		if (lo < hi)
			DTF_VEC_CALL(ln_grad_gamma, (lo, hi, j->c, j->x, j->dy, j->eps, acc));
		return;
	}
	if (lo >= hi)
		return;
	if (j->kind == LN_FORWARD)
		DTF_VEC_CALL(ln_forward, (lo, hi, j->c, j->x, j->gamma, j->beta,
					  j->eps, j->y));
	else
		DTF_VEC_CALL(ln_grad_input, (lo, hi, j->c, j->x, j->gamma, j->dy,
					     j->eps, j->y));
}

/* one thread below this many floats: a wake-up costs more */
#define LN_SERIAL ((size_t)1 << 14)
#endif

/* The job on the pool in vector lanes, or the reference kernel of its kind
 * where the rows are not whole vectors (or there are no vectors). */
static void ln_run(struct dtf_pool *p, const struct ln_job *j)
{
#if defined(DTF_VEC_TILES)
	if (ln_vector(j->c)) {
		if (j->rows * (size_t)j->c < LN_SERIAL)
			p = NULL;
		dtf_pool_run(p, ln_task, (void *)j);
		if (j->kind == LN_GRAD_GAMMA) {
			int nt = dtf_pool_size(p);
			for (int t = 1; t < nt; t++)
				for (int k = 0; k < j->c; k++)
					j->ws[k] += j->ws[(size_t)t * (size_t)j->c + k];
			memcpy(j->y, j->ws, (size_t)j->c * sizeof(float));
		}
		return;
	}
#endif
	switch (j->kind) {
	case LN_FORWARD:
		dtf_cpu_layer_norm(j->rows, j->c, j->x, j->gamma, j->beta, j->eps, j->y);
		break;
	case LN_GRAD_INPUT:
		dtf_cpu_layer_norm_grad_input(j->rows, j->c, j->x, j->gamma, j->dy,
					      j->eps, j->y);
		break;
	case LN_GRAD_GAMMA:
		dtf_cpu_layer_norm_grad_gamma(j->rows, j->c, j->x, j->dy, j->eps, j->y);
		break;
	}
}

size_t dtf_fast_layer_norm_workspace(int c, int nthreads)
{
	return (size_t)c * (size_t)(nthreads > 1 ? nthreads : 1);
}

void dtf_fast_layer_norm(struct dtf_pool *p, size_t rows, int c,
			 const float *x, const float *gamma, const float *beta,
			 float eps, float *y)
{
	struct ln_job j = {LN_FORWARD, rows, c, x, gamma, beta, NULL, eps, y, NULL};
	ln_run(p, &j);
}

void dtf_fast_layer_norm_grad_input(struct dtf_pool *p, size_t rows, int c,
				    const float *x, const float *gamma,
				    const float *dy, float eps, float *dx)
{
	struct ln_job j = {LN_GRAD_INPUT, rows, c, x, gamma, NULL, dy, eps, dx, NULL};
	ln_run(p, &j);
}

void dtf_fast_layer_norm_grad_gamma(struct dtf_pool *p, size_t rows, int c,
				    const float *x, const float *dy, float eps,
				    float *dgamma, float *ws)
{
	struct ln_job j = {LN_GRAD_GAMMA, rows, c, x, NULL, NULL, dy, eps, dgamma, ws};
	ln_run(p, &j);
}
