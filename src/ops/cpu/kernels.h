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
#include "graph/window.h"

/* struct dtf_window_geom, enum dtf_padding and dtf_window_geom_finish()
 * are graph-level (graph/window.h): a node carries the geometry, every
 * backend reads it. */

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

/*
 * y (n, oh, ow, c) = mean over each window of x (n, h, w, c), TF's AvgPool:
 * the divisor is the number of window cells inside the input, so padded
 * cells (same or explicit padding) are excluded from the count, not
 * averaged in as zeros.
 */
void dtf_cpu_avg_pool2d(const struct dtf_window_geom *g, const float *x,
			float *y);

/* dx (n, h, w, c): each dy (n, oh, ow, c) spread evenly over the cells its
 * window covered inside the input (same divisor); TF's AvgPoolGrad. */
void dtf_cpu_avg_pool2d_grad(const struct dtf_window_geom *g, const float *dy,
			     float *dx);

/* y (n, c) = mean over the hw = h*w pixels of x (n, hw, c); Keras's
 * GlobalAveragePooling2D (NHWC, keepdims false).  Sums in double. */
void dtf_cpu_global_avg_pool(size_t n, size_t hw, int c, const float *x,
			     float *y);

/* dx (n, hw, c) = dy (n, c) / hw broadcast over the pixels. */
void dtf_cpu_global_avg_pool_grad(size_t n, size_t hw, int c,
				  const float *dy, float *dx);

/* ---- depthwise conv2d -------------------------------------------------- */

/*
 * TF's DepthwiseConv2dNative, NHWC: x (n, h, w, c), filter (kh, kw, c, m)
 * with channel multiplier m, y (n, oh, ow, c*m) where output channel
 * ci*m + q is input channel ci convolved with filter[:, :, ci, q].
 * g->o must be c*m; strides, dilation and padding as in the geometry.
 * Direct loops (no workspace); accumulation in float.
 */
void dtf_cpu_depthwise_conv2d(const struct dtf_window_geom *g, const float *x,
			      const float *w, float *y);

/* dx (n, h, w, c) from dy (n, oh, ow, c*m) and w; TF's
 * DepthwiseConv2dNativeBackpropInput. */
void dtf_cpu_depthwise_conv2d_backprop_input(const struct dtf_window_geom *g,
					     const float *dy, const float *w,
					     float *dx);

/* dw (kh, kw, c, m) from x and dy; TF's
 * DepthwiseConv2dNativeBackpropFilter. */
void dtf_cpu_depthwise_conv2d_backprop_filter(const struct dtf_window_geom *g,
					      const float *x, const float *dy,
					      float *dw);

/* ---- normalization ----------------------------------------------------- */

/*
 * Batch normalization (Ioffe & Szegedy 2015), TF's FusedBatchNormV3 with
 * is_training = true, channels last: x and y are (rows, c), rows = n*h*w
 * for NHWC or n for (n, features).  Per channel: mean and the biased
 * variance (divide by rows) over the rows, computed in double;
 * y = gamma * (x - mean) / sqrt(var + eps) + beta.
 * When moving_mean / moving_var are not NULL they are updated in place as
 * Keras's BatchNormalization does: moving = moving * momentum +
 * batch * (1 - momentum), where the batch variance fed to the moving
 * average carries Bessel's correction (var * rows / (rows - 1)), as
 * FusedBatchNormV3's batch_variance output does and so tf.keras 2's default
 * (fused) layer.  (Keras 3 and the non-fused tf.keras path feed the biased
 * variance; the two differ by the factor rows / (rows - 1).)  With rows == 1
 * the biased variance is used.
 */
void dtf_cpu_batch_norm_train(size_t rows, int c, const float *x,
			      const float *gamma, const float *beta, float eps,
			      float momentum, float *moving_mean,
			      float *moving_var, float *y);

/* Inference (is_training = false): y = gamma * (x - mean) /
 * sqrt(var + eps) + beta with the given (moving) statistics.  In place
 * (y == x) allowed. */
