/*
 * test_cuda_emu.cpp - the own CUDA kernels' arithmetic, checked on the CPU.
 *
 * kernels.cu is compiled here as host C++ with a few definitions
 * (__global__ empty, one block of one thread, __umulhi in 64-bit
 * arithmetic), so each grid-stride kernel runs all its indices in one
 * thread.  That checks what a machine without a GPU can check: the index
 * arithmetic and the formulas of max_pool2d and its gradient (padding,
 * dilation, overlapping windows, ties), dropout's Philox stream, the filter
 * transposes, bias_add, relu_grad, the cross-entropy gradient, embedding
 * and its scatter-add gradient, layer_norm and its gradients, gelu and
 * its gradient (host libm on both sides) and the optimizer updates, bit
 * for bit against the CPU kernels; causal self-attention and its
 * gradient within float rounding of the CPU's double sums.  It does not
 * check the kernels that need a whole block (the block reductions of the
 * loss, count_correct and bias gradient), launch configurations, or
 * anything of CUDA itself: tests/test_cuda.c does, on a GPU.
 * Exit 1 on a difference.
 */
#include <initializer_list>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "ops/cpu/kernels.h"
}

#define DTF_CUDA_EMULATE 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct emu_dim {
	unsigned x;
};
static const emu_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1},
		     gridDim = {1};
static inline uint32_t __umulhi(uint32_t a, uint32_t b)
{
	return (uint32_t)(((uint64_t)a * b) >> 32);
}
static inline void __syncthreads(void) {}

#include "ops/cuda/kernels.cu"

static int failures;
static uint64_t state = 0x1234;

static float frand(void)
{
	state = state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((state >> 40) / 16777216.0) * 2.0f - 1.0f;
}

static void same(const char *what, const float *gpu, const float *cpu,
		 size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0) {
			printf("FAIL %s[%zu]: kernel %.9g, cpu %.9g\n", what, i,
			       (double)gpu[i], (double)cpu[i]);
			failures++;
			return;
		}
	printf("ok   %s (%zu values equal)\n", what, n);
}

/* |gpu - cpu| <= atol + rtol |cpu|: kernels whose float sums stand beside
 * the CPU's double sums */
static void close(const char *what, const float *gpu, const float *cpu,
		  size_t n, double atol, double rtol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs((double)gpu[i] - cpu[i]) <= atol + rtol * fabs(cpu[i]))) {
			printf("FAIL %s[%zu]: kernel %.9g, cpu %.9g\n", what, i,
			       (double)gpu[i], (double)cpu[i]);
			failures++;
			return;
		}
	printf("ok   %s (%zu values within %g + %g |cpu|)\n", what, n, atol, rtol);
}

static void pool(int n, int h, int w, int c, int k, int s, int dil,
		 enum dtf_padding pad)
{
	struct dtf_window_geom g;
	memset(&g, 0, sizeof(g));
	g.n = n, g.h = h, g.w = w, g.c = c, g.kh = g.kw = k;
	g.stride_h = g.stride_w = s, g.dilation_h = g.dilation_w = dil;
	if (dtf_window_geom_finish(&g, pad) < 0)
		abort();
	size_t nx = (size_t)n * h * w * c, ny = (size_t)n * g.oh * g.ow * c;
	float *x = new float[nx], *dy = new float[ny];
	float *y1 = new float[ny], *y2 = new float[ny];
	float *d1 = new float[nx], *d2 = new float[nx];
	for (size_t i = 0; i < nx; i++) /* four levels: many ties */
		x[i] = (float)(int)((frand() + 1.0f) * 2.0f) * 0.25f;
	for (size_t i = 0; i < ny; i++)
		dy[i] = frand();
	dtf_cpu_max_pool2d(&g, x, y1);
	dtf_cpu_max_pool2d_grad(&g, x, dy, d1);
	int f[14] = {g.n, g.h, g.w, g.c, g.kh, g.kw, g.stride_h, g.stride_w,
		     g.dilation_h, g.dilation_w, g.pad_top, g.pad_left, g.oh,
		     g.ow};
	struct geom ge = unflat(f);
	k_max_pool(ge, x, y2);
	k_max_pool_grad(ge, x, dy, d2);
	char what[96];
	snprintf(what, sizeof(what), "max_pool2d %dx%d stride %d dilation %d %s",
		 k, k, s, dil, pad == DTF_PAD_SAME ? "same" : "valid");
	same(what, y2, y1, ny);
	strcat(what, " grad");
	same(what, d2, d1, nx);
	delete[] x, delete[] dy, delete[] y1, delete[] y2, delete[] d1,
		delete[] d2;
}

