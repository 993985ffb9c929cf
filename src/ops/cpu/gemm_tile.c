/*
 * gemm_tile.c - dtf_mm_tile (gemm_tile.h): gemm_tile_isa.h compiled for
 * 16-float (AVX-512) and 8-float (AVX2 + FMA) vectors, picked per call by
 * dtf_cpu_isa(), or for 4-float NEON vectors on AArch64.
 */
#include "ops/cpu/gemm_tile.h"

#include "ops/cpu/isa.h"
#include "ops/cpu/simd.h"

#if defined(DTF_VEC_TILES)

/* floats of the slice of b one pass over the row tiles reads (32 KB: the
 * L1 cache holds it) */
#define PACK_FLOATS 8192

#if defined(DTF_T512)
#define DTF_VW 16
#include "ops/cpu/vec.h"
#include "ops/cpu/gemm_tile_isa.h"
#undef DTF_VW
#define DTF_VW 8
#include "ops/cpu/vec.h"
#include "ops/cpu/gemm_tile_isa.h"
#else
#define DTF_VW 4
#include "ops/cpu/vec.h"
#include "ops/cpu/gemm_tile_isa.h"
#endif

void dtf_mm_tile(int rows, int K, int O, const float *a, size_t ars,
		 size_t aks, const float *b, size_t ldb, float *c, size_t ldc,
		 int add, int ct)
{
	DTF_VEC_CALL(dtf_mm_tile, (rows, K, O, a, ars, aks, b, ldb, c, ldc, add, ct));
}

int dtf_mm_tile_usable(void)
{
	return dtf_cpu_isa() > DTF_ISA_GENERIC;
}

#else

void dtf_mm_tile(int rows, int K, int O, const float *a, size_t ars,
		 size_t aks, const float *b, size_t ldb, float *c, size_t ldc,
		 int add, int ct)
{
	(void)rows; (void)K; (void)O; (void)a; (void)ars; (void)aks; (void)b;
	(void)ldb; (void)c; (void)ldc; (void)add; (void)ct;
}

int dtf_mm_tile_usable(void) { return 0; }

#endif
