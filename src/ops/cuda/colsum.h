/*
 * colsum.h - how the bias gradient's column sum splits its rows, and the
 * row statistics of the layer-norm gamma gradient (shared by the kernels
 * and the planner, which reserves the scratch).
 */
#ifndef DTF_OPS_CUDA_COLSUM_H
#define DTF_OPS_CUDA_COLSUM_H

#include <stddef.h>

/* Blocks of about 256 rows, at most 1024 blocks. */
static inline size_t dtf_cuda_colsum_blocks(size_t rows)
{
	size_t b = (rows + 255) / 256;
	b = b > 1024 ? 1024 : b;
	return b ? b : 1;
}

/* Floats of partial sums dtf_cuda_bias_add_grad needs for (rows, c). */
static inline size_t dtf_cuda_bias_add_grad_scratch(size_t rows, int c)
{
	return dtf_cuda_colsum_blocks(rows) * (size_t)c;
}

/* Floats of scratch dtf_cuda_layer_norm_grad_gamma needs for `rows` rows:
 * each row's mean and 1 / sqrt(var + eps), two doubles. */
static inline size_t dtf_cuda_layer_norm_grad_gamma_scratch(size_t rows)
{
	return 4 * (rows ? rows : 1);
}

#endif
