/*
 * embedding.c - embedding lookup (a gather of table rows) and its gradient
 * (a scatter-add into the table), the reference kernels.
 *
 * The gradient visits the positions in order and adds each one's dy row
 * into the row of its id, so its float sums have one fixed order: the
 * same bits for any thread count, and the order the CUDA kernel
 * reproduces (ops/cuda/kernels.cu, one thread per table element walking
 * the positions).
 */
#include <math.h>
#include <string.h>

#include "ops/cpu/kernels.h"

void dtf_cpu_embedding(size_t n, int vocab, int dim, const int32_t *ids,
		       const float *table, float *y)
{
	for (size_t p = 0; p < n; p++) {
		float *yr = y + p * (size_t)dim;
		int32_t id = ids[p];
		if (id < 0 || id >= vocab) {
			for (int j = 0; j < dim; j++)
				yr[j] = NAN;
			continue;
		}
		memcpy(yr, table + (size_t)id * (size_t)dim,
		       (size_t)dim * sizeof(float));
	}
}

void dtf_cpu_embedding_grad(size_t n, int vocab, int dim, const float *dy,
			    const int32_t *ids, float *dtable)
{
	memset(dtable, 0, (size_t)vocab * (size_t)dim * sizeof(float));
	for (size_t p = 0; p < n; p++) {
		int32_t id = ids[p];
		if (id < 0 || id >= vocab)
			continue;
		float *dr = dtable + (size_t)id * (size_t)dim;
		const float *g = dy + p * (size_t)dim;
		for (int j = 0; j < dim; j++)
			dr[j] += g[j];
	}
}
