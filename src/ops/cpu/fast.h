/*
 * fast.h - fast CPU paths: a thread pool and fused, threaded kernels.
 *
 * The reference kernels (kernels.h) stay the oracle; every function here is
 * tested against them op by op (tests/test_fast.c) and computes the same
 * mathematical result up to float rounding (sums are split across threads
 * and blocks in a different order).  Same conventions as kernels.h: float32,
 * NHWC, filter HWIO, row-major, caller-owned buffers, never allocate, never
 * fail.  Work is split statically (by images, rows or columns) over the
 * pool's threads, so a given thread count always gives the same bits.
 *
 * Threads: a process uses one pool of T threads (the caller plus T - 1
 * workers) and OpenBLAS runs single-threaded inside each of them; each
 * thread calls sgemm on its own slice.  Mixing OpenBLAS's own threads with
 * ours would leave OpenBLAS's spinning workers competing with ours for the
 * same cores.  A NULL pool means one thread: everything runs in the caller.
 *
 * Vector code: plain C loops compiled for AVX-512, AVX2+FMA and baseline
 * x86-64 (GCC target_clones, chosen once at load time by the CPU), so a
 * generic build still runs the wide paths.
 */
#ifndef DTF_OPS_CPU_FAST_H
#define DTF_OPS_CPU_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/kernels.h"

/* ---- thread pool --------------------------------------------------------- */

struct dtf_pool;

/* fn runs once per thread with tid in [0, nthreads). */
typedef void (*dtf_pool_fn)(void *arg, int tid, int nthreads);

/*
 * A pool of `nthreads` threads: the caller of dtf_pool_run() is thread 0,
 * nthreads - 1 workers are started here and wait (spinning briefly, then
 * asleep) for work.  Workers inherit the caller's floating-point
 * environment (FTZ/DAZ).  nthreads <= 1 makes a pool with no workers.
 * Errors: DTF_ERR_NOMEM, DTF_ERR_IO (a thread could not be started).
 */
int dtf_pool_new(int nthreads, struct dtf_pool **out);
/* Stop and join the workers; NULL is a no-op. */
void dtf_pool_free(struct dtf_pool *p);
/* Threads in the pool (1 for NULL). */
int dtf_pool_size(const struct dtf_pool *p);
/* Run fn on every thread and return when all have finished.  Not
 * reentrant: fn must not call dtf_pool_run on the same pool. */
void dtf_pool_run(struct dtf_pool *p, dtf_pool_fn fn, void *arg);

/* [*lo, *hi) of `n` items for thread tid of nt, in multiples of `align`
 * (the last thread takes the remainder). */
void dtf_pool_split(size_t n, size_t align, int tid, int nt, size_t *lo,
		    size_t *hi);

/* ---- conv2d ---------------------------------------------------------------- */

/* Floats of workspace the fast conv2d kernels need with `nthreads`
 * threads (per-thread im2col blocks, padded images or padded dy, partial
 * filter gradients; a transposed filter). */
size_t dtf_fast_conv2d_workspace(const struct dtf_window_geom *g,
				 int nthreads);

/* y (n, oh, ow, o) = act(conv(x, w) + bias): bias (o) may be NULL (none),
 * relu != 0 applies max(., 0).  An AVX-512 direct kernel where the CPU has
 * it and o % 32 == 0; otherwise a direct kernel where the im2col matrix is
 * narrow (few input channels), im2col + sgemm per image block elsewhere;
 * bias and relu are applied to each block while it is in cache.  The
 * gradients below choose the same way (fast_conv.c). */
void dtf_fast_conv2d(struct dtf_pool *p, const struct dtf_window_geom *g,
		     const float *x, const float *w, const float *bias,
		     int relu, float *y, float *ws);

/* dtf_fast_conv2d, then q = max_pool2d(pg, y) image by image while each
 * image of y is still in cache (y is written as well).  The pooling
 * windows must tile (dtf_fast_pool_tiles()) and pg must describe y
 * (pg->n == g->n, pg->h/w/c == g->oh/ow/o). */
void dtf_fast_conv2d_pool(struct dtf_pool *p, const struct dtf_window_geom *g,
			  const float *x, const float *w, const float *bias,
			  int relu, float *y, const struct dtf_window_geom *pg,
			  float *q, float *ws);

/* dx (n, h, w, c) from dy (n, oh, ow, o) and w: Conv2DBackpropInput. */
void dtf_fast_conv2d_backprop_input(struct dtf_pool *p,
				    const struct dtf_window_geom *g,
				    const float *dy, const float *w, float *dx,
				    float *ws);

/* dw (kh, kw, c, o) from x and dy: Conv2DBackpropFilter.  Each thread sums
 * its images into its own partial, then the partials are added. */
void dtf_fast_conv2d_backprop_filter(struct dtf_pool *p,
				     const struct dtf_window_geom *g,
				     const float *x, const float *dy, float *dw,
				     float *ws);

/* ---- dense --------------------------------------------------------------- */

