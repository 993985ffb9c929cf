/*
 * shape.c - concat along an axis and its gradient (a slice of the inner
 * dimension).
 *
 * Design: any axis reduces to rows of an (outer, inner) view: the
 * dimensions before the axis are the rows, the axis and everything after it
 * is one contiguous run per row.  Concat copies two runs per row; the
 * gradient copies one part of each row back out.  memcpy per run.
 */
#include "ops/cpu/kernels.h"

#include <string.h>

void dtf_cpu_concat(size_t outer, size_t ia, size_t ib, const float *a,
		    const float *b, float *y)
{
	/* a (outer, ia); b (outer, ib); y (outer, ia + ib) */
	for (size_t r = 0; r < outer; r++) {
		float *yr = y + r * (ia + ib);
		memcpy(yr, a + r * ia, ia * sizeof *y);
		memcpy(yr + ia, b + r * ib, ib * sizeof *y);
	}
}

void dtf_cpu_slice_grad(size_t outer, size_t inner, size_t begin, size_t len,
			const float *dy, float *dx)
{
	/* dy (outer, len); dx (outer, inner) */
	for (size_t r = 0; r < outer; r++) {
		float *d = dx + r * inner;
		for (size_t j = 0; j < inner; j++)
			d[j] = 0.0f;
		for (size_t j = 0; j < len; j++)
			d[begin + j] = dy[r * len + j];
	}
}

void dtf_cpu_slice_inner(size_t outer, size_t inner, size_t begin, size_t len,
			 const float *x, float *y)
{
	/* x (outer, inner); y (outer, len) */
	for (size_t r = 0; r < outer; r++)
		memcpy(y + r * len, x + r * inner + begin, len * sizeof *y);
}
