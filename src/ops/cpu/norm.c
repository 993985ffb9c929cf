/*
 * norm.c - batch normalization and layer normalization, forward and
 * backward, float32, channels last.
 *
 * Design: statistics in double, two passes (mean, then the sum of squared
 * deviations), so the variance does not cancel for inputs with a large
 * mean.  Batch norm walks channels in chunks of CHUNK with the chunk's
 * accumulators on the stack (no workspace, no allocation) and reads each
 * row's chunk contiguously.  The backward passes recompute the batch (or
 * row) statistics from x instead of saving them in the forward pass: one
 * extra read of x, and the forward node stays a plain one-output op.
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <string.h>

#define CHUNK 64

/* mean and biased variance of columns [c0, c0+cn) of x (rows, c). */
static void column_stats(size_t rows, int c, int c0, int cn, const float *x,
			 double *mean, double *var)
{
	for (int t = 0; t < cn; t++)
		mean[t] = var[t] = 0.0;
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c + c0;
		for (int t = 0; t < cn; t++)
			mean[t] += xr[t];
	}
	for (int t = 0; t < cn; t++)
		mean[t] = rows ? mean[t] / (double)rows : 0.0;
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c + c0;
		for (int t = 0; t < cn; t++) {
			double d = xr[t] - mean[t];
			var[t] += d * d;
		}
	}
	for (int t = 0; t < cn; t++)
		var[t] = rows ? var[t] / (double)rows : 0.0;
}

/* y = (x - mean) * scale + beta on columns [c0, c0+cn), in double: x*s +
 * (beta - mean*s) in float would cancel for inputs with a large mean. */
static void normalize(size_t rows, int c, int c0, int cn, const float *x,
		      const double *mean, const double *scale,
		      const float *beta, float *y)
{
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c + c0;
		float *yr = y + r * (size_t)c + c0;
		for (int t = 0; t < cn; t++)
			yr[t] = (float)(((double)xr[t] - mean[t]) * scale[t] +
					beta[c0 + t]);
	}
}

void dtf_cpu_batch_norm_train(size_t rows, int c, const float *x,
			      const float *gamma, const float *beta, float eps,
			      float momentum, float *moving_mean,
			      float *moving_var, float *y)
{
	/* x, y (rows, c); gamma, beta, moving_* (c) */
	for (int c0 = 0; c0 < c; c0 += CHUNK) {
		int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
		double mean[CHUNK], var[CHUNK], scale[CHUNK];
		column_stats(rows, c, c0, cn, x, mean, var);
		for (int t = 0; t < cn; t++)
			scale[t] = gamma[c0 + t] / sqrt(var[t] + (double)eps);
		normalize(rows, c, c0, cn, x, mean, scale, beta, y);
		if (!moving_mean || !moving_var)
			continue;
		double bessel = rows > 1 ? (double)rows / (double)(rows - 1) : 1.0;
		for (int t = 0; t < cn; t++) {
			moving_mean[c0 + t] = (float)(moving_mean[c0 + t] * (double)momentum +
						      mean[t] * (1.0 - momentum));
			moving_var[c0 + t] = (float)(moving_var[c0 + t] * (double)momentum +
						     var[t] * bessel * (1.0 - momentum));
		}
	}
}

void dtf_cpu_batch_norm_infer(size_t rows, int c, const float *x,
			      const float *gamma, const float *beta,
			      const float *mean, const float *var, float eps,
			      float *y)
{
	/* x, y (rows, c); gamma, beta, mean, var (c) */
	for (int c0 = 0; c0 < c; c0 += CHUNK) {
		int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
		double m[CHUNK], scale[CHUNK];
		for (int t = 0; t < cn; t++) {
			m[t] = mean[c0 + t];
			scale[t] = gamma[c0 + t] / sqrt((double)var[c0 + t] + (double)eps);
		}
		normalize(rows, c, c0, cn, x, m, scale, beta, y);
	}
}

/* Per channel of the chunk: sum dy and sum dy * xhat, with the batch
 * statistics of x in mean / inv. */
static void grad_sums(size_t rows, int c, int c0, int cn, const float *x,
		      const float *dy, const double *mean, const double *inv,
		      double *sdy, double *sdyx)
{
	for (int t = 0; t < cn; t++)
		sdy[t] = sdyx[t] = 0.0;
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c + c0;
		const float *gr = dy + r * (size_t)c + c0;
		for (int t = 0; t < cn; t++) {
			sdy[t] += gr[t];
			sdyx[t] += gr[t] * ((xr[t] - mean[t]) * inv[t]);
		}
	}
}

