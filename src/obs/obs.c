/*
 * obs.c - progress, metrics.jsonl, TensorBoard events, trace and summary.
 *
 * Design: the loop hands over each finished step (its global loss and
 * correct sums, this rank's phase times and the step's clock readings);
 * everything else is derived here.  Three accumulators:
 *   win    since the last logged step: the logged means and rates;
 *   epoch  since the epoch began: the progress line and last-epoch rate;
 *   run    this run's steps and step seconds: the ETA.
 * Rates divide by the summed step durations (t_end - t_begin), so time
 * spent evaluating or checkpointing between steps does not lower them; the
 * summary's mean samples/s is the trainer's whole-run figure instead.
 * Buffers are reserved at open; the per-step path formats into them and
 * makes at most one write per output per logged step (and one per traced
 * step for the trace), which is what keeps the cost of all outputs on
 * near that of none (tests/bench/obs_overhead.sh).
 */
#include "obs/obs.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/lock.h"
#include "core/log.h"
#include "distribute/comm.h"
#include "obs/straggler.h"
#include "obs/tfevents.h"
#include "obs/trace.h"

#define METRICS_BUFFER (64 * 1024)
#define REDRAW_SECONDS 0.1 /* most progress redraws per second: 10 */
#define PATH_SIZE 4096
#define STRAG_HOST 64   /* bytes of a host name in the straggler report */
#define STRAG_FIELDS 8  /* struct dtf_straggler_times's, in its order */
#define STRAG_ROUNDS 5  /* ring round trips per window, the shortest kept */

static const char *const phase_names[DTF_OBS_PHASE_COUNT_] = {
	[DTF_OBS_STEP] = "step",
	[DTF_OBS_DATA_WAIT] = "data_wait",
	[DTF_OBS_AGREE] = "agree",
	[DTF_OBS_FORWARD] = "forward",
	[DTF_OBS_BACKWARD] = "backward",
	[DTF_OBS_ALLREDUCE] = "allreduce",
	[DTF_OBS_OPTIMIZER] = "optimizer",
	[DTF_OBS_EVALUATION] = "evaluation",
	[DTF_OBS_CHECKPOINT] = "checkpoint",
};
_Static_assert(sizeof(phase_names) / sizeof(phase_names[0]) ==
		       DTF_OBS_PHASE_COUNT_,
	       "a name for every phase");

struct window {
	int64_t steps;
	double loss, correct, count; /* global sums */
	double seconds;              /* summed step durations */
	struct dtf_step_times t;     /* this rank's phase sums */
};

struct dtf_obs {
	struct dtf_obs_job job; /* the job's settings (strings borrowed) */
	int rank, world, quiet, tty;
	char host[64];
	int64_t start_step, total_steps, steps_per_epoch, global_batch;
	int eval_at_start;
	int total_epochs;
	double origin; /* dtf_obs_now() just after the opening barrier */

	/* chief's files; NULL when off or after a write error */
	FILE *metrics;
	char *metrics_buf;
	char *metrics_path;
	struct dtf_tfevents *ev_train, *ev_eval;
	char *events_dir; /* logging.dir, for the summary */
	char *ckpt_dir;

	/* every rank's trace */
	struct dtf_trace *trace;
	int trace_on; /* logging.trace was set (the trace may have failed) */
	int64_t trace_from, trace_to; /* 1-based, inclusive; to 0: no end */

	int64_t *rss; /* world: peak resident KB per rank */

	struct window win, ep;
	int epoch;           /* of the steps in `ep` */
	double epoch_begin;  /* t_begin of the epoch's first step */
	double last_epoch_sps;
	int64_t run_steps;
	double run_seconds;
	double last_draw;
	double final_loss, final_accuracy; /* last logged window */
	double eval_loss, eval_accuracy, eval_count;
	int have_final, have_eval;
	int sidecar_eval; /* an evaluator task writes eval/ */

	/* stragglers (obs/straggler.h): this rank's window on every rank;
	 * the rest on the chief, allocated at open */
	struct window sw;
	int64_t sw_first;              /* the window's first step */
	double *sw_busy, *sw_data, *sw_compute; /* per step of the window */
	struct dtf_straggler *strag;
	double *gathered;              /* world x STRAG_FIELDS */
	struct dtf_straggler_times *rank_t; /* world */
	struct dtf_straggler_verdict *verdict; /* world */
	char (*hosts)[STRAG_HOST];     /* world */
	int *host_idx;                 /* world */
};

