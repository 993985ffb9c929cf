/*
 * evaluator.h - the TF_CONFIG "evaluator" task: sidecar evaluation of each
 * new checkpoint, as TensorFlow's evaluator does (tf.estimator's
 * train_and_evaluate, tf.distribute's side-car evaluation with
 * tf.train.checkpoints_iterator).
 *
 * The evaluator rank joins no training collective (the strategy gives it no
 * replica communicator and does not count it in the global batch).  After
 * the set-up agreement on the world it watches checkpoint.dir: every poll
 * it reads the index "checkpoint" (which names only complete files, see
 * checkpoint.h) and, when the newest checkpoint is one it has not
 * evaluated, loads it into its own copy of the variables and evaluates
 * data.eval with the trainer's evaluation routine on its own threads.  When
 * several checkpoints appeared since the last poll only the newest is
 * evaluated, as checkpoints_iterator does.  Per evaluated checkpoint: a log
 * line (step, loss, accuracy), an "eval" line in
 * <logging.dir>/eval/metrics.jsonl and the eval scalars in
 * <logging.dir>/eval/ events (obs.h); the chief then evaluates nothing
 * itself and leaves eval/ to the evaluator.
 *
 * Termination: the chief sends one notice (distribute/comm.h) to the evaluator
 * when its run ends, after its last checkpoint write is complete: {exit
 * status, final step}.  The evaluator tests for it before each poll of the
 * directory; after it came, one last poll evaluates the newest checkpoint
 * if it is new, and the evaluator stops: with 0 after a training that
 * succeeded (a warning when the final step has no checkpoint, e.g. after
 * train.stop_at_accuracy), with the training's kind of error (its exit
 * status) after one that failed, without evaluating further.  Between
 * polls it sleeps DTF_EVALUATOR_POLL_SECONDS.  An error of its own (eval
 * data, a checkpoint of another model) stops its evaluating, never the
 * training: it waits for the notice and then returns that error.  A
 * SIGTERM/SIGINT/SIGUSR1 stops it at once with DTF_ERR_SIGNAL.
 */
#ifndef DTF_TRAIN_EVALUATOR_H
#define DTF_TRAIN_EVALUATOR_H

#include <stdint.h>

#include "config/job.h"
#include "config/tf_config.h"

struct dtf_comm;
struct dtf_checkpointer;
struct dtf_evaluator;

#define DTF_EVALUATOR_POLL_SECONDS 0.2

/* Sums over data.eval of one evaluation. */
struct dtf_evaluator_totals {
	double loss_sum, correct, count;
	double top_k; /* examples right within model.metric_top_k */
};

struct dtf_evaluator_config {
	const struct dtf_job *job;
	struct dtf_comm *world;      /* the world communicator (the notice) */
	int chief_rank;              /* world rank of the chief (0) */
	struct dtf_checkpointer *ck; /* loads the variables `evaluate` reads */
	/* Evaluate the loaded variables over data.eval (the trainer's eval
	 * routine); `step` for messages. */
	int (*evaluate)(void *arg, int64_t step,
			struct dtf_evaluator_totals *out);
	void *arg;
};

/* The world rank of the cluster's evaluator task, or -1 when it has none
 * (ranks go chief, workers, ps, evaluator: the last rank). */
int dtf_evaluator_rank(const struct dtf_cluster *c);

/*
 * A job run with an evaluator task needs checkpoint.dir (what it
 * evaluates) and data.eval (what it evaluates on): else DTF_ERR_CONFIG,
 * the same on every rank, to be returned before any collective.  Warns
 * (on rank 0) that train.stop_at_accuracy and train.eval_every_steps do
 * nothing then: the chief does not evaluate.
 */
int dtf_evaluator_check_job(const struct dtf_job *job);

/*
 * Post the receive of the chief's notice and open the evaluator's outputs
 * (obs.h dtf_obs_open_evaluator).  No collective: call before the set-up
 * agreement, so an error here stops every rank.  cfg is copied; its
 * pointers are borrowed.  Errors: DTF_ERR_IO, DTF_ERR_MPI, DTF_ERR_NOMEM.
 */
int dtf_evaluator_new(const struct dtf_evaluator_config *cfg,
		      struct dtf_evaluator **out);

/*
 * Evaluate each new checkpoint until the chief's notice (above).  *last_step
 * gets the step of the last checkpoint evaluated (-1: none), *loss and
 * *accuracy its results (-1: none).  Errors: the training's kind of error
 * when it failed (DTF_ERR_DATA, _CONFIG, _CHECKPOINT, _SIGNAL, else
 * DTF_ERR_REMOTE), this rank's own (DTF_ERR_DATA, DTF_ERR_CHECKPOINT,
 * DTF_ERR_SIGNAL, DTF_ERR_MPI, ...).
 */
int dtf_evaluator_run(struct dtf_evaluator *ev, int64_t *last_step,
		      double *loss, double *accuracy);

/* Cancel a notice not received, close the outputs.  NULL is a no-op. */
void dtf_evaluator_free(struct dtf_evaluator *ev);

/*
 * The chief, at the end of its run (after the last checkpoint write has
 * finished, success or error): tell the evaluator on world rank
 * `evaluator_rank` that training ended with `rc` (0 or a negative
 * DTF_ERR_*) at `step`.  Errors: DTF_ERR_MPI.
 */
int dtf_evaluator_notify(struct dtf_comm *world, int evaluator_rank, int rc,
			 int64_t step);

#endif