void dtf_cpu_batch_norm_infer(size_t rows, int c, const float *x,
			      const float *gamma, const float *beta,
			      const float *mean, const float *var, float eps,
			      float *y);

/*
 * dx (rows, c) of training-mode batch norm, recomputing the batch
 * statistics from x (nothing is saved by the forward pass):
 * dx = gamma / sqrt(var + eps) * (dy - mean(dy) - xhat * mean(dy * xhat)),
 * means over rows, per channel; TF's FusedBatchNormGradV3 (is_training).
 */
void dtf_cpu_batch_norm_grad_input(size_t rows, int c, const float *x,
				   const float *gamma, const float *dy,
				   float eps, float *dx);

/* dgamma (c) = sum over rows of dy * xhat (batch statistics of x).  The
 * beta gradient is dtf_cpu_bias_add_grad(dy). */
void dtf_cpu_batch_norm_grad_gamma(size_t rows, int c, const float *x,
				   const float *dy, float eps, float *dgamma);

/*
 * Layer normalization (Ba et al. 2016), Keras's LayerNormalization with
 * axis -1: each row of x (rows, c) is normalized by its own mean and
 * biased variance (in double), y = gamma * xhat + beta.  In place allowed.
 */
void dtf_cpu_layer_norm(size_t rows, int c, const float *x,
			const float *gamma, const float *beta, float eps,
			float *y);

/* dx (rows, c) = gamma-weighted layer norm backward per row:
 * g = dy * gamma; dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var+eps),
 * means over the row. */
void dtf_cpu_layer_norm_grad_input(size_t rows, int c, const float *x,
				   const float *gamma, const float *dy,
				   float eps, float *dx);

/* dgamma (c) = sum over rows of dy * xhat; dbeta is bias_add_grad. */
void dtf_cpu_layer_norm_grad_gamma(size_t rows, int c, const float *x,
				   const float *dy, float eps, float *dgamma);

/* ---- embedding ---------------------------------------------------------- */

/* y (n, dim) = row ids[p] of table (vocab, dim) for each of the n
 * positions (tf.nn.embedding_lookup); ids int32; an id outside [0, vocab)
 * gives a row of NaN. */
void dtf_cpu_embedding(size_t n, int vocab, int dim, const int32_t *ids,
		       const float *table, float *y);
/* dtable (vocab, dim) = sum of dy (n, dim) rows by id: zeroed, then each
 * position's row added to row ids[p] in position order (deterministic);
 * out-of-range ids add nothing. */
void dtf_cpu_embedding_grad(size_t n, int vocab, int dim, const float *dy,
			    const int32_t *ids, float *dtable);

/* ---- shape ------------------------------------------------------------- */

/* Concatenate along an axis: with outer = product of the dimensions before
 * the axis, y (outer, ia + ib) rows are a's row (ia floats) then b's row
 * (ib floats), where ia = a.shape[axis] * product of the dimensions after
 * the axis (likewise ib).  TF's ConcatV2 of two tensors. */
void dtf_cpu_concat(size_t outer, size_t ia, size_t ib, const float *a,
		    const float *b, float *y);

/* y (outer, len) = x (outer, inner)[:, begin:begin+len]; tf.slice along
 * one axis, and the gradient of concat for one of its inputs.  A copy of
 * the bytes: int32 tensors slice through it too. */
void dtf_cpu_slice_inner(size_t outer, size_t inner, size_t begin, size_t len,
			 const float *x, float *y);
/* dx (outer, inner) = 0 but dx[:, begin:begin+len] = dy (outer, len): the
 * gradient of dtf_cpu_slice_inner (TF's Pad of dy). */
