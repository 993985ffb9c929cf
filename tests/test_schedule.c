/*
 * test_schedule.c - the learning rate of every step (train.schedule and
 * train.learning_rate_scaling), against closed forms computed here.
 *
 * The closed forms are Keras's (tf.keras.optimizers.schedules:
 * PiecewiseConstantDecay, ExponentialDecay with and without staircase,
 * CosineDecay with a linear warmup) written out again in this file, times
 * Goyal et al.'s linear scaling factor (1 + (n - 1) s / W during its
 * warmup, n after it); they share no code with src/train/schedule.c.
 *
 *  - unit: dtf_schedule_lr equals the closed form at every step, and a
 *    few values computed by hand;
 *  - end to end, for every schedule on every strategy and update path
 *    (one_device; 2 ranks of multi_worker_mirrored over MPI and through
 *    the shared-memory window with the sharded update; central_storage;
 *    parameter_server with 2 workers and a ps): the learning rate that
 *    metrics.jsonl and the TensorBoard `learning_rate` series give at each
 *    step is the closed form's within 1e-6 relative;
 *  - after a stop by SIGTERM at step 10 and --resume, the series goes on
 *    with the closed form's values up to the end (every path that has
 *    checkpoints: parameter_server has none yet);
 *  - the optimizer uses that rate: SGD with a piecewise-constant schedule
 *    that drops to 0 after update 7 ends 16 steps with exactly the
 *    variables of 8 constant-rate steps (and not those of 16).
 * The GPU path's schedule is tested in test_cuda_mock.c.
 */
#include <check.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "train/schedule.h"

#include "testutil.h"

static char tmpdir[256];

#define STEPS 24 /* steps of each run */

/* the sections after the tiny CNN (tu_write_tiny_job) */
static const char job_rest[] =
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 24\n"
	"  epochs: 2\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"strategy: {type: multi_worker_mirrored}\n"
	"logging: {every_steps: 1}\n";

/* ---- the closed forms ------------------------------------------------------- */

enum kind { PIECEWISE, EXPONENTIAL, COSINE };

static const struct sched {
	const char *name;
	const char *set;     /* train.schedule */
	const char *scaling; /* train.learning_rate_scaling, or NULL */
	enum kind kind;
	double lr;           /* the optimizer's learning_rate */
	int nb;
	double b[2], v[3];   /* piecewise boundaries and values */
	double D, rate;      /* decay_steps (0: cosine's default), decay_rate */
	int staircase;
	double alpha;
	int W;               /* the schedule's warmup_steps */
	int scale_w;         /* the scaling's warmup_steps */
} scheds[] = {
	{"piecewise", "{piecewise_constant: {boundaries: [5, 12], values: [0.02, 0.01, 0.005], warmup_steps: 4}}",
	 NULL, PIECEWISE, 0.01, 2, {5, 12}, {0.02, 0.01, 0.005}, 0, 0, 0, 0, 4, 0},
	{"exponential", "{exponential_decay: {decay_steps: 3, decay_rate: 0.8}}",
	 NULL, EXPONENTIAL, 0.01, 0, {0}, {0}, 3, 0.8, 0, 0, 0, 0},
	{"staircase", "{exponential_decay: {decay_steps: 3, decay_rate: 0.5, staircase: true, warmup_steps: 3}}",
	 NULL, EXPONENTIAL, 0.01, 0, {0}, {0}, 3, 0.5, 1, 0, 3, 0},
	{"cosine", "{cosine_decay: {decay_steps: 15, alpha: 0.1, warmup_steps: 5}}",
	 NULL, COSINE, 0.01, 0, {0}, {0}, 15, 0, 0, 0.1, 5, 0},
	/* decay_steps 0: the run's steps less the warmup (24 - 4) */
	{"cosine_default", "{cosine_decay: {warmup_steps: 4}}",
	 NULL, COSINE, 0.01, 0, {0}, {0}, 0, 0, 0, 0, 4, 0},
	{"cosine_linear_scaling", "{cosine_decay: {decay_steps: 20, alpha: 0.05, warmup_steps: 2}}",
	 "{linear: {warmup_steps: 6}}", COSINE, 0.01, 0, {0}, {0}, 20, 0, 0, 0.05, 2, 6},
};
#define NSCHED (int)(sizeof(scheds) / sizeof(scheds[0]))