/* dtf_cpu_matmul split over the pool: the larger of m and n is cut into
 * one slice per thread, each a single-threaded sgemm; except, where
 * dtf_cpu_isa() is AVX-512, a dense layer's products at a batch of at
 * most 256: a b^T with m (the batch) a multiple of 16 runs as
 * c^T = b a^T, a^T b with k (the batch) <= 256 and n a multiple of 16
 * and a b with m <= 256 and n a multiple of 16 directly, in the unpacked
 * register-tile product of gemm_tile.h, rows or columns split across
 * threads.  ws holds
 * dtf_fast_matmul_workspace() floats (may be NULL when that is 0). */
void dtf_fast_matmul(struct dtf_pool *p, int m, int n, int k, const float *a,
		     int trans_a, const float *b, int trans_b, float *c,
		     float *ws);

/* As dtf_cpu_batch_matmul: one OpenBLAS sgemm per matrix (alpha folded
 * in), the batch split across the pool's threads. */
void dtf_fast_batch_matmul(struct dtf_pool *p, int batch, int m, int n, int k,
			   const float *a, int trans_a, const float *b,
			   int trans_b, float alpha, float *c);

/* Floats of workspace dtf_fast_matmul needs for these operands (a
 * transposed copy of a for the a b^T product on the unpacked path). */
size_t dtf_fast_matmul_workspace(int m, int n, int k, int trans_a,
				 int trans_b);

/* y (rows, c) = act(x + bias): bias may be NULL, relu != 0 applies
 * max(., 0).  In place (y == x) allowed. */
void dtf_fast_bias_act(struct dtf_pool *p, size_t rows, int c, const float *x,
		       const float *bias, int relu, float *y);

/* dx (rows, c) = dy where y > 0, else 0 (ReluGrad); when db is not NULL,
 * db (c) = column sums of dx (BiasAddGrad), in the same pass.  dx == dy
 * allowed. */
void dtf_fast_relu_grad_bias(struct dtf_pool *p, size_t rows, int c,
			     const float *dy, const float *y, float *dx,
			     float *db, float *ws);

/* Floats of workspace dtf_fast_relu_grad_bias needs (per-thread partial
 * column sums). */
size_t dtf_fast_bias_grad_workspace(int c, int nthreads);

/* ---- pooling --------------------------------------------------------------- */

/* dtf_cpu_max_pool2d over the pool (images split across threads). */
void dtf_fast_max_pool2d(struct dtf_pool *p, const struct dtf_window_geom *g,
			 const float *x, float *y);

/*
 * dx (n, h, w, c) = MaxPoolGrad(x, dy), then, when relu != 0, ReluGrad with
 * x as the relu output (dx = 0 where x <= 0), and when db is not NULL,
 * db (c) = column sums of dx: the backward of conv -> bias -> relu -> pool
 * in one pass over dx, with no separate zero fill.  Windows must tile the
 * input (dtf_fast_pool_tiles()); otherwise use the reference kernels.
 */
void dtf_fast_max_pool2d_grad(struct dtf_pool *p,
			      const struct dtf_window_geom *g, const float *x,
			      const float *dy, int relu, float *dx, float *db,
			      float *ws);

/* One thread's share of dtf_fast_max_pool2d for tiling windows
 * (dtf_fast_pool_tiles()): nb images (g->n is not read), in the calling
 * thread.  A building block for fused kernels. */
void dtf_fast_max_pool2d_images(const struct dtf_window_geom *g, size_t nb,
				const float *x, float *y);

/* One thread's share of dtf_fast_max_pool2d_grad: nb images (g->n is not
 * read) in the calling thread, sum (c) = column sums of dx over them when
 * not NULL (float within runs of 64 windows, double across runs).  A
 * building block for fused kernels. */
void dtf_fast_max_pool2d_grad_images(const struct dtf_window_geom *g,
				     size_t nb, const float *x,
				     const float *dy, int relu, float *dx,
				     float *sum);

/*
 * The backward of relu -> max pool -> (the pool input is) conv2d's output
 * in one pass per image: dx = dtf_fast_max_pool2d_grad(pg, x, dy, relu)
 * is formed one image at a time in a per-thread buffer (never stored),
 * db (pg->c) = its column sums when not NULL, and dw (kh, kw, c, o) =
 * Conv2DBackpropFilter(cx, dx) for the conv2d `cg` whose output is the
 * pool's input (cg->n == pg->n, cg->oh/ow/o == pg->h/w/c).  Saves writing
 * and re-reading dx when only the filter gradient needs it (a first
 * layer).  Pooling windows must tile (dtf_fast_pool_tiles()).
 */
void dtf_fast_pool_grad_conv2d_filter(struct dtf_pool *p,
				      const struct dtf_window_geom *pg,
				      const float *x, const float *dy, int relu,
				      float *db, const struct dtf_window_geom *cg,
				      const float *cx, float *dw, float *ws);

/* Floats of workspace dtf_fast_pool_grad_conv2d_filter needs. */
size_t dtf_fast_pool_grad_conv2d_filter_workspace(
	const struct dtf_window_geom *pg, const struct dtf_window_geom *cg,
	int nthreads);