void dtf_cpu_slice_grad(size_t outer, size_t inner, size_t begin, size_t len,
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

/* y = x where x > 0, alpha * x elsewhere; tf.nn.leaky_relu (its default
 * alpha is 0.2, DTF_LEAKY_RELU_ALPHA in graph/graph.h; Keras's LeakyReLU
 * layer defaults to 0.3).  In place allowed. */
void dtf_cpu_leaky_relu(size_t n, float alpha, const float *x, float *y);
/* dx = dy where x > 0, alpha * dy elsewhere (x is the input). */
void dtf_cpu_leaky_relu_grad(size_t n, float alpha, const float *dy,
			     const float *x, float *dx);

/* y = x where x > 0, alpha * (exp(x) - 1) elsewhere; Keras's ELU (alpha
 * default 1.0, which is tf.nn.elu).  In place allowed. */
void dtf_cpu_elu(size_t n, float alpha, const float *x, float *y);
/* dx = dy where x > 0, dy * alpha * exp(x) elsewhere (x is the input). */
void dtf_cpu_elu_grad(size_t n, float alpha, const float *dy, const float *x,
		      float *dx);

/* tf.nn.gelu: approximate == 0: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
 * (TF's default); approximate != 0: 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))).  In place allowed. */
void dtf_cpu_gelu(size_t n, int approximate, const float *x, float *y);
/* dx = dy * d gelu / dx at the input x, same form as the forward. */
void dtf_cpu_gelu_grad(size_t n, int approximate, const float *dy,
		       const float *x, float *dx);

/* y = tanh(x); in place allowed. */
void dtf_cpu_tanh(size_t n, const float *x, float *y);
/* dx = dy * (1 - y^2), y the output; TF's TanhGrad. */
void dtf_cpu_tanh_grad(size_t n, const float *dy, const float *y, float *dx);

/* y = 1 / (1 + exp(-x)), overflow-free for any x; in place allowed. */
void dtf_cpu_sigmoid(size_t n, const float *x, float *y);
/* dx = dy * y * (1 - y), y the output; TF's SigmoidGrad. */
void dtf_cpu_sigmoid_grad(size_t n, const float *dy, const float *y,
			  float *dx);

/* y (rows, c) = softmax over the last axis of x (max subtracted; row sums
 * in double); tf.nn.softmax.  In place allowed. */
void dtf_cpu_softmax(size_t rows, int c, const float *x, float *y);
/* dx = y * (dy - sum_j dy_j y_j) per row, y the output. */
void dtf_cpu_softmax_grad(size_t rows, int c, const float *dy, const float *y,
			  float *dx);

/* y = a * b elementwise, n elements; in place (y == a or b) allowed. */
void dtf_cpu_multiply(size_t n, const float *a, const float *b, float *y);

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

/* Elements [j0, j1) of one row of dtf_cpu_dropout, j0 a multiple of 4
 * (one Philox block per 4 elements): y[j] = x[j] * scale where kept, else
 * 0, for the row of example `id`; scale = 1 / (1 - rate), 0 < rate < 1.
 * The building block of dtf_cpu_dropout, and of the fast kernels' scalar
 * path and tails. */
void dtf_cpu_dropout_span(size_t j0, size_t j1, uint64_t id, float rate,
			  float scale, struct dtf_philox_key key, uint32_t salt,
			  const float *x, float *y);

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
 * maximum wins; NaN logits never win, so a row of NaNs is never correct).
 * Keras's sparse_categorical_accuracy. */
size_t dtf_cpu_count_correct(size_t rows, int classes, const float *logits,
			     const int32_t *labels, size_t valid);

/*
 * Number of valid rows whose label is among the k largest logits, TF's
 * in_top_k (Keras's sparse_top_k_categorical_accuracy): a row counts when
 * fewer than k logits are strictly greater than the label's logit, so
 * classes tied at the k-th place all count as in the top k.  A non-finite
 * label logit or a label outside [0, classes) never counts.
 */
size_t dtf_cpu_count_in_top_k(size_t rows, int classes, const float *logits,
			      const int32_t *labels, size_t valid, int k);

/* The same with one-hot (or smoothed) float labels (rows, classes): the
 * label of a row is the argmax of its label row (first maximum), as in
 * Keras's categorical_accuracy (k == 1 there uses argmax of the logits,
 * first maximum wins: dtf_cpu_count_correct_onehot). */
size_t dtf_cpu_count_in_top_k_onehot(size_t rows, int classes,
				     const float *logits, const float *labels,
				     size_t valid, int k);

