/*
 * attention.c - multi-head causal self-attention and its gradient, the
 * reference kernels (kernels.h): plain loops over (example, head, query,
 * key) with the scores, softmax statistics and dot products in double.
 *
 * The forward is GPT-2's attention core (nanoGPT's CausalSelfAttention
 * between c_attn and c_proj); the gradient recomputes the probabilities
 * from qkv, as FlashAttention's backward does:
 *     P = softmax(Q K^T / sqrt(d)) over keys j <= i,
 *     dV = P^T dY,  dP = dY V^T,  dS = P * (dP - rowsum(P * dP)),
 *     dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d).
 */
#include <math.h>
#include <string.h>

#include "ops/cpu/kernels.h"

/* Row i of head h of the q (part 0), k (1) or v (2) block of qkv. */
static const float *qkv_row(const float *qkv, int t, int c, int n, int i,
			    int part, int h, int d)
{
	return qkv + ((size_t)n * t + i) * 3 * (size_t)c + (size_t)part * c +
	       (size_t)h * d;
}

static double dot(const float *a, const float *b, int d)
{
	double s = 0.0;
	for (int k = 0; k < d; k++)
		s += (double)a[k] * b[k];
	return s;
}

/* The row maximum and the sum of exp(s - max) of query i's scores. */
static void row_stats(const float *qkv, int t, int c, int n, int h, int d,
		      int i, double scale, double *max, double *sum)
{
	const float *q = qkv_row(qkv, t, c, n, i, 0, h, d);
	double m = -INFINITY, s = 0.0;
	for (int j = 0; j <= i; j++) {
		double sj = scale * dot(q, qkv_row(qkv, t, c, n, j, 1, h, d), d);
		if (sj > m)
			m = sj;
	}
	for (int j = 0; j <= i; j++)
		s += exp(scale * dot(q, qkv_row(qkv, t, c, n, j, 1, h, d), d) - m);
	*max = m;
	*sum = s;
}

void dtf_cpu_causal_self_attention(int b, int t, int c, int heads,
				   const float *qkv, float *y)
{
	int d = c / heads;
	double scale = 1.0 / sqrt((double)d);
	for (int n = 0; n < b; n++)
		for (int h = 0; h < heads; h++)
			for (int i = 0; i < t; i++) {
				const float *q = qkv_row(qkv, t, c, n, i, 0, h, d);
				float *yi = y + ((size_t)n * t + i) * c + (size_t)h * d;
				double m, sum;
				row_stats(qkv, t, c, n, h, d, i, scale, &m, &sum);
				for (int k = 0; k < d; k++)
					yi[k] = 0.0f;
				for (int j = 0; j <= i; j++) {
					const float *kj = qkv_row(qkv, t, c, n, j, 1, h, d);
					const float *vj = qkv_row(qkv, t, c, n, j, 2, h, d);
					float p = (float)(exp(scale * dot(q, kj, d) - m) / sum);
					for (int k = 0; k < d; k++)
						yi[k] += p * vj[k];
				}
			}
}

void dtf_cpu_causal_self_attention_grad(int b, int t, int c, int heads,
					const float *qkv, const float *dy,
					float *dqkv)
{
	int d = c / heads;
	double scale = 1.0 / sqrt((double)d);
	memset(dqkv, 0, (size_t)b * t * 3 * c * sizeof(float));
	for (int n = 0; n < b; n++)
		for (int h = 0; h < heads; h++)
			for (int i = 0; i < t; i++) {
				const float *q = qkv_row(qkv, t, c, n, i, 0, h, d);
				const float *dyi = dy + ((size_t)n * t + i) * c + (size_t)h * d;
				float *dq = dqkv + (q - qkv);
				double m, sum, delta = 0.0;
				row_stats(qkv, t, c, n, h, d, i, scale, &m, &sum);
				/* delta = sum_j P_ij dP_ij */
				for (int j = 0; j <= i; j++) {
					const float *kj = qkv_row(qkv, t, c, n, j, 1, h, d);
					const float *vj = qkv_row(qkv, t, c, n, j, 2, h, d);
					double p = exp(scale * dot(q, kj, d) - m) / sum;
					delta += p * dot(dyi, vj, d);
				}
				for (int j = 0; j <= i; j++) {
					const float *kj = qkv_row(qkv, t, c, n, j, 1, h, d);
					const float *vj = qkv_row(qkv, t, c, n, j, 2, h, d);
					float *dk = dqkv + (kj - qkv), *dv = dqkv + (vj - qkv);
					double p = exp(scale * dot(q, kj, d) - m) / sum;
					double ds = p * (dot(dyi, vj, d) - delta);
					for (int k = 0; k < d; k++) {
						dq[k] += (float)(scale * ds * kj[k]);
						dk[k] += (float)(scale * ds * q[k]);
						dv[k] += (float)(p * dyi[k]);
					}
				}
			}
}