/* The schedule's rate at step t of its own (after the warmup). */
static double decayed(const struct sched *c, double t, int64_t total)
{
	switch (c->kind) {
	case PIECEWISE: {
		int i = 0;
		while (i < c->nb && t > c->b[i])
			i++;
		return c->v[i];
	}
	case EXPONENTIAL:
		return c->lr * pow(c->rate, c->staircase ? floor(t / c->D)
							 : t / c->D);
	case COSINE: {
		double D = c->D > 0 ? c->D : (double)(total - c->W);
		double tt = fmin(t, D);
		return c->lr * ((1 - c->alpha) * 0.5 * (1 + cos(M_PI * tt / D)) +
				c->alpha);
	}
	}
	return NAN;
}

/* The rate of the update made after s updates, on nrep replicas. */
static double closed_form(const struct sched *c, int64_t s, int nrep,
			  int64_t total)
{
	double x = s < c->W ? decayed(c, 0, total) * (double)s / c->W
			    : decayed(c, (double)(s - c->W), total);
	if (c->scaling)
		x *= s < c->scale_w
			     ? 1 + (nrep - 1) * (double)s / c->scale_w
			     : nrep;
	return x;
}

static double rel(double got, double want)
{
	return fabs(got - want) / fmax(fabs(want), 1e-12);
}

/* ---- the paths -------------------------------------------------------------- */

static const struct path {
	const char *name;
	int np, nrep;
	const char *sets;
	const char *log_has; /* in the start-up lines: the path did run */
} paths[] = {
	{"one_device", 1, 1, "--set strategy.type=one_device", "strategy one_device"},
	{"mpi", 2, 2, "--set strategy.communication.implementation=mpi",
	 "implementation mpi"},
	{"shared_memory", 2, 2,
	 "--set strategy.communication.implementation=shared_memory",
	 "update sharded"},
	{"central_storage", 2, 2, "--set strategy.type=central_storage",
	 "strategy central_storage"},
	{"parameter_server", 3, 2, "--set strategy.type=parameter_server",
	 "strategy parameter_server"},
};
#define NPATH (int)(sizeof(paths) / sizeof(paths[0]))

/* mpirun -np NP dtf-train ... into DIR/NAME (logging.dir NAME/run) with
 * its stderr in NAME.log; returns the exit status. */
static int run(const struct path *p, const char *env, const char *name,
	       const char *sets)
{
	char log[256];
	snprintf(log, sizeof(log), "%s.log", name);
	return tu_mpirun(p->np, env, tmpdir, log,
			 "--threads 1 --export-variables %s/%s.bin "
			 "--set logging.dir=%s/%s/run %s %s %s/job.yaml",
			 tmpdir, name, tmpdir, name, p->sets, sets, tmpdir);
}

static void schedule_sets(const struct sched *c, char *buf, size_t n)
{
	snprintf(buf, n, "--set 'train.schedule=%s' --set 'train.learning_rate_scaling=%s'",
		 c->set, c->scaling ? c->scaling : "none");
}

/* Checks every train line of NAME/run/metrics.jsonl and every
 * learning_rate of the train events against the closed form; each step
 * 1..STEPS must be seen (in metrics.jsonl and in some event file). */
