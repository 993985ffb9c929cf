/*
 * rng.h - counter-based random numbers: Philox-4x32-10.
 *
 * Follows Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
 * 1, 2, 3" (SC'11), the generator behind TensorFlow's stateless random ops.
 * A draw is a pure function of (key, counter), so dropout masks, shuffles and
 * initial values are reproducible and resumable without storing generator
 * state, and are the same whatever the number of ranks.
 *
 * Convention in this project: key = {seed low 32 bits, seed high 32 bits ^
 * purpose}; counter = {block, a, b, c} where block numbers successive blocks
 * of 4 outputs of one stream and (a, b, c) name the stream (a variable index,
 * an example id, a step...).  Purposes are the DTF_RNG_* values below.
 */
#ifndef DTF_CORE_RNG_H
#define DTF_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

enum dtf_rng_purpose {
	DTF_RNG_INIT = 0x1a17,    /* variable initialisers */
	DTF_RNG_DROPOUT = 0xd409, /* dropout masks */
	DTF_RNG_SHUFFLE = 0x5aff, /* shuffle buffers */
	DTF_RNG_AUGMENT = 0xa06e, /* data augmentation */
	DTF_RNG_SAMPLE = 0x5a3b,  /* dtf-train generate's draws */
};

struct dtf_philox_key {
	uint32_t k[2];
};

/* Philox-4x32-10's round multipliers and key increments (the paper's
 * constants), for vectorized copies of dtf_philox4x32 (ops/cpu/fused.c). */
#define DTF_PHILOX_M0 0xD2511F53u
#define DTF_PHILOX_M1 0xCD9E8D57u
#define DTF_PHILOX_W0 0x9E3779B9u
#define DTF_PHILOX_W1 0xBB67AE85u

/* Key for (seed, purpose). */
struct dtf_philox_key dtf_philox_make_key(uint64_t seed, uint32_t purpose);

/* One block: 4 uniformly distributed 32-bit words for `ctr`. */
void dtf_philox4x32(struct dtf_philox_key key, const uint32_t ctr[4],
		    uint32_t out[4]);

/* A 32-bit word to a float in [0, 1) with 24 bits of mantissa. */
static inline float dtf_rng_u01(uint32_t w)
{
	return (float)(w >> 8) * (1.0f / 16777216.0f);
}

/*
 * Fill out[0..n) with uniform floats in [lo, hi) from the stream named by
 * (a, b, c): out[i] comes from block i/4, word i%4, so any prefix is stable.
 */
void dtf_rng_uniform(struct dtf_philox_key key, uint32_t a, uint32_t b,
		     uint32_t c, float lo, float hi, float *out, size_t n);

/* Fill with normal(mean, stddev) by Box-Muller over the same stream layout
 * (two uniforms per pair of outputs).  With `truncate`, values further than
 * two standard deviations from the mean are redrawn, as TF's
 * truncated_normal does. */
void dtf_rng_normal(struct dtf_philox_key key, uint32_t a, uint32_t b,
		    uint32_t c, float mean, float stddev, int truncate,
		    float *out, size_t n);

#endif
