/*
 * optimizer.h - parameter updates over the flat parameter vector.
 *
 * Keras semantics (tf.keras.optimizers, Keras 3), t = updates so far + 1:
 *  - SGD: v = momentum * v - lr * g; p += v (nesterov: p += momentum * v -
 *    lr * g); plain p -= lr * g without momentum.
 *  - Adam (Kingma & Ba 2015, Keras's epsilon outside the square root and
 *    bias correction folded into the step size): m = b1 m + (1-b1) g;
 *    v = b2 v + (1-b2) g^2; p -= lr * sqrt(1-b2^t)/(1-b1^t) * m /
 *    (sqrt(v) + eps).
 *  - AdamW (Loshchilov & Hutter 2019, decoupled weight decay, as Keras's
 *    AdamW): p -= lr * weight_decay * p on the decayed groups, then the
 *    Adam step (which does not see the decay).
 *  - RMSprop: ms = rho ms + (1-rho) g^2; centered: mg = rho mg + (1-rho) g,
 *    den = ms - mg^2 + eps, else den = ms + eps; inc = lr * g / sqrt(den);
 *    with momentum: mom = momentum * mom + inc, p -= mom; else p -= inc.
 * Before the update, in this order, the gradient vector is changed in
 * place: L2 weight decay (train.weight_decay: g += rate * p on the decayed
 * groups, i.e. a loss term rate/2 * |p|^2 that the logged loss leaves
 * out), then clipping by global norm (train.clipnorm: every trainable
 * gradient is scaled by min(1, clipnorm / |g|), |g| the 2-norm over all of
 * them; Keras's global_clipnorm).  Gradients are the allreduced sums, so
 * every replica clips and decays identically.
 *
 * Variables are segments of the vector: trainable or not (moving
 * statistics, constants: never touched), decayed or not (by default
 * kernels only; biases and norm parameters are not, as is common
 * practice).  Slots (velocity; m and v; ms, mg and mom) are one allocation
 * made at init; apply() allocates nothing.
 */
#ifndef DTF_TRAIN_OPTIMIZER_H
#define DTF_TRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"

struct dtf_graph;

/* A run of the parameter vector with one treatment. */
struct dtf_opt_segment {
	size_t offset, count; /* floats */
	int trainable;        /* 0: the optimizer leaves it alone */
	int decay;            /* weight decay (L2 and AdamW's) applies */
	int no_grad;          /* trainable, but the loss does not reach it:
				 its gradient is zeros, which apply leaves
				 as it found them (after its L2 term) */
};

struct dtf_optimizer {
	enum dtf_optimizer_kind kind;
	double momentum, beta_1, beta_2, epsilon, rho;
	int nesterov, centered;
	double weight_decay;    /* L2 rate */
	double decoupled_decay; /* AdamW's */
	double clipnorm;        /* 0: off */
	size_t n;          /* floats in the parameter vector */
	float *slots;      /* owned: 0 to 3 times n floats */
	int nslots;
	struct dtf_opt_segment *segs; /* owned; NULL: one segment, all
					 trainable and decayed */
	int nsegs;
	int64_t iterations; /* updates applied so far (Adam's t - 1) */
	double last_norm;   /* global gradient norm of the last update (0
			       unless clipping) */
	struct dtf_pool *pool; /* not owned; see dtf_optimizer_set_pool */
	int fast;
};

/* Set up for n parameters from the job's train section; all of them one
 * trainable, decayed segment until dtf_optimizer_set_segments.
 * Errors: DTF_ERR_NOMEM. */
int dtf_optimizer_init(struct dtf_optimizer *opt, const struct dtf_job *job,
		       size_t n);
void dtf_optimizer_deinit(struct dtf_optimizer *opt);

/* Run Adam's update as the fused, vectorized kernel dtf_fast_adam() on
 * `pool` (NULL: one thread): the same bits as the reference loop, faster.
 * Only Adam/AdamW's moment update changes; the rest stays as is. */
struct dtf_pool;
void dtf_optimizer_set_pool(struct dtf_optimizer *opt, struct dtf_pool *pool);

/* 1 when g (n floats) holds a NaN or an infinity, else 0; on the pool
 * given to dtf_optimizer_set_pool when there was one. */
int dtf_optimizer_nonfinite(const struct dtf_optimizer *opt, const float *g,
			    size_t n);

/* Copy segs[0..nsegs) (each inside [0, n)).  Errors: DTF_ERR_NOMEM. */
int dtf_optimizer_set_segments(struct dtf_optimizer *opt,
			       const struct dtf_opt_segment *segs, int nsegs);

/* Segments of a graph's variables: trainable as the variable says,
 * decayed when its group (dtf_graph_var_group) is in
 * job->train.decay_groups, no_grad when the graph was differentiated
 * (dtf_graph_backward) and the loss has no gradient for it.  Errors:
 * DTF_ERR_NOMEM. */
int dtf_optimizer_segments_from_graph(struct dtf_optimizer *opt,
				      const struct dtf_job *job,
				      const struct dtf_graph *g);

/* A range of the flat parameter vector: floats [off, off + n). */
struct dtf_opt_range {
	size_t off, n;
};

/* Set up *part (as dtf_optimizer_init) for the vector that concatenates
 * the ranges from[0..nfrom) of whole's vector (each inside [0, whole->n)),
 * with the segments that give each float the treatment it has in whole
 * (trainable, decayed): a ps rank's share of the variables.  Errors:
 * DTF_ERR_NOMEM. */
int dtf_optimizer_init_part(struct dtf_optimizer *part,
			    const struct dtf_optimizer *whole,
			    const struct dtf_job *job,
			    const struct dtf_opt_range *from, int nfrom);

/* Slot k (0 <= k < opt->nslots) holds opt->slots[k*n .. (k+1)*n); its
 * name as checkpoints store it: sgd "momentum"; adam, adamw "m", "v";
 * rmsprop "rms", then "mg" when centered, then "momentum" with momentum. */
const char *dtf_optimizer_slot_name(const struct dtf_optimizer *opt, int k);

/* One update of params (n) with gradients grads (n) at learning rate lr.
 * grads is changed in place (L2 term, clipping). */
void dtf_optimizer_apply(struct dtf_optimizer *opt, float *params,
			 float *grads, double lr);

/* The same update restricted to the elements in ranges[0 .. nranges)
 * (disjoint, any order): each element changes exactly as under
 * dtf_optimizer_apply, and the iteration count advances once.  For an
 * update sharded across replicas (ZeRO stage 1: Rajbhandari et al., "ZeRO:
 * Memory Optimizations Toward Training Trillion Parameter Models", SC
 * 2020), where each replica updates its own ranges.  Every update but
 * clipnorm's is elementwise; with opt->clipnorm > 0 the global norm needs
 * every element, so the ranges must then cover all n (the caller's
 * duty). */
void dtf_optimizer_apply_ranges(struct dtf_optimizer *opt, float *params,
				float *grads, double lr,
				const struct dtf_opt_range *ranges,
				int nranges);

/*
 * The job's optimizer and its settings in one phrase for the start-up line
 * (NUL-terminated, cut to `size`): the Keras name, the learning rate before
 * any schedule or scaling, the other settings of that optimizer and the
 * gradient treatments in force, e.g. "adam lr 0.001 (beta_1 0.9, beta_2
 * 0.999, epsilon 1e-07)" or "sgd lr 0.1 (momentum 0.9, nesterov; clipnorm
 * 1)".
 */
void dtf_optimizer_describe(const struct dtf_job *job, char *buf, size_t size);

#endif
