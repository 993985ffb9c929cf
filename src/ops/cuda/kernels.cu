/*
 * kernels.cu - the CUDA backend's own kernels: what cuDNN and cuBLAS do not
 * cover, each the twin of a CPU kernel in ops/cpu (same formula, same
 * operation order; compiled with -fmad=false so no multiply-add is fused
 * and the elementwise kernels reproduce the CPU's bits).
 *
 * Design: elementwise kernels use a grid-stride loop over size_t indices;
 * reductions that feed the loss and the statistics (cross-entropy,
 * count_correct) run in one block with a fixed shape and a tree reduction
 * in shared memory, so they are deterministic; the max-pool gradient
 * gathers (one thread per input cell, windows visited in the CPU's order)
 * instead of scattering with atomics, so it is deterministic and equal to
 * the CPU's sum.  Dropout evaluates the CPU's Philox-4x32-10 stream: thread
 * t of row r draws block t with counter {t, id lo, id hi, salt} and keeps
 * element 4t + u iff u01(word u) >= rate.
 */
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"

#define THREADS 256 /* = 32 columns x 8 row lanes in k_colsum_part */

static unsigned blocks_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;
	if (b > 65535u * 16u)
		b = 65535u * 16u; /* the grid-stride loop covers the rest */
	return b ? (unsigned)b : 1u;
}

#define GRID_STRIDE(i, n)                                                     \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

/* ---- elementwise ---------------------------------------------------------- */

__global__ void k_transpose(int rows, int cols, const float *in, float *out)
{
	/* in (rows, cols) -> out (cols, rows) */
	size_t n = (size_t)rows * cols;
	GRID_STRIDE(i, n)
	{
		size_t r = i / (size_t)cols, c = i % (size_t)cols;
		out[c * (size_t)rows + r] = in[i];
	}
}

