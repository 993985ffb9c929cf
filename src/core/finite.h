/*
 * finite.h - whether n float32 values hold a NaN or an infinity: the one
 * loop behind every non-finite check (the optimizer's, the shared-memory
 * sum's, the parameter server's).
 *
 * A value is not finite when its exponent bits are all ones (IEEE 754
 * binary32: NaN or +-infinity).  The loop tests bits without a branch, so
 * GCC vectorises it for whatever ISA it is compiled under; it is always
 * inlined, so a caller that wraps it in a function with a target
 * attribute (avx2, avx512f) gets that ISA's code.
 */
#ifndef DTF_CORE_FINITE_H
#define DTF_CORE_FINITE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define DTF_FINITE_INLINE __attribute__((always_inline))
#else
#define DTF_FINITE_INLINE
#endif

/* Nonzero when x[0 .. n) holds a NaN or an infinity, else 0. */
static inline DTF_FINITE_INLINE uint32_t dtf_nonfinite_body(
	size_t n, const float *restrict x)
{
	uint32_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], sizeof b);
		bad |= (b & 0x7f800000u) == 0x7f800000u;
	}
	return bad;
}

#endif
