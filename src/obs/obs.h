/*
 * obs.h - what a person watching training sees: the console progress, the
 * metrics file, TensorBoard event files, the timeline trace and the
 * end-of-run summary.  The training loop calls it with a few lines; it owns
 * every file it writes.
 *
 * Who writes what (the chief is rank 0):
 *   console      the chief, on stderr: a progress line redrawn in place
 *                when stderr is a terminal (epoch, step/total, loss,
 *                accuracy, samples/s, ETA), else a plain line every
 *                logging.every_steps steps with no control characters;
 *                nothing per step with `quiet`.
 *   metrics      the chief: <logging.dir>/metrics.jsonl, one JSON object
 *                per line (kind "start", "train" every logging.every_steps
 *                steps, "eval", "summary"), opened for append so a resumed
 *                run continues the same file; locked (flock) so a second
 *                run writing to the same directory fails at start.
 *   events       the chief, when logging.dir is set and logging.tensorboard
 *                (default true): <dir>/train/events.out.tfevents.* and
 *                <dir>/eval/events.out.tfevents.* (obs/tfevents.h).
 *   evaluator    when the cluster has an evaluator task, it alone writes
 *                <dir>/eval/: its own metrics.jsonl ("start", then one
 *                "eval" line per evaluated checkpoint) and the eval events;
 *                the chief then evaluates nothing and writes no eval/.
 *   trace        every rank, when logging.trace is set, for the steps in
 *                logging.trace_steps: its own file (obs/trace.h), merged by
 *                the chief into logging.trace at the end of a run.
 *   summary      the chief, on stderr at the end, and a "summary" line in
 *                metrics.jsonl.
 *   stragglers   every fault.straggler_window_steps steps with more than
 *                one replica: every rank's times of the window (and its
 *                round trip to the next rank) gathered to the chief, which
 *                names a slow rank and its cause in a warning
 *                (obs/straggler.h) and writes a "rank_times" line to
 *                metrics.jsonl and rank_time_ms/<part>/rank_<r> scalars
 *                to the train events.
 *
 * Steps are numbered from 1: step N is the N-th update, counted over
 * resumes (the trainer passes the step it starts from).  Clocks: every time
 * argument is dtf_obs_now() (CLOCK_MONOTONIC seconds); dtf_obs_open() lines
 * the ranks' timelines up with a barrier and takes the origin right after it,
 * so trace timestamps agree across ranks on a node to within the barrier's
 * exit skew (microseconds on shared memory).
 *
 * Files fail softly once open: a write error (a full disk) is reported once
 * as a warning and that output stops; training goes on.  Only opening fails
 * the run.  Nothing is allocated after dtf_obs_open().  Not thread-safe:
 * call from the training thread.
 */
#ifndef DTF_OBS_OBS_H
#define DTF_OBS_OBS_H

#include <stdint.h>
#include <stdio.h>

struct dtf_comm;
struct dtf_obs;

/* What obs reads of the job (train.h's dtf_train_obs_job fills it from
 * a struct dtf_job).  Strings are borrowed for the life of the dtf_obs. */
struct dtf_obs_job {
	const char *name;        /* the job's name */
	const char *dir;         /* logging.dir, NULL: no files */
	int tensorboard;         /* logging.tensorboard */
	const char *trace;       /* logging.trace, NULL: none */
	int64_t trace_steps[2];  /* logging.trace_steps: [from, to], 1-based */
	int64_t every_steps;     /* logging.every_steps */
	int metric_accuracy;     /* model.metrics has accuracy */
	int metric_top_k;        /* top_k_accuracy's k; 0: none */
	int has_eval;            /* data.eval.files is set */
	/* fault.straggler_*: a window every `straggler_window_steps` steps
	 * (0: no straggler report), named after `straggler_windows` in a
	 * row, at `straggler_factor` x the others' median (obs/straggler.h) */
	int64_t straggler_window_steps;
	int straggler_windows;
	double straggler_factor;
};

/* Seconds per phase of a step, or summed over a run. */
struct dtf_step_times {
	double data_wait; /* waiting for the input pipeline */
	double forward, backward;
	double comm;      /* allreduce and status agreement, not overlapped */
	double optimizer;
	double mark;      /* internal: start of the current phase */
};