__global__ void k_relu_grad(size_t n, const float *dy, const float *y,
			    float *dx)
{
	GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void k_bias_add(size_t n, int c, const float *x, const float *b,
			   float *y)
{
	GRID_STRIDE(i, n) y[i] = x[i] + b[i % (size_t)c];
}

/* Column sums of dy (rows, c), pass 1: block b sums rows [b*per, (b+1)*per)
 * of every column into part[b*c + j]; a 32-column tile per warp row, 8 row
 * lanes, reduced in shared memory in a fixed order. */
__global__ void k_colsum_part(size_t rows, int c, size_t per, const float *dy,
			      float *part)
{
	__shared__ float tile[8][33];
	int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
	size_t r0 = (size_t)blockIdx.x * per;
	size_t r1 = r0 + per < rows ? r0 + per : rows;
	for (int c0 = 0; c0 < c; c0 += 32) {
		int j = c0 + tx;
		float acc = 0.0f;
		if (j < c)
			for (size_t r = r0 + ty; r < r1; r += 8)
				acc += dy[r * (size_t)c + j];
		tile[ty][tx] = acc;
		__syncthreads();
		if (ty == 0 && j < c) {
			float s = 0.0f;
			for (int t = 0; t < 8; t++)
				s += tile[t][tx];
			part[(size_t)blockIdx.x * c + j] = s;
		}
		__syncthreads();
	}
}

/* pass 2: db[j] = sum over blocks, in block order */
__global__ void k_colsum_final(int nblocks, int c, const float *part, float *db)
{
	GRID_STRIDE(j, (size_t)c)
	{
		float s = 0.0f;
		for (int b = 0; b < nblocks; b++)
			s += part[(size_t)b * c + j];
		db[j] = s;
	}
}

__global__ void k_add(size_t n, const float *a, const float *b, float *y)
{
	GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_fill(size_t n, float *p, float v)
{
	GRID_STRIDE(i, n) p[i] = v;
}

/* ---- layer normalization (norm.c) ------------------------------------------ */

/* mean and 1 / sqrt(biased variance + eps) of one row, as norm.c's */
__device__ void ln_row_stats(int c, const float *x, float eps, double *mean,
			     double *inv)
{
	double m = 0.0, v = 0.0;
	for (int j = 0; j < c; j++)
		m += x[j];
	m = c ? m / c : 0.0;
	for (int j = 0; j < c; j++)
		v += ((double)x[j] - m) * ((double)x[j] - m);
	v = c ? v / c : 0.0;
	*mean = m;
	*inv = 1.0 / sqrt(v + (double)eps);
}

/* One thread per row: the CPU's loop, so its bits. */
__global__ void k_layer_norm(size_t rows, int c, const float *x,
			     const float *gamma, const float *beta, float eps,
			     float *y)
{
	GRID_STRIDE(r, rows)
	{
		const float *xr = x + r * (size_t)c;
		float *yr = y + r * (size_t)c;
		double m, inv;
		ln_row_stats(c, xr, eps, &m, &inv);
		for (int j = 0; j < c; j++)
			yr[j] = (float)(((double)xr[j] - m) * inv * gamma[j] +
					beta[j]);
	}
}

__global__ void k_layer_norm_grad_input(size_t rows, int c, const float *x,
					const float *gamma, const float *dy,
					float eps, float *dx)
{
	GRID_STRIDE(r, rows)
	{
		const float *xr = x + r * (size_t)c;
		const float *gr = dy + r * (size_t)c;
		float *dr = dx + r * (size_t)c;
		double m, inv, sg = 0.0, sgx = 0.0;
		ln_row_stats(c, xr, eps, &m, &inv);
		for (int j = 0; j < c; j++) {
			double gj = (double)gr[j] * gamma[j];
			sg += gj;
			sgx += gj * ((double)xr[j] - m) * inv;
		}
		sg /= c;
		sgx /= c;
		for (int j = 0; j < c; j++) {
			double xhat = ((double)xr[j] - m) * inv;
			double gj = (double)gr[j] * gamma[j];
			dr[j] = (float)(inv * (gj - sg - xhat * sgx));
		}
	}
}

/* gamma gradient, pass 1: each row's statistics into stats[2r], [2r+1] */
__global__ void k_layer_norm_stats(size_t rows, int c, const float *x,
				   float eps, double *stats)
{
	GRID_STRIDE(r, rows)
	ln_row_stats(c, x + r * (size_t)c, eps, &stats[2 * r], &stats[2 * r + 1]);
}

/* pass 2: one thread per column, the rows in order (the CPU's sum) */
__global__ void k_layer_norm_gamma(size_t rows, int c, const float *x,
				   const float *dy, const double *stats,
				   float *dgamma)
{
	GRID_STRIDE(j, (size_t)c)
	{
		double acc = 0.0;
		for (size_t r = 0; r < rows; r++) {
			size_t i = r * (size_t)c + j;
			acc += dy[i] * (((double)x[i] - stats[2 * r]) *
					stats[2 * r + 1]);
		}
		dgamma[j] = (float)acc;
	}
}

/* ---- gelu (activation.c) ---------------------------------------------------- */

#define SQRT_2_OVER_PI 0.7978845608028654
#define INV_SQRT_2 0.7071067811865476
#define INV_SQRT_2PI 0.3989422804014327
#define GELU_C 0.044715

__global__ void k_gelu(size_t n, int approximate, const float *x, float *y)
{
	GRID_STRIDE(i, n)
	{
		double v = x[i];
		if (approximate)
			y[i] = (float)(0.5 * v *
				       (1.0 + tanh(SQRT_2_OVER_PI *
						   (v + GELU_C * v * v * v))));
		else
			y[i] = (float)(0.5 * v * (1.0 + erf(v * INV_SQRT_2)));
	}
}

__global__ void k_gelu_grad(size_t n, int approximate, const float *dy,
			    const float *x, float *dx)
{
	GRID_STRIDE(i, n)
	{
		double v = x[i], d;
		if (approximate) {
			double u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
			double t = tanh(u);
			double du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
			d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
		} else {
			d = 0.5 * (1.0 + erf(v * INV_SQRT_2)) +
			    v * INV_SQRT_2PI * exp(-0.5 * v * v);
		}
		dx[i] = (float)(dy[i] * d);
	}
}

/* ---- embedding (embedding.c) ------------------------------------------------ */

__global__ void k_embedding(size_t n, int vocab, int dim, const int32_t *ids,
			    const float *table, float *y)
{
	GRID_STRIDE(i, n * (size_t)dim)
	{
		size_t p = i / (size_t)dim, j = i % (size_t)dim;
		int32_t id = ids[p];
		y[i] = id >= 0 && id < vocab ? table[(size_t)id * dim + j]
					     : nanf("");
	}
}

/* One thread per table element (v, j): the dy of every position whose id
 * is v, added in position order from 0 as the CPU does.  The threads of a
 * warp mostly share v (all of them when dim is a multiple of 32) and read
 * the same id, so ids are broadcast and dy is read only where the id
 * matches. */
__global__ void k_embedding_grad(size_t n, int vocab, int dim,
				 const float *dy, const int32_t *ids,
				 float *dtable)
{
	GRID_STRIDE(i, (size_t)vocab * dim)
	{
		int32_t v = (int32_t)(i / (size_t)dim);
		size_t j = i % (size_t)dim;
		float acc = 0.0f;
		for (size_t p = 0; p < n; p++)
			if (ids[p] == v)
				acc += dy[p * (size_t)dim + j];
		dtable[i] = acc;
	}
}

/* ---- causal self-attention (attention.c) ---------------------------------- */

/* Row i of head h of part (0 q, 1 k, 2 v) of example n of qkv (b, t, 3c). */
__device__ __forceinline__ const float *attn_row(const float *qkv, int t, int c,
						 int n, int i, int part, int h,
						 int d)
{
	return qkv + ((size_t)n * t + i) * 3 * (size_t)c + (size_t)part * c +
	       (size_t)h * d;
}

__device__ __forceinline__ float attn_dot(const float *a, const float *b, int d)
{
	float s = 0.0f;
	for (int k = 0; k < d; k++)
		s += a[k] * b[k];
	return s;
}

/* The max and log of the sum of exp(s - max) of query i's scores. */
__device__ void attn_stats(const float *qkv, int t, int c, int n, int h, int d,
			   int i, float scale, float *max, float *sum)
{
	const float *q = attn_row(qkv, t, c, n, i, 0, h, d);
	float m = -INFINITY, l = 0.0f;
	for (int j = 0; j <= i; j++) {
		float sj = scale * attn_dot(q, attn_row(qkv, t, c, n, j, 1, h, d), d);
		m = fmaxf(m, sj);
	}
	for (int j = 0; j <= i; j++)
		l += expf(scale * attn_dot(q, attn_row(qkv, t, c, n, j, 1, h, d), d) - m);
	*max = m;
	*sum = l;
}

/* One thread per (example, head, query): two passes over its keys. */
__global__ void k_attn_fwd(int b, int t, int c, int heads, const float *qkv,
			   float *y)
{
	int d = c / heads;
	float scale = 1.0f / sqrtf((float)d);
	GRID_STRIDE(r, (size_t)b * heads * t)
	{
		int i = (int)(r % (size_t)t), h = (int)(r / (size_t)t % (size_t)heads);
		int n = (int)(r / ((size_t)t * heads));
		const float *q = attn_row(qkv, t, c, n, i, 0, h, d);
		float *yi = y + ((size_t)n * t + i) * c + (size_t)h * d;
		float m, l;
		attn_stats(qkv, t, c, n, h, d, i, scale, &m, &l);
		for (int k = 0; k < d; k++)
			yi[k] = 0.0f;
		for (int j = 0; j <= i; j++) {
			const float *kj = attn_row(qkv, t, c, n, j, 1, h, d);
			const float *vj = attn_row(qkv, t, c, n, j, 2, h, d);
			float p = expf(scale * attn_dot(q, kj, d) - m) / l;
			for (int k = 0; k < d; k++)
				yi[k] += p * vj[k];
		}
	}
}

/* One thread per query row: dq, and the row's max, sum and delta = sum_j
 * P_ij dP_ij into stats (3 floats per row) for k_attn_bwd_kv. */
__global__ void k_attn_bwd_q(int b, int t, int c, int heads, const float *qkv,
			     const float *dy, float *dqkv, float *stats)
{
	int d = c / heads;
	float scale = 1.0f / sqrtf((float)d);
	GRID_STRIDE(r, (size_t)b * heads * t)
	{
		int i = (int)(r % (size_t)t), h = (int)(r / (size_t)t % (size_t)heads);
		int n = (int)(r / ((size_t)t * heads));
		const float *q = attn_row(qkv, t, c, n, i, 0, h, d);
		const float *dyi = dy + ((size_t)n * t + i) * c + (size_t)h * d;
		float *dq = dqkv + (q - qkv);
		float m, l, delta = 0.0f;
		attn_stats(qkv, t, c, n, h, d, i, scale, &m, &l);
		for (int j = 0; j <= i; j++) {
			const float *kj = attn_row(qkv, t, c, n, j, 1, h, d);
			const float *vj = attn_row(qkv, t, c, n, j, 2, h, d);
			float p = expf(scale * attn_dot(q, kj, d) - m) / l;
			delta += p * attn_dot(dyi, vj, d);
		}
		for (int k = 0; k < d; k++)
			dq[k] = 0.0f;
		for (int j = 0; j <= i; j++) {
			const float *kj = attn_row(qkv, t, c, n, j, 1, h, d);
			const float *vj = attn_row(qkv, t, c, n, j, 2, h, d);
			float p = expf(scale * attn_dot(q, kj, d) - m) / l;
			float ds = p * (attn_dot(dyi, vj, d) - delta);
			for (int k = 0; k < d; k++)
				dq[k] += scale * ds * kj[k];
		}
		stats[3 * r] = m;
		stats[3 * r + 1] = l;
		stats[3 * r + 2] = delta;
	}
}

/* One thread per key row j: dk_j, dv_j summed over the queries i >= j,
 * with their statistics from k_attn_bwd_q (no atomics). */
__global__ void k_attn_bwd_kv(int b, int t, int c, int heads, const float *qkv,
			      const float *dy, const float *stats, float *dqkv)
{
	int d = c / heads;
	float scale = 1.0f / sqrtf((float)d);
	GRID_STRIDE(r, (size_t)b * heads * t)
	{
		int j = (int)(r % (size_t)t), h = (int)(r / (size_t)t % (size_t)heads);
		int n = (int)(r / ((size_t)t * heads));
		const float *kj = attn_row(qkv, t, c, n, j, 1, h, d);
		const float *vj = attn_row(qkv, t, c, n, j, 2, h, d);
		float *dk = dqkv + (kj - qkv), *dv = dqkv + (vj - qkv);
		for (int k = 0; k < d; k++)
			dk[k] = dv[k] = 0.0f;
		for (int i = j; i < t; i++) {
			size_t ri = r - (size_t)j + (size_t)i;
			const float *qi = attn_row(qkv, t, c, n, i, 0, h, d);
			const float *dyi = dy + ((size_t)n * t + i) * c + (size_t)h * d;
			float p = expf(scale * attn_dot(qi, kj, d) - stats[3 * ri]) /
				  stats[3 * ri + 1];
			float ds = p * (attn_dot(dyi, vj, d) - stats[3 * ri + 2]);
			for (int k = 0; k < d; k++) {
				dk[k] += scale * ds * qi[k];
				dv[k] += p * dyi[k];
			}
		}
	}
}

/* ---- dropout: Philox-4x32-10 as core/rng.c ------------------------------- */

__device__ __forceinline__ void philox(uint32_t k0, uint32_t k1, uint32_t c[4])
{
	for (int r = 0; r < 10; r++) {
		uint32_t hi0 = __umulhi(0xD2511F53u, c[0]);
		uint32_t lo0 = 0xD2511F53u * c[0];
		uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]);
		uint32_t lo1 = 0xCD9E8D57u * c[2];
		uint32_t n0 = hi1 ^ c[1] ^ k0;
		uint32_t n2 = hi0 ^ c[3] ^ k1;
		c[1] = lo1;
		c[3] = lo0;
		c[0] = n0;
		c[2] = n2;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
}

__global__ void k_dropout(size_t rows, size_t cols, float rate, float scale,
			  uint32_t k0, uint32_t k1, const uint64_t *ids,
			  uint32_t salt, const float *x, float *y)
{
	size_t groups = (cols + 3) / 4;
	GRID_STRIDE(t, rows * groups)
	{
		size_t r = t / groups, j0 = (t % groups) * 4;
		uint64_t id = ids[r];
		uint32_t c[4] = {(uint32_t)(j0 / 4), (uint32_t)id,
				 (uint32_t)(id >> 32), salt};
		philox(k0, k1, c);
		const float *xr = x + r * cols;
		float *yr = y + r * cols;
		for (int u = 0; u < 4 && j0 + u < cols; u++) {
			float u01 = (float)(c[u] >> 8) * (1.0f / 16777216.0f);
			yr[j0 + u] = u01 >= rate ? xr[j0 + u] * scale : 0.0f;
		}
	}
}

/* ---- max pooling ---------------------------------------------------------- */

struct geom {
	int n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
};

static struct geom unflat(const int *g)
{
	struct geom r = {g[0], g[1], g[2],  g[3],  g[4],  g[5],  g[6],
			 g[7], g[8], g[9], g[10], g[11], g[12], g[13]};
	return r;
}

/* taps of window (oy, ox) inside the input, as pool.c's clip() */
__device__ void clip(const struct geom &g, int oy, int ox, int *iy0, int *ix0,
		     int *k0y, int *k1y, int *k0x, int *k1x)
{
	*iy0 = oy * g.sh - g.pt;
	*ix0 = ox * g.sw - g.pl;
	*k0y = *iy0 < 0 ? (-*iy0 + g.dh - 1) / g.dh : 0;
	*k0x = *ix0 < 0 ? (-*ix0 + g.dw - 1) / g.dw : 0;
	*k1y = g.kh;
	while (*k1y > *k0y && *iy0 + (*k1y - 1) * g.dh >= g.h)
		(*k1y)--;
	*k1x = g.kw;
	while (*k1x > *k0x && *ix0 + (*k1x - 1) * g.dw >= g.w)
		(*k1x)--;
}

__global__ void k_max_pool(struct geom g, const float *x, float *y)
{
	size_t n = (size_t)g.n * g.oh * g.ow * g.c;
	GRID_STRIDE(i, n)
	{
		int ch = (int)(i % g.c);
		size_t p = i / g.c;
		int ox = (int)(p % g.ow);
		p /= g.ow;
		int oy = (int)(p % g.oh);
		int b = (int)(p / g.oh);
		int iy0, ix0, k0y, k1y, k0x, k1x;
		clip(g, oy, ox, &iy0, &ix0, &k0y, &k1y, &k0x, &k1x);
		const float *img = x + (size_t)b * g.h * g.w * g.c + ch;
		float best = 0.0f;
		int first = 1;
		for (int ky = k0y; ky < k1y; ky++)
			for (int kx = k0x; kx < k1x; kx++) {
				int iy = iy0 + ky * g.dh, ix = ix0 + kx * g.dw;
				float v = img[((size_t)iy * g.w + ix) * g.c];
				best = first ? v : (v > best ? v : best);
				first = 0;
			}
		y[i] = best;
	}
}

/* One thread per input cell: sum dy over the windows whose first maximum
 * is this cell, in the CPU's (oy, ox) order. */
__global__ void k_max_pool_grad(struct geom g, const float *x,
				const float *dy, float *dx)
{
	size_t n = (size_t)g.n * g.h * g.w * g.c;
	GRID_STRIDE(i, n)
	{
		int ch = (int)(i % g.c);
		size_t p = i / g.c;
		int ix = (int)(p % g.w);
		p /= g.w;
		int iy = (int)(p % g.h);
		int b = (int)(p / g.h);
		const float *img = x + (size_t)b * g.h * g.w * g.c + ch;
		/* windows oy with oy*sh - pt <= iy <= oy*sh - pt + (kh-1)*dh */
		int ey = (g.kh - 1) * g.dh, ex = (g.kw - 1) * g.dw;
		int oy0 = iy + g.pt - ey, ox0 = ix + g.pl - ex;
		oy0 = oy0 <= 0 ? 0 : (oy0 + g.sh - 1) / g.sh;
		ox0 = ox0 <= 0 ? 0 : (ox0 + g.sw - 1) / g.sw;
		int oy1 = (iy + g.pt) / g.sh, ox1 = (ix + g.pl) / g.sw;
		if (oy1 >= g.oh)
			oy1 = g.oh - 1;
		if (ox1 >= g.ow)
			ox1 = g.ow - 1;
		float acc = 0.0f;
		for (int oy = oy0; oy <= oy1; oy++) {
			for (int ox = ox0; ox <= ox1; ox++) {
				int iy0, ix0, k0y, k1y, k0x, k1x;
				clip(g, oy, ox, &iy0, &ix0, &k0y, &k1y, &k0x,
				     &k1x);
				if ((iy - iy0) % g.dh || (ix - ix0) % g.dw)
					continue;
				if (k0y >= k1y || k0x >= k1x)
					continue;
				int by = iy0 + k0y * g.dh, bx = ix0 + k0x * g.dw;
				float best = img[((size_t)by * g.w + bx) * g.c];
				for (int ky = k0y; ky < k1y; ky++)
					for (int kx = k0x; kx < k1x; kx++) {
						int yy = iy0 + ky * g.dh;
						int xx = ix0 + kx * g.dw;
						float v = img[((size_t)yy * g.w + xx) * g.c];
						if (v > best) {
							best = v;
							by = yy;
							bx = xx;
						}
					}
				if (by == iy && bx == ix)
					acc += dy[(((size_t)b * g.oh + oy) * g.ow + ox) *
							  g.c + ch];
			}
		}
		dx[i] = acc;
	}
}

/* ---- loss ------------------------------------------------------------------ */

/* max and log(sum(exp(l - max))) of one row, in double, as loss.c */
__device__ void row_lse(int classes, const float *l, double *max, double *lse)
{
	double m = l[0];
	for (int j = 1; j < classes; j++)
		m = l[j] > m ? l[j] : m;
	double s = 0.0;
	for (int j = 0; j < classes; j++)
		s += exp((double)l[j] - m);
	*max = m;
	*lse = log(s);
}

#define RED 256 /* threads of the one-block reductions */

__device__ double block_sum(double v)
{
	__shared__ double part[RED];
	part[threadIdx.x] = v;
	__syncthreads();
	for (int s = RED / 2; s > 0; s /= 2) {
		if ((int)threadIdx.x < s)
			part[threadIdx.x] += part[threadIdx.x + s];
		__syncthreads();
	}
	double r = part[0];
	__syncthreads();
	return r;
}

__global__ void k_xent(size_t rows, int classes, const float *logits,
		       const int32_t *labels, size_t valid, int per,
		       float scale, float *loss, float *sum_f, double *sum_acc)
{
	double local = 0.0;
	size_t n = rows < valid ? rows : valid;
	for (size_t r = threadIdx.x; r < n; r += RED) {
		const float *l = logits + r * (size_t)classes;
		int32_t y = labels[r];
		if (y < 0 || y >= classes || classes <= 0) {
			local += nan("");
			continue;
		}
		double m, lse;
		row_lse(classes, l, &m, &lse);
		local += (m - l[y]) + lse;
	}
	double total = block_sum(local) / per;
	if (threadIdx.x == 0) {
		if (loss)
			*loss = (float)(total * scale);
		if (sum_f)
			*sum_f = (float)total;
		if (sum_acc)
			*sum_acc += total;
	}
}

__global__ void k_xent_grad(size_t rows, int classes, const float *logits,
			    const int32_t *labels, size_t valid, float scale,
			    float *dlogits)
{
	GRID_STRIDE(r, rows)
	{
		const float *l = logits + r * (size_t)classes;
		float *d = dlogits + r * (size_t)classes;
		if (r >= valid) {
			for (int j = 0; j < classes; j++)
				d[j] = 0.0f;
			continue;
		}
		int32_t y = labels[r];
		if (y < 0 || y >= classes) {
			for (int j = 0; j < classes; j++)
				d[j] = nanf("");
			continue;
		}
		double m, lse;
		row_lse(classes, l, &m, &lse);
		for (int j = 0; j < classes; j++) {
			double p = exp((double)l[j] - m - lse);
			d[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));
		}
	}
}

