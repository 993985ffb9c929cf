/*
 * elementwise.c - relu, its gradient, gradient accumulation and inverted
 * dropout.
 *
 * Design: plain loops the compiler vectorizes.  Where the header allows
 * in-place use (relu, dropout) the pointers are not restrict-qualified;
 * element i reads only index i, so y == x is safe.  Dropout keys each row's
 * mask by its example id (kernels.h), never by position, so the mask of an
 * example is the same on 1 or N ranks and in any batch order; the backward
 * pass regenerates the mask instead of storing it.
 */
#include "ops/cpu/kernels.h"

#include <string.h>

void dtf_cpu_relu(size_t n, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void dtf_cpu_relu_grad(size_t n, const float *dy, const float *y, float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void dtf_cpu_add_inplace(size_t n, const float *restrict x, float *restrict y)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

/* y (rows, cols) = mask * x * scale; shared by forward and backward, which
 * differ only in what flows through. */
static void apply_mask(size_t rows, size_t cols, float rate,
		       struct dtf_philox_key key, const uint64_t *example_id,
		       uint32_t salt, const float *x, float *y)
{
	if (rate <= 0.0f) {
		if (x != y)
			memmove(y, x, rows * cols * sizeof *y);
		return;
	}
	if (rate >= 1.0f) {
		/* u01 < 1 always, so nothing is kept; avoid scale = inf. */
		memset(y, 0, rows * cols * sizeof *y);
		return;
	}
	const float scale = 1.0f / (1.0f - rate);
	for (size_t r = 0; r < rows; r++)
		dtf_cpu_dropout_span(0, cols, example_id[r], rate, scale, key,
				     salt, x + r * cols, y + r * cols);
}

void dtf_cpu_dropout_span(size_t j0, size_t j1, uint64_t id, float rate,
			  float scale, struct dtf_philox_key key, uint32_t salt,
			  const float *x, float *y)
{
	for (; j0 < j1; j0 += 4) {
		uint32_t ctr[4] = {(uint32_t)(j0 / 4), (uint32_t)id,
				   (uint32_t)(id >> 32), salt};
		uint32_t word[4];
		dtf_philox4x32(key, ctr, word);
		size_t jn = j1 - j0 < 4 ? j1 - j0 : 4;
		for (size_t t = 0; t < jn; t++)
			y[j0 + t] = dtf_rng_u01(word[t]) >= rate ? x[j0 + t] * scale
								 : 0.0f;
	}
}

void dtf_cpu_dropout(size_t rows, size_t cols, float rate,
		     struct dtf_philox_key key, const uint64_t *example_id,
		     uint32_t salt, const float *x, float *y)
{
	apply_mask(rows, cols, rate, key, example_id, salt, x, y);
}

void dtf_cpu_dropout_grad(size_t rows, size_t cols, float rate,
			  struct dtf_philox_key key, const uint64_t *example_id,
			  uint32_t salt, const float *dy, float *dx)
{
	apply_mask(rows, cols, rate, key, example_id, salt, dy, dx);
}