int main(void)
{
	pool(2, 8, 8, 5, 2, 2, 1, DTF_PAD_VALID);
	pool(2, 7, 7, 3, 3, 2, 1, DTF_PAD_SAME);
	pool(1, 9, 9, 2, 3, 1, 1, DTF_PAD_VALID);
	pool(1, 10, 9, 2, 3, 1, 2, DTF_PAD_SAME);
	pool(2, 6, 6, 3, 4, 3, 1, DTF_PAD_SAME);

	const size_t rows = 33, cols = 1027, n = rows * cols;
	uint64_t ids[rows];
	for (size_t r = 0; r < rows; r++)
		ids[r] = ((uint64_t)(r % 3) << 40) | (uint64_t)(r * 7919);
	float *x = new float[n], *y1 = new float[n], *y2 = new float[n];
	for (size_t i = 0; i < n; i++)
		x[i] = frand();
	struct dtf_philox_key key = dtf_philox_make_key(42, DTF_RNG_DROPOUT);
	dtf_cpu_dropout(rows, cols, 0.4f, key, ids, 0xabcd, x, y1);
	k_dropout(rows, cols, 0.4f, 1.0f / (1.0f - 0.4f), key.k[0], key.k[1],
		  ids, 0xabcd, x, y2);
	same("dropout rate 0.4", y2, y1, n);

	/* HWIO (kh*kw*c, o) -> KRSC (o, kh*kw*c): element (s, o) moves to
	 * (o, s) */
	const int S = 5 * 5 * 3, O = 7;
	float *w = new float[S * O], *t = new float[S * O], *b = new float[S * O];
	for (int i = 0; i < S * O; i++)
		w[i] = frand();
	k_transpose(S, O, w, t);
	for (int s = 0; s < S; s++)
		for (int o = 0; o < O; o++)
			b[s * O + o] = t[o * S + s];
	same("filter HWIO -> KRSC", b, w, (size_t)S * O);
	k_transpose(O, S, t, b);
	same("filter KRSC -> HWIO", b, w, (size_t)S * O);

	const int c = 37;
	const size_t r2 = 101, m = r2 * c;
	float *bias = new float[c], *a = new float[m], *e = new float[m];
	float *f1 = new float[m], *f2 = new float[m];
	for (int i = 0; i < c; i++)
		bias[i] = frand();
	for (size_t i = 0; i < m; i++)
		a[i] = frand(), e[i] = frand();
	dtf_cpu_bias_add(r2, c, a, bias, f1);
	k_bias_add(m, c, a, bias, f2);
	same("bias_add", f2, f1, m);
	dtf_cpu_relu_grad(m, e, a, f1);
	k_relu_grad(m, e, a, f2);
	same("relu_grad", f2, f1, m);

	const size_t R = 50;
	const int C = 10;
	float *l = new float[R * C], *g1 = new float[R * C], *g2 = new float[R * C];
	int32_t lab[R];
	for (size_t i = 0; i < R * C; i++)
		l[i] = frand() * 4;
	for (size_t r = 0; r < R; r++)
		lab[r] = (int32_t)(r * 7 % C);
	dtf_cpu_sparse_softmax_xent_grad(R, C, l, lab, 45, 1.0f / 64, g1);
	k_xent_grad(R, C, l, lab, 45, 1.0f / 64, g2);
	same("softmax cross-entropy grad (host libm on both sides)", g2, g1, R * C);

	/* optimizer.c's formulas */
	float *p1 = new float[m], *p2 = new float[m], *m1 = new float[m];
	float *m2 = new float[m], *v1 = new float[m], *v2 = new float[m];
	for (size_t i = 0; i < m; i++)
		p1[i] = p2[i] = frand(), m1[i] = m2[i] = v1[i] = v2[i] = 0;
	for (int it = 1; it <= 3; it++) {
		float st = (float)(0.01 * sqrt(1.0 - pow(0.999, it)) /
				   (1.0 - pow(0.9, it)));
		for (size_t i = 0; i < m; i++) {
			m1[i] = 0.9f * m1[i] + (1.0f - 0.9f) * e[i];
			v1[i] = 0.999f * v1[i] + (1.0f - 0.999f) * e[i] * e[i];
			p1[i] -= st * m1[i] / (sqrtf(v1[i]) + 1e-7f);
		}
		k_adam(m, p2, e, m2, v2, st, 0.9f, 0.999f, 1e-7f);
	}
	same("adam", p2, p1, m);
	for (size_t i = 0; i < m; i++) {
		v1[i] = 0.9f * 0 - 0.01f * e[i];
		p1[i] += 0.9f * v1[i] - 0.01f * e[i];
		v2[i] = 0;
	}
	k_momentum(m, p2, e, v2, 0.01f, 0.9f, 1);
	same("sgd nesterov", p2, p1, m);
	for (float *q : {x, y1, y2, w, t, b, bias, a, e, f1, f2, l, g1, g2, p1,
			 p2, m1, m2, v1, v2})
		delete[] q;
	/* layer_norm and its gradients: the CPU's double arithmetic */
	{
		const size_t R = 37;
		const int Cn = 45;
		const float eps = 1e-3f;
		float *lx = new float[R * Cn], *ldy = new float[R * Cn];
		float *lg = new float[Cn], *lb = new float[Cn];
		float *o1 = new float[R * Cn], *o2 = new float[R * Cn];
		float *g1 = new float[Cn], *g2 = new float[Cn];
		double *st = new double[2 * R];
		for (size_t i = 0; i < R * Cn; i++)
			lx[i] = frand() * 3 + 0.5f, ldy[i] = frand();
		for (int j = 0; j < Cn; j++)
			lg[j] = 1 + frand() / 4, lb[j] = frand();
		dtf_cpu_layer_norm(R, Cn, lx, lg, lb, eps, o1);
		k_layer_norm(R, Cn, lx, lg, lb, eps, o2);
		same("layer_norm", o2, o1, R * Cn);
		dtf_cpu_layer_norm_grad_input(R, Cn, lx, lg, ldy, eps, o1);
		k_layer_norm_grad_input(R, Cn, lx, lg, ldy, eps, o2);
		same("layer_norm_grad_input", o2, o1, R * Cn);
		dtf_cpu_layer_norm_grad_gamma(R, Cn, lx, ldy, eps, g1);
		k_layer_norm_stats(R, Cn, lx, eps, st);
		k_layer_norm_gamma(R, Cn, lx, ldy, st, g2);
		same("layer_norm_grad_gamma", g2, g1, (size_t)Cn);
		for (float *q : {lx, ldy, lg, lb, o1, o2, g1, g2})
			delete[] q;
		delete[] st;
	}

	/* gelu, both forms, and their gradients (host libm on both sides) */
	for (int approx = 0; approx < 2; approx++) {
		const size_t ng = 4001;
		float *gx = new float[ng], *gd = new float[ng];
		float *q1 = new float[ng], *q2 = new float[ng];
		for (size_t i = 0; i < ng; i++)
			gx[i] = frand() * 6, gd[i] = frand();
		dtf_cpu_gelu(ng, approx, gx, q1);
		k_gelu(ng, approx, gx, q2);
		same(approx ? "gelu (tanh)" : "gelu (erf)", q2, q1, ng);
		dtf_cpu_gelu_grad(ng, approx, gd, gx, q1);
		k_gelu_grad(ng, approx, gd, gx, q2);
		same(approx ? "gelu_grad (tanh)" : "gelu_grad (erf)", q2, q1, ng);
		for (float *q : {gx, gd, q1, q2})
			delete[] q;
	}

	/* embedding: a gather, and the scatter-add in position order */
	{
		const size_t np = 301;
		const int V = 11, Dm = 13;
		int32_t ids[np];
		for (size_t p = 0; p < np; p++)
			ids[p] = (int32_t)((p * 7 + p / 5) % V);
		ids[9] = -1, ids[200] = V;
		float *tab = new float[V * Dm], *gy = new float[np * Dm];
		float *e1 = new float[np * Dm], *e2 = new float[np * Dm];
		float *t1 = new float[V * Dm], *t2 = new float[V * Dm];
		for (int i = 0; i < V * Dm; i++)
			tab[i] = frand();
		for (size_t i = 0; i < np * Dm; i++)
			gy[i] = frand();
		dtf_cpu_embedding(np, V, Dm, ids, tab, e1);
		k_embedding(np, V, Dm, ids, tab, e2);
		size_t bad = np * Dm;
		for (size_t i = 0; i < np * Dm && bad == np * Dm; i++)
			if (memcmp(&e1[i], &e2[i], 4) != 0 &&
			    !(isnan(e1[i]) && isnan(e2[i])))
				bad = i; /* NaN rows of bad ids: both NaN */
		if (bad < np * Dm) {
			printf("FAIL embedding[%zu]\n", bad);
			failures++;
		} else {
			printf("ok   embedding (%zu values, 2 rows of bad ids "
			       "NaN)\n", np * Dm);
		}
		dtf_cpu_embedding_grad(np, V, Dm, gy, ids, t1);
		k_embedding_grad(np, V, Dm, gy, ids, t2);
		same("embedding_grad", t2, t1, (size_t)V * Dm);
		for (float *q : {tab, gy, e1, e2, t1, t2})
			delete[] q;
	}

	/* causal self-attention and its gradient: float sums and expf beside
	 * the CPU's double arithmetic (a wrong or missing term is ~1e-2) */
	{
		const int B = 2, T = 19, Cn = 24, H = 3;
		size_t nq = (size_t)B * T * 3 * Cn, ny = (size_t)B * T * Cn;
		float *q = new float[nq], *ady = new float[ny];
		float *y1 = new float[ny], *y2 = new float[ny];
		float *d1 = new float[nq], *d2 = new float[nq];
		float *st = new float[3 * (size_t)B * T * H];
		for (size_t i = 0; i < nq; i++)
			q[i] = frand();
		for (size_t i = 0; i < ny; i++)
			ady[i] = frand();
		dtf_cpu_causal_self_attention(B, T, Cn, H, q, y1);
		k_attn_fwd(B, T, Cn, H, q, y2);
		close("causal_self_attention", y2, y1, ny, 1e-5, 1e-4);
		dtf_cpu_causal_self_attention_grad(B, T, Cn, H, q, ady, d1);
		k_attn_bwd_q(B, T, Cn, H, q, ady, d2, st);
		k_attn_bwd_kv(B, T, Cn, H, q, ady, st, d2);
		close("causal_self_attention_grad", d2, d1, nq, 1e-5, 1e-4);
		for (float *p : {q, ady, y1, y2, d1, d2, st})
			delete[] p;
	}

	printf("%s\n", failures ? "FAILED" : "all equal");
	return failures ? 1 : 0;
}
