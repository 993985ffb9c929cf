/*
 * main.c - dtf-train: argv -> job -> run; a dtf error -> exit status.
 *
 * Exit statuses (DESIGN.md section 5): 0 done, 1 runtime failure, 2 usage
 * or job-file error, 3 input data error, 4 checkpoint error, 75 stopped by
 * a signal (after a checkpoint when checkpoint.dir is set).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/tf_config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm.h"
#include "dtf_config.h"
#include "export/export.h"
#include "main.h"
#include "obs/obs.h"
#include "train/fault.h"
#include "train/threads.h"
#include "train/train.h"

static const char usage[] =
	"Usage: dtf-train [OPTION]... JOB.yaml\n"
	"       mpirun -np N dtf-train [OPTION]... JOB.yaml\n"
	"       dtf-train --merge-trace TRACE.json\n"
	"       dtf-train evaluate JOB.yaml [--checkpoint PATH] [--data GLOB]\n"
	"       dtf-train predict JOB.yaml --data GLOB --output FILE [OPTION]...\n"
	"       dtf-train export JOB.yaml [--checkpoint PATH] [--format onnx|safetensors]\n"
	"                        --output FILE\n"
	"       dtf-train generate JOB.yaml [--checkpoint PATH] [--prompt TEXT]\n"
	"                          [--tokens N] [OPTION]...\n"
	"Train the model described by the job file, data parallel over MPI ranks;\n"
	"evaluate, predict, export or generate (sample text from a GPT) with a\n"
	"checkpoint of it (dtf-train evaluate --help, and so on).\n"
	"\n"
	"Options:\n"
	"  -n, --dry-run            build and check the graph, print the layer table, exit\n"
	"  -s, --set KEY=VALUE      override a job key (e.g. train.epochs=1; KEY= unsets\n"
	"                           it, so its default applies); repeatable\n"
	"  -t, --threads N          compute threads per rank, each calling OpenBLAS\n"
	"                           single-threaded (default: cores / ranks per node)\n"
	"      --export-variables FILE  write the final parameter vector (float32) to FILE\n"
	"      --print-cluster      print the role of every rank (TF_CONFIG or the job), exit\n"
	"      --resume             continue from the newest checkpoint in checkpoint.dir\n"
	"                           that verifies (none there: start at step 0)\n"
	"      --allow-fresh-start  with --resume: if no checkpoint verifies, start at\n"
	"                           step 0 instead of exiting 4\n"
	"      --overwrite-checkpoints  start over in a checkpoint.dir that holds an\n"
	"                           earlier run's checkpoints, deleting them first\n"
	"                           (without it a new run there exits 4; --resume\n"
	"                           continues the earlier run)\n"
	"  -q, --quiet              only warnings, errors and the notice of a stop on\n"
	"                           a signal on the console\n"
	"  -v, --verbose            also debug messages (files opened, per-rank details)\n"
	"      --merge-trace TRACE  merge the per-rank trace files of TRACE (left by a\n"
	"                           stopped run) into TRACE, then exit\n"
	"  -h, --help               show this help and exit\n"
	"  -V, --version            show the version and exit\n"
	"\n"
	"Exit status: 0 done, 1 runtime failure, 2 usage or job-file error,\n"
	"3 input data error, 4 checkpoint error, 75 stopped by a signal (with a\n"
	"checkpoint when checkpoint.dir is set, else nothing saved).\n"
	"See dtf-train(1) and dtf-train-job(5).\n";

enum { OPT_EXPORT = 256, OPT_RESUME, OPT_FRESH, OPT_MERGE_TRACE,
       OPT_PRINT_CLUSTER, OPT_OVERWRITE };

/*
 * The cluster: TF_CONFIG when set (checked against this rank and the
 * world), else derived from the job.  Every rank then agrees on the status
 * before anything else talks, so a bad TF_CONFIG on one rank stops all of
 * them with exit status 2 instead of leaving the others in a collective.
 * *failed_here: TF_CONFIG failed on this rank (its own error, which only
 * this rank may know of); an error passed in as `rc` (reading the job
 * file and --set, the same on every rank) is not counted.
 */
