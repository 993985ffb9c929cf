/*
 * loss.c - the losses (sparse and dense softmax cross-entropy, sigmoid
 * cross-entropy, mean squared error), their gradients, and the accuracy
 * counts (argmax, TF's in_top_k, binary).
 *
 * Design: per row, subtract the maximum before exponentiating (log-sum-exp),
 * and do the row's arithmetic in double: rows are short (classes ~ 10-1000),
 * so double costs nothing measurable and keeps the loss exact enough for
 * finite-difference checks and for logits of magnitude ~1e4.  Rows at or
 * past `valid` (padding of a short batch) get loss 0 and gradient 0.
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <string.h>

/* max and log(sum(exp(l - max))) of one row. */
static void row_lse(int classes, const float *l, double *max, double *lse)
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

double dtf_cpu_sparse_softmax_xent(size_t rows, int classes,
				   const float *logits, const int32_t *labels,
				   size_t valid, float *loss)
{
	/* logits (rows, classes); labels (rows); loss (rows) or NULL */
	double total = 0.0;
	for (size_t r = 0; r < rows; r++) {
		double li = 0.0;
		if (r < valid) {
			const float *l = logits + r * (size_t)classes;
			int32_t y = labels[r];
			if (y < 0 || y >= classes || classes <= 0) {
				li = NAN;
			} else {
				double m, lse;
				row_lse(classes, l, &m, &lse);
				/* -log softmax[y] = lse + m - l[y] */
				li = (m - l[y]) + lse;
			}
			total += li;
		}
		if (loss)
			loss[r] = (float)li;
	}
	return total;
}

