/*
 * main_use.c - `dtf-train evaluate` and `dtf-train predict`: argv -> the
 * job and options -> train/infer.h -> what is printed and the exit status
 * (main.h).  evaluate runs on one process or on every rank mpirun starts;
 * predict on one process (mpirun with more ranks is a usage error).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm.h"
#include "main.h"
#include "train/infer.h"

static const char evaluate_usage[] =
	"Usage: dtf-train evaluate JOB.yaml [OPTION]...\n"
	"       mpirun -np N dtf-train evaluate JOB.yaml [OPTION]...\n"
	"The loss and metrics of the job's model from a checkpoint on data.eval\n"
	"(or --data), each record counted once over the ranks; the result goes to\n"
	"stdout and, with logging.dir, into its metrics.jsonl.\n"
	"\n"
	"Options:\n"
	"  -c, --checkpoint PATH    a checkpoint file, or a directory: its newest\n"
	"                           checkpoint that verifies (default: checkpoint.dir)\n"
	"  -d, --data GLOB          TFRecord files to evaluate on (default: data.eval)\n"
	"  -s, --set KEY=VALUE      override a job key; repeatable\n"
	"  -t, --threads N          threads per rank (default: cores / ranks per node)\n"
	"  -q, --quiet              only warnings and errors on stderr\n"
	"  -v, --verbose            also debug messages\n"
	"  -h, --help               show this help and exit\n"
	"\n"
	"Exit status: 0 done, 1 runtime failure, 2 usage or job-file error,\n"
	"3 input data error, 4 checkpoint error.  See dtf-train(1).\n";

static const char predict_usage[] =
	"Usage: dtf-train predict JOB.yaml --data GLOB --output FILE [OPTION]...\n"
	"One line per record of the files: file, record index, then the top-k\n"
	"classes with their probabilities or the model's raw outputs; FILE.csv is\n"
	"CSV, FILE.jsonl JSON Lines.  One process, without mpirun.\n"
	"\n"
	"Options:\n"
	"  -c, --checkpoint PATH    a checkpoint file, or a directory: its newest\n"
	"                           checkpoint that verifies (default: checkpoint.dir)\n"
	"  -d, --data GLOB          TFRecord files to predict on (required)\n"
	"  -o, --output FILE        where to write (.csv, .jsonl); written as\n"
	"                           FILE.tmp and renamed at the end (required)\n"
	"  -k, --top-k K            classes per record, best first (default 1)\n"
	"      --outputs WHAT       classes (default): the top-k classes and their\n"
	"                           probabilities; logits: the loss's logits layer\n"
	"  -s, --set KEY=VALUE      override a job key; repeatable\n"
	"  -t, --threads N          threads (default: the cores)\n"
	"  -q, --quiet              only warnings and errors on stderr\n"
	"  -v, --verbose            also debug messages\n"
	"  -h, --help               show this help and exit\n"
	"\n"
	"Exit status: 0 done, 1 runtime failure, 2 usage or job-file error,\n"
	"3 input data error, 4 checkpoint error.  See dtf-train(1).\n";

enum { OPT_OUTPUTS = 256 };

/* A positive integer option up to `max`, else -1 after the message. */
static int int_arg(const char *opt, const char *arg, long max)
{
	char *end;
	long v = strtol(arg, &end, 10);
	if (*end || end == arg || v < 1 || v > max) {
		fprintf(stderr, "dtf-train: %s: expected an integer from 1 to %ld, got '%s'\n",
			opt, max, arg);
		return -1;
	}
	return (int)v;
}

/* The options of both into *o (predict's only with `predict`), the
 * --set texts into sets[] and the job file into *job_path.  Returns -1
 * to go on, or the exit status (--help: 0, a usage error: 2). */