/* A finished run, as this rank saw it, for the summary. */
struct dtf_obs_run {
	int64_t steps;             /* global step at the end */
	double wall_seconds;
	double samples_per_second; /* over all replicas */
	struct dtf_step_times times; /* this rank's, whole run */
};

/* Spans of the timeline; tid 1 (communication) for the collectives. */
enum dtf_obs_phase {
	DTF_OBS_STEP,       /* a whole step, around the others */
	DTF_OBS_DATA_WAIT,  /* waiting for the input pipeline */
	DTF_OBS_AGREE,      /* the per-step status agreement */
	DTF_OBS_FORWARD,
	DTF_OBS_BACKWARD,
	DTF_OBS_ALLREDUCE,  /* one call per bucket: pass its index */
	DTF_OBS_OPTIMIZER,
	DTF_OBS_EVALUATION,
	DTF_OBS_CHECKPOINT, /* hook for the checkpoint writer */
	DTF_OBS_PHASE_COUNT_
};

struct dtf_obs_config {
	struct dtf_obs_job job;
	int quiet;              /* no progress or per-step console lines */
	int64_t start_step;     /* steps done before this run (resume), >= 0 */
	int eval_at_start;      /* this run evaluates at start_step again (a
				   checkpoint at an epoch's end) */
	int64_t total_steps;    /* the run ends at this step */
	int64_t steps_per_epoch;
	int64_t global_batch;   /* examples per step over all replicas */
	int sidecar_eval;       /* an evaluator task writes <dir>/eval/ */
};

/*
 * Collective: every rank calls it.  Barrier, clock origin, then the chief
 * creates logging.dir (and parents), opens metrics.jsonl (append) and the
 * event files, and each rank opens its trace file.  On error *out is NULL
 * and nothing is left open; the caller must agree on the status with the
 * other ranks before the next collective.
 * Errors: DTF_ERR_IO naming the path (cannot create, locked by another
 * run), DTF_ERR_NOMEM, DTF_ERR_MPI.
 */
int dtf_obs_open(struct dtf_comm *comm, const struct dtf_obs_config *cfg,
		 struct dtf_obs **out);

/*
 * The evaluator task's outputs (train/evaluator.h), opened without any
 * collective: <logging.dir>/eval/metrics.jsonl (append, locked: one writer
 * per file) starting with a "start" line {"task":"evaluator"}, and, with
 * logging.tensorboard, <logging.dir>/eval/events.out.tfevents.*; nothing
 * without logging.dir.  Feed it with dtf_obs_eval (no console lines: the
 * evaluator logs its own).  Free with dtf_obs_free.
 * Errors: DTF_ERR_IO naming the path, DTF_ERR_NOMEM.
 */
int dtf_obs_open_evaluator(const struct dtf_obs_job *job, const char *host,
			   struct dtf_obs **out);

/* The clock of every time argument: CLOCK_MONOTONIC, seconds. */
double dtf_obs_now(void);

/* 1 when step `step` is inside logging.trace_steps and a trace is open
 * (0 for o == NULL): guard span calls with it. */
int dtf_obs_tracing(const struct dtf_obs *o, int64_t step);

/*
 * A span of the timeline from t0 to t1 for step `step`; `index` >= 0 adds
 * "index" to the event's args (an allreduce bucket), -1 for none.  Does
 * nothing when the step is not traced.  o may be NULL.
 */
void dtf_obs_span(struct dtf_obs *o, enum dtf_obs_phase phase, int64_t step,
		  int index, double t0, double t1);

/* One finished training step, as the loop saw it. */
struct dtf_obs_step {
	int64_t step;         /* 1-based, after the update */
	int epoch;            /* 0-based */
	double loss_sum;      /* summed over the global batch */
	double correct;       /* correct predictions over the global batch */
	double count;         /* examples in the global batch */
	double learning_rate; /* the rate this step used */
	struct dtf_step_times times; /* this rank's seconds per phase */
	double t_begin, t_end; /* dtf_obs_now() around the step */
};

/* Account one step: progress line, and every logging.every_steps steps
 * (and at the last) a console line, a metrics line and train events.  o may
 * be NULL. */
void dtf_obs_step(struct dtf_obs *o, const struct dtf_obs_step *s);

