/*
 * train.h - the training driver: job -> graph -> data -> steps -> eval.
 *
 * Data parallel (DESIGN.md section 5): every rank holds a full replica,
 * reads its shard, computes gradients of the loss sum / GLOBAL batch, and
 * the gradients are summed over ranks with one allreduce per step (the
 * step's loss, correct count and example count ride in the same buffer), so
 * every rank applies the same update and replicas stay bit-identical.
 */
#ifndef DTF_TRAIN_TRAIN_H
#define DTF_TRAIN_TRAIN_H

#include <stdio.h>

#include "config/job.h"
#include "obs/obs.h"

struct dtf_comm;
struct dtf_cluster;

struct dtf_train_opts {
	int dry_run;        /* build and check, print the summary, no data */
	int dry_run_ranks;  /* --dry-run under mpirun or srun (no MPI): the
			       launcher's number of ranks, checked as a run
			       on them would (replicas, the global batch's
			       split, ps ranks); 0 or 1: one process */
	int threads;        /* BLAS threads per rank; 0 = cores / local ranks */
	const char *export_variables; /* write the final parameter vector */
	int quiet;          /* no per-step lines */
	/* roles from TF_CONFIG (checked against the world), or NULL: derived
	 * from the job (config/tf_config.h) */
	const struct dtf_cluster *cluster;
	int resume;         /* --resume: as checkpoint.resume: auto */
	int allow_fresh_start; /* --allow-fresh-start: no checkpoint verifies
				  -> train from step 0 instead of failing */
	int overwrite_checkpoints; /* --overwrite-checkpoints: delete an
				      earlier run's checkpoints in
				      checkpoint.dir and start over (else a
				      new run finding them is refused) */
};

/* Seconds spent per phase of the training step: struct dtf_step_times
 * (obs/obs.h), summed over steps. */

/* Results of a run, for the caller and tests. */
struct dtf_train_result {
	int64_t steps;
	double wall_seconds;
	double samples_per_second;
	double eval_loss, eval_accuracy; /* -1 when there was no eval */
	double eval_top_k_accuracy; /* metrics top_k_accuracy; -1 if none */
	size_t num_params;
	int remote_failure; /* 1: stopped because another rank failed */
	int same_error;     /* 1: every rank failed with this same error
			       message, so one rank (0) says it */
	int stop_announced; /* 1: a stop on a signal whose notice replica 0
			     * printed (DTF_ERR_SIGNAL on every replica) */
	struct dtf_step_times times; /* whole run */
	uint64_t step_allocations; /* dtf_alloc calls inside steps 2.. (0) */
};

/*
 * Run the job on this rank.  comm may be NULL for --dry-run.  Prints
 * progress on rank 0 (stderr) and the summary/table on stdout.
 * Errors: any DTF_ERR_*; every rank returns an error when any rank failed
 * (DTF_ERR_REMOTE on the ranks that did not fail themselves).
 */
int dtf_train_run(const struct dtf_job *job, struct dtf_comm *comm,
		  const struct dtf_train_opts *opts,
		  struct dtf_train_result *result);

/* Print the Keras-style table of layers, output shapes and parameters for
 * per-replica batch `batch`.  Errors as graph building. */
int dtf_train_summary(const struct dtf_job *job, int batch, FILE *out);

/* What obs/ reads of the job (obs/obs.h), borrowing its strings. */
void dtf_train_obs_job(const struct dtf_job *job, struct dtf_obs_job *out);

#endif
