/*
 * infer.h - using a trained model: `dtf-train evaluate` (the loss and
 * metrics of a checkpoint on a data set, on one process or sharded over
 * ranks) and `dtf-train predict` (one output line per record).
 *
 * Both build the job's forward graph (no backward pass) on the CPU backend
 * at the per-replica batch of train.batch_size over the ranks, load the
 * variables from a checkpoint with the checkpointer (train/checkpoint.h:
 * whole variables, the same whatever world size or sharded update wrote
 * them; batch_norm's moving statistics as saved, their mean over the
 * replicas) and run the forward pass in inference (dropout off, batch_norm
 * on its moving statistics) through the same code the training's own
 * evaluation runs (train_priv.h), so `evaluate` on the data a training
 * evaluated gives the loss and accuracy that training logged.
 */
#ifndef DTF_TRAIN_INFER_H
#define DTF_TRAIN_INFER_H

#include <stdint.h>

#include "config/job.h"

struct dtf_comm;

/* Bytes of a checkpoint path in the results. */
#define DTF_INFER_PATH_MAX 4352

/* Where the variables and the data come from. */
struct dtf_infer_source {
	/* A checkpoint file, or a directory: its newest checkpoint that
	 * verifies (checkpoint.h dtf_checkpointer_load_newest).  NULL: the
	 * job's checkpoint.dir. */
	const char *checkpoint;
	/* glob(3) pattern of TFRecord files; NULL: data.eval.files (evaluate;
	 * predict requires it). */
	const char *data;
	int threads; /* threads of the fast kernels; 0: cores / local ranks */
};

struct dtf_evaluate_result {
	char checkpoint[DTF_INFER_PATH_MAX]; /* the file loaded */
	int64_t step;          /* its global step */
	double loss;           /* mean per-example loss */
	double accuracy;       /* correct / (examples * positions)
				  (model.metrics) */
	double top_k_accuracy; /* top_k_accuracy's fraction, -1: none */
	double correct, examples; /* sums over every rank; correct counts
				     positions for a sequence loss */
	int positions;         /* positions per example: 1, or t of a
				  sequence loss's (n, t, classes) logits */
	double seconds;        /* wall time of the evaluation pass */
	int remote_failure;    /* the error is another rank's (not printed
				  here) */
};

/*
 * Evaluate on every rank of comm (NULL: this process alone; a collective
 * otherwise): each record of the data is read by exactly one rank (the
 * pipeline's sharding, no padding), the sums are allreduced, and every
 * rank gets the same *out.  Rank 0 loads the checkpoint and broadcasts
 * the variables.  With logging.dir, rank 0 appends an "evaluate" line to
 * <logging.dir>/metrics.jsonl (obs.h dtf_obs_append_evaluate).
 * Errors: DTF_ERR_USAGE (no data or no checkpoint named anywhere),
 * DTF_ERR_CONFIG (the batch), DTF_ERR_CHECKPOINT naming the file or
 * directory (missing, does not verify, another model), DTF_ERR_DATA (the
 * pattern matches nothing, bad records: file, record, offset), those of
 * the backend, DTF_ERR_REMOTE, DTF_ERR_MPI.
 */
int dtf_infer_evaluate(const struct dtf_job *job, struct dtf_comm *comm,
		       const struct dtf_infer_source *src,
		       struct dtf_evaluate_result *out);

/* What predict writes per record. */
enum dtf_predict_outputs {
	DTF_PREDICT_CLASSES, /* the top-k classes with their probabilities */
	DTF_PREDICT_LOGITS,  /* the raw outputs of the loss's logits layer */
};

struct dtf_predict_opts {
	struct dtf_infer_source src;
	const char *output; /* the file: ".csv" CSV, ".jsonl", ".ndjson" or
			       ".json" JSON Lines */
	enum dtf_predict_outputs outputs;
	int top_k;          /* classes per record, 1..classes (CLASSES) */
};

struct dtf_predict_result {
	char checkpoint[DTF_INFER_PATH_MAX];
	int64_t step;
	int64_t records;
	double seconds;     /* wall time from the first batch to the rename */
	double cpu_seconds; /* user + system time of the process over it */
	double peak_rss_mib; /* the process's peak resident memory at the end
				(getrusage ru_maxrss) */
};

/*
 * Predict on this process: the output is written to OUTPUT.tmp (created
 * before anything else is done, so an output that cannot be written fails
 * first) one line per record as the pipeline reads them (files in sorted
 * order, interleaved as data.cycle_length says; no shuffle), and renamed
 * to OUTPUT at the end after an fsync: a stopped run leaves nothing under
 * OUTPUT.  Memory is the graph's at one batch and the pipeline's buffers,
 * whatever the number of records (and the pages of the files being read,
 * which the reader maps: data/tfrecord.h).  A feature that only the loss reads
 * (the labels) may be missing from the records (read as 0).
 *
 * Lines (floats with 9 significant digits, float32's round trip):
 *   JSONL classes {"file":F,"record":R,"classes":[c1,...],
 *                  "probabilities":[p1,...]}, best first
 *   JSONL logits  {"file":F,"record":R,"logits":[v0,...]}
 *   CSV classes   header file,record,class_1,probability_1,...,class_k,
 *                 probability_k, then one row per record
 *   CSV logits    header file,record,logit_0,...,logit_{n-1}
 * F is the file's path as the pattern matched it, R the record's 0-based
 * index in it.  Probabilities: softmax of the logits for the softmax
 * losses, the sigmoid of each output for sigmoid_cross_entropy; ties go
 * to the lower class (Keras's argmax).
 * Errors: DTF_ERR_USAGE (output not writable or of an unknown extension,
 * --top-k outside 1..classes, classes of a mean_squared_error model), the
 * errors of evaluate, DTF_ERR_IO (a write fails: the temporary file is
 * removed).
 */
int dtf_infer_predict(const struct dtf_job *job,
		      const struct dtf_predict_opts *opts,
		      struct dtf_predict_result *out);

#endif
