/*
 * optimizer.h - parameter updates over the flat parameter vector.
 *
 * SGD with momentum as tf.keras.optimizers.SGD: v = momentum * v - lr * g;
 * p += v (nesterov: p += momentum * v - lr * g).  Adam as
 * tf.keras.optimizers.Adam (Kingma & Ba 2015, with Keras's epsilon placed
 * outside the square root and bias correction folded into the step size):
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps).
 * Slots (velocity, or m and v) are one allocation made at init; apply()
 * allocates nothing.
 */
#ifndef DTF_TRAIN_OPTIMIZER_H
#define DTF_TRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"

struct dtf_optimizer {
	enum dtf_optimizer_kind kind;
	double momentum, beta_1, beta_2, epsilon;
	int nesterov;
	size_t n;          /* floats in the parameter vector */
	float *slots;      /* owned: n (sgd with momentum) or 2n (adam) */
	int64_t iterations; /* updates applied so far (Adam's t) */
	struct dtf_pool *pool; /* not owned; see dtf_optimizer_set_pool */
	int fast;
};

/* Set up for n parameters from the job's train section.
 * Errors: DTF_ERR_NOMEM. */
int dtf_optimizer_init(struct dtf_optimizer *opt, const struct dtf_job *job,
		       size_t n);
void dtf_optimizer_deinit(struct dtf_optimizer *opt);

/* Run Adam as the fused, vectorized kernel dtf_fast_adam() on `pool`
 * (NULL: one thread): the same bits as the reference loop, faster. */
struct dtf_pool;
void dtf_optimizer_set_pool(struct dtf_optimizer *opt, struct dtf_pool *pool);

/* One update of params (n) with gradients grads (n) at learning rate lr. */
void dtf_optimizer_apply(struct dtf_optimizer *opt, float *params,
			 const float *grads, double lr);

#endif
