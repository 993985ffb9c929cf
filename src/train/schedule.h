/*
 * schedule.h - the learning rate of each step (train.schedule), as
 * tf.keras.optimizers.schedules computes it from the step s = number of
 * updates applied before this one (0 for the first update):
 *  - constant: lr.
 *  - piecewise_constant(boundaries b, values v): v[0] while s <= b[0],
 *    v[i] while b[i-1] < s <= b[i], v[last] after b[last]
 *    (PiecewiseConstantDecay; the optimizer's learning_rate is unused).
 *  - exponential_decay(decay_steps D, decay_rate r, staircase):
 *    lr * r^(s / D), with floor(s / D) when staircase (ExponentialDecay).
 *  - cosine_decay(decay_steps D, alpha a): s' = min(s, D),
 *    lr * ((1 - a) * 0.5 * (1 + cos(pi * s' / D)) + a) (CosineDecay).
 *    D left out (0 here) means the run's total steps minus the warmup;
 *    the job reader refuses an explicit 0 and an alpha outside [0, 1].
 * Linear warmup (warmup_steps W > 0, any schedule): for s < W the rate is
 * peak * s / W, peak being the schedule's rate at its step 0; from s = W
 * the schedule runs on s - W.  For cosine_decay this is Keras's
 * CosineDecay(initial_learning_rate=0, warmup_target=lr, warmup_steps=W).
 */
#ifndef DTF_TRAIN_SCHEDULE_H
#define DTF_TRAIN_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "config/job.h"

struct dtf_schedule {
	struct dtf_schedule_spec spec;
	double lr;            /* the optimizer's learning_rate */
	int64_t decay_steps;  /* resolved (cosine with 0: total - warmup) */
};

/* From the job; total_steps: the run's steps (for cosine's default). */
void dtf_schedule_init(struct dtf_schedule *s, const struct dtf_job *job,
		       int64_t total_steps);

/* The learning rate of the update after `step` updates. */
double dtf_schedule_lr(const struct dtf_schedule *s, int64_t step);

/* The job-file name of a schedule kind ("cosine_decay"). */
const char *dtf_schedule_kind_name(enum dtf_schedule_kind kind);

/* The schedule's rate at its own step 0: that of the first update without
 * a warmup, the one the warmup ramps up to with one (for piecewise_constant
 * its first value, not the optimizer's learning_rate). */
double dtf_schedule_initial_lr(const struct dtf_schedule *s);

/*
 * The schedule in force in one phrase for the start-up line (NUL-
 * terminated, cut to `size`), with its resolved settings, e.g.
 * "cosine_decay(decay_steps 1000, alpha 0) after 100 warmup steps",
 * "exponential_decay(decay_steps 469, decay_rate 0.7, staircase)",
 * "piecewise_constant(boundaries [2343, 3750], values [0.1, 0.01, 0.001])"
 * or "constant".
 */
void dtf_schedule_describe(const struct dtf_schedule *s, char *buf,
			   size_t size);

#endif