double dtf_obs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p; Errors: DTF_ERR_IO. */
static int make_dirs(const char *path)
{
	char buf[PATH_SIZE];
	size_t n = strlen(path);
	if (n == 0)
		return 0;
	if (n >= sizeof(buf))
		return dtf_error(DTF_ERR_IO, "%s: path too long", path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char c = buf[i];
		buf[i] = 0;
		struct stat st;
		if (mkdir(buf, 0777) != 0 && errno != EEXIST)
			return dtf_error(DTF_ERR_IO, "%s: cannot create directory: %s",
					 buf, strerror(errno));
		if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
			return dtf_error(DTF_ERR_IO, "%s: not a directory", buf);
		buf[i] = c;
	}
	return 0;
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = dtf_malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* ---- JSON ---------------------------------------------------------------- */

/* A number, or null for NaN and infinities (not JSON numbers). */
static void jnum(FILE *f, const char *key, double v)
{
	if (isfinite(v))
		fprintf(f, "\"%s\":%.9g", key, v); /* float32 round trip */
	else
		fprintf(f, "\"%s\":null", key);
}

void dtf_obs_put_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void jstr(FILE *f, const char *key, const char *s)
{
	fprintf(f, "\"%s\":", key);
	dtf_obs_put_json_string(f, s);
}

/* End a metrics line: newline, flush; a failure warns once and stops the
 * file. */
static void metrics_end(struct dtf_obs *o)
{
	fputs("}\n", o->metrics);
	if (fflush(o->metrics) != 0 || ferror(o->metrics)) {
		dtf_warn("%s: write error: %s; no more metrics are written",
			 o->metrics_path, strerror(errno ? errno : EIO));
		fclose(o->metrics);
		o->metrics = NULL;
	}
}

static void metrics_head(struct dtf_obs *o, const char *kind, int64_t step,
			 int epoch)
{
	FILE *f = o->metrics;
	fprintf(f, "{\"kind\":\"%s\",\"step\":%lld,\"epoch\":%d,", kind,
		(long long)step, epoch);
	fprintf(f, "\"wall_time\":%.3f,", wall_now());
	jnum(f, "elapsed_s", dtf_obs_now() - o->origin);
}

static void events_check(struct dtf_obs *o, struct dtf_tfevents **w, int rc)
{
	if (rc >= 0)
		return;
	dtf_warn("%s; no more TensorBoard events are written there",
		 dtf_error_msg());
	dtf_tfevents_close(*w);
	*w = NULL;
}

/* ---- open / close ---------------------------------------------------------- */

/* Open <dir>/metrics.jsonl for append and lock it: one writer per file. */
static int open_metrics(struct dtf_obs *o, const char *dir)
{
	if (!(o->metrics_path = join(dir, "metrics.jsonl")) ||
	    !(o->metrics_buf = dtf_malloc(METRICS_BUFFER)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	o->metrics = fopen(o->metrics_path, "a");
	if (!o->metrics)
		return dtf_error(DTF_ERR_IO, "%s: cannot open for append: %s",
				 o->metrics_path, strerror(errno));
	setvbuf(o->metrics, o->metrics_buf, _IOFBF, METRICS_BUFFER);
	char busy[PATH_SIZE + 96];
	snprintf(busy, sizeof(busy),
		 "%s: another run is writing to this logging.dir (the file is locked)",
		 o->metrics_path);
	return dtf_lock_exclusive(fileno(o->metrics), o->metrics_path,
				  DTF_ERR_IO, busy, 0);
}

static int open_chief_files(struct dtf_obs *o)
{
	const struct dtf_obs_job *job = &o->job;
	const char *dir = job->dir;
	int rc;
	if ((rc = make_dirs(dir)) < 0)
		return rc;
	if (!(o->events_dir = dtf_strdup(dir)))
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if ((rc = open_metrics(o, dir)) < 0)
		return rc;
	metrics_head(o, "start", o->start_step, 0);
	fputc(',', o->metrics);
	jstr(o->metrics, "job", job->name);
	fprintf(o->metrics, ",\"replicas\":%d,\"global_batch\":%lld,"
			    "\"total_steps\":%lld,\"steps_per_epoch\":%lld",
		o->world, (long long)o->global_batch,
		(long long)o->total_steps, (long long)o->steps_per_epoch);
	metrics_end(o);
	if (!o->metrics)
		return dtf_error(DTF_ERR_IO, "%s: write error", o->metrics_path);

	if (!job->tensorboard)
		return 0;
	double wall = wall_now();
	char *sub = join(dir, "train");
	if (!sub)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	rc = make_dirs(sub);
	if (rc == 0)
		rc = dtf_tfevents_open(sub, o->host, wall, &o->ev_train);
	dtf_free(sub);
	if (rc == 0 && job->has_eval && !o->sidecar_eval) {
		if (!(sub = join(dir, "eval")))
			return dtf_error(DTF_ERR_NOMEM, "out of memory");
		rc = make_dirs(sub);
		if (rc == 0)
			rc = dtf_tfevents_open(sub, o->host, wall, &o->ev_eval);
		dtf_free(sub);
	}
	/* TensorBoard drops the points at and after a START's step: the
	 * first this run writes is start_step + 1 (the earlier run's at
	 * start_step, its checkpoint's, stay), or for eval/ start_step when
	 * this run evaluates there again */
	if (rc == 0 && o->start_step > 0) {
		rc = dtf_tfevents_session_start(o->ev_train, o->start_step + 1,
						wall);
		if (rc == 0 && o->ev_eval)
			rc = dtf_tfevents_session_start(
				o->ev_eval, o->start_step + !o->eval_at_start,
				wall);
	}
	return rc;
}

static int open_trace(struct dtf_obs *o)
{
	const char *path = o->job.trace;
	char rank_path[PATH_SIZE], dir[PATH_SIZE];
	dtf_trace_rank_path(path, o->rank, rank_path, sizeof(rank_path));
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		int rc = make_dirs(dir);
		if (rc < 0)
			return rc;
	}
	dtf_log(DTF_LOG_DEBUG, 1, "trace: steps %lld to %lld into %s",
		(long long)o->trace_from, (long long)o->trace_to, rank_path);
	return dtf_trace_open(rank_path, o->rank, o->host, o->origin,
			      &o->trace);
}

/* The straggler report's buffers and the ranks' host names (a gather:
 * every rank calls it, and every rank alike skips it when the report is
 * off or there is one replica). */
static int open_stragglers(struct dtf_obs *o, struct dtf_comm *comm)
{
	if (o->job.straggler_window_steps <= 0 || o->world < 2)
		return 0;
	char mine[STRAG_HOST] = {0};
	snprintf(mine, sizeof(mine), "%s", o->host);
	size_t n = (size_t)o->world, w = (size_t)o->job.straggler_window_steps;
	int rc = 0;
	o->sw_busy = dtf_calloc(w, sizeof(double));
	o->sw_data = dtf_calloc(w, sizeof(double));
	o->sw_compute = dtf_calloc(w, sizeof(double));
	if (!o->sw_busy || !o->sw_data || !o->sw_compute)
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
	if (rc == 0 && o->rank == 0) {
		o->gathered = dtf_calloc(n * STRAG_FIELDS, sizeof(double));
		o->rank_t = dtf_calloc(n, sizeof(*o->rank_t));
		o->verdict = dtf_calloc(n, sizeof(*o->verdict));
		o->hosts = dtf_calloc(n, sizeof(*o->hosts));
		o->host_idx = dtf_calloc(n, sizeof(int));
		if (!o->gathered || !o->rank_t || !o->verdict || !o->hosts ||
		    !o->host_idx)
			rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		if (rc == 0)
			rc = dtf_straggler_new(o->world, o->job.straggler_factor,
					       o->job.straggler_windows,
					       &o->strag);
	}
	/* a failure stops the gather on every rank; the others learn of it
	 * in the caller's agreement */
	int64_t failed = rc < 0;
	int grc = dtf_comm_allreduce_max_i64(comm, &failed, 1);
	if (rc < 0 || grc < 0 || failed)
		return rc < 0 ? rc : grc;
	if ((rc = dtf_comm_gather_bytes(comm, mine, STRAG_HOST, o->hosts,
					0)) < 0 ||
	    o->rank != 0)
		return rc;
	/* host indices 0, 1, ... in order of each host's first rank */
	int nh = 0;
	for (int r = 0; r < o->world; r++) {
		o->hosts[r][STRAG_HOST - 1] = 0;
		int q = 0;
		while (q < r && strcmp(o->hosts[q], o->hosts[r]))
			q++;
		o->host_idx[r] = q < r ? o->host_idx[q] : nh++;
	}
	return 0;
}

int dtf_obs_open(struct dtf_comm *comm, const struct dtf_obs_config *cfg,
		 struct dtf_obs **out)
{
	*out = NULL;
	int rc;
	if ((rc = dtf_comm_barrier(comm)) < 0)
		return rc;
	double origin = dtf_obs_now();
	struct dtf_obs *o = dtf_calloc(1, sizeof(*o));
	if (!o)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	o->job = cfg->job;
	const struct dtf_obs_job *job = &o->job;
	o->origin = origin;
	o->rank = dtf_comm_rank(comm);
	o->world = dtf_comm_size(comm);
	snprintf(o->host, sizeof(o->host), "%s", dtf_comm_host(comm));
	o->quiet = cfg->quiet;
	o->tty = isatty(STDERR_FILENO);
	o->start_step = cfg->start_step;
	o->eval_at_start = cfg->eval_at_start;
	o->total_steps = cfg->total_steps;
	o->steps_per_epoch = cfg->steps_per_epoch;
	o->global_batch = cfg->global_batch;
	o->sidecar_eval = cfg->sidecar_eval;
	o->total_epochs = cfg->steps_per_epoch > 0
				  ? (int)((cfg->total_steps + cfg->steps_per_epoch - 1) /
					  cfg->steps_per_epoch)
				  : 0;
	o->epoch = -1;
	o->trace_from = job->trace_steps[0];
	o->trace_to = job->trace_steps[1];
	o->have_final = o->have_eval = 0;
	o->rss = dtf_calloc((size_t)o->world, sizeof(int64_t));
	if (!o->rss) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = open_stragglers(o, comm)) < 0)
		goto fail;
	if (o->rank == 0 && job->dir &&
	    (rc = open_chief_files(o)) < 0)
		goto fail;
	if (job->trace) {
		o->trace_on = 1;
		if ((rc = open_trace(o)) < 0)
			goto fail;
	}
	if (o->rank == 0 && job->dir)
		dtf_log(DTF_LOG_DEBUG, 0, "logging to %s (metrics.jsonl%s)",
			job->dir,
			o->ev_train ? ", TensorBoard events in train/ and eval/" : "");
	*out = o;
	return 0;
fail:
	dtf_obs_free(o);
	return rc;
}

