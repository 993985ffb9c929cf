/*
 * dist_probe.c - run under mpirun by test_dist: the compressed allreduce
 * on many ranks.  Every rank sends n copies of VALUE (argv[2]) with
 * compression argv[1] (none, fp16, bf16); prints, on rank 0,
 * "sum S mean M" of element 0 and "naive X" (the fp16 sum of the same
 * values without pre-division, as a custom operator adding in float32 and
 * rounding to fp16 would give it); exits 1 when the elements differ.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distribute/comm.h"
#include "distribute/strategy.h"

int main(int argc, char **argv)
{
	struct dtf_comm *c;
	if (argc != 3 || dtf_comm_init(&argc, &argv, &c) < 0)
		return 2;
	enum dtf_grad_compression k = !strcmp(argv[1], "fp16")   ? DTF_GRAD_COMPRESSION_FP16
				 : !strcmp(argv[1], "bf16") ? DTF_GRAD_COMPRESSION_BF16
							    : DTF_GRAD_COMPRESSION_NONE;
	float value = strtof(argv[2], NULL);
	enum { N = 10000 };
	static float buf[N];
	static uint16_t scratch[N];
	for (int i = 0; i < N; i++)
		buf[i] = value;
	int rc = dtf_strategy_allreduce_compressed(c, buf, scratch, N, k);
	int bad = rc < 0;
	for (int i = 1; i < N; i++)
		bad |= buf[i] != buf[0];
	int size = dtf_comm_size(c);
	/* without pre-division: add fp16(value) size times, rounding each
	 * partial sum to fp16 */
	uint16_t h = dtf_f32_to_f16(value);
	for (int r = 1; r < size; r++)
		h = dtf_f32_to_f16(dtf_f16_to_f32(h) + dtf_f16_to_f32(dtf_f32_to_f16(value)));
	if (dtf_comm_rank(c) == 0)
		printf("sum %.9g mean %.9g naive %.9g\n", buf[0],
		       buf[0] / (float)size, dtf_f16_to_f32(h));
	dtf_comm_finalize(c);
	return bad;
}