static int load_cluster(const struct dtf_job *job, struct dtf_comm *comm,
			int rc, int print_only, struct dtf_cluster *cl,
			int *failed_here)
{
	const char *tf = getenv("TF_CONFIG");
	int rank = comm ? dtf_comm_rank(comm) : 0;
	int world = comm ? dtf_comm_size(comm) : 1;
	*failed_here = 0;
	if (rc == 0 && tf && tf[0]) {
		rc = dtf_cluster_parse(tf, cl);
		/* a lone --print-cluster shows TF_CONFIG's cluster as is */
		if (rc == 0 && !(print_only && world == 1))
			rc = dtf_cluster_check(cl, job, rank, world);
		*failed_here = rc < 0;
	} else if (rc == 0) {
		rc = dtf_cluster_from_job(job, world, cl);
	}
	if (!comm)
		return rc;
	int worst = 0, who = 0;
	int arc = dtf_comm_agree(comm, rc < 0 ? dtf_error_exit_status(rc) : 0,
				 &worst, &who);
	if (arc < 0)
		return arc;
	if (rc < 0 || !worst)
		return rc;
	return dtf_error(worst == 2 ? DTF_ERR_CONFIG : DTF_ERR_REMOTE,
			 "stopping: rank %d failed reading the job or TF_CONFIG",
			 who);
}

/*
 * The command line into *opts, sets[] (the --set texts, *nsets of them)
 * and *print_cluster.  Returns -1 to go on with the job file at
 * argv[optind], or the exit status when done (--help, --version,
 * --merge-trace, a usage error: 2).
 */
static int parse_args(int argc, char **argv, struct dtf_train_opts *opts,
		      const char **sets, int *nsets, int *print_cluster)
{
	static const struct option longopts[] = {
		{"dry-run", no_argument, NULL, 'n'},
		{"set", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'},
		{"export-variables", required_argument, NULL, OPT_EXPORT},
		{"print-cluster", no_argument, NULL, OPT_PRINT_CLUSTER},
		{"resume", no_argument, NULL, OPT_RESUME},
		{"allow-fresh-start", no_argument, NULL, OPT_FRESH},
		{"overwrite-checkpoints", no_argument, NULL, OPT_OVERWRITE},
		{"merge-trace", required_argument, NULL, OPT_MERGE_TRACE},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "ns:t:qvhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			opts->dry_run = 1;
			break;
		case 's':
			sets[(*nsets)++] = optarg;
			break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1024) {
				fprintf(stderr, "dtf-train: --threads: expected an integer from 1 to 1024, got '%s'\n", optarg);
				return 2;
			}
			opts->threads = (int)v;
			break;
		}
		case OPT_EXPORT:
			opts->export_variables = optarg;
			break;
		case OPT_PRINT_CLUSTER:
			*print_cluster = 1;
			break;
		case OPT_RESUME:
			opts->resume = 1;
			break;
		case OPT_FRESH:
			opts->allow_fresh_start = 1;
			break;
		case OPT_OVERWRITE:
			opts->overwrite_checkpoints = 1;
			break;
		case OPT_MERGE_TRACE: {
			int n = 0, mrc = dtf_obs_merge_trace(optarg, &n);
			if (mrc < 0) {
				fprintf(stderr, "dtf-train: %s\n", dtf_error_msg());
				return dtf_error_exit_status(mrc);
			} else if (dtf_log_get_level() >= DTF_LOG_INFO) {
				fprintf(stderr, "dtf-train: merged %d rank file(s) into %s\n",
					n, optarg);
			}
			return 0;
		}
		case 'q':
			opts->quiet = 1;
			dtf_log_set_level(DTF_LOG_WARN);
			break;
		case 'v':
			dtf_log_set_level(DTF_LOG_DEBUG);
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("dtf-train %s\n", DTF_VERSION);
			return 0;
		default:
			fputs("Try 'dtf-train --help'.\n", stderr);
			return 2;
		}
	}
	if (optind == argc - 2 && !strchr(argv[optind], '.') &&
	    !strchr(argv[optind], '/') && access(argv[optind], F_OK) != 0) {
		/* `dtf-train evalute job.yaml`: a word, not a file */
		fprintf(stderr, "dtf-train: '%s' is not a subcommand (evaluate, predict, export, generate) nor a job file\n"
			"Try 'dtf-train --help'.\n", argv[optind]);
		return 2;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "dtf-train: %s\nTry 'dtf-train --help'.\n",
			optind >= argc ? "missing the job file"
				       : "expected exactly one job file");
		return 2;
	}
	return -1;
}

/* ---- dtf-train export ---------------------------------------------------- */

static const char export_usage[] =
	"Usage: dtf-train export JOB.yaml [OPTION]... --output FILE\n"
	"Write the model of a checkpoint as ONNX (the inference graph, with the\n"
	"job's feature decoding) or its variables as safetensors.\n"
	"\n"
	"Options:\n"
	"  -c, --checkpoint PATH    a checkpoint file, or a directory: its newest\n"
	"                           (default: the job's checkpoint.dir)\n"
	"  -f, --format FORMAT      onnx (default) or safetensors\n"
	"  -o, --output FILE        the file to write (through FILE.tmp, renamed)\n"
	"  -s, --set KEY=VALUE      override a job key; repeatable\n"
	"  -q, --quiet              only warnings and errors\n"
	"  -v, --verbose            also debug messages\n"
	"  -h, --help               show this help and exit\n"
	"\n"
	"Exit status: 0 done, 1 runtime failure, 2 usage or job-file error,\n"
	"4 checkpoint error.  See dtf-train(1).\n";

