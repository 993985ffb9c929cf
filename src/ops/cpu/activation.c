/*
 * activation.c - leaky_relu, elu, gelu, tanh, sigmoid, softmax and
 * elementwise multiply, with their gradients.
 *
 * Design: plain loops; element i reads only index i (softmax: only row r),
 * so the in-place uses kernels.h allows are safe without restrict.  Which
 * tensor a gradient reads follows TF's registry: the output y where the
 * derivative is a function of it (tanh, sigmoid, softmax), the input x
 * otherwise (leaky_relu, elu, gelu).  Transcendentals are evaluated in
 * float except where cancellation would cost accuracy (softmax sums,
 * gelu's tanh form), which use double.
 */
#include "ops/cpu/kernels.h"

#include <math.h>

void dtf_cpu_leaky_relu(size_t n, float alpha, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
}

void dtf_cpu_leaky_relu_grad(size_t n, float alpha, const float *dy,
			     const float *x, float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = x[i] > 0.0f ? dy[i] : alpha * dy[i];
}

void dtf_cpu_elu(size_t n, float alpha, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : alpha * expm1f(x[i]);
}

void dtf_cpu_elu_grad(size_t n, float alpha, const float *dy, const float *x,
		      float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * alpha * expf(x[i]);
}

#define SQRT_2_OVER_PI 0.7978845608028654
#define INV_SQRT_2 0.7071067811865476
#define INV_SQRT_2PI 0.3989422804014327
#define GELU_C 0.044715

void dtf_cpu_gelu(size_t n, int approximate, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++) {
		double v = x[i];
		if (approximate)
			y[i] = (float)(0.5 * v *
				       (1.0 + tanh(SQRT_2_OVER_PI * (v + GELU_C * v * v * v))));
		else
			y[i] = (float)(0.5 * v * (1.0 + erf(v * INV_SQRT_2)));
	}
}

void dtf_cpu_gelu_grad(size_t n, int approximate, const float *dy,
		       const float *x, float *dx)
{
	for (size_t i = 0; i < n; i++) {
		double v = x[i], d;
		if (approximate) {
			double u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
			double t = tanh(u);
			double du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
			d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
		} else {
			/* Phi(x) + x * phi(x) */
			d = 0.5 * (1.0 + erf(v * INV_SQRT_2)) +
			    v * INV_SQRT_2PI * exp(-0.5 * v * v);
		}
		dx[i] = (float)(dy[i] * d);
	}
}

void dtf_cpu_tanh(size_t n, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = tanhf(x[i]);
}

void dtf_cpu_tanh_grad(size_t n, const float *dy, const float *y, float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void dtf_cpu_sigmoid(size_t n, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++) {
		/* exp of a non-positive number only: no overflow */
		if (x[i] >= 0.0f) {
			y[i] = 1.0f / (1.0f + expf(-x[i]));
		} else {
			float e = expf(x[i]);
			y[i] = e / (1.0f + e);
		}
	}
}

void dtf_cpu_sigmoid_grad(size_t n, const float *dy, const float *y,
			  float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

void dtf_cpu_softmax(size_t rows, int c, const float *x, float *y)
{
	/* x, y (rows, c) */
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * (size_t)c;
		float *yr = y + r * (size_t)c;
		if (c <= 0)
			continue;
		float m = xr[0];
		for (int j = 1; j < c; j++)
			m = xr[j] > m ? xr[j] : m;
		double s = 0.0;
		for (int j = 0; j < c; j++) {
			float e = expf(xr[j] - m);
			yr[j] = e;
			s += e;
		}
		float inv = (float)(1.0 / s);
		for (int j = 0; j < c; j++)
			yr[j] *= inv;
	}
}

void dtf_cpu_softmax_causal(size_t rows, int c, int tq, const float *x,
			    float *y)
{
	/* x, y (rows, c); row r is query r % tq: keys 0 .. r % tq */
	for (size_t r = 0; r < rows; r++) {
		int i = (int)(r % (size_t)tq);
		int keep = i + 1 < c ? i + 1 : c;
		dtf_cpu_softmax(1, keep, x + r * (size_t)c, y + r * (size_t)c);
		for (int j = keep; j < c; j++)
			y[r * (size_t)c + j] = 0.0f;
	}
}

void dtf_cpu_softmax_grad(size_t rows, int c, const float *dy, const float *y,
			  float *dx)
{
	/* dy, y, dx (rows, c) */
	for (size_t r = 0; r < rows; r++) {
		const float *gr = dy + r * (size_t)c, *yr = y + r * (size_t)c;
		float *dr = dx + r * (size_t)c;
		double s = 0.0;
		for (int j = 0; j < c; j++)
			s += (double)gr[j] * yr[j];
		for (int j = 0; j < c; j++)
			dr[j] = (float)(yr[j] * (gr[j] - s));
	}
}

void dtf_cpu_multiply(size_t n, const float *a, const float *b, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] * b[i];
}
