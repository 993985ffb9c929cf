/*
 * loss.c - sparse softmax cross-entropy, its gradient, and accuracy count.
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

size_t dtf_cpu_count_correct(size_t rows, int classes, const float *logits,
			     const int32_t *labels, size_t valid)
{
	size_t n = rows < valid ? rows : valid, correct = 0;
	for (size_t r = 0; r < n; r++) {
		const float *l = logits + r * (size_t)classes;
		int best = 0;
		for (int j = 1; j < classes; j++)
			if (l[j] > l[best])
				best = j;
		correct += classes > 0 && best == labels[r];
	}
	return correct;
}