static void check_series(const struct sched *c, const struct path *p,
			 const char *name)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s/run", tmpdir, name);
	char *text = tu_read_file(dir, "metrics.jsonl", NULL);
	int seen[STEPS + 1] = {0};
	double worst = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strstr(line, "\"kind\":\"train\""))
			continue;
		long long step;
		double lr;
		const char *ps = strstr(line, "\"step\":");
		const char *pl = strstr(line, "\"learning_rate\":");
		ck_assert_msg(ps && pl, "%s", line);
		ck_assert_int_eq(sscanf(ps, "\"step\":%lld", &step), 1);
		ck_assert_int_eq(sscanf(pl, "\"learning_rate\":%lf", &lr), 1);
		ck_assert_msg(step >= 1 && step <= STEPS, "%s", line);
		double want = closed_form(c, step - 1, p->nrep, STEPS);
		ck_assert_msg(rel(lr, want) <= 1e-6,
			      "%s on %s: metrics.jsonl step %lld learning_rate %.9g, closed form %.9g",
			      c->name, p->name, step, lr, want);
		worst = fmax(worst, rel(lr, want));
		seen[step]++;
	}
	free(text);
	for (int s = 1; s <= STEPS; s++)
		ck_assert_msg(seen[s] == 1, "%s on %s: step %d logged %d times",
			      c->name, p->name, s, seen[s]);

	char pattern[600];
	snprintf(pattern, sizeof(pattern), "%s/train/events.out.tfevents.*", dir);
	glob_t g;
	ck_assert_int_eq(glob(pattern, 0, NULL, &g), 0);
	struct tu_event_file *ef = malloc(sizeof(*ef));
	int ev_seen[STEPS + 1] = {0};
	for (size_t f = 0; f < g.gl_pathc; f++) {
		tu_events_read(g.gl_pathv[f], ef);
		for (int i = 0; i < ef->n; i++) {
			if (strcmp(ef->s[i].tag, "learning_rate"))
				continue;
			int64_t step = ef->s[i].step;
			ck_assert(step >= 1 && step <= STEPS);
			/* the event holds a float32 */
			double want = (float)closed_form(c, step - 1, p->nrep, STEPS);
			ck_assert_msg(rel(ef->s[i].value, want) <= 1e-6,
				      "%s on %s: event step %lld learning_rate %.9g, closed form %.9g",
				      c->name, p->name, (long long)step,
				      ef->s[i].value, want);
			ev_seen[step]++;
		}
	}
	globfree(&g);
	free(ef);
	for (int s = 1; s <= STEPS; s++)
		ck_assert_msg(ev_seen[s] == 1, "%s on %s: step %d in %d events",
			      c->name, p->name, s, ev_seen[s]);
	printf("%-22s %-16s %d steps, max relative difference %.2g\n", c->name,
	       p->name, STEPS, worst);
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-schedule-test");
	tu_synth(tmpdir, "train", 480, 2, "8,8,1", 1);
	tu_write_tiny_job(tmpdir, "job.yaml", 0, 0, job_rest);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

/* ---- unit ------------------------------------------------------------------- */

START_TEST(schedule_lr_is_the_closed_form)
{
	char path[512];
	tu_path(path, sizeof(path), tmpdir, "job.yaml");
	for (int i = 0; i < NSCHED; i++) {
		const struct sched *c = &scheds[i];
		char set[256];
		snprintf(set, sizeof(set), "train.schedule=%s", c->set);
		const char *sets[] = {set};
		struct dtf_job *job = NULL;
		ck_assert_msg(dtf_job_load(path, sets, 1, &job) == 0, "%s",
			      dtf_error_msg());
		struct dtf_schedule s;
		dtf_schedule_init(&s, job, STEPS);
		for (int64_t t = 0; t < 100; t++) {
			/* one replica: the schedule alone */
			double want = closed_form(c, t, 1, STEPS);
			ck_assert_msg(rel(dtf_schedule_lr(&s, t), want) <= 1e-12,
				      "%s step %lld: %.17g, closed form %.17g",
				      c->name, (long long)t,
				      dtf_schedule_lr(&s, t), want);
		}
		dtf_job_free(job);
	}
	/* by hand: a cosine quarter of the way (warmup 5, D 15, alpha 0.1):
	 * step 5 + 15/4 -> 0.01 * (0.9 * 0.5 * (1 + cos(pi/4)) + 0.1) */
	ck_assert(rel(closed_form(&scheds[3], 5, 1, STEPS), 0.01) < 1e-15);
	ck_assert(rel(closed_form(&scheds[3], 2, 1, STEPS), 0.004) < 1e-15);
	ck_assert(rel(closed_form(&scheds[3], 20, 1, STEPS), 0.001) < 1e-15);
	ck_assert(rel(decayed(&scheds[3], 3.75, STEPS),
		      0.01 * (0.45 * (1 + sqrt(0.5)) + 0.1)) < 1e-15);
	/* staircase 0.5 every 3 after 3 warmup steps: step 9 is 0.0025 */
	ck_assert(rel(closed_form(&scheds[2], 9, 1, STEPS), 0.0025) < 1e-15);
	/* piecewise: 0.02 at step 4 + 5, 0.01 at 4 + 6 */
	ck_assert(rel(closed_form(&scheds[0], 9, 1, STEPS), 0.02) < 1e-15);
	ck_assert(rel(closed_form(&scheds[0], 10, 1, STEPS), 0.01) < 1e-15);
	/* linear scaling on 2 replicas, half-way through its warmup of 6 */
	ck_assert(rel(closed_form(&scheds[5], 3, 2, STEPS),
		      1.5 * decayed(&scheds[5], 1, STEPS)) < 1e-15);
}
END_TEST

