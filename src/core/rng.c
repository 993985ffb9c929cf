/*
 * rng.c - Philox-4x32-10 (Salmon et al., SC'11), constants from the paper.
 */
#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 DTF_PHILOX_M0
#define PHILOX_M1 DTF_PHILOX_M1
#define PHILOX_W0 DTF_PHILOX_W0
#define PHILOX_W1 DTF_PHILOX_W1

struct dtf_philox_key dtf_philox_make_key(uint64_t seed, uint32_t purpose)
{
	struct dtf_philox_key key = {
		{(uint32_t)seed, (uint32_t)(seed >> 32) ^ purpose}};
	return key;
}

void dtf_philox4x32(struct dtf_philox_key key, const uint32_t ctr[4],
		    uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key.k[0], k1 = key.k[1];
	for (int r = 0; r < 10; r++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

void dtf_rng_uniform(struct dtf_philox_key key, uint32_t a, uint32_t b,
		     uint32_t c, float lo, float hi, float *out, size_t n)
{
	uint32_t w[4];
	for (size_t i = 0; i < n; i += 4) {
		uint32_t ctr[4] = {(uint32_t)(i / 4), a, b, c};
		dtf_philox4x32(key, ctr, w);
		for (size_t j = 0; j < 4 && i + j < n; j++)
			out[i + j] = lo + (hi - lo) * dtf_rng_u01(w[j]);
	}
}

void dtf_rng_normal(struct dtf_philox_key key, uint32_t a, uint32_t b,
		    uint32_t c, float mean, float stddev, int truncate,
		    float *out, size_t n)
{
	/* Each output i draws from its own counter; a rejected truncated value
	 * moves on to later rounds (ctr[0] high bits), so out[i] never depends
	 * on n. */
	for (size_t i = 0; i < n; i++) {
		for (uint32_t round = 0;; round++) {
			uint32_t ctr[4] = {(uint32_t)i ^ (round << 28) ^
						   (uint32_t)((uint64_t)i >> 32),
					   a, b, c ^ (round * 0x9E3779B9u)};
			uint32_t w[4];
			dtf_philox4x32(key, ctr, w);
			double u1 = ((w[0] >> 8) + 1.0) / 16777217.0;
			double u2 = (w[1] >> 8) / 16777216.0;
			double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
			if (!truncate || fabs(z) <= 2.0 || round == 15) {
				out[i] = (float)(mean + stddev * z);
				break;
			}
		}
	}
}
