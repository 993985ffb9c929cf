/*
 * fast_attention.c - multi-head causal self-attention and its gradient
 * (fast.h) on the thread pool: one task per (example, head), split
 * statically over the threads, each with its own slice of the workspace.
 * A head's queries, keys and values are gathered into contiguous blocks
 * (the keys also transposed, so a query's scores are vectors of keys),
 * then each query row runs scores -> softmax -> weighted sum of values
 * over its keys 0..i only, in vectors (attention_isa.h, compiled for
 * AVX-512, AVX2 and the baseline; the widest the CPU has runs).  The
 * gradient recomputes each row's probabilities the same way and
 * accumulates dK, dV of the head in the workspace.  A task's result does
 * not depend on the thread count; it differs from the reference
 * (attention.c) by float rounding (float sums, a polynomial exp).
 */
#include <math.h>
#include <string.h>

#include "ops/cpu/fast.h"
#include "ops/cpu/simd.h"

/* query rows per block of the gradient (attention_isa.h) */
#define ATTN_QB 64

#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/attention_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/attention_isa.h"
#undef DTF_VW
#undef VF
#undef VT
#undef VN
#undef VLOAD
#undef VSTORE
#undef VZERO
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VMAX
#undef VFMA
#endif

/* the baseline: the same source over scalars */
#define DTF_VW 1
#define VF float
#define VT
#define VN(name) name##_gen
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VZERO() 0.0f
#define VSET1(s) (s)
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VMAX(a, b) fmaxf(a, b)
#define VFMA(a, b, c) ((a) * (b) + (c))
#include "ops/cpu/attention_isa.h"

/* Floats of workspace one task needs (attn_head_bwd's blocks; the forward
 * uses fewer): q, k, dy (t, d), k and v transposed (d, tp), dk, dv (t
 * rounded up to 4, d), a block of ATTN_QB rows of probabilities and of
 * score gradients (ATTN_QB, tp). */
static size_t thread_floats(int t, int d)
{
	size_t tp = (size_t)(t + 15) / 16 * 16, t4 = (size_t)(t + 3) / 4 * 4;
	return (3 * (size_t)t * d + 2 * (size_t)d * tp + 2 * t4 * d +
		2 * (size_t)ATTN_QB * tp + 15) / 16 * 16;
}

size_t dtf_fast_attention_workspace(int t, int c, int heads, int nthreads)
{
	return thread_floats(t, c / heads) * (size_t)(nthreads > 1 ? nthreads : 1);
}

struct attn_job {
	int b, t, c, heads;
	const float *qkv, *dy;
	float *out, *ws;
	int grad;
};

static void attn_task(void *arg, int tid, int nt)
{
	const struct attn_job *j = arg;
	int d = j->c / j->heads;
	float scale = 1.0f / sqrtf((float)d);
	float *ws = j->ws + thread_floats(j->t, d) * (size_t)tid;
	size_t lo, hi;
	dtf_pool_split((size_t)j->b * j->heads, 1, tid, nt, &lo, &hi);
	enum dtf_cpu_isa isa = dtf_cpu_isa();
	for (size_t task = lo; task < hi; task++) {
		int n = (int)(task / (size_t)j->heads), h = (int)(task % (size_t)j->heads);
		const float *qkv = j->qkv + (size_t)n * j->t * 3 * j->c;
		if (j->grad) {
			const float *dy = j->dy + (size_t)n * j->t * j->c;
			float *dqkv = j->out + (size_t)n * j->t * 3 * j->c;
#if defined(DTF_T512)
			if (isa == DTF_ISA_AVX512)
				attn_head_bwd_512(j->t, j->c, d, h, scale, qkv, dy, dqkv, ws);
			else if (isa == DTF_ISA_AVX2)
				attn_head_bwd_256(j->t, j->c, d, h, scale, qkv, dy, dqkv, ws);
			else
#endif
				attn_head_bwd_gen(j->t, j->c, d, h, scale, qkv, dy, dqkv, ws);
		} else {
			float *y = j->out + (size_t)n * j->t * j->c;
#if defined(DTF_T512)
			if (isa == DTF_ISA_AVX512)
				attn_head_fwd_512(j->t, j->c, d, h, scale, qkv, y, ws);
			else if (isa == DTF_ISA_AVX2)
				attn_head_fwd_256(j->t, j->c, d, h, scale, qkv, y, ws);
			else
#endif
				attn_head_fwd_gen(j->t, j->c, d, h, scale, qkv, y, ws);
		}
	}
	(void)isa;
}

void dtf_fast_causal_self_attention(struct dtf_pool *p, int b, int t, int c,
				    int heads, const float *qkv, float *y,
				    float *ws)
{
	struct attn_job j = {b, t, c, heads, qkv, NULL, y, ws, 0};
	dtf_pool_run(p, attn_task, &j);
}

void dtf_fast_causal_self_attention_grad(struct dtf_pool *p, int b, int t,
					 int c, int heads, const float *qkv,
					 const float *dy, float *dqkv, float *ws)
{
	struct attn_job j = {b, t, c, heads, qkv, dy, dqkv, ws, 1};
	dtf_pool_run(p, attn_task, &j);
}