/* ---- end to end ------------------------------------------------------------- */

START_TEST(series_equals_closed_form)
{
	const struct sched *c = &scheds[_i / NPATH];
	const struct path *p = &paths[_i % NPATH];
	char name[128], sets[512];
	snprintf(name, sizeof(name), "%s-%s", c->name, p->name);
	schedule_sets(c, sets, sizeof(sets));
	int st = run(p, NULL, name, sets);
	char logname[160];
	snprintf(logname, sizeof(logname), "%s.log", name);
	const char *log = tu_slurp(tmpdir, logname);
	ck_assert_msg(st == 0, "%s", log);
	ck_assert_msg(strstr(log, p->log_has) != NULL, "%s", log);
	check_series(c, p, name);
}
END_TEST

START_TEST(series_continues_after_resume)
{
	const struct sched *c = &scheds[NSCHED - 1]; /* warmup, decay, scaling */
	const struct path *p = &paths[_i];
	char name[128], sets[1024], logname[200];
	snprintf(name, sizeof(name), "resume-%s", p->name);
	snprintf(logname, sizeof(logname), "%s.log", name);
	int n = snprintf(sets, sizeof(sets),
			 "--set 'checkpoint={dir: %s/%s/ckpt, every_steps: 0}' ",
			 tmpdir, name);
	schedule_sets(c, sets + n, sizeof(sets) - (size_t)n);
	/* SIGTERM to rank 0 at step 10: a checkpoint, exit status 75 */
	int st = run(p, "DTF_FAULT=term:rank=0:step=10", name, sets);
	ck_assert_msg(st == 75, "status %d: %s", st, tu_slurp(tmpdir, logname));
	char more[1100];
	snprintf(more, sizeof(more), "%s --resume", sets);
	st = run(p, NULL, name, more);
	const char *log = tu_slurp(tmpdir, logname);
	ck_assert_msg(st == 0, "%s", log);
	ck_assert_msg(strstr(log, "resum") != NULL, "%s", log);
	check_series(c, p, name);
}
END_TEST

START_TEST(optimizer_uses_the_schedule)
{
	const struct path *p = &paths[_i];
	const char *sgd = "--set 'train.optimizer={sgd: {learning_rate: 0.05}}' ";
	char name[3][128], sets[512];
	const char *tag[3] = {"drop", "eight", "sixteen"};
	for (int k = 0; k < 3; k++)
		snprintf(name[k], sizeof(name[k]), "%s-%s", tag[k], p->name);
	/* updates 0..7 at 0.05, then 0: 16 steps move as 8 do */
	snprintf(sets, sizeof(sets), "%s --set 'train.schedule={piecewise_constant: "
		 "{boundaries: [7], values: [0.05, 0.0]}}' --set train.max_steps=16",
		 sgd);
	ck_assert_int_eq(run(p, NULL, name[0], sets), 0);
	snprintf(sets, sizeof(sets), "%s --set train.max_steps=8", sgd);
	ck_assert_int_eq(run(p, NULL, name[1], sets), 0);
	snprintf(sets, sizeof(sets), "%s --set train.max_steps=16", sgd);
	ck_assert_int_eq(run(p, NULL, name[2], sets), 0);
	char f[3][200];
	for (int k = 0; k < 3; k++)
		snprintf(f[k], sizeof(f[k]), "%.127s.bin", name[k]);
	size_t nvars, moved;
	double same = tu_vars_rel_diff(tmpdir, f[0], f[1], &nvars, &moved, NULL);
	double apart = tu_vars_rel_diff(tmpdir, f[0], f[2], NULL, NULL, NULL);
	printf("%-16s schedule to 0 after 8 updates: %.3g from 8 steps, %.3g from 16 (%zu variables)\n",
	       p->name, same, apart, nvars);
	ck_assert_msg(same == 0, "%s: %g", p->name, same);
	ck_assert_msg(apart > 1e-3, "%s: %g", p->name, apart);
	ck_assert_uint_gt(moved, nvars / 2);
}
END_TEST