/* 1 when pooling windows tile the input exactly: size == stride, no
 * dilation, no padding, h and w multiples of the window. */
int dtf_fast_pool_tiles(const struct dtf_window_geom *g);

/* ---- dropout ---------------------------------------------------------------- */

/* dtf_cpu_dropout (and, with dy for x, dtf_cpu_dropout_grad) over the pool:
 * the same Philox mask and the same products, so the same bits; Philox
 * blocks are computed 16 at a time in AVX-512 lanes (scalar on other
 * CPUs), rows are split across threads.  y == x allowed (each element is
 * read before it is written, by the same thread). */
void dtf_fast_dropout(struct dtf_pool *p, size_t rows, size_t cols,
		      float rate, struct dtf_philox_key key,
		      const uint64_t *example_id, uint32_t salt,
		      const float *x, float *y);

/* ---- gelu (fast_act.c) ------------------------------------------------------ */

/* dtf_cpu_gelu and dtf_cpu_gelu_grad (ops/cpu/kernels.h: n floats, x the
 * op's input, dy the incoming gradient) over the pool.  The tanh form
 * (approximate != 0) runs in AVX-512, AVX2 or NEON lanes as x / (1 +
 * exp(-2u)), exp by a float polynomial: within about 1e-6 relative (plus
 * 1e-7 absolute near zeros) of the reference, which evaluates tanh in
 * double; the erf form and the generic ISA run the reference kernels.
 * In place (y == x; dx == dy or dx == x) allowed. */
void dtf_fast_gelu(struct dtf_pool *p, size_t n, int approximate,
		   const float *x, float *y);
void dtf_fast_gelu_grad(struct dtf_pool *p, size_t n, int approximate,
			const float *dy, const float *x, float *dx);

/* ---- layer_norm (fast_act.c) ----------------------------------------------- */

/* dtf_cpu_layer_norm, dtf_cpu_layer_norm_grad_input and
 * dtf_cpu_layer_norm_grad_gamma (ops/cpu/kernels.h: rows of c floats,
 * gamma and beta c floats, eps the variance epsilon) over the pool, rows
 * split across threads.  Where c is a whole number of vectors of the ISA
 * in use, statistics and sums are float lanes (the reference: double),
 * within about 1e-5 relative of the reference; otherwise the reference
 * runs.  The gamma gradient sums each thread's rows into ws
 * (dtf_fast_layer_norm_workspace floats) and adds the threads in order:
 * the same bits for the same thread count.  In place as the references. */
size_t dtf_fast_layer_norm_workspace(int c, int nthreads);
void dtf_fast_layer_norm(struct dtf_pool *p, size_t rows, int c,
			 const float *x, const float *gamma, const float *beta,
			 float eps, float *y);
void dtf_fast_layer_norm_grad_input(struct dtf_pool *p, size_t rows, int c,
				    const float *x, const float *gamma,
				    const float *dy, float eps, float *dx);
void dtf_fast_layer_norm_grad_gamma(struct dtf_pool *p, size_t rows, int c,
				    const float *x, const float *dy, float eps,
				    float *dgamma, float *ws);

/* ---- attention (fast_attention.c) ------------------------------------------ */

/* Floats of workspace the two functions below need for time t, channels c
 * and `heads` heads on `nthreads` threads (per thread: a head's q, k, v
 * blocks, one transposed, and two score rows). */
size_t dtf_fast_attention_workspace(int t, int c, int heads, int nthreads);
/* dtf_cpu_causal_self_attention and its gradient over the pool: the
 * (example, head) pairs split across threads; vectors over keys (scores)
 * and over the head's channels (weighted sums).  Same result up to float
 * rounding (float sums, a polynomial exp within ~2 ulp); the same bits for
 * any thread count.  ws: dtf_fast_attention_workspace() floats. */
void dtf_fast_causal_self_attention(struct dtf_pool *p, int b, int t, int c,
				    int heads, const float *qkv, float *y,
				    float *ws);
void dtf_fast_causal_self_attention_grad(struct dtf_pool *p, int b, int t,
					 int c, int heads, const float *qkv,
					 const float *dy, float *dqkv, float *ws);

/* ---- optimizer ------------------------------------------------------------- */

/* Adam as dtf_optimizer_apply (train/optimizer.h), one fused pass over n
 * parameters split across the pool: m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; p -= step * m / (sqrt(v) + eps), where step is the
 * bias-corrected learning rate.  Same float operations in the same order as
 * the reference loop, so the same bits. */
void dtf_fast_adam(struct dtf_pool *p, size_t n, float *params,
		   const float *grads, float *m, float *v, float step, float b1,
		   float b2, float eps);

/* 1 when x (n) holds a NaN or an infinity, else 0: a vectorized scan
 * split over the pool (one thread below 64 Ki floats). */
int dtf_fast_nonfinite(struct dtf_pool *p, size_t n, const float *x);

/* y += x over the pool. */
void dtf_fast_add_inplace(struct dtf_pool *p, size_t n, const float *x,
			  float *y);

#endif