/* Valid rows whose argmax of logits equals the argmax of the float label
 * row (first maximum wins in both); Keras's categorical_accuracy. */
size_t dtf_cpu_count_correct_onehot(size_t rows, int classes,
				    const float *logits, const float *labels,
				    size_t valid);

/* Sum over valid rows of the fraction of the row's cols elements where
 * (logit > 0) == (label > 0.5): Keras's binary_accuracy with threshold 0.5
 * on sigmoid(logit), averaged over the last axis as Keras does. */
double dtf_cpu_binary_accuracy_sum(size_t rows, size_t cols,
				   const float *logits, const float *labels,
				   size_t valid);

/*
 * Softmax cross-entropy with float labels (rows, classes), TF's
 * SoftmaxCrossEntropyWithLogits / Keras's CategoricalCrossentropy
 * (from_logits = true): loss[r] = -sum_j t_j log softmax(logits)_j with the
 * smoothed target t = labels * (1 - label_smoothing) + label_smoothing /
 * classes (Keras's label_smoothing).  Stable (log-sum-exp, double).
 * Rows r >= valid are ignored; loss may be NULL; returns the sum over valid
 * rows.
 */
double dtf_cpu_softmax_xent(size_t rows, int classes, const float *logits,
			    const float *labels, float label_smoothing,
			    size_t valid, float *loss);

/* dlogits = scale * (softmax(logits) * sum_j t_j - t) for valid rows (the
 * sum_j t_j is 1 for proper one-hot labels), 0 for the rest. */
void dtf_cpu_softmax_xent_grad(size_t rows, int classes, const float *logits,
			       const float *labels, float label_smoothing,
			       size_t valid, float scale, float *dlogits);

/*
 * Sigmoid cross-entropy from logits, elementwise as TF's
 * sigmoid_cross_entropy_with_logits in its stable form
 * max(x, 0) - x * z + log(1 + exp(-|x|)), then averaged over the cols
 * elements of each row (Keras's BinaryCrossentropy(from_logits=True) per
 * example).  logits, labels (rows, cols).  Returns the sum over valid rows.
 */
double dtf_cpu_sigmoid_xent(size_t rows, size_t cols, const float *logits,
			    const float *labels, size_t valid, float *loss);

/* dlogits = scale / cols * (sigmoid(x) - z) for valid rows, else 0. */
void dtf_cpu_sigmoid_xent_grad(size_t rows, size_t cols, const float *logits,
			       const float *labels, size_t valid, float scale,
			       float *dlogits);

/* Mean squared error per row, Keras's mean_squared_error: loss[r] =
 * mean over cols of (pred - label)^2.  Returns the sum over valid rows. */
double dtf_cpu_mean_squared_error(size_t rows, size_t cols, const float *pred,
				  const float *labels, size_t valid,
				  float *loss);

/* dpred = scale * 2 / cols * (pred - label) for valid rows, else 0. */
void dtf_cpu_mean_squared_error_grad(size_t rows, size_t cols,
				     const float *pred, const float *labels,
				     size_t valid, float scale, float *dpred);

/* ---- attention (attention.c) ------------------------------------------- */

/*
 * Multi-head causal self-attention (dtf_graph_causal_self_attention):
 * qkv (b, t, 3c) = [q | k | v], head h of each in columns h*d ..
 * (h+1)*d - 1, d = c / heads (heads divides c); y (b, t, c), head h in
 * the same columns: y_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) v_j.
 * Scores and softmax statistics in double.  No workspace.
 */
void dtf_cpu_causal_self_attention(int b, int t, int c, int heads,
				   const float *qkv, float *y);
/* dqkv (b, t, 3c) from qkv and dy (b, t, c), the probabilities recomputed
 * from qkv (nothing is saved by the forward).  dqkv is written. */
void dtf_cpu_causal_self_attention_grad(int b, int t, int c, int heads,
					const float *qkv, const float *dy,
					float *dqkv);

/* ---- elementwise helpers ----------------------------------------------- */

/* y += x, n elements (gradient accumulation). */
void dtf_cpu_add_inplace(size_t n, const float *x, float *y);

#endif