/*
 * Collective over the replicas, called by every rank after each
 * dtf_obs_step: at the end of a straggler window (step a multiple of
 * fault.straggler_window_steps) the ranks measure their ring round trips
 * (dtf_comm_ring_rtt) and gather their window's times to the chief, which
 * judges them and writes the report (see "stragglers" above); otherwise
 * nothing.  Does nothing (and no collective) on every rank alike when the
 * window is off or there is one replica.  o may be NULL on no rank or on
 * every rank.  Errors: DTF_ERR_MPI.
 */
int dtf_obs_stragglers(struct dtf_obs *o, struct dtf_comm *comm,
		       int64_t step);

/* An evaluation after `step` (epoch 0-based): console line, metrics line,
 * eval events, evaluation span from t0 to t1.  top_k_accuracy is the
 * fraction for model.metric_top_k, negative when not computed (no
 * top_k_accuracy metric, or the GPU path).  o may be NULL. */
void dtf_obs_eval(struct dtf_obs *o, int64_t step, int epoch, double loss,
		  double accuracy, double top_k_accuracy, double count,
		  double t0, double t1);

/* s as a JSON string (RFC 8259): in quotes, '"' and '\' escaped,
 * control characters as \u00XX; other bytes as they are (UTF-8). */
void dtf_obs_put_json_string(FILE *f, const char *s);

/* The result of `dtf-train evaluate` (train/infer.h). */
struct dtf_obs_evaluate {
	const char *checkpoint; /* the file evaluated */
	const char *data;       /* the glob pattern of the data */
	int64_t step;           /* the checkpoint's global step */
	double loss, accuracy;
	double top_k_accuracy;  /* negative: not computed */
	/* correct: right predictions, counted per position for a sequence
	 * loss (logits (n, t, classes): up to n * t); positions: the
	 * positions per example (1 for a per-example loss, t for a sequence
	 * loss), so correct / (examples * positions) = accuracy */
	double correct, examples;
	int positions;
	double seconds;         /* of the evaluation pass */
};

/*
 * Append one line {"kind":"evaluate","step":S,"wall_time":T,
 * "checkpoint":P,"data":D,"loss":L,"metrics":{"accuracy":A,
 * "top_k_accuracy":K},"correct":C,"examples":N,"positions":P,"seconds":X}
 * ("positions" only where it is above 1; the metrics
 * the job asks for, as the "eval" lines) to <job->dir>/metrics.jsonl,
 * making the directory if needed; nothing without job->dir.  One write(2)
 * on a descriptor opened O_APPEND, so the line lands whole even beside a
 * training appending to the same file, whose lock it does not take.
 * Errors: DTF_ERR_IO naming the file, DTF_ERR_NOMEM.
 */
int dtf_obs_append_evaluate(const struct dtf_obs_job *job,
			    const struct dtf_obs_evaluate *e);

/* Where checkpoints go, for the summary (copied; NULL: none).  Hook for the
 * checkpoint writer, with dtf_obs_span(DTF_OBS_CHECKPOINT) around a save. */
void dtf_obs_set_checkpoint_dir(struct dtf_obs *o, const char *dir);

/*
 * Collective, at the end of a successful run on every rank: gather the peak
 * resident memory of each rank (getrusage) to the chief, flush and close
 * the trace files and let the chief merge them into logging.trace, print
 * the summary block and write the summary line.  `r` is this rank's result
 * (steps, wall time, samples/s, step times).  o may be NULL on no rank
 * or on every rank.  Errors: DTF_ERR_MPI; output errors are warnings.
 */
int dtf_obs_finish(struct dtf_obs *o, struct dtf_comm *comm,
		   const struct dtf_obs_run *r);

/*
 * Merge the per-rank files of the trace `path` ("<stem>.rank*.json", as a
 * killed run leaves them) into `path`, keeping the rank files; *nfiles gets
 * how many were merged.  For `dtf-train --merge-trace`.
 * Errors: DTF_ERR_DATA (none found, or not a trace), DTF_ERR_IO, DTF_ERR_NOMEM.
 */
int dtf_obs_merge_trace(const char *path, int *nfiles);

/* Close everything without collectives (after an error too; the trace
 * files stay valid, unmerged).  NULL is a no-op. */
void dtf_obs_free(struct dtf_obs *o);

#endif
