/*
 * fault.h - preemption signals, the collective watchdog, and fault
 * injection for tests (DESIGN.md section 6).
 *
 * Signals: SIGTERM, SIGINT and SIGUSR1 (what Slurm sends before a job's
 * time ends, see srun --signal) only set a flag here.  The training loop
 * puts the flag into the per-step status agreement, so every rank learns at
 * the same step boundary that some rank was signalled; the chief then
 * writes a checkpoint and every rank exits 75 (EX_TEMPFAIL).  A second
 * SIGTERM (or SIGINT) ends the process at once by that signal's default
 * action, after one line on stderr saying so.  main() catches the signals
 * before MPI starts (dtf_fault_catch_signals; Open MPI's MPI_Init leaves
 * SIGTERM, SIGINT and SIGUSR1 alone), so one that arrives while the job
 * starts stops it after the first step like any other.  SIGXFSZ is
 * ignored (from dtf_fault_new on), so writing past RLIMIT_FSIZE fails
 * with EFBIG (an error we report) instead of killing.
 *
 * Watchdog: a thread that ends the whole job (MPI_Abort through distribute/)
 * when the main thread makes no progress for fault.timeout_seconds; the
 * loop marks progress at every step, evaluation and checkpoint.  A rank
 * stuck in a collective because a peer hangs, or hung itself, so never
 * waits forever.  A rank that dies is seen by mpirun, which ends the job
 * (naming the rank, its PID and node) before the watchdog would.
 *
 * Fault injection: the environment variable DTF_FAULT holds one or more
 * comma-separated specs "ACTION[:rank=R][:step=S][:attempt=A]", for tests:
 *   kill   SIGKILL this process at the start of step S (0-based: S steps
 *          are done)
 *   term, int, usr1   raise that signal at the start of step S
 *   hang   stop making progress (sleep forever) at the start of step S
 *   exit   _exit(1) without MPI_Finalize at the start of step S
 *   kill-in-checkpoint-write   SIGKILL half way through writing the
 *          checkpoint of step S (any checkpoint when no step is given)
 *   kill-in-export-write   SIGKILL half way through writing the file of
 *          `dtf-train export` (export/export.h)
 * rank: the rank it applies to (default every rank); attempt: applies only
 * when DTF_LAUNCH_ATTEMPT (set by dtf-launch, default 1) equals A (default
 * 1), so a restarted run does not fail again at the same step.
 */
#ifndef DTF_TRAIN_FAULT_H
#define DTF_TRAIN_FAULT_H

#include <stdint.h>

struct dtf_comm;
struct dtf_fault;

/*
 * Catch SIGTERM, SIGINT and SIGUSR1 from now on (the flag that
 * dtf_fault_pending_signal reads), for the whole process: main() calls it
 * before MPI_Init, so no signal in the start-up kills the process
 * silently.  A flag set from here on stays set through dtf_fault_new.
 */
void dtf_fault_catch_signals(void);

/*
 * Back to the default actions (the process ends on each of the three), for
 * a process that has no step boundary to stop at (a parameter server
 * rank, which serves until the workers end); a signal caught since
 * dtf_fault_catch_signals is raised again, so it ends the process now.
 */
void dtf_fault_default_signals(void);

/*
 * Parse DTF_FAULT, install the signal handlers and, when timeout_seconds
 * > 0, start the watchdog (disarmed until the first dtf_fault_progress).
 * comm may be NULL (no watchdog abort possible: the watchdog is not
 * started).  Errors: DTF_ERR_USAGE (a malformed DTF_FAULT, quoted),
 * DTF_ERR_NOMEM, DTF_ERR_RUNTIME (thread creation).
 */
int dtf_fault_new(struct dtf_comm *comm, int rank, double timeout_seconds,
		  struct dtf_fault **out);

/* Stop the watchdog and restore the previous signal actions.  NULL is a
 * no-op.  A pending signal stays readable until the next dtf_fault_new. */
void dtf_fault_free(struct dtf_fault *f);

/* The first of SIGTERM/SIGINT/SIGUSR1 received since dtf_fault_new (since
 * dtf_fault_catch_signals when that was called), or 0.
 * Async-signal-safe to call. */
int dtf_fault_pending_signal(void);

/* "SIGTERM" etc. */
const char *dtf_fault_signal_name(int sig);

/*
 * What the user's shell sees when every rank exits 75 after a stop on a
 * signal, for the stop's notice: a parenthesis starting with a space, or
 * "" when the launcher is not known.  Chosen from the environment: set
 * DTF_LAUNCH_ATTEMPT (dtf-launch), Open MPI's OMPI_MCA_orte_hnp_uri
 * (mpirun, 4.x), SLURM_STEP_ID (srun).  Open MPI 4.1's mpirun exits 1
 * when it is itself sent SIGINT or SIGTERM (it then SIGTERMs the ranks and
 * SIGKILLs them after odls_base_sigkill_timeout, 1 s); it passes 75 on
 * when it forwarded SIGUSR1 or only ranks were signalled.  So under mpirun
 * the text depends on `got_sigterm`: some rank received SIGTERM.
 */
const char *dtf_fault_exit_note(int got_sigterm);

/* Mark progress: restart the watchdog's clock for `phase` (a static
 * string: "training step", "evaluation", "checkpoint") at global step
 * `step`. */
void dtf_fault_progress(struct dtf_fault *f, const char *phase, int64_t step);

/* Disarm the watchdog (until the next dtf_fault_progress). */
void dtf_fault_idle(struct dtf_fault *f);

/* Injection hook at the start of global step `step` (S steps done).  May
 * not return (kill, hang, exit). */
void dtf_fault_at_step(struct dtf_fault *f, int64_t step);

/* 1 when the checkpoint of `step` being written should be cut by SIGKILL
 * half way (kill-in-checkpoint-write). */
int dtf_fault_kill_in_write(const struct dtf_fault *f, int64_t step);

/* 1 when DTF_FAULT names kill-in-export-write (for this process: rank 0,
 * this attempt): the export's file is cut by SIGKILL half way.  Reads the
 * environment only; installs nothing. */
int dtf_fault_kill_in_export(void);

#endif
