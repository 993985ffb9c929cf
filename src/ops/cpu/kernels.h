/*
 * kernels.h - CPU reference kernels, float32, NHWC (TensorFlow's default).
 *
 * These are the oracle for every fast path (DESIGN.md, STYLE.md): plain,
 * readable, and exact enough for finite-difference gradient checks.  The
 * heavy ones (conv2d, matmul) are im2col + OpenBLAS sgemm.  Kernels never
 * allocate and never parse config: the caller passes every buffer, including
 * workspace sized by the *_workspace() functions.  All pointers are to
 * contiguous row-major float32 arrays unless said otherwise; outputs are
 * written (not accumulated into) unless said otherwise.  Kernels do not
 * fail: shapes were checked when the graph was built.
 */
#ifndef DTF_OPS_CPU_KERNELS_H
#define DTF_OPS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

/*
 * Geometry of a 2-D convolution or pooling window, TensorFlow semantics.
 * Input x: (n, h, w, c).  Filter (conv2d): (kh, kw, c, o), TF's HWIO layout.
 * Output y: (n, oh, ow, o) for conv2d, (n, oh, ow, c) for pooling.
 * padding "same": oh = ceil(h / stride_h), pad_total = max((oh-1)*stride_h +
 * (kh-1)*dilation_h + 1 - h, 0), pad_top = pad_total / 2 (the extra row goes
 * at the bottom, as in TF).  "valid": oh = ceil((h - (kh-1)*dil - 1 + 1) /
 * stride_h), no padding.  Fill it with dtf_window_geom().
 */
struct dtf_window_geom {
	int n, h, w, c;       /* input */
	int kh, kw, o;        /* window / filter; o unused by pooling */
	int stride_h, stride_w;
	int dilation_h, dilation_w;
	int pad_top, pad_left; /* padding before; padding after is implied */
	int oh, ow;            /* output spatial size */
};

enum dtf_padding { DTF_PAD_VALID = 0, DTF_PAD_SAME = 1 };

/* Fill g->oh, ow, pad_top, pad_left from the other fields and `padding`.
 * Returns 0, or -1 when the output would be empty (window larger than
 * input with valid padding). */
int dtf_window_geom_finish(struct dtf_window_geom *g, enum dtf_padding padding);

/* ---- conv2d: y = conv(x, w), im2col + sgemm --------------------------- */

/* Floats of workspace the conv2d kernels need for one call (the im2col
 * matrix of one image or of a block of images). */
size_t dtf_cpu_conv2d_workspace(const struct dtf_window_geom *g);

/* y (n, oh, ow, o) = x (n, h, w, c) conv w (kh, kw, c, o). */
void dtf_cpu_conv2d(const struct dtf_window_geom *g, const float *x,
		    const float *w, float *y, float *ws);

/* dx (n, h, w, c) = gradient of the loss w.r.t. x given dy (n, oh, ow, o);
 * TF's Conv2DBackpropInput. */
void dtf_cpu_conv2d_backprop_input(const struct dtf_window_geom *g,
				   const float *dy, const float *w, float *dx,
				   float *ws);

/* dw (kh, kw, c, o) = gradient w.r.t. the filter; TF's
 * Conv2DBackpropFilter. */
void dtf_cpu_conv2d_backprop_filter(const struct dtf_window_geom *g,
				    const float *x, const float *dy, float *dw,
				    float *ws);

/* ---- pooling ----------------------------------------------------------- */

/* y (n, oh, ow, c) = max over each window of x (n, h, w, c); padded cells
 * never win (TF's MaxPool). */
void dtf_cpu_max_pool2d(const struct dtf_window_geom *g, const float *x,
			float *y);

/* dx (n, h, w, c) = dy routed to the first maximum of each window of x
 * (TF's MaxPoolGrad; ties go to the first in row-major window order). */
void dtf_cpu_max_pool2d_grad(const struct dtf_window_geom *g, const float *x,
			     const float *dy, float *dx);

/* ---- dense ------------------------------------------------------------- */

/* c (m, n) = op(a) op(b); op(a) is (m, k): a is (m, k), or (k, m) when
 * trans_a; op(b) is (k, n): b is (k, n), or (n, k) when trans_b.  sgemm. */
void dtf_cpu_matmul(int m, int n, int k, const float *a, int trans_a,
		    const float *b, int trans_b, float *c);

/* y (rows, c) = x (rows, c) + bias (c).  In place (y == x) allowed. */
void dtf_cpu_bias_add(size_t rows, int c, const float *x, const float *bias,
		      float *y);

/* db (c) = sum over rows of dy (rows, c); TF's BiasAddGrad. */
void dtf_cpu_bias_add_grad(size_t rows, int c, const float *dy, float *db);

/* ---- activations ------------------------------------------------------- */

/* y = max(x, 0), n elements; in place allowed. */
void dtf_cpu_relu(size_t n, const float *x, float *y);

/* dx = dy where y > 0, else 0 (y is the relu output); TF's ReluGrad. */
void dtf_cpu_relu_grad(size_t n, const float *dy, const float *y, float *dx);

/* ---- dropout ----------------------------------------------------------- */

/*
 * Inverted dropout: y = x / (1 - rate) where kept, 0 where dropped.
 * x and y are (rows, cols).  Row r belongs to the example with id
 * example_id[r]; its mask is drawn from the Philox stream
 * (key, a = (uint32)example_id[r], b = example_id[r] >> 32, c = salt),
 * element j kept iff u01(word j) >= rate.  Keying by example id rather than
 * by rank or position makes 1 rank and N ranks drop the same units.
 * `salt` separates layers and steps (the caller mixes them in).
 */
void dtf_cpu_dropout(size_t rows, size_t cols, float rate,
		     struct dtf_philox_key key, const uint64_t *example_id,
		     uint32_t salt, const float *x, float *y);

/* dx = dy / (1 - rate) where the same mask kept, else 0. */
void dtf_cpu_dropout_grad(size_t rows, size_t cols, float rate,
			  struct dtf_philox_key key, const uint64_t *example_id,
			  uint32_t salt, const float *dy, float *dx);

/* ---- loss -------------------------------------------------------------- */

/*
 * Sparse softmax cross-entropy, numerically stable (max-subtracted
 * log-sum-exp), TF's SparseSoftmaxCrossEntropyWithLogits.
 * logits (rows, classes); labels (rows), int32 in [0, classes).
 * Rows r >= valid are ignored (a short batch).  loss[r] is the per-example
 * loss (may be NULL); returns the sum over valid rows, in double.
 * A label outside [0, classes) contributes NaN (the caller validates labels
 * when decoding, this keeps the kernel total).
 */
double dtf_cpu_sparse_softmax_xent(size_t rows, int classes,
				   const float *logits, const int32_t *labels,
				   size_t valid, float *loss);

/* dlogits = scale * (softmax(logits) - onehot(label)) for rows < valid,
 * 0 for the rest. */
void dtf_cpu_sparse_softmax_xent_grad(size_t rows, int classes,
				      const float *logits,
				      const int32_t *labels, size_t valid,
				      float scale, float *dlogits);

/* Number of valid rows whose argmax of logits equals the label (first
 * maximum wins). */
size_t dtf_cpu_count_correct(size_t rows, int classes, const float *logits,
			     const int32_t *labels, size_t valid);

/* ---- elementwise helpers ----------------------------------------------- */

/* y += x, n elements (gradient accumulation). */
void dtf_cpu_add_inplace(size_t n, const float *x, float *y);

#endif