static int parse_args(int argc, char **argv, int predict,
		      struct dtf_predict_opts *o, const char **sets,
		      int *nsets, const char **job_path)
{
	static const struct option longopts[] = {
		{"checkpoint", required_argument, NULL, 'c'},
		{"data", required_argument, NULL, 'd'},
		{"set", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		/* predict */
		{"output", required_argument, NULL, 'o'},
		{"top-k", required_argument, NULL, 'k'},
		{"outputs", required_argument, NULL, OPT_OUTPUTS},
		{NULL, 0, NULL, 0},
	};
	const char *name = predict ? "predict" : "evaluate";
	int c, top_k_given = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, predict ? "c:d:s:t:qvho:k:"
						    : "c:d:s:t:qvh",
				longopts, NULL)) != -1) {
		if (!predict && (c == 'o' || c == 'k' || c == OPT_OUTPUTS))
			c = '?'; /* predict's own */
		switch (c) {
		case 'c':
			o->src.checkpoint = optarg;
			break;
		case 'd':
			o->src.data = optarg;
			break;
		case 's':
			sets[(*nsets)++] = optarg;
			break;
		case 't':
			if ((o->src.threads = int_arg("--threads", optarg, 1024)) < 0)
				return 2;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'k':
			if ((o->top_k = int_arg("--top-k", optarg, 1 << 20)) < 0)
				return 2;
			top_k_given = 1;
			break;
		case OPT_OUTPUTS:
			if (!strcmp(optarg, "classes")) {
				o->outputs = DTF_PREDICT_CLASSES;
			} else if (!strcmp(optarg, "logits")) {
				o->outputs = DTF_PREDICT_LOGITS;
			} else {
				fprintf(stderr, "dtf-train: --outputs: expected classes or logits, got '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'q':
			dtf_log_set_level(DTF_LOG_WARN);
			break;
		case 'v':
			dtf_log_set_level(DTF_LOG_DEBUG);
			break;
		case 'h':
			fputs(predict ? predict_usage : evaluate_usage, stdout);
			return 0;
		default:
			fprintf(stderr, "Try 'dtf-train %s --help'.\n", name);
			return 2;
		}
	}
	const char *missing = optind >= argc	      ? "missing the job file"
			      : optind != argc - 1    ? "expected exactly one job file"
			      : predict && !o->src.data ? "--data GLOB is required"
			      : predict && !o->output ? "--output FILE is required"
			      : predict && top_k_given &&
					      o->outputs == DTF_PREDICT_LOGITS
				      ? "--top-k applies to --outputs classes, not logits"
				      : NULL;
	if (missing) {
		fprintf(stderr, "dtf-train %s: %s\nTry 'dtf-train %s --help'.\n",
			name, missing, name);
		return 2;
	}
	*job_path = argv[optind];
	return -1;
}

/* Errors the same on every rank are printed by rank 0 alone; a rank that
 * failed itself says why; one that stopped for another rank does not. */
static void print_error(int rc, int rank, int remote)
{
	int same_everywhere = rc == -DTF_ERR_CONFIG || rc == -DTF_ERR_USAGE ||
			      rc == -DTF_ERR_GRAPH;
	if (rank == 0 || (!same_everywhere && !remote))
		dtf_errlog("%s", dtf_error_msg());
}

static void print_evaluation(const struct dtf_job *job,
			     const struct dtf_evaluate_result *e)
{
	printf("checkpoint: %s\n", e->checkpoint);
	printf("step: %lld\n", (long long)e->step);
	printf("examples: %.0f\n", e->examples);
	printf("loss: %.9g\n", e->loss);
	if (job->model.metric_accuracy && e->positions > 1)
		printf("accuracy: %.9g (%.0f of %.0f positions correct)\n",
		       e->accuracy, e->correct, e->examples * e->positions);
	else if (job->model.metric_accuracy)
		printf("accuracy: %.9g (%.0f correct)\n", e->accuracy,
		       e->correct);
	if (e->top_k_accuracy >= 0)
		printf("top_%d_accuracy: %.9g\n", job->model.metric_top_k,
		       e->top_k_accuracy);
	fflush(stdout);
}

/* Both subcommands: MPI, the job, then the work. */
static int run(int argc, char **argv, int predict)
{
	struct dtf_predict_opts o = {.top_k = 1};
	const char *job_path = NULL;
	const char **sets = dtf_calloc((size_t)argc + 1, sizeof(char *));
	int nsets = 0, status;
	struct dtf_comm *comm = NULL;
	struct dtf_job *job = NULL;
	if (!sets)
		return 1;
	if ((status = parse_args(argc, argv, predict, &o, sets, &nsets,
				 &job_path)) >= 0 ||
	    (status = dtf_main_start_mpi(&argc, &argv, &comm)) != 0)
		goto out;
	int rank = dtf_comm_rank(comm), world = dtf_comm_size(comm);
	int rc = dtf_main_load_job(job_path, sets, nsets, &job), remote = 0;
	if (rc == 0 && predict && world > 1)
		rc = dtf_error(DTF_ERR_USAGE,
			       "predict runs as one process: start it without mpirun (here %d ranks)",
			       world);
	if (rc == 0 && predict) {
		struct dtf_predict_result res;
		rc = dtf_infer_predict(job, &o, &res);
		if (rc == 0)
			dtf_info("predict: %lld records in %.3f s: %.1f records/s, %.3f ms CPU per record, peak memory %.1f MiB; written to %s",
				 (long long)res.records, res.seconds,
				 res.seconds > 0 ? (double)res.records / res.seconds : 0,
				 res.records ? 1e3 * res.cpu_seconds / (double)res.records
					     : 0,
				 res.peak_rss_mib, o.output);
	} else if (rc == 0) {
		struct dtf_evaluate_result res;
		rc = dtf_infer_evaluate(job, comm, &o.src, &res);
		remote = res.remote_failure;
		if (rc == 0 && rank == 0)
			print_evaluation(job, &res);
	}
	if (rc < 0) {
		print_error(rc, rank, remote);
		status = dtf_error_exit_status(rc);
	}
out:
	dtf_job_free(job);
	dtf_comm_finalize(comm);
	dtf_free(sets);
	return status;
}

int dtf_main_evaluate(int argc, char **argv)
{
	return run(argc, argv, 0);
}

int dtf_main_predict(int argc, char **argv)
{
	return run(argc, argv, 1);
}