__global__ void k_count_correct(size_t rows, int classes, const float *logits,
				const int32_t *labels, size_t valid, int per,
				float *count_f, double *count_acc)
{
	double local = 0.0;
	size_t n = rows < valid ? rows : valid;
	for (size_t r = threadIdx.x; r < n; r += RED) {
		const float *l = logits + r * (size_t)classes;
		int best = 0;
		for (int j = 1; j < classes; j++)
			if (l[j] > l[best])
				best = j;
		local += classes > 0 && best == labels[r];
	}
	double total = block_sum(local) / per;
	if (threadIdx.x == 0) {
		if (count_f)
			*count_f = (float)total;
		if (count_acc)
			*count_acc += total;
	}
}

/* ---- optimizers (optimizer.c) --------------------------------------------- */

__global__ void k_sgd(size_t n, float *p, const float *g, float lr)
{
	GRID_STRIDE(i, n) p[i] -= lr * g[i];
}

__global__ void k_momentum(size_t n, float *p, const float *g, float *v,
			   float lr, float mu, int nesterov)
{
	GRID_STRIDE(i, n)
	{
		v[i] = mu * v[i] - lr * g[i];
		if (nesterov)
			p[i] += mu * v[i] - lr * g[i];
		else
			p[i] += v[i];
	}
}

