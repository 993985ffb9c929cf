/*
 * gemm512.h - a small float32 matrix product in AVX-512 register tiles,
 * for shapes where OpenBLAS's packing costs as much as the product: the
 * 36 or 64 per-point products of the Winograd kernels (winograd.c) and
 * dense layers whose batch dimension is small (fused.c).
 *
 * Nothing is packed in advance: one operand is broadcast element by
 * element from memory with any row and column stride, the other is read as
 * rows of 16-float vectors, a 32 KB slice at a time (copied to consecutive
 * rows when its rows lie further apart and several row tiles read it).
 * Tiles are 6 rows x 64 columns (24 accumulators) when the width is a
 * multiple of 64, otherwise 12 rows x 32 or 12 x 16.
 */
#ifndef DTF_OPS_CPU_GEMM512_H
#define DTF_OPS_CPU_GEMM512_H

#include <stddef.h>

/*
 * c (rows, O) = a (rows, K) b (K, O), or c += it when add != 0, where
 * a(i, k) = a[i * ars + k * aks] (so a or its transpose, any strides),
 * b (K, O) has row stride ldb, and c has row stride ldc; when ct != 0, c
 * is stored transposed: element (i, j) at c[j * ldc + i].  O must be a
 * multiple of 16; rows, K >= 0.  Sums run over k in order, one FMA per
 * product.  Call only where the CPU has AVX-512F (dtf_mm512_usable()).
 */
void dtf_mm512(int rows, int K, int O, const float *a, size_t ars, size_t aks,
	       const float *b, size_t ldb, float *c, size_t ldc, int add,
	       int ct);

/* 1 when this build has dtf_mm512 and the CPU has AVX-512F. */
int dtf_mm512_usable(void);

#endif
