/*
 * schedule.c - learning-rate schedules (schedule.h), in double precision.
 */
#include "train/schedule.h"

#include <math.h>
#include <stdio.h>

#include "core/log.h"

void dtf_schedule_init(struct dtf_schedule *s, const struct dtf_job *job,
		       int64_t total_steps)
{
	s->spec = job->train.schedule;
	s->lr = job->train.learning_rate;
	s->decay_steps = s->spec.decay_steps;
	if (s->spec.kind == DTF_SCHED_COSINE_DECAY && s->decay_steps <= 0) {
		s->decay_steps = total_steps - s->spec.warmup_steps;
		if (s->decay_steps < 1)
			s->decay_steps = 1;
	}
}

static double decayed(const struct dtf_schedule *s, int64_t step)
{
	const struct dtf_schedule_spec *p = &s->spec;
	switch (p->kind) {
	case DTF_SCHED_CONSTANT:
		return s->lr;
	case DTF_SCHED_PIECEWISE_CONSTANT: {
		int i = 0;
		while (i < p->nboundaries && step > p->boundaries[i])
			i++;
		return p->values[i];
	}
	case DTF_SCHED_EXPONENTIAL_DECAY: {
		double e = (double)step / (double)s->decay_steps;
		if (p->staircase)
			e = floor(e);
		return s->lr * pow(p->decay_rate, e);
	}
	case DTF_SCHED_COSINE_DECAY: {
		double d = (double)s->decay_steps;
		double t = (double)step < d ? (double)step : d;
		double cosine = 0.5 * (1.0 + cos(M_PI * t / d));
		return s->lr * ((1.0 - p->alpha) * cosine + p->alpha);
	}
	}
	return s->lr;
}

double dtf_schedule_lr(const struct dtf_schedule *s, int64_t step)
{
	int64_t w = s->spec.warmup_steps;
	if (w > 0 && step < w)
		return decayed(s, 0) * (double)step / (double)w;
	return decayed(s, step - (w > 0 ? w : 0));
}

const char *dtf_schedule_kind_name(enum dtf_schedule_kind kind)
{
	switch (kind) {
	case DTF_SCHED_CONSTANT:
		return "constant";
	case DTF_SCHED_PIECEWISE_CONSTANT:
		return "piecewise_constant";
	case DTF_SCHED_EXPONENTIAL_DECAY:
		return "exponential_decay";
	case DTF_SCHED_COSINE_DECAY:
		return "cosine_decay";
	}
	return "?";
}

double dtf_schedule_initial_lr(const struct dtf_schedule *s)
{
	return decayed(s, 0);
}

void dtf_schedule_describe(const struct dtf_schedule *s, char *buf,
			   size_t size)
{
	const struct dtf_schedule_spec *p = &s->spec;
	size_t at = 0;
#define ADD(...) dtf_log_append(buf, size, &at, __VA_ARGS__)
	switch (p->kind) {
	case DTF_SCHED_CONSTANT:
		ADD("constant");
		break;
	case DTF_SCHED_PIECEWISE_CONSTANT:
		ADD("piecewise_constant(boundaries [");
		for (int i = 0; i < p->nboundaries; i++)
			ADD("%s%lld", i ? ", " : "", (long long)p->boundaries[i]);
		ADD("], values [");
		for (int i = 0; i <= p->nboundaries; i++)
			ADD("%s%g", i ? ", " : "", p->values[i]);
		ADD("])");
		break;
	case DTF_SCHED_EXPONENTIAL_DECAY:
		ADD("exponential_decay(decay_steps %lld, decay_rate %g%s)",
		    (long long)s->decay_steps, p->decay_rate,
		    p->staircase ? ", staircase" : "");
		break;
	case DTF_SCHED_COSINE_DECAY:
		ADD("cosine_decay(decay_steps %lld, alpha %g)",
		    (long long)s->decay_steps, p->alpha);
		break;
	}
	if (p->warmup_steps > 0)
		ADD(" after %lld warmup steps", (long long)p->warmup_steps);
#undef ADD
	if (size > 0 && at >= size)
		buf[size - 1] = '\0';
}
