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

#include "data/feature.h" /* DTF_MAX_RANK */

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

void dtf_cpu_transpose(int rank, const int64_t *dims, const int *perm,
		       const float *x, float *y)
{
	/* Walk y in order with an odometer over its index; `off` follows
	 * the matching element of x by x's strides of the permuted axes. */
	int64_t stride[DTF_MAX_RANK], odims[DTF_MAX_RANK], ostride[DTF_MAX_RANK];
	int64_t idx[DTF_MAX_RANK] = {0}, total = 1;
	for (int i = rank - 1, s = 1; i >= 0; i--) {
		stride[i] = s;
		s *= (int)dims[i];
	}
	for (int i = 0; i < rank; i++) {
		odims[i] = dims[perm[i]];
		ostride[i] = stride[perm[i]];
		total *= odims[i];
	}
	int64_t off = 0;
	for (int64_t o = 0; o < total; o++) {
		y[o] = x[off];
		for (int i = rank - 1; i >= 0; i--) {
			off += ostride[i];
			if (++idx[i] < odims[i])
				break;
			off -= ostride[i] * odims[i];
			idx[i] = 0;
		}
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
