/*
 * dense.c - matmul (OpenBLAS sgemm) and bias add / bias gradient.
 *
 * Design: matmul is one row-major sgemm; transposes are passed to BLAS, never
 * materialised.  bias_add_grad sums many rows (n*oh*ow for a conv layer):
 * rows are summed in float over short runs (vectorizable, error bounded by
 * the run length) and the runs are added in double, so the result does not
 * drift with the batch size.
 */
#include "ops/cpu/kernels.h"

#include <cblas.h>
#include <string.h>

/* Columns per pass of bias_add_grad (stack accumulators) and rows per float
 * partial sum. */
#define COLS 256
#define RUN 64

void dtf_cpu_matmul(int m, int n, int k, const float *a, int trans_a,
		    const float *b, int trans_b, float *c)
{
	/* a (m, k) or (k, m); b (k, n) or (n, k); c (m, n) */
	if (m <= 0 || n <= 0)
		return;
	if (k <= 0) {
		/* sgemm with k == 0 and beta 0 is fine in OpenBLAS, but some
		 * BLAS reject lda < 1; the answer is simply zero. */
		memset(c, 0, (size_t)m * n * sizeof *c);
		return;
	}
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
		    trans_a ? m : k, b, trans_b ? k : n, 0.0f, c, n);
}

void dtf_cpu_batch_matmul(int batch, int m, int n, int k, const float *a,
			  int trans_a, const float *b, int trans_b,
			  float alpha, float *c)
{
	for (int i = 0; i < batch; i++) {
		const float *ai = a + (size_t)i * m * k, *bi = b + (size_t)i * k * n;
		float *ci = c + (size_t)i * m * n;
		for (int r = 0; r < m; r++)
			for (int j = 0; j < n; j++) {
				double s = 0.0;
				for (int q = 0; q < k; q++) {
					float av = trans_a ? ai[(size_t)q * m + r]
							   : ai[(size_t)r * k + q];
					float bv = trans_b ? bi[(size_t)j * k + q]
							   : bi[(size_t)q * n + j];
					s += (double)av * bv;
				}
				ci[(size_t)r * n + j] = (float)(alpha * s);
			}
	}
}

void dtf_cpu_bias_add(size_t rows, int c, const float *x, const float *bias,
		      float *y)
{
	/* x, y (rows, c), possibly the same buffer; bias (c) */
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * c;
		float *yr = y + r * c;
		for (int j = 0; j < c; j++)
			yr[j] = xr[j] + bias[j];
	}
}

void dtf_cpu_bias_add_grad(size_t rows, int c, const float *dy, float *db)
{
	/* dy (rows, c); db (c) */
	for (int c0 = 0; c0 < c; c0 += COLS) {
		int cn = c - c0 < COLS ? c - c0 : COLS;
		double acc[COLS];
		float part[COLS];
		for (int j = 0; j < cn; j++)
			acc[j] = 0.0;
		for (size_t r0 = 0; r0 < rows; r0 += RUN) {
			size_t r1 = rows - r0 < RUN ? rows : r0 + RUN;
			for (int j = 0; j < cn; j++)
				part[j] = 0.0f;
			for (size_t r = r0; r < r1; r++) {
				const float *restrict row = dy + r * c + c0;
				for (int j = 0; j < cn; j++)
					part[j] += row[j];
			}
			for (int j = 0; j < cn; j++)
				acc[j] += part[j];
		}
		for (int j = 0; j < cn; j++)
			db[c0 + j] = (float)acc[j];
	}
}
