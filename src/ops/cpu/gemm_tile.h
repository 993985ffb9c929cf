/*
 * gemm_tile.h - a small float32 matrix product in register tiles, for
 * shapes where OpenBLAS's packing costs as much as the product: the 36 or
 * 64 per-point products of the Winograd kernels (winograd.c) and dense
 * layers whose batch dimension is small (fused.c).
 *
 * Nothing is packed in advance: one operand is broadcast element by
 * element from memory with any row and column stride, the other is read as
 * rows of vectors, a slice of at most 32 KB at a time (copied to
 * consecutive rows when its rows lie further apart and several row tiles
 * read it).  On AVX-512 (16-float vectors, 32 registers) tiles are 6 rows
 * x 64 columns (24 accumulators) when the width is a multiple of 64,
 * otherwise 12 rows x 32 or 12 x 16; on AVX2 + FMA (8-float vectors, 16
 * registers) 6 rows x 16 columns (12 accumulators), each row tile passing
 * over the AVX-512 tile's width in 16-column steps; on AArch64 NEON
 * (4-float vectors) 6 rows x 8 columns.  All run each output's sum over
 * the same slices of k in the same order, one FMA per product, so they
 * give the same bits.  The next slice of a copied b is prefetched into L2
 * while one is computed.  One source, gemm_tile_isa.h,
 * compiled for each width (vec.h).
 */
#ifndef DTF_OPS_CPU_GEMM_TILE_H
#define DTF_OPS_CPU_GEMM_TILE_H

#include <stddef.h>

/*
 * c (rows, O) = a (rows, K) b (K, O), or c += it when add != 0, where
 * a(i, k) = a[i * ars + k * aks] (so a or its transpose, any strides),
 * b (K, O) has row stride ldb, and c has row stride ldc; when ct != 0, c
 * is stored transposed: element (i, j) at c[j * ldc + i].  O must be a
 * multiple of 16; rows, K >= 0.  Sums run over k in order, one FMA per
 * product.  Runs in the ISA dtf_cpu_isa() names (isa.h); call only where
 * dtf_mm_tile_usable().
 */
void dtf_mm_tile(int rows, int K, int O, const float *a, size_t ars,
		 size_t aks, const float *b, size_t ldb, float *c, size_t ldc,
		 int add, int ct);

/* 1 when this build has dtf_mm_tile and dtf_cpu_isa() is AVX2 or
 * AVX-512 (x86) or NEON (AArch64). */
int dtf_mm_tile_usable(void);

#endif
