/*
 * tf_config.h - the cluster: which MPI rank plays which role.
 *
 * TF_CONFIG is TensorFlow's JSON description of a cluster and of the task
 * this process plays in it:
 *
 *   {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"],
 *                "ps": ["h3:2222"], "evaluator": ["h4:2222"]},
 *    "task": {"type": "worker", "index": 1}}
 *
 * Rules, as tf.distribute.cluster_resolver.TFConfigClusterResolver and
 * multi_worker_util check them: task types are chief, worker, ps and
 * evaluator; at most one chief and at most one evaluator; without a chief,
 * worker 0 is the chief (it logs, evaluates and writes checkpoints); every
 * address appears once; the task's type is in the cluster and its index is
 * in [0, number of tasks of that type).
 *
 * Mapping to MPI (dtf-train's own rule, since Open MPI, not the addresses,
 * carries the traffic): ranks go chief, then workers by index, then ps by
 * index, then the evaluator; the cluster must have exactly as many tasks as
 * there are ranks, and rank r's TF_CONFIG must name the task of rank r.
 *
 * Without TF_CONFIG the cluster comes from the job: every rank is a worker
 * (rank 0 the chief), except, for strategy parameter_server, the last
 * strategy.num_ps ranks, which are ps.
 *
 * TF_CONFIG is read as strict JSON (RFC 8259) with Jansson: trailing text,
 * duplicate keys (anywhere), comments, single quotes and unquoted keys or
 * strings are errors "TF_CONFIG: byte N: ...", N the byte offset where the
 * parser stopped; "index" must be a JSON integer (not "0", not 1.5).
 */
#ifndef DTF_CONFIG_TF_CONFIG_H
#define DTF_CONFIG_TF_CONFIG_H

#include <stdio.h>

#include "config/job.h"

enum dtf_task_type {
	DTF_TASK_CHIEF = 0,
	DTF_TASK_WORKER,
	DTF_TASK_PS,
	DTF_TASK_EVALUATOR,
	DTF_TASK_COUNT_
};

#define DTF_ADDR_MAX 256

struct dtf_task {
	enum dtf_task_type type;
	int index;
	char addr[DTF_ADDR_MAX]; /* "host:port" from TF_CONFIG, or "" */
};

struct dtf_cluster {
	int ntasks;              /* = MPI world size once checked */
	struct dtf_task *tasks;  /* [ntasks] in rank order; owned */
	int count[DTF_TASK_COUNT_]; /* tasks of each type */
	struct dtf_task self;    /* TF_CONFIG's "task" (type, index) */
	int self_rank;           /* the rank `self` maps to */
	int from_tf_config;      /* 1: read from TF_CONFIG */
};

/*
 * Parse TF_CONFIG text (JSON).  Errors (DTF_ERR_CONFIG, message starting
 * "TF_CONFIG: "): malformed JSON (with the byte offset), a structure that
 * is not {"cluster": {TYPE: [ADDR, ...]}, "task": {"type": T, "index": I}},
 * an unknown task type, more than one chief or evaluator, a duplicate
 * address, a loopback address (localhost, 127.0.0.0/8, ::1) for a task
 * when another task's address names another host (the message names the
 * task), a task type missing from the cluster, a negative index, an index
 * out of range.  DTF_ERR_NOMEM.  On error *out is left empty.
 */
int dtf_cluster_parse(const char *json, struct dtf_cluster *out);

/* The cluster of a job run without TF_CONFIG on `world` ranks (see above).
 * Errors: DTF_ERR_CONFIG when parameter_server leaves no worker
 * (num_ps >= world), DTF_ERR_NOMEM. */
int dtf_cluster_from_job(const struct dtf_job *job, int world,
			 struct dtf_cluster *out);

/*
 * Check a parsed TF_CONFIG cluster against the MPI world, before any
 * collective: the number of tasks equals `world` and this process's task
 * maps to `rank`; and against the job: ps tasks only with strategy
 * parameter_server, which needs at least one ps and one worker.
 * Errors: DTF_ERR_CONFIG, each with its own message.
 */
int dtf_cluster_check(const struct dtf_cluster *c, const struct dtf_job *job,
		      int rank, int world);

void dtf_cluster_deinit(struct dtf_cluster *c);

/* "chief", "worker", "ps", "evaluator". */
const char *dtf_task_type_name(enum dtf_task_type t);

/* Does the task on `rank` train (chief or worker)?  Its replica index among
 * the training tasks is `rank` itself: they come first. */
int dtf_cluster_is_replica(const struct dtf_cluster *c, int rank);

/* Print "rank R: TYPE INDEX [ADDR] [(chief)]" for every rank. */
void dtf_cluster_print(const struct dtf_cluster *c, FILE *out);

#endif
