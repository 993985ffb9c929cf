/*
 * evaluator.c - the evaluator task: poll checkpoint.dir, evaluate each new
 * checkpoint, stop on the chief's notice (evaluator.h).
 *
 * One thread (the kernels' pool aside, set up by the trainer); no
 * collectives after the set-up agreement.  Order per round: test for the
 * notice, then read the index.  The chief sends the notice only after its
 * last write finished, so a round that saw the notice reads the final
 * index: nothing written later can be missed.
 */
#include "train/evaluator.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm.h"
#include "obs/obs.h"
#include "train/checkpoint.h"
#include "train/fault.h"
#include "train/train.h"

struct dtf_evaluator {
	struct dtf_evaluator_config cfg;
	struct dtf_comm_notice *notice;
	struct dtf_obs *obs;
};

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_seconds(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR &&
	       !dtf_fault_pending_signal())
		;
}

int dtf_evaluator_rank(const struct dtf_cluster *c)
{
	for (int r = 0; r < c->ntasks; r++)
		if (c->tasks[r].type == DTF_TASK_EVALUATOR)
			return r;
	return -1;
}

int dtf_evaluator_check_job(const struct dtf_job *job)
{
	const char *what = !job->checkpoint.dir ? "checkpoint.dir"
			   : !job->data.eval_files ? "data.eval"
						   : NULL;
	if (what)
		return dtf_error(DTF_ERR_CONFIG,
				 "%s: %s: the cluster (TF_CONFIG) has an evaluator task, which evaluates each checkpoint on data.eval, but the job has no %s\n"
				 "HINT: set checkpoint.dir, checkpoint.every_steps and data.eval, or remove the evaluator from TF_CONFIG",
				 job->path, what, what);
	if (dtf_log_rank() == 0 && (job->train.stop_at_accuracy > 0 ||
				    job->train.eval_every_steps > 0))
		dtf_warn("train.stop_at_accuracy and train.eval_every_steps do nothing with an evaluator task: it evaluates the checkpoints, the chief does not evaluate");
	return 0;
}

int dtf_evaluator_new(const struct dtf_evaluator_config *cfg,
		      struct dtf_evaluator **out)
{
	*out = NULL;
	struct dtf_evaluator *ev = dtf_calloc(1, sizeof(*ev));
	if (!ev)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	ev->cfg = *cfg;
	int rc = dtf_comm_notice_post(cfg->world, cfg->chief_rank, &ev->notice);
	struct dtf_obs_job oj;
	dtf_train_obs_job(cfg->job, &oj);
	if (rc == 0)
		rc = dtf_obs_open_evaluator(&oj, dtf_comm_host(cfg->world),
					    &ev->obs);
	if (rc < 0) {
		dtf_evaluator_free(ev);
		return rc;
	}
	*out = ev;
	return 0;
}

void dtf_evaluator_free(struct dtf_evaluator *ev)
{
	if (!ev)
		return;
	dtf_comm_notice_free(ev->notice);
	dtf_obs_free(ev->obs);
	dtf_free(ev);
}

int dtf_evaluator_notify(struct dtf_comm *world, int evaluator_rank, int rc,
			 int64_t step)
{
	int status = rc < 0 ? dtf_error_exit_status(rc) : 0;
	if (rc < 0 && status == 0)
		status = 1;
	const int64_t msg[2] = {status, step};
	return dtf_comm_notice_send(world, evaluator_rank, msg);
}

/* The training's exit status -> the evaluator's error. */
static int training_failed(int64_t status, int64_t last)
{
	enum dtf_err code = status == 3    ? DTF_ERR_DATA
			    : status == 2  ? DTF_ERR_CONFIG
			    : status == 4  ? DTF_ERR_CHECKPOINT
			    : status == 75 ? DTF_ERR_SIGNAL
					   : DTF_ERR_REMOTE;
	char done[64] = "no checkpoint was evaluated";
	if (last >= 0)
		snprintf(done, sizeof(done), "the last checkpoint evaluated is step %lld",
			 (long long)last);
	return dtf_error(code, "evaluator: the training stopped with exit status %lld; %s",
			 (long long)status, done);
}

/* Load and evaluate checkpoint `step`.  *skipped = 1 when its file is gone
 * or does not verify (a warning; not this rank's error). */