int dtf_obs_open_evaluator(const struct dtf_obs_job *job, const char *host,
			   struct dtf_obs **out)
{
	*out = NULL;
	struct dtf_obs *o = dtf_calloc(1, sizeof(*o));
	if (!o)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	o->job = *job;
	o->origin = dtf_obs_now();
	o->world = 1;
	o->quiet = 1;
	o->epoch = -1;
	snprintf(o->host, sizeof(o->host), "%s", host);
	int rc = 0;
	const char *top = job->dir;
	char *dir = top ? join(top, "eval") : NULL;
	if (top && !dir)
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
	if (dir && rc == 0)
		rc = make_dirs(dir);
	if (dir && rc == 0)
		rc = open_metrics(o, dir);
	if (dir && rc == 0) {
		metrics_head(o, "start", 0, 0);
		fputc(',', o->metrics);
		jstr(o->metrics, "job", job->name);
		fputs(",\"task\":\"evaluator\"", o->metrics);
		metrics_end(o);
		if (!o->metrics)
			rc = dtf_error(DTF_ERR_IO, "%s: write error",
				       o->metrics_path);
	}
	if (dir && rc == 0 && job->tensorboard)
		rc = dtf_tfevents_open(dir, o->host, wall_now(), &o->ev_eval);
	if (dir && rc == 0)
		dtf_log(DTF_LOG_DEBUG, 1, "evaluator: logging to %s (metrics.jsonl%s)",
			dir, o->ev_eval ? ", TensorBoard events" : "");
	dtf_free(dir);
	if (rc < 0) {
		dtf_obs_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

void dtf_obs_free(struct dtf_obs *o)
{
	if (!o)
		return;
	if (o->tty)
		dtf_log_progress_end();
	if (o->metrics)
		fclose(o->metrics); /* also drops the lock */
	dtf_tfevents_close(o->ev_train);
	dtf_tfevents_close(o->ev_eval);
	dtf_trace_close(o->trace);
	dtf_free(o->metrics_buf);
	dtf_free(o->metrics_path);
	dtf_free(o->events_dir);
	dtf_free(o->ckpt_dir);
	dtf_free(o->rss);
	dtf_straggler_free(o->strag);
	dtf_free(o->sw_busy);
	dtf_free(o->sw_data);
	dtf_free(o->sw_compute);
	dtf_free(o->gathered);
	dtf_free(o->rank_t);
	dtf_free(o->verdict);
	dtf_free(o->hosts);
	dtf_free(o->host_idx);
	dtf_free(o);
}

void dtf_obs_set_checkpoint_dir(struct dtf_obs *o, const char *dir)
{
	if (!o)
		return;
	dtf_free(o->ckpt_dir);
	o->ckpt_dir = dir ? dtf_strdup(dir) : NULL;
}

/* ---- spans ------------------------------------------------------------------ */

int dtf_obs_tracing(const struct dtf_obs *o, int64_t step)
{
	return o && o->trace && step >= o->trace_from &&
	       (o->trace_to <= 0 || step <= o->trace_to);
}

void dtf_obs_span(struct dtf_obs *o, enum dtf_obs_phase phase, int64_t step,
		  int index, double t0, double t1)
{
	if (!dtf_obs_tracing(o, step) || phase < 0 ||
	    phase >= DTF_OBS_PHASE_COUNT_)
		return;
	/* compute, communication, the gradient buckets (which overlap
	 * backward and one another's ends) */
	int tid = phase == DTF_OBS_ALLREDUCE && index >= 0 ? 2
		  : phase == DTF_OBS_ALLREDUCE || phase == DTF_OBS_AGREE;
	dtf_trace_span(o->trace, phase_names[phase], tid, t0, t1, step, index);
}

static void trace_flush(struct dtf_obs *o)
{
	if (o->trace && dtf_trace_flush(o->trace) < 0) {
		dtf_warn("%s; the trace stops here", dtf_error_msg());
		dtf_trace_close(o->trace);
		o->trace = NULL;
	}
}

/* ---- steps ------------------------------------------------------------------ */

static void add_window(struct window *w, const struct dtf_obs_step *s)
{
	w->steps++;
	w->loss += s->loss_sum;
	w->correct += s->correct;
	w->count += s->count;
	w->seconds += s->t_end - s->t_begin;
	w->t.data_wait += s->times.data_wait;
	w->t.forward += s->times.forward;
	w->t.backward += s->times.backward;
	w->t.comm += s->times.comm;
	w->t.optimizer += s->times.optimizer;
}

static double rate(const struct dtf_obs *o, const struct window *w)
{
	return w->seconds > 0 ? (double)w->steps * (double)o->global_batch /
					w->seconds
			      : 0;
}

/* "h:mm:ss" of the remaining steps at this run's mean step time. */
static void eta(const struct dtf_obs *o, int64_t step, char *buf, size_t size)
{
	if (o->run_steps == 0) {
		snprintf(buf, size, "?");
		return;
	}
	double s = (double)(o->total_steps - step) * o->run_seconds /
		   (double)o->run_steps;
	long t = lround(s);
	snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* The progress line.  Its bar fills with the steps of the whole run, as
 * the "step S/T" beside it counts them (a run cut short by max_steps, or
 * resumed inside an epoch, would not fill an epoch's bar). */
static void draw_progress(struct dtf_obs *o, const struct dtf_obs_step *s)
{
	char line[256], left[32], bar[24];
	int64_t width = 20;
	int64_t done = o->total_steps > 0 ? s->step * width / o->total_steps
					  : width;
	if (done > width)
		done = width;
	for (int64_t i = 0; i < width; i++)
		bar[i] = i < done ? '=' : (i == done ? '>' : '.');
	bar[width] = 0;
	eta(o, s->step, left, sizeof(left));
	int n = snprintf(line, sizeof(line),
			 "epoch %d/%d  step %lld/%lld [%s]  loss %.4f",
			 s->epoch + 1, o->total_epochs, (long long)s->step,
			 (long long)o->total_steps, bar,
			 o->ep.loss / o->ep.count);
	if (o->job.metric_accuracy)
		n += snprintf(line + n, sizeof(line) - (size_t)n,
			      "  accuracy %.4f", o->ep.correct / o->ep.count);
	snprintf(line + n, sizeof(line) - (size_t)n,
		 "  lr %.3g  %.0f samples/s  ETA %s", s->learning_rate,
		 rate(o, &o->ep), left);
	dtf_log_progress(line);
}

static void log_line(struct dtf_obs *o, const struct dtf_obs_step *s)
{
	const struct window *w = &o->win;
	double per = 1e3 / (double)w->steps;
	char left[32], acc[40] = "";
	eta(o, s->step, left, sizeof(left));
	if (o->job.metric_accuracy)
		snprintf(acc, sizeof(acc), "  accuracy %.4f",
			 w->correct / w->count);
	dtf_info("step %lld/%lld  epoch %d/%d  loss %.4f%s  lr %.3g  %.0f samples/s  ETA %s  "
		 "(ms/step: data %.1f fwd %.1f bwd %.1f comm %.1f opt %.1f)",
		 (long long)s->step, (long long)o->total_steps, s->epoch + 1,
		 o->total_epochs, w->loss / w->count, acc, s->learning_rate,
		 rate(o, w), left, w->t.data_wait * per, w->t.forward * per,
		 w->t.backward * per, w->t.comm * per, w->t.optimizer * per);
}

static void write_train_metrics(struct dtf_obs *o, const struct dtf_obs_step *s)
{
	const struct window *w = &o->win;
	double per = 1e3 / (double)w->steps;
	double loss = w->loss / w->count, acc = w->correct / w->count;
	double ms[5] = {w->t.data_wait * per, w->t.forward * per,
			w->t.backward * per, w->t.comm * per,
			w->t.optimizer * per};
	static const char *const parts[5] = {"data_wait", "forward", "backward",
					     "comm", "optimizer"};
	if (o->metrics) {
		FILE *f = o->metrics;
		metrics_head(o, "train", s->step, s->epoch + 1);
		fputc(',', f);
		jnum(f, "loss", loss);
		fputs(",\"metrics\":{", f);
		if (o->job.metric_accuracy)
			jnum(f, "accuracy", acc);
		fputs("},", f);
		jnum(f, "learning_rate", s->learning_rate);
		fputc(',', f);
		jnum(f, "samples_per_second", rate(o, w));
		fprintf(f, ",\"steps\":%lld,\"step_time_ms\":{",
			(long long)w->steps);
		double total = 0;
		for (int i = 0; i < 5; i++) {
			jnum(f, parts[i], ms[i]);
			fputc(',', f);
			total += ms[i];
		}
		jnum(f, "total", total);
		fputc('}', f);
		metrics_end(o);
	}
	if (o->ev_train) {
		struct dtf_tfevents_scalar v[10];
		int n = 0;
		v[n++] = (struct dtf_tfevents_scalar){"loss", (float)loss};
		if (o->job.metric_accuracy)
			v[n++] = (struct dtf_tfevents_scalar){"accuracy",
							     (float)acc};
		v[n++] = (struct dtf_tfevents_scalar){"learning_rate",
						     (float)s->learning_rate};
		v[n++] = (struct dtf_tfevents_scalar){"samples_per_second",
						     (float)rate(o, w)};
		static const char *const tags[5] = {
			"step_time_ms/data_wait", "step_time_ms/forward",
			"step_time_ms/backward", "step_time_ms/comm",
			"step_time_ms/optimizer"};
		for (int i = 0; i < 5; i++)
			v[n++] = (struct dtf_tfevents_scalar){tags[i],
							     (float)ms[i]};
		int rc = dtf_tfevents_scalars(o->ev_train, s->step, wall_now(),
					      v, n);
		if (rc == 0)
			rc = dtf_tfevents_flush(o->ev_train);
		events_check(o, &o->ev_train, rc);
	}
}

void dtf_obs_step(struct dtf_obs *o, const struct dtf_obs_step *s)
{
	if (!o)
		return;
	if (s->epoch != o->epoch) {
		if (o->ep.steps)
			o->last_epoch_sps = rate(o, &o->ep);
		memset(&o->ep, 0, sizeof(o->ep));
		o->epoch = s->epoch;
		o->epoch_begin = s->t_begin;
		if (o->tty && !o->quiet)
			dtf_log_progress_end();
	}
	add_window(&o->win, s);
	add_window(&o->ep, s);
	if (o->sw_busy && o->sw.steps < o->job.straggler_window_steps) {
		if (!o->sw.steps)
			o->sw_first = s->step;
		double c = s->times.forward + s->times.backward +
			   s->times.optimizer;
		o->sw_busy[o->sw.steps] = s->times.data_wait + c;
		o->sw_data[o->sw.steps] = s->times.data_wait;
		o->sw_compute[o->sw.steps] = c;
		add_window(&o->sw, s);
	}
	o->run_steps++;
	o->run_seconds += s->t_end - s->t_begin;
	if (dtf_obs_tracing(o, s->step)) {
		dtf_obs_span(o, DTF_OBS_STEP, s->step, -1, s->t_begin, s->t_end);
		trace_flush(o);
	}
	int64_t every = o->job.every_steps;
	int logged = s->step == o->total_steps ||
		     (every > 0 && s->step % every == 0);
	if (o->rank != 0)
		goto out;
	if (!o->quiet && o->tty &&
	    (logged || s->t_end - o->last_draw >= REDRAW_SECONDS)) {
		draw_progress(o, s);
		o->last_draw = s->t_end;
	}
	if (!logged)
		return;
	if (!o->quiet && !o->tty)
		log_line(o, s);
	write_train_metrics(o, s);
	o->final_loss = o->win.loss / o->win.count;
	o->final_accuracy = o->win.correct / o->win.count;
	o->have_final = 1;
out:
	if (logged)
		memset(&o->win, 0, sizeof(o->win));
}

/* ---- stragglers ------------------------------------------------------------ */

/* The warning naming rank r (and, for the network, the other ranks of its
 * host named in the same window), or the notice that it recovered. */
static void name_straggler(struct dtf_obs *o, int r, int64_t first,
			   int64_t step)
{
	const struct dtf_straggler_verdict *v = &o->verdict[r];
	const struct dtf_straggler_times *t = &o->rank_t[r];
	const char *host = o->hosts[r];
	if (v->cleared) {
		dtf_info("straggler: rank %d (host %s) is no longer slow in the window of steps %lld to %lld",
			 r, host, (long long)first, (long long)step);
		return;
	}
	if (!v->named)
		return;
	char span[96];
	snprintf(span, sizeof(span),
		 "for the last %d window(s) of %lld steps (to step %lld)",
		 v->streak, (long long)o->job.straggler_window_steps,
		 (long long)step);
	double ratio = v->median > 0 ? v->value / v->median : 0;
	if (v->cause != DTF_STRAGGLER_NETWORK) {
		dtf_warn("straggler: rank %d (host %s), cause %s, %s: data wait + compute %.1f ms in its median step, %.2fx the median of the other ranks (%.1f ms); compute %.1f ms, data wait %.1f ms; the other ranks wait for it in their communication",
			 r, host, dtf_straggler_cause_name(v->cause), span,
			 1e3 * v->value, ratio, 1e3 * v->median,
			 1e3 * t->compute_median, 1e3 * t->data_wait_median);
		return;
	}
	for (int q = 0; q < r; q++)
		if (o->host_idx[q] == o->host_idx[r] && o->verdict[q].named &&
		    o->verdict[q].cause == DTF_STRAGGLER_NETWORK)
			return; /* named with its host's first rank */
	char ranks[128] = "";
	size_t len = 0;
	int more = 0;
	for (int q = r + 1; q < o->world; q++)
		if (o->host_idx[q] == o->host_idx[r] && o->verdict[q].named &&
		    o->verdict[q].cause == DTF_STRAGGLER_NETWORK) {
			if (len + 16 >= sizeof(ranks)) {
				more = 1;
				break;
			}
			len += (size_t)snprintf(ranks + len, sizeof(ranks) - len,
						",%d", q);
		}
	dtf_warn("straggler: rank %d%s%s (host %s), cause network, %s: the shortest round trip of the host's links to other hosts %.2f ms, %.2fx the median of the other hosts (%.2f ms); its compute and data wait are even with the other ranks'",
		 r, ranks, more ? ",..." : "", host, span, 1e3 * v->value,
		 ratio, 1e3 * v->median);
}

/* metrics.jsonl "rank_times" line and rank_time_ms scalars of a window. */
static void write_rank_times(struct dtf_obs *o, int64_t first, int64_t step)
{
	static const char *const parts[6] = {"step", "data_wait", "compute",
					     "comm", "busy_median", "link_rtt"};
	if (o->metrics) {
		FILE *f = o->metrics;
		metrics_head(o, "rank_times", step, o->epoch + 1);
		fprintf(f, ",\"first_step\":%lld,\"window_steps\":%lld,"
			   "\"ranks\":[",
			(long long)first, (long long)(step - first + 1));
		for (int r = 0; r < o->world; r++) {
			const struct dtf_straggler_times *t = &o->rank_t[r];
			const struct dtf_straggler_verdict *v = &o->verdict[r];
			double ms[6] = {t->step, t->data_wait, t->compute,
					t->comm, t->busy_median, t->link_rtt};
			fprintf(f, "%s{\"rank\":%d,", r ? "," : "", r);
			jstr(f, "host", o->hosts[r]);
			for (int i = 0; i < 6; i++) {
				char key[32];
				snprintf(key, sizeof(key), "%s_ms", parts[i]);
				fputc(',', f);
				jnum(f, key, 1e3 * ms[i]);
			}
			const char *c = dtf_straggler_cause_name(v->cause);
			if (c)
				fprintf(f, ",\"straggler\":\"%s\",\"streak\":%d",
					c, v->streak);
			else
				fputs(",\"straggler\":null", f);
			fputc('}', f);
		}
		fputc(']', f);
		metrics_end(o);
	}
	if (!o->ev_train)
		return;
	struct dtf_tfevents_scalar v[DTF_TFEVENTS_MAX_SCALARS];
	char tags[DTF_TFEVENTS_MAX_SCALARS][DTF_TFEVENTS_MAX_TAG];
	int n = 0, rc = 0;
	double wall = wall_now();
	for (int r = 0; r < o->world && rc == 0; r++) {
		const struct dtf_straggler_times *t = &o->rank_t[r];
		double ms[6] = {t->step, t->data_wait, t->compute, t->comm,
				t->busy_median, t->link_rtt};
		for (int i = 0; i < 6; i++) {
			snprintf(tags[n], sizeof(tags[n]),
				 "rank_time_ms/%s/rank_%d", parts[i], r);
			v[n] = (struct dtf_tfevents_scalar){tags[n],
							    (float)(1e3 * ms[i])};
			n++;
		}
		if (n + 6 > DTF_TFEVENTS_MAX_SCALARS || r == o->world - 1) {
			rc = dtf_tfevents_scalars(o->ev_train, step, wall, v, n);
			n = 0;
		}
	}
	if (rc == 0)
		rc = dtf_tfevents_flush(o->ev_train);
	events_check(o, &o->ev_train, rc);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of v[0..n-1] (sorted in place), n >= 1. */
static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int dtf_obs_stragglers(struct dtf_obs *o, struct dtf_comm *comm,
		       int64_t step)
{
	int64_t every = o ? o->job.straggler_window_steps : 0;
	if (!o || every <= 0 || o->world < 2 || step % every || !o->sw.steps)
		return 0;
	double rtt = 0;
	int rc = dtf_comm_ring_rtt(comm, STRAG_ROUNDS, &rtt);
	if (rc < 0)
		return rc;
	const struct window *w = &o->sw;
	double k = 1.0 / (double)w->steps;
	int ns = (int)w->steps;
	double mine[STRAG_FIELDS] = {
		w->seconds * k, w->t.data_wait * k,
		(w->t.forward + w->t.backward + w->t.optimizer) * k,
		w->t.comm * k, median_of(o->sw_busy, ns),
		median_of(o->sw_data, ns), median_of(o->sw_compute, ns), rtt};
	int64_t first = o->sw_first;
	memset(&o->sw, 0, sizeof(o->sw));
	if ((rc = dtf_comm_gather_f64(comm, mine, STRAG_FIELDS, o->gathered,
				      0)) < 0 ||
	    o->rank != 0)
		return rc;
	for (int r = 0; r < o->world; r++) {
		const double *g = o->gathered + (size_t)r * STRAG_FIELDS;
		o->rank_t[r] = (struct dtf_straggler_times){
			.step = g[0], .data_wait = g[1], .compute = g[2],
			.comm = g[3], .busy_median = g[4],
			.data_wait_median = g[5], .compute_median = g[6],
			.link_rtt = g[7]};
	}
	dtf_straggler_update(o->strag, o->rank_t, o->host_idx, o->verdict);
	for (int r = 0; r < o->world; r++)
		name_straggler(o, r, first, step);
	write_rank_times(o, first, step);
	return 0;
}

void dtf_obs_eval(struct dtf_obs *o, int64_t step, int epoch, double loss,
		  double accuracy, double top_k_accuracy, double count,
		  double t0, double t1)
{
	int top_k = o && o->job.metric_top_k && top_k_accuracy >= 0;
	if (!o)
		return;
	if (dtf_obs_tracing(o, step)) {
		dtf_obs_span(o, DTF_OBS_EVALUATION, step, -1, t0, t1);
		trace_flush(o);
	}
	o->eval_loss = loss;
	o->eval_accuracy = accuracy;
	o->eval_count = count;
	o->have_eval = 1;
	if (o->rank != 0)
		return;
	if (!o->quiet) {
		if (o->tty)
			dtf_log_progress_end();
		char acc[80] = "";
		int n = 0;
		if (o->job.metric_accuracy)
			n = snprintf(acc, sizeof(acc), "  accuracy %.4f",
				     accuracy);
		if (top_k)
			snprintf(acc + n, sizeof(acc) - (size_t)n,
				 "  top-%d accuracy %.4f",
				 o->job.metric_top_k, top_k_accuracy);
		/* the step too: train.eval_every_steps evaluates inside
		 * epochs */
		dtf_info("epoch %d, step %lld: %.1f s into the epoch; eval loss %.4f%s  (%.0f examples, %.1f s)",
			 epoch + 1, (long long)step, t1 - o->epoch_begin, loss,
			 acc, count, t1 - t0);
	}
	if (o->metrics) {
		FILE *f = o->metrics;
		metrics_head(o, "eval", step, epoch + 1);
		fputc(',', f);
		jnum(f, "loss", loss);
		fputs(",\"metrics\":{", f);
		if (o->job.metric_accuracy)
			jnum(f, "accuracy", accuracy);
		if (top_k) {
			if (o->job.metric_accuracy)
				fputc(',', f);
			jnum(f, "top_k_accuracy", top_k_accuracy);
		}
		fputs("},", f);
		jnum(f, "examples", count);
		fputc(',', f);
		jnum(f, "seconds", t1 - t0);
		metrics_end(o);
	}
	if (o->ev_eval) {
		struct dtf_tfevents_scalar v[3] = {{"loss", (float)loss}};
		int n = 1;
		if (o->job.metric_accuracy)
			v[n++] = (struct dtf_tfevents_scalar){"accuracy",
							      (float)accuracy};
		if (top_k)
			v[n++] = (struct dtf_tfevents_scalar){
				"top_k_accuracy", (float)top_k_accuracy};
		int rc = dtf_tfevents_scalars(o->ev_eval, step, wall_now(), v, n);
		if (rc == 0)
			rc = dtf_tfevents_flush(o->ev_eval);
		events_check(o, &o->ev_eval, rc);
	}
}

/* ---- dtf-train evaluate ------------------------------------------------------ */

int dtf_obs_append_evaluate(const struct dtf_obs_job *job,
			    const struct dtf_obs_evaluate *e)
{
	if (!job->dir)
		return 0;
	char line[3 * PATH_SIZE];
	FILE *f = fmemopen(line, sizeof(line), "w");
	if (!f)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	fprintf(f, "{\"kind\":\"evaluate\",\"step\":%lld,\"wall_time\":%.3f,",
		(long long)e->step, wall_now());
	jstr(f, "checkpoint", e->checkpoint);
	fputc(',', f);
	jstr(f, "data", e->data);
	fputc(',', f);
	jnum(f, "loss", e->loss);
	fputs(",\"metrics\":{", f);
	if (job->metric_accuracy)
		jnum(f, "accuracy", e->accuracy);
	if (job->metric_top_k && e->top_k_accuracy >= 0) {
		if (job->metric_accuracy)
			fputc(',', f);
		jnum(f, "top_k_accuracy", e->top_k_accuracy);
	}
	fputs("},", f);
	jnum(f, "correct", e->correct);
	fputc(',', f);
	jnum(f, "examples", e->examples);
	fputc(',', f);
	if (e->positions > 1) {
		jnum(f, "positions", e->positions);
		fputc(',', f);
	}
	jnum(f, "seconds", e->seconds);
	fputs("}\n", f);
	long len = ftell(f);
	int full = ferror(f) || len <= 0 || (size_t)len >= sizeof(line) - 1;
	fclose(f);
	if (full)
		return dtf_error(DTF_ERR_IO,
				 "the evaluate line for metrics.jsonl is too long (paths of %zu and %zu bytes)",
				 strlen(e->checkpoint), strlen(e->data));
	int rc = make_dirs(job->dir);
	char *path = rc == 0 ? join(job->dir, "metrics.jsonl") : NULL;
	if (rc == 0 && !path)
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
	int fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
			     0644)
		      : -1;
	if (path && fd < 0)
		rc = dtf_error(DTF_ERR_IO, "%s: cannot open for append: %s",
			       path, strerror(errno));
	/* one write: O_APPEND puts it whole at the end of the file */
	if (fd >= 0 && write(fd, line, (size_t)len) != (ssize_t)len)
		rc = dtf_error(DTF_ERR_IO, "%s: write failed: %s", path,
			       strerror(errno));
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = dtf_error(DTF_ERR_IO, "%s: write failed: %s", path,
			       strerror(errno));
	dtf_free(path);
	return rc;
}

/* ---- the end ------------------------------------------------------------------ */

/* Merge the ranks' trace files of `path` into it and remove them.  Returns
 * the number of rank files merged, or an error. */
static int merge_rank_files(const char *path, int world)
{
	char **names = dtf_calloc((size_t)world, sizeof(char *));
	int rc = 0, missing = 0;
	if (!names)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	for (int i = 0; i < world && rc == 0; i++) {
		names[i] = dtf_malloc(PATH_SIZE);
		if (!names[i])
			rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		else
			dtf_trace_rank_path(path, i, names[i], PATH_SIZE);
	}
	if (rc == 0)
		rc = dtf_trace_merge(path, (const char *const *)names, world,
				     &missing);
	if (rc == 0)
		for (int i = 0; i < world; i++)
			unlink(names[i]);
	for (int i = 0; i < world; i++)
		dtf_free(names[i]);
	dtf_free(names);
	return rc < 0 ? rc : world - missing;
}

static void print_summary(struct dtf_obs *o, const struct dtf_obs_run *r,
			  const char *trace_where)
{
	const struct dtf_step_times *t = &r->times;
	double parts = t->data_wait + t->forward + t->backward + t->comm +
		       t->optimizer;
	double pct = parts > 0 ? 100.0 / parts : 0;
	int64_t run = r->steps - o->start_step;
	double last = o->ep.steps ? rate(o, &o->ep) : o->last_epoch_sps;
	char line[1024];
	int n;
	dtf_info("done: %lld steps in %.1f s, %.0f samples/s (global batch %lld, %d replica(s))%s",
		 (long long)run, r->wall_seconds, r->samples_per_second,
		 (long long)o->global_batch, o->world,
		 o->start_step ? ", resumed" : "");
	dtf_info("  samples/s     mean %.0f (whole run), last epoch %.0f (steps only)",
		 r->samples_per_second, last);
	dtf_info("  step time     data_wait %.1f%%  forward %.1f%%  backward %.1f%%  comm %.1f%%  optimizer %.1f%%  (%.1f ms/step, rank 0)",
		 t->data_wait * pct, t->forward * pct, t->backward * pct,
		 t->comm * pct, t->optimizer * pct,
		 run > 0 ? 1e3 * parts / (double)run : 0.0);
	if (o->have_final) {
		n = snprintf(line, sizeof(line), "  final train   loss %.4f",
			     o->final_loss);
		if (o->job.metric_accuracy)
			snprintf(line + n, sizeof(line) - (size_t)n,
				 "  accuracy %.4f", o->final_accuracy);
		dtf_info("%s (mean of the last logged steps)", line);
	}
	if (o->have_eval) {
		n = snprintf(line, sizeof(line), "  final eval    loss %.4f",
			     o->eval_loss);
		if (o->job.metric_accuracy)
			snprintf(line + n, sizeof(line) - (size_t)n,
				 "  accuracy %.4f", o->eval_accuracy);
		dtf_info("%s (%.0f examples)", line, o->eval_count);
	}
	n = snprintf(line, sizeof(line), "  peak memory  ");
	for (int i = 0; i < o->world && n < (int)sizeof(line) - 40; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n,
			      " rank %d %.0f MB%s", i, (double)o->rss[i] / 1024,
			      i + 1 < o->world ? "," : "");
	dtf_info("%s (resident)", line);
	dtf_info("  metrics       %s", o->metrics ? o->metrics_path : "none (set logging.dir)");
	if (o->ev_train)
		dtf_info("  events        %s/train%s", o->events_dir,
			 o->ev_eval ? ", eval" : "");
	else
		dtf_info("  events        none");
	dtf_info("  trace         %s", trace_where);
	dtf_info("  checkpoints   %s", o->ckpt_dir ? o->ckpt_dir : "none");
}

static void write_summary_metrics(struct dtf_obs *o,
				  const struct dtf_obs_run *r)
{
	FILE *f = o->metrics;
	const struct dtf_step_times *t = &r->times;
	double parts = t->data_wait + t->forward + t->backward + t->comm +
		       t->optimizer;
	double share = parts > 0 ? 1.0 / parts : 0;
	metrics_head(o, "summary", r->steps, o->epoch + 1);
	fprintf(f, ",\"steps\":%lld,", (long long)(r->steps - o->start_step));
	jnum(f, "wall_seconds", r->wall_seconds);
	fputc(',', f);
	jnum(f, "samples_per_second", r->samples_per_second);
	fputc(',', f);
	jnum(f, "last_epoch_samples_per_second",
	     o->ep.steps ? rate(o, &o->ep) : o->last_epoch_sps);
	fputs(",\"step_time_share\":{", f);
	jnum(f, "data_wait", t->data_wait * share);
	fputc(',', f);
	jnum(f, "forward", t->forward * share);
	fputc(',', f);
	jnum(f, "backward", t->backward * share);
	fputc(',', f);
	jnum(f, "comm", t->comm * share);
	fputc(',', f);
	jnum(f, "optimizer", t->optimizer * share);
	fputs("},\"train\":{", f);
	if (o->have_final) {
		jnum(f, "loss", o->final_loss);
		if (o->job.metric_accuracy) {
			fputc(',', f);
			jnum(f, "accuracy", o->final_accuracy);
		}
	}
	fputs("},\"eval\":{", f);
	if (o->have_eval) {
		jnum(f, "loss", o->eval_loss);
		if (o->job.metric_accuracy) {
			fputc(',', f);
			jnum(f, "accuracy", o->eval_accuracy);
		}
	}
	fputs("},\"peak_rss_mb\":[", f);
	for (int i = 0; i < o->world; i++)
		fprintf(f, "%s%.1f", i ? "," : "", (double)o->rss[i] / 1024);
	fputc(']', f);
	metrics_end(o);
}

int dtf_obs_finish(struct dtf_obs *o, struct dtf_comm *comm,
		   const struct dtf_obs_run *r)
{
	if (!o)
		return 0;
	int rc;
	struct rusage ru;
	memset(o->rss, 0, (size_t)o->world * sizeof(int64_t));
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		o->rss[o->rank] = ru.ru_maxrss; /* KB on Linux */
	if ((rc = dtf_comm_allreduce_max_i64(comm, o->rss, (size_t)o->world)) < 0)
		return rc;

	/* every rank's trace is closed before the chief merges them */
	if (o->trace_on) {
		if (o->trace && dtf_trace_close(o->trace) < 0)
			dtf_warn("%s", dtf_error_msg());
		o->trace = NULL;
		if ((rc = dtf_comm_barrier(comm)) < 0)
			return rc;
	}
	if (o->rank != 0)
		return 0;
	char trace_where[PATH_SIZE + 64] = "none";
	if (o->trace_on) {
		int merged = merge_rank_files(o->job.trace, o->world);
		if (merged < 0)
			dtf_warn("%s; the ranks' trace files are left unmerged",
				 dtf_error_msg());
		else
			snprintf(trace_where, sizeof(trace_where),
				 "%s (%d rank(s))", o->job.trace,
				 merged);
		if (merged >= 0 && merged < o->world)
			dtf_warn("%s: %d of %d ranks' trace files were not found here (not on a shared file system?); they stay where their rank wrote them",
				 o->job.trace, o->world - merged,
				 o->world);
	}
	if (o->tty)
		dtf_log_progress_end();
	if (!o->quiet)
		print_summary(o, r, trace_where);
	if (o->metrics)
		write_summary_metrics(o, r);
	return 0;
}

int dtf_obs_merge_trace(const char *path, int *nfiles)
{
	char pattern[PATH_SIZE];
	dtf_trace_rank_path(path, 0, pattern, sizeof(pattern));
	/* "<stem>.rank0.json" -> "<stem>.rank*.json" */
	char *r0 = strstr(pattern + strlen(pattern) - 11, ".rank0.json");
	if (!r0)
		return dtf_error(DTF_ERR_USAGE, "%s: bad trace path", path);
	memcpy(r0, ".rank*.json", 12);
	glob_t g;
	int grc = glob(pattern, 0, NULL, &g);
	if (grc == GLOB_NOMATCH) {
		*nfiles = 0;
		return dtf_error(DTF_ERR_DATA, "no per-rank trace files %s",
				 pattern);
	}
	if (grc != 0)
		return dtf_error(DTF_ERR_IO, "%s: cannot list files", pattern);
	int rc = dtf_trace_merge(path, (const char *const *)g.gl_pathv,
				 (int)g.gl_pathc, NULL);
	*nfiles = (int)g.gl_pathc;
	globfree(&g);
	return rc;
}