/* `dtf-train export ...` (argv[0] is "export"): one process, no MPI. */
static int export_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"checkpoint", required_argument, NULL, 'c'},
		{"format", required_argument, NULL, 'f'},
		{"output", required_argument, NULL, 'o'},
		{"set", required_argument, NULL, 's'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct dtf_export_opts o = {.format = DTF_EXPORT_ONNX};
	const char **sets = dtf_calloc((size_t)argc + 1, sizeof(char *));
	int nsets = 0, c, status = 2;
	if (!sets)
		return 1;
	while ((c = getopt_long(argc, argv, "c:f:o:s:qvh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o.checkpoint = optarg;
			break;
		case 'f':
			if (!strcmp(optarg, "onnx")) {
				o.format = DTF_EXPORT_ONNX;
			} else if (!strcmp(optarg, "safetensors")) {
				o.format = DTF_EXPORT_SAFETENSORS;
			} else {
				fprintf(stderr, "dtf-train export: --format: expected onnx or safetensors, got '%s'\n", optarg);
				goto out;
			}
			break;
		case 'o':
			o.output = optarg;
			break;
		case 's':
			sets[nsets++] = optarg;
			break;
		case 'q':
			dtf_log_set_level(DTF_LOG_WARN);
			break;
		case 'v':
			dtf_log_set_level(DTF_LOG_DEBUG);
			break;
		case 'h':
			fputs(export_usage, stdout);
			status = 0;
			goto out;
		default:
			fputs("Try 'dtf-train export --help'.\n", stderr);
			goto out;
		}
	}
	if (optind != argc - 1 || !o.output) {
		fprintf(stderr, "dtf-train export: %s\nTry 'dtf-train export --help'.\n",
			!o.output ? "missing --output FILE"
			: optind >= argc ? "missing the job file"
					 : "expected exactly one job file");
		goto out;
	}
	struct dtf_job *job = NULL;
	int rc = dtf_main_load_job(argv[optind], sets, nsets, &job);
	if (rc == 0)
		rc = dtf_export_run(job, &o);
	if (rc < 0)
		dtf_errlog("%s", dtf_error_msg());
	status = rc < 0 ? dtf_error_exit_status(rc) : 0;
	dtf_job_free(job);
out:
	dtf_free(sets);
	return status;
}

/* `dtf-train NAME ...`: the subcommands besides training (main.h). */
static const struct subcommand {
	const char *name;
	int (*main)(int argc, char **argv); /* argv[0] is the name */
} subcommands[] = {
	{"evaluate", dtf_main_evaluate},
	{"predict", dtf_main_predict},
	{"export", export_main},
	{"generate", dtf_main_generate},
};

int dtf_main_start_mpi(int *argc, char ***argv, struct dtf_comm **comm)
{
	int rc = dtf_comm_init(argc, argv, comm);
	if (rc < 0) {
		fprintf(stderr, "dtf-train: %s\n", dtf_error_msg());
		return dtf_error_exit_status(rc);
	}
	int rank = dtf_comm_rank(*comm);
	dtf_log_set_identity(rank, dtf_comm_size(*comm), dtf_comm_host(*comm));
	/* the same verdict on every rank: rank 0 says it */
	if ((rc = dtf_comm_check_launch(*comm)) < 0) {
		if (rank == 0)
			dtf_errlog("%s", dtf_error_msg());
		dtf_comm_finalize(*comm);
		*comm = NULL;
		return dtf_error_exit_status(rc);
	}
	return 0;
}

/*
 * This process's rank as the launcher gave it, without MPI (for
 * --dry-run, which does not start MPI): Open MPI's OMPI_COMM_WORLD_RANK,
 * PMIx's PMIX_RANK, PMI's PMI_RANK, Slurm's SLURM_PROCID; 0 when none is
 * set (a plain run).
 */
/* The value of the first of vars[0..n-1] that is set, as an integer; 0
 * when none is. */
static int first_env_int(const char *const *vars, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return atoi(v);
	}
	return 0;
}

static int launcher_rank(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK",
					   "PMI_RANK", "SLURM_PROCID"};
	return first_env_int(vars, sizeof(vars) / sizeof(vars[0]));
}