/* The start-up line names the rate the first updates ramp up to (the
 * schedule's, not the optimizer's unused one for piecewise_constant) and
 * the scaling with its ramp; every value in it is the closed form's. */
START_TEST(start_line_names_the_schedule_rate_and_scaling)
{
	const struct path *p = &paths[1]; /* 2 replicas over MPI */
	/* scheds[0]: piecewise [0.02, 0.01, 0.005] after 4 warmup steps,
	 * the optimizer's learning_rate 0.01 */
	char sets[512];
	snprintf(sets, sizeof(sets),
		 "--set 'train.schedule=%s' --set 'train.learning_rate_scaling="
		 "{linear: {warmup_steps: 6}}' --set train.max_steps=1",
		 scheds[0].set);
	ck_assert_int_eq(run(p, NULL, "line-pw", sets), 0);
	char want[512];
	snprintf(want, sizeof(want),
		 "learning rate %g (train.schedule piecewise_constant's first "
		 "value; the optimizer's learning_rate %g is not used; reached "
		 "after train.schedule's %d warmup steps from 0), effective %g "
		 "(linear scaling by the 2 replica(s), ramped from %g over the "
		 "first 6 updates)",
		 decayed(&scheds[0], 0, STEPS), scheds[0].lr, scheds[0].W,
		 2 * decayed(&scheds[0], 0, STEPS), /* Goyal's factor n */
		 decayed(&scheds[0], 0, STEPS));
	tu_assert_log(tmpdir, "line-pw.log", want);
	ck_assert(strstr(want, "learning rate 0.02 (") && strstr(want, "effective 0.04 ("));
	/* a warmup of 4 in a 1-step run: the rate of its one step is
	 * 0 (4 * 0 / 4), and the start says so */
	tu_assert_log(tmpdir, "line-pw.log",
		      "warning: train.schedule.piecewise_constant.warmup_steps 4 "
		      "is not below the run's 1 steps: the rate ramps up from 0 "
		      "for the whole run, to 0 at its last step, and the schedule "
		      "never starts\n"
		      "HINT: fewer warmup_steps, or more steps (train.max_steps, "
		      "train.epochs)");
	/* cosine_decay's warmup of 30 over 24 steps: 0.01 * 23 / 30 last */
	snprintf(sets, sizeof(sets),
		 "--set 'train.schedule={cosine_decay: {warmup_steps: 30}}'");
	ck_assert_int_eq(run(&paths[0], NULL, "line-cos", sets), 0);
	snprintf(want, sizeof(want),
		 "warning: train.schedule.cosine_decay.warmup_steps 30 is not "
		 "below the run's %d steps: the rate ramps up from 0 for the "
		 "whole run, to %g at its last step",
		 STEPS, 0.01 * (STEPS - 1) / 30);
	tu_assert_log(tmpdir, "line-cos.log", want);
	/* one step shorter than the run: no warning */
	snprintf(sets, sizeof(sets),
		 "--set 'train.schedule={cosine_decay: {warmup_steps: %d}}'",
		 STEPS - 1);
	ck_assert_int_eq(run(&paths[0], NULL, "line-cos2", sets), 0);
	tu_assert_not_log(tmpdir, "line-cos2.log", "warmup_steps");
	/* no schedule, no scaling: the optimizer's rate, as it is */
	ck_assert_int_eq(run(p, NULL, "line-const", "--set train.max_steps=1"), 0);
	tu_assert_log(tmpdir, "line-const.log", "parameters; learning rate 0.01, effective 0.01\n");
}
END_TEST

static Suite *schedule_suite(void)
{
	Suite *s = suite_create("schedule");
	TCase *tc = tcase_create("unit");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, schedule_lr_is_the_closed_form);
	suite_add_tcase(s, tc);
	tc = tcase_create("start_line");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, start_line_names_the_schedule_rate_and_scaling);
	suite_add_tcase(s, tc);
	tc = tcase_create("end_to_end");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, series_equals_closed_form, 0, NSCHED * NPATH);
	/* parameter_server has no checkpoints yet (a job error) */
	tcase_add_loop_test(tc, series_continues_after_resume, 0, NPATH - 1);
	tcase_add_loop_test(tc, optimizer_uses_the_schedule, 0, NPATH);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(schedule_suite(), 1);
}
