/*
 * blas.c - matmul through cuBLAS sgemm.
 *
 * cuBLAS is column-major; a row-major (r, c) matrix is the column-major
 * (c, r) matrix of the same memory, its transpose.  So row-major
 * C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands
 * and the sizes, keep the transpose flags (the BLAS idiom for row-major
 * data).  Math mode (FP32 or TF32 tensor cores) is set on the handle when
 * the context is made.
 */
#include "ops/cuda/internal.h"

void dtf_cuda_batch_matmul(struct dtf_cuda_ctx *ctx, int batch, int m, int n,
			   int k, const float *a, int trans_a, const float *b,
			   int trans_b, float alpha, float *c)
{
	/* per matrix as dtf_cuda_matmul; strides in elements */
	if (batch <= 0 || m <= 0 || n <= 0)
		return;
	if (k <= 0) {
		CUDA_KEEP(ctx, cudaMemsetAsync(c, 0,
					       (size_t)batch * m * n * sizeof(float),
					       ctx->stream[DTF_CUDA_COMPUTE]));
		return;
	}
	const float zero = 0.0f;
	CUBLAS_KEEP(ctx, cublasSgemmStridedBatched(
				 ctx->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
				 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
				 &alpha, b, trans_b ? k : n, (long long)k * n, a,
				 trans_a ? m : k, (long long)m * k, &zero, c, n,
				 (long long)m * n, batch));
}

void dtf_cuda_matmul(struct dtf_cuda_ctx *ctx, int m, int n, int k,
		     const float *a, int trans_a, const float *b, int trans_b,
		     float *c)
{
	/* a (m, k) or (k, m) when trans_a; b (k, n) or (n, k); c (m, n) */
	const float one = 1.0f, zero = 0.0f;
	CUBLAS_KEEP(ctx, cublasSgemm(ctx->blas,
				     trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
				     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
				     k, &one, b, trans_b ? k : n, a,
				     trans_a ? m : k, &zero, c, n));
}