/* The launcher's number of ranks, without MPI (for --dry-run): Open MPI's
 * OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE, Slurm's SLURM_STEP_NUM_TASKS (set
 * inside an srun step only, not in the batch script); 0 when none is set. */
static int launcher_world(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
					   "SLURM_STEP_NUM_TASKS"};
	return first_env_int(vars, sizeof(vars) / sizeof(vars[0]));
}

int dtf_main_load_job(const char *path, const char **sets, int nsets,
		      struct dtf_job **job)
{
	int rc = dtf_job_load(path, sets, nsets, job);
	if (rc == -DTF_ERR_IO) { /* the job file itself: a usage error */
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dtf_error_msg());
		rc = dtf_error(DTF_ERR_USAGE, "%s", msg);
	}
	return rc;
}

int main(int argc, char **argv)
{
	dtf_threads_fix_blas_core(argv); /* may re-exec with a better BLAS */
	for (size_t i = 0; argc > 1 && i < sizeof(subcommands) /
						sizeof(subcommands[0]); i++)
		if (!strcmp(argv[1], subcommands[i].name))
			return subcommands[i].main(argc - 1, argv + 1);
	struct dtf_train_opts opts = {0};
	int print_cluster = 0;
	const char **sets = dtf_calloc((size_t)argc + 1, sizeof(char *));
	int nsets = 0, status = 0;
	if (!sets)
		return 1;
	if ((status = parse_args(argc, argv, &opts, sets, &nsets,
				 &print_cluster)) >= 0)
		goto out;
	status = 0;
	const char *path = argv[optind];

	struct dtf_comm *comm = NULL;
	int rc = 0, rank = 0;
	if (opts.dry_run)
		opts.dry_run_ranks = launcher_world();
	if (opts.dry_run && (rank = launcher_rank()) > 0) {
		/* under mpirun or srun every rank checks the job alike (no
		 * MPI, no data): rank 0 alone prints the table and the
		 * warnings and errors, every rank exits with the status */
		if (!freopen("/dev/null", "w", stdout))
			return 1;
		dtf_log_set_level(DTF_LOG_ERROR);
	}
	if (!opts.dry_run) {
		/* from here a signal stops the run with its notice (after
		 * the first step when it comes during the start-up), not
		 * the default death; MPI_Init leaves these signals alone */
		dtf_fault_catch_signals();
		if ((status = dtf_main_start_mpi(&argc, &argv, &comm)) != 0)
			goto out;
		rank = dtf_comm_rank(comm);
	}

	struct dtf_job *job = NULL;
	struct dtf_train_result result;
	struct dtf_cluster cluster;
	int own_cluster_error = 0;
	memset(&result, 0, sizeof(result));
	memset(&cluster, 0, sizeof(cluster));
	rc = dtf_main_load_job(path, sets, nsets, &job);
	if (!opts.dry_run || print_cluster)
		rc = load_cluster(job, comm, rc, print_cluster, &cluster,
				  &own_cluster_error);
	if (rc == 0 && print_cluster) {
		if (rank == 0)
			dtf_cluster_print(&cluster, stdout);
	} else if (rc == 0) {
		opts.cluster = cluster.from_tf_config ? &cluster : NULL;
		rc = dtf_train_run(job, comm, &opts, &result);
	}
	if (rc < 0) {
		/* Job-file errors are the same on every rank: say them once.
		 * A rank that failed itself says why (a TF_CONFIG error is its
		 * own); rank 0 also says when the job stopped because of
		 * another rank. */
		int same_everywhere = rc == -DTF_ERR_CONFIG ||
				      rc == -DTF_ERR_USAGE ||
				      rc == -DTF_ERR_GRAPH;
		if (own_cluster_error)
			same_everywhere = 0;
		/* every rank failed with the same message (no file matches,
		 * too few records for a batch), or a dry run (no MPI) */
		if (result.same_error || opts.dry_run)
			same_everywhere = 1;
		/* A stop on a signal was asked for: a notice, not an error;
		 * the training's replica 0 printed it already for them all
		 * (an evaluator task says its own). */
		if (rc == -DTF_ERR_SIGNAL) {
			if (!result.stop_announced)
				dtf_log_notice("%s", dtf_error_msg());
		} else if (rank == 0 ||
			   (!same_everywhere && !result.remote_failure)) {
			dtf_errlog("%s", dtf_error_msg());
		}
		status = dtf_error_exit_status(rc);
	}
	dtf_cluster_deinit(&cluster);
	dtf_job_free(job);
	dtf_comm_finalize(comm);
out:
	dtf_free(sets);
	return status;
}