void dtf_cpu_batch_norm_grad_input(size_t rows, int c, const float *x,
				   const float *gamma, const float *dy,
				   float eps, float *dx)
{
	/* x, dy, dx (rows, c); gamma (c) */
	for (int c0 = 0; c0 < c; c0 += CHUNK) {
		int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
		double mean[CHUNK], var[CHUNK], inv[CHUNK], sdy[CHUNK], sdyx[CHUNK];
		column_stats(rows, c, c0, cn, x, mean, var);
		for (int t = 0; t < cn; t++)
			inv[t] = 1.0 / sqrt(var[t] + (double)eps);
		grad_sums(rows, c, c0, cn, x, dy, mean, inv, sdy, sdyx);
		double n = rows ? (double)rows : 1.0;
		for (size_t r = 0; r < rows; r++) {
			const float *xr = x + r * (size_t)c + c0;
			const float *gr = dy + r * (size_t)c + c0;
			float *dr = dx + r * (size_t)c + c0;
			for (int t = 0; t < cn; t++) {
				double xhat = (xr[t] - mean[t]) * inv[t];
				dr[t] = (float)(gamma[c0 + t] * inv[t] *
						(gr[t] - sdy[t] / n - xhat * sdyx[t] / n));
			}
		}
	}
}

void dtf_cpu_batch_norm_grad_gamma(size_t rows, int c, const float *x,
				   const float *dy, float eps, float *dgamma)
{
	/* x, dy (rows, c); dgamma (c) */
	for (int c0 = 0; c0 < c; c0 += CHUNK) {
		int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
		double mean[CHUNK], var[CHUNK], inv[CHUNK], sdy[CHUNK], sdyx[CHUNK];
		column_stats(rows, c, c0, cn, x, mean, var);
		for (int t = 0; t < cn; t++)
			inv[t] = 1.0 / sqrt(var[t] + (double)eps);
		grad_sums(rows, c, c0, cn, x, dy, mean, inv, sdy, sdyx);
		for (int t = 0; t < cn; t++)
			dgamma[c0 + t] = (float)sdyx[t];
	}
}

/* mean and 1 / sqrt(biased variance + eps) of one row of c floats. */
static void row_stats(int c, const float *x, float eps, double *mean,
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

void dtf_cpu_layer_norm(size_t rows, int c, const float *x,
			const float *gamma, const float *beta, float eps,
			float *y)
{
	/* x, y (rows, c); gamma, beta (c) */
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c;
		float *yr = y + r * (size_t)c;
		double m, inv;
		row_stats(c, xr, eps, &m, &inv);
		for (int j = 0; j < c; j++)
			yr[j] = (float)(((double)xr[j] - m) * inv * gamma[j] + beta[j]);
	}
}

void dtf_cpu_layer_norm_grad_input(size_t rows, int c, const float *x,
				   const float *gamma, const float *dy,
				   float eps, float *dx)
{
	/* x, dy, dx (rows, c); gamma (c) */
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c;
		const float *gr = dy + r * (size_t)c;
		float *dr = dx + r * (size_t)c;
		double m, inv, sg = 0.0, sgx = 0.0;
		row_stats(c, xr, eps, &m, &inv);
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

void dtf_cpu_layer_norm_grad_gamma(size_t rows, int c, const float *x,
				   const float *dy, float eps, float *dgamma)
{
	/* x, dy (rows, c); dgamma (c) */
	for (int c0 = 0; c0 < c; c0 += CHUNK) {
		int cn = c - c0 < CHUNK ? c - c0 : CHUNK;
		double acc[CHUNK] = {0};
		for (size_t r = 0; r < rows; r++) {
			const float *xr = x + r * (size_t)c;
			const float *gr = dy + r * (size_t)c + c0;
			double m, inv;
			row_stats(c, xr, eps, &m, &inv);
			for (int t = 0; t < cn; t++)
				acc[t] += gr[t] * (((double)xr[c0 + t] - m) * inv);
		}
		for (int t = 0; t < cn; t++)
			dgamma[c0 + t] = (float)acc[t];
	}
}
