/*
 * main.h - the dtf-train command: its subcommands (`dtf-train NAME ...`,
 * dispatched by main.c's table) and what main.c shares with them.  Each
 * subcommand's entry point takes argv from its name on and returns the
 * exit status (DESIGN.md section 5), having printed any error once.
 */
#ifndef DTF_MAIN_H
#define DTF_MAIN_H

struct dtf_comm;
struct dtf_job;

/* dtf-train evaluate JOB.yaml [OPTION]... (main_use.c) */
int dtf_main_evaluate(int argc, char **argv);
/* dtf-train predict JOB.yaml [OPTION]... (main_use.c) */
int dtf_main_predict(int argc, char **argv);
/* dtf-train generate JOB.yaml [OPTION]... (main_generate.c) */
int dtf_main_generate(int argc, char **argv);

/*
 * Start MPI (a singleton without mpirun), name this rank in log lines and
 * check the launch (distribute/comm.h).  Returns 0, or the exit status
 * after printing the error (rank 0 alone for the launch check, which
 * every rank agrees on).
 */
int dtf_main_start_mpi(int *argc, char ***argv, struct dtf_comm **comm);

/* Load the job file with the --set overrides (config/config.h); a job
 * file that cannot be read is a usage error (exit status 2). */
int dtf_main_load_job(const char *path, const char **sets, int nsets,
		      struct dtf_job **job);

#endif