void dtf_cpu_sparse_softmax_xent_grad(size_t rows, int classes,
				      const float *logits,
				      const int32_t *labels, size_t valid,
				      float scale, float *dlogits)
{
	/* logits, dlogits (rows, classes); labels (rows) */
	for (size_t r = 0; r < rows; r++) {
		const float *l = logits + r * (size_t)classes;
		float *d = dlogits + r * (size_t)classes;
		if (r >= valid) {
			memset(d, 0, (size_t)classes * sizeof *d);
			continue;
		}
		int32_t y = labels[r];
		if (y < 0 || y >= classes) {
			/* Matches the NaN loss: a bad label is visible, not
			 * silently trained on. */
			for (int j = 0; j < classes; j++)
				d[j] = NAN;
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

/* Index of the first maximum of v, NaNs skipped; -1 when there is none
 * (so a row of NaN logits is never correct). */
static int argmax(int classes, const float *v)
{
	int best = -1;
	for (int j = 0; j < classes; j++)
		if (!isnan(v[j]) && (best < 0 || v[j] > v[best]))
			best = j;
	return best;
}

size_t dtf_cpu_count_correct(size_t rows, int classes, const float *logits,
			     const int32_t *labels, size_t valid)
{
	size_t n = rows < valid ? rows : valid, correct = 0;
	for (size_t r = 0; r < n; r++) {
		correct += argmax(classes, logits + r * (size_t)classes) ==
			   labels[r];
	}
	return correct;
}

/* ---- top-k and one-hot accuracy ---------------------------------------- */

/* 1 when fewer than k logits are strictly greater than l[y] (TF's
 * in_top_k: ties at the k-th place all count). */
static int in_top_k(int classes, const float *l, int y, int k)
{
	if (y < 0 || y >= classes || !isfinite(l[y]))
		return 0;
	int greater = 0;
	for (int j = 0; j < classes; j++)
		greater += l[j] > l[y];
	return greater < k;
}


size_t dtf_cpu_count_in_top_k(size_t rows, int classes, const float *logits,
			      const int32_t *labels, size_t valid, int k)
{
	size_t n = rows < valid ? rows : valid, correct = 0;
	for (size_t r = 0; r < n; r++)
		correct += in_top_k(classes, logits + r * (size_t)classes,
				    labels[r], k);
	return correct;
}

size_t dtf_cpu_count_in_top_k_onehot(size_t rows, int classes,
				     const float *logits, const float *labels,
				     size_t valid, int k)
{
	size_t n = rows < valid ? rows : valid, correct = 0;
	if (classes <= 0)
		return 0;
	for (size_t r = 0; r < n; r++) {
		int y = argmax(classes, labels + r * (size_t)classes);
		correct += in_top_k(classes, logits + r * (size_t)classes, y, k);
	}
	return correct;
}

size_t dtf_cpu_count_correct_onehot(size_t rows, int classes,
				    const float *logits, const float *labels,
				    size_t valid)
{
	size_t n = rows < valid ? rows : valid, correct = 0;
	if (classes <= 0)
		return 0;
	for (size_t r = 0; r < n; r++)
		correct += argmax(classes, logits + r * (size_t)classes) ==
			   argmax(classes, labels + r * (size_t)classes);
	return correct;
}

double dtf_cpu_binary_accuracy_sum(size_t rows, size_t cols,
				   const float *logits, const float *labels,
				   size_t valid)
{
	size_t n = rows < valid ? rows : valid;
	double total = 0.0;
	if (cols == 0)
		return 0.0;
	for (size_t r = 0; r < n; r++) {
		size_t hits = 0;
		for (size_t j = 0; j < cols; j++) {
			size_t i = r * cols + j;
			hits += (logits[i] > 0.0f) == (labels[i] > 0.5f);
		}
		total += (double)hits / (double)cols;
	}
	return total;
}

/* ---- softmax cross-entropy with float labels --------------------------- */

double dtf_cpu_softmax_xent(size_t rows, int classes, const float *logits,
			    const float *labels, float label_smoothing,
			    size_t valid, float *loss)
{
	/* logits, labels (rows, classes); loss (rows) or NULL */
	const double ls = label_smoothing, off = classes > 0 ? ls / classes : 0;
	double total = 0.0;
	for (size_t r = 0; r < rows; r++) {
		double li = 0.0;
		if (r < valid && classes > 0) {
			const float *l = logits + r * (size_t)classes;
			const float *t = labels + r * (size_t)classes;
			double m, lse;
			row_lse(classes, l, &m, &lse);
			/* -sum t_j (l_j - m - lse) */
			for (int j = 0; j < classes; j++) {
				double tj = t[j] * (1.0 - ls) + off;
				li -= tj * ((double)l[j] - m - lse);
			}
			total += li;
		}
		if (loss)
			loss[r] = (float)li;
	}
	return total;
}

void dtf_cpu_softmax_xent_grad(size_t rows, int classes, const float *logits,
			       const float *labels, float label_smoothing,
			       size_t valid, float scale, float *dlogits)
{
	const double ls = label_smoothing, off = classes > 0 ? ls / classes : 0;
	for (size_t r = 0; r < rows; r++) {
		const float *l = logits + r * (size_t)classes;
		const float *t = labels + r * (size_t)classes;
		float *d = dlogits + r * (size_t)classes;
		if (r >= valid || classes <= 0) {
			memset(d, 0, (size_t)(classes > 0 ? classes : 0) * sizeof *d);
			continue;
		}
		double m, lse, tsum = 0.0;
		row_lse(classes, l, &m, &lse);
		for (int j = 0; j < classes; j++)
			tsum += t[j] * (1.0 - ls) + off;
		for (int j = 0; j < classes; j++) {
			double p = exp((double)l[j] - m - lse);
			double tj = t[j] * (1.0 - ls) + off;
			d[j] = (float)(scale * (p * tsum - tj));
		}
	}
}

/* ---- sigmoid cross-entropy and mean squared error ---------------------- */

double dtf_cpu_sigmoid_xent(size_t rows, size_t cols, const float *logits,
			    const float *labels, size_t valid, float *loss)
{
	/* logits, labels (rows, cols); loss (rows) or NULL */
	double total = 0.0;
	for (size_t r = 0; r < rows; r++) {
		double li = 0.0;
		if (r < valid && cols > 0) {
			for (size_t j = 0; j < cols; j++) {
				double x = logits[r * cols + j], z = labels[r * cols + j];
				li += (x > 0.0 ? x : 0.0) - x * z + log1p(exp(-fabs(x)));
			}
			li /= (double)cols;
			total += li;
		}
		if (loss)
			loss[r] = (float)li;
	}
	return total;
}

void dtf_cpu_sigmoid_xent_grad(size_t rows, size_t cols, const float *logits,
			       const float *labels, size_t valid, float scale,
			       float *dlogits)
{
	const double s = cols ? (double)scale / (double)cols : 0.0;
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++) {
			size_t i = r * cols + j;
			if (r >= valid) {
				dlogits[i] = 0.0f;
				continue;
			}
			double x = logits[i];
			double p = x >= 0.0 ? 1.0 / (1.0 + exp(-x))
					    : exp(x) / (1.0 + exp(x));
			dlogits[i] = (float)(s * (p - labels[i]));
		}
}

double dtf_cpu_mean_squared_error(size_t rows, size_t cols, const float *pred,
				  const float *labels, size_t valid,
				  float *loss)
{
	/* pred, labels (rows, cols); loss (rows) or NULL */
	double total = 0.0;
	for (size_t r = 0; r < rows; r++) {
		double li = 0.0;
		if (r < valid && cols > 0) {
			for (size_t j = 0; j < cols; j++) {
				double d = (double)pred[r * cols + j] - labels[r * cols + j];
				li += d * d;
			}
			li /= (double)cols;
			total += li;
		}
		if (loss)
			loss[r] = (float)li;
	}
	return total;
}

void dtf_cpu_mean_squared_error_grad(size_t rows, size_t cols,
				     const float *pred, const float *labels,
				     size_t valid, float scale, float *dpred)
{
	const double s = cols ? 2.0 * (double)scale / (double)cols : 0.0;
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++) {
			size_t i = r * cols + j;
			dpred[i] = r < valid
					   ? (float)(s * ((double)pred[i] - labels[i]))
					   : 0.0f;
		}
}