__global__ void k_adam(size_t n, float *p, const float *g, float *m, float *v,
		       float step, float b1, float b2, float eps)
{
	GRID_STRIDE(i, n)
	{
		m[i] = b1 * m[i] + (1.0f - b1) * g[i];
		v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
		p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
	}
}

/* ---- launchers ------------------------------------------------------------- */

/* tests/test_cuda_emu.cpp compiles the kernels above as host C++ (one
 * thread, one block) and leaves the launchers out. */
#ifndef DTF_CUDA_EMULATE
extern "C" {

void dtf_cu_transpose(cudaStream_t s, int rows, int cols, const float *in,
		      float *out)
{
	size_t n = (size_t)rows * cols;
	k_transpose<<<blocks_for(n), THREADS, 0, s>>>(rows, cols, in, out);
}

void dtf_cu_relu_grad(cudaStream_t s, size_t n, const float *dy,
		      const float *y, float *dx)
{
	k_relu_grad<<<blocks_for(n), THREADS, 0, s>>>(n, dy, y, dx);
}

void dtf_cu_bias_add(cudaStream_t s, size_t rows, int c, const float *x,
		     const float *bias, float *y)
{
	size_t n = rows * (size_t)c;
	k_bias_add<<<blocks_for(n), THREADS, 0, s>>>(n, c, x, bias, y);
}

void dtf_cu_bias_add_grad(cudaStream_t s, size_t rows, int c,
			  const float *dy, float *part, float *db)
{
	size_t nb = dtf_cuda_colsum_blocks(rows);
	size_t per = (rows + nb - 1) / nb;
	k_colsum_part<<<(unsigned)nb, THREADS, 0, s>>>(rows, c, per, dy, part);
	k_colsum_final<<<blocks_for((size_t)c), THREADS, 0, s>>>((int)nb, c,
								 part, db);
}

void dtf_cu_add(cudaStream_t s, size_t n, const float *a, const float *b,
		float *y)
{
	k_add<<<blocks_for(n), THREADS, 0, s>>>(n, a, b, y);
}

void dtf_cu_fill(cudaStream_t s, float *p, size_t n, float v)
{
	k_fill<<<blocks_for(n), THREADS, 0, s>>>(n, p, v);
}

void dtf_cu_layer_norm(cudaStream_t s, size_t rows, int c, const float *x,
		       const float *gamma, const float *beta, float eps,
		       float *y)
{
	k_layer_norm<<<blocks_for(rows), THREADS, 0, s>>>(rows, c, x, gamma,
							   beta, eps, y);
}

void dtf_cu_layer_norm_grad_input(cudaStream_t s, size_t rows, int c,
				  const float *x, const float *gamma,
				  const float *dy, float eps, float *dx)
{
	k_layer_norm_grad_input<<<blocks_for(rows), THREADS, 0, s>>>(
		rows, c, x, gamma, dy, eps, dx);
}

void dtf_cu_layer_norm_grad_gamma(cudaStream_t s, size_t rows, int c,
				  const float *x, const float *dy, float eps,
				  double *stats, float *dgamma)
{
	k_layer_norm_stats<<<blocks_for(rows), THREADS, 0, s>>>(rows, c, x, eps,
								 stats);
	k_layer_norm_gamma<<<blocks_for((size_t)c), THREADS, 0, s>>>(
		rows, c, x, dy, stats, dgamma);
}

void dtf_cu_gelu(cudaStream_t s, size_t n, int approximate, const float *x,
		 float *y)
{
	k_gelu<<<blocks_for(n), THREADS, 0, s>>>(n, approximate, x, y);
}

void dtf_cu_gelu_grad(cudaStream_t s, size_t n, int approximate,
		      const float *dy, const float *x, float *dx)
{
	k_gelu_grad<<<blocks_for(n), THREADS, 0, s>>>(n, approximate, dy, x, dx);
}

void dtf_cu_embedding(cudaStream_t s, size_t n, int vocab, int dim,
		      const int32_t *ids, const float *table, float *y)
{
	size_t m = n * (size_t)dim;
	k_embedding<<<blocks_for(m), THREADS, 0, s>>>(n, vocab, dim, ids, table,
						       y);
}

void dtf_cu_embedding_grad(cudaStream_t s, size_t n, int vocab, int dim,
			   const float *dy, const int32_t *ids, float *dtable)
{
	size_t m = (size_t)vocab * (size_t)dim;
	k_embedding_grad<<<blocks_for(m), THREADS, 0, s>>>(n, vocab, dim, dy, ids,
							    dtable);
}

void dtf_cu_causal_self_attention(cudaStream_t s, int b, int t, int c,
				  int heads, const float *qkv, float *y)
{
	size_t rows = (size_t)b * heads * t;
	k_attn_fwd<<<blocks_for(rows), THREADS, 0, s>>>(b, t, c, heads, qkv, y);
}

void dtf_cu_causal_self_attention_grad(cudaStream_t s, int b, int t, int c,
				       int heads, const float *qkv,
				       const float *dy, float *stats,
				       float *dqkv)
{
	size_t rows = (size_t)b * heads * t;
	k_attn_bwd_q<<<blocks_for(rows), THREADS, 0, s>>>(b, t, c, heads, qkv, dy,
							   dqkv, stats);
	k_attn_bwd_kv<<<blocks_for(rows), THREADS, 0, s>>>(b, t, c, heads, qkv, dy,
							    stats, dqkv);
}

void dtf_cu_dropout(cudaStream_t s, size_t rows, size_t cols, float rate,
		    float scale, uint32_t k0, uint32_t k1,
		    const uint64_t *example_id, uint32_t salt, const float *x,
		    float *y)
{
	size_t n = rows * ((cols + 3) / 4);
	k_dropout<<<blocks_for(n), THREADS, 0, s>>>(rows, cols, rate, scale, k0,
						     k1, example_id, salt, x, y);
}

void dtf_cu_max_pool(cudaStream_t s, const int *geom14, const float *x,
		     float *y)
{
	struct geom g = unflat(geom14);
	size_t n = (size_t)g.n * g.oh * g.ow * g.c;
	k_max_pool<<<blocks_for(n), THREADS, 0, s>>>(g, x, y);
}

void dtf_cu_max_pool_grad(cudaStream_t s, const int *geom14, const float *x,
			  const float *dy, float *dx)
{
	struct geom g = unflat(geom14);
	size_t n = (size_t)g.n * g.h * g.w * g.c;
	k_max_pool_grad<<<blocks_for(n), THREADS, 0, s>>>(g, x, dy, dx);
}

void dtf_cu_xent(cudaStream_t s, size_t rows, int classes,
		 const float *logits, const int32_t *labels, size_t valid,
		 int per, float scale, float *loss, float *sum_f,
		 double *sum_acc)
{
	k_xent<<<1, RED, 0, s>>>(rows, classes, logits, labels, valid, per,
				 scale, loss, sum_f, sum_acc);
}

void dtf_cu_xent_grad(cudaStream_t s, size_t rows, int classes,
		      const float *logits, const int32_t *labels, size_t valid,
		      float scale, float *dlogits)
{
	k_xent_grad<<<blocks_for(rows), THREADS, 0, s>>>(
		rows, classes, logits, labels, valid, scale, dlogits);
}

void dtf_cu_count_correct(cudaStream_t s, size_t rows, int classes,
			  const float *logits, const int32_t *labels,
			  size_t valid, int per, float *count_f,
			  double *count_acc)
{
	k_count_correct<<<1, RED, 0, s>>>(rows, classes, logits, labels, valid,
					  per, count_f, count_acc);
}

void dtf_cu_sgd(cudaStream_t s, size_t n, float *p, const float *g, float *v,
		float lr, float momentum, int nesterov)
{
	if (v)
		k_momentum<<<blocks_for(n), THREADS, 0, s>>>(n, p, g, v, lr,
							     momentum, nesterov);
	else
		k_sgd<<<blocks_for(n), THREADS, 0, s>>>(n, p, g, lr);
}

void dtf_cu_adam(cudaStream_t s, size_t n, float *p, const float *g, float *m,
		 float *v, float step, float b1, float b2, float eps)
{
	k_adam<<<blocks_for(n), THREADS, 0, s>>>(n, p, g, m, v, step, b1, b2,
						 eps);
}

} /* extern "C" */
#endif /* DTF_CUDA_EMULATE */