static int evaluate_step(struct dtf_evaluator *ev, int64_t step,
			 double *loss, double *accuracy, int *skipped)
{
	const struct dtf_job *job = ev->cfg.job;
	char path[4352];
	*skipped = 0;
	snprintf(path, sizeof(path), "%s/ckpt-%lld.dtf", job->checkpoint.dir,
		 (long long)step);
	struct dtf_ckpt_position pos;
	int verified = 0;
	double t0 = now_seconds();
	int rc = dtf_checkpointer_load(ev->cfg.ck, path, &pos, &verified);
	if (rc < 0 && !verified && rc != -DTF_ERR_NOMEM) {
		dtf_warn("evaluator: %s; skipping step %lld", dtf_error_msg(),
			 (long long)step);
		*skipped = 1;
		return 0;
	}
	if (rc < 0)
		return rc;
	struct dtf_evaluator_totals tot = {0, 0, 0, 0};
	if ((rc = ev->cfg.evaluate(ev->cfg.arg, step, &tot)) < 0)
		return rc;
	double t1 = now_seconds();
	*loss = tot.count > 0 ? tot.loss_sum / tot.count : 0;
	*accuracy = tot.count > 0 ? tot.correct / tot.count : 0;
	double top_k = job->model.metric_top_k && tot.count > 0
			       ? tot.top_k / tot.count
			       : -1;
	dtf_obs_eval(ev->obs, step, (int)pos.epoch, *loss, *accuracy, top_k,
		     tot.count, t0, t1);
	char acc[80] = "";
	int n = 0;
	if (job->model.metric_accuracy)
		n = snprintf(acc, sizeof(acc), "  accuracy %.4f", *accuracy);
	if (top_k >= 0)
		snprintf(acc + n, sizeof(acc) - (size_t)n, "  top-%d accuracy %.4f",
			 job->model.metric_top_k, top_k);
	dtf_log(DTF_LOG_INFO, 1,
		"evaluator: checkpoint of step %lld: eval loss %.4f%s  (%.0f examples, %.1f s)",
		(long long)step, *loss, acc, tot.count, t1 - t0);
	return 0;
}

int dtf_evaluator_run(struct dtf_evaluator *ev, int64_t *last_step,
		      double *loss, double *accuracy)
{
	const char *dir = ev->cfg.job->checkpoint.dir;
	int64_t last = -1, seen = -1, msg[2] = {0, 0};
	int own = 0, arrived = 0, nevaluated = 0;
	*last_step = -1;
	*loss = *accuracy = -1;
	dtf_log(DTF_LOG_INFO, 1, "evaluator: watching %s for new checkpoints",
		dir);
	for (;;) {
		int rc = dtf_comm_notice_test(ev->notice, &arrived, msg);
		if (rc < 0)
			return rc;
		int sig = dtf_fault_pending_signal();
		if (sig)
			return dtf_error(DTF_ERR_SIGNAL,
					 "evaluator: stopped by %s after evaluating %d checkpoint(s)",
					 dtf_fault_signal_name(sig), nevaluated);
		if (arrived && msg[0] != 0)
			return own < 0 ? own : training_failed(msg[0], last);
		int64_t newest = -1;
		if (own == 0 && (rc = dtf_checkpoint_latest(dir, &newest)) < 0)
			own = rc;
		/* a new newest: evaluate it (a skipped one is not retried) */
		if (own == 0 && newest >= 0 && newest != seen) {
			int skipped = 0;
			double l = 0, a = 0;
			seen = newest;
			rc = evaluate_step(ev, newest, &l, &a, &skipped);
			if (rc < 0) {
				own = rc;
				dtf_warn("%s; evaluation stops, waiting for the training to end",
					 dtf_error_msg());
			} else if (!skipped) {
				last = newest;
				*last_step = last;
				*loss = l;
				*accuracy = a;
				nevaluated++;
			}
			continue; /* look again at once: the notice, a newer one */
		}
		if (arrived)
			break;
		sleep_seconds(DTF_EVALUATOR_POLL_SECONDS);
	}
	if (own < 0)
		return own;
	if (last != msg[1])
		dtf_warn("evaluator: the training ended at step %lld without a checkpoint of that step; %s",
			 (long long)msg[1],
			 last >= 0 ? "the last one was evaluated"
				   : "no checkpoint was evaluated");
	dtf_log(DTF_LOG_INFO, 1,
		"evaluator: the training ended at step %lld; %d checkpoint(s) evaluated, the last of step %lld",
		(long long)msg[1], nevaluated, (long long)last);
	return 0;
}
