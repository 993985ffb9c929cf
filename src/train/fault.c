/*
 * fault.c - signal flag, watchdog thread, DTF_FAULT injection (fault.h).
 *
 * The signal flag is the one mutable global: a handler can reach nothing
 * else.  The watchdog shares with the main thread only atomics (the time of
 * the last progress mark, the step, a pointer to a static phase string)
 * and a stop flag; it sleeps in slices of at most 100 ms, so it ends within
 * that when stopped and fires within that of the timeout.
 */
#include "train/fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "distribute/comm.h"

#define MAX_FAULTS 4

static volatile sig_atomic_t pending_signal;

static const int caught[] = {SIGTERM, SIGINT, SIGUSR1};
#define NCAUGHT ((int)(sizeof(caught) / sizeof(caught[0])))

enum action {
	ACT_KILL,
	ACT_TERM,
	ACT_INT,
	ACT_USR1,
	ACT_HANG,
	ACT_EXIT,
	ACT_KILL_IN_WRITE,
	ACT_KILL_IN_EXPORT,
};

static const struct {
	const char *name;
	enum action act;
} actions[] = {
	{"kill", ACT_KILL}, {"term", ACT_TERM}, {"int", ACT_INT},
	{"usr1", ACT_USR1}, {"hang", ACT_HANG}, {"exit", ACT_EXIT},
	{"kill-in-checkpoint-write", ACT_KILL_IN_WRITE},
	{"kill-in-export-write", ACT_KILL_IN_EXPORT},
};

struct fault_spec {
	enum action act;
	int rank;     /* -1: every rank */
	int64_t step; /* -1: any */
	int attempt;
};

struct dtf_fault {
	struct dtf_comm *comm;
	int rank;
	double timeout;
	struct fault_spec faults[MAX_FAULTS];
	int nfaults;
	struct sigaction old[NCAUGHT], old_xfsz;
	pthread_t thread;
	int thread_started;
	atomic_int stop;
	atomic_int armed;
	atomic_llong mark_ns; /* CLOCK_MONOTONIC of the last progress */
	atomic_llong step;
	_Atomic(const char *) phase;
};

/* SIGTERM and SIGINT seen so far (each on its own): a second one of the
 * same kind ends the process, after a line saying so. */
static volatile sig_atomic_t seen_term, seen_int;
/* dtf_fault_catch_signals ran: signals from the process's start count, so
 * dtf_fault_new keeps a flag already set */
static int caught_early;
/* the line a second SIGTERM / SIGINT writes, formatted ahead (a handler
 * may not format) by prepare_second() */
static char second_line[2][256];
static size_t second_len[2];

static void prepare_second(void)
{
	for (int k = 0; k < 2; k++) {
		char prefix[160];
		dtf_log_prefix(DTF_LOG_WARN, prefix, sizeof(prefix));
		int n = snprintf(second_line[k], sizeof(second_line[k]),
				 "%ssecond %s: ending at once, without waiting for "
				 "the stop's checkpoint (killed by %s: exit status "
				 "%d in a shell)\n",
				 prefix, k ? "SIGINT" : "SIGTERM",
				 k ? "SIGINT" : "SIGTERM", k ? 130 : 143);
		second_len[k] = n < 0 ? 0
			       : (size_t)n < sizeof(second_line[k])
				       ? (size_t)n
				       : sizeof(second_line[k]) - 1;
	}
}

static void on_signal(int sig)
{
	int saved_errno = errno;
	if (sig == SIGTERM || sig == SIGINT) {
		volatile sig_atomic_t *seen = sig == SIGTERM ? &seen_term
							     : &seen_int;
		if (*seen) {
			/* the second of its kind: say so, then the default
			 * action (delivered when the handler returns) */
			int k = sig == SIGINT;
			ssize_t w = write(STDERR_FILENO, second_line[k],
					  second_len[k]);
			(void)w;
			signal(sig, SIG_DFL);
			raise(sig);
			errno = saved_errno;
			return;
		}
		*seen = 1;
	}
	if (!pending_signal)
		pending_signal = sig;
	errno = saved_errno;
}

static void install_handlers(struct sigaction *old)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (int i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &sa, old ? &old[i] : NULL);
}

void dtf_fault_catch_signals(void)
{
	prepare_second();
	caught_early = 1;
	install_handlers(NULL);
}

void dtf_fault_default_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &sa, NULL);
	if (pending_signal)
		raise(pending_signal);
}

int dtf_fault_pending_signal(void) { return pending_signal; }

const char *dtf_fault_signal_name(int sig)
{
	switch (sig) {
	case SIGTERM:
		return "SIGTERM";
	case SIGINT:
		return "SIGINT";
	case SIGUSR1:
		return "SIGUSR1";
	case SIGKILL:
		return "SIGKILL";
	default:
		return "a signal";
	}
}

const char *dtf_fault_exit_note(int got_sigterm)
{
	if (getenv("DTF_LAUNCH_ATTEMPT"))
		return " (dtf-launch exits 75 too when it was signalled itself; "
		       "otherwise it restarts from this checkpoint)";
	if (getenv("OMPI_MCA_orte_hnp_uri"))
		return got_sigterm
			       ? " (mpirun itself exits 1 when it was sent SIGINT "
				 "or SIGTERM, as by Ctrl-C; to get 75, signal "
				 "mpirun with SIGUSR1, or use dtf-launch or srun)"
			       : " (mpirun exits 75 too)";
	if (getenv("SLURM_STEP_ID"))
		return " (srun exits with its tasks' highest status: 75)";
	return "";
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ---- DTF_FAULT ----------------------------------------------------------- */

static int parse_int(const char *s, size_t n, long long *out)
{
	char buf[32];
	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = 0;
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (*end || errno || v < 0)
		return -1;
	*out = v;
	return 0;
}

/* One spec "action[:key=value]..." of length n. */
static int parse_spec(const char *s, size_t n, struct fault_spec *f)
{
	const char *colon = memchr(s, ':', n);
	size_t alen = colon ? (size_t)(colon - s) : n;
	int found = 0;
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (strlen(actions[i].name) == alen &&
		    !memcmp(actions[i].name, s, alen)) {
			f->act = actions[i].act;
			found = 1;
		}
	if (!found)
		return -1;
	f->rank = -1;
	f->step = -1;
	f->attempt = 1;
	const char *p = colon, *end = s + n;
	while (p && p < end) {
		p++; /* past ':' */
		const char *next = memchr(p, ':', (size_t)(end - p));
		const char *stop = next ? next : end;
		const char *eq = memchr(p, '=', (size_t)(stop - p));
		long long v;
		if (!eq || parse_int(eq + 1, (size_t)(stop - eq - 1), &v) < 0)
			return -1;
		size_t klen = (size_t)(eq - p);
		if (klen == 4 && !memcmp(p, "rank", 4))
			f->rank = (int)v;
		else if (klen == 4 && !memcmp(p, "step", 4))
			f->step = v;
		else if (klen == 7 && !memcmp(p, "attempt", 7))
			f->attempt = (int)v;
		else
			return -1;
		p = next;
	}
	return 0;
}

static int parse_faults(struct dtf_fault *f, const char *text)
{
	const char *p = text;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (f->nfaults == MAX_FAULTS ||
		    parse_spec(p, n, &f->faults[f->nfaults]) < 0)
			return dtf_error(DTF_ERR_USAGE,
					 "DTF_FAULT='%s': expected ACTION[:rank=R][:step=S][:attempt=A],... "
					 "(at most %d), ACTION one of kill, term, int, usr1, hang, exit, "
					 "kill-in-checkpoint-write, kill-in-export-write",
					 text, MAX_FAULTS);
		f->nfaults++;
		p += n;
		if (*p == ',')
			p++;
	}
	/* only the faults of this rank and this attempt matter */
	const char *att = getenv("DTF_LAUNCH_ATTEMPT");
	int attempt = att && atoi(att) > 0 ? atoi(att) : 1;
	int k = 0;
	for (int i = 0; i < f->nfaults; i++)
		if ((f->faults[i].rank < 0 || f->faults[i].rank == f->rank) &&
		    f->faults[i].attempt == attempt)
			f->faults[k++] = f->faults[i];
	f->nfaults = k;
	return 0;
}

/* ---- watchdog ------------------------------------------------------------ */

static void *watchdog(void *arg)
{
	struct dtf_fault *f = arg;
	long long limit = (long long)(f->timeout * 1e9);
	long long slice = limit / 10;
	if (slice > 100000000ll)
		slice = 100000000ll;
	if (slice < 1000000ll)
		slice = 1000000ll;
	while (!atomic_load(&f->stop)) {
		struct timespec ts = {(time_t)(slice / 1000000000ll),
				      (long)(slice % 1000000000ll)};
		nanosleep(&ts, NULL);
		if (!atomic_load(&f->armed))
			continue;
		long long idle = now_ns() - atomic_load(&f->mark_ns);
		if (idle < limit)
			continue;
		dtf_errlog("no progress for %.0f s (fault.timeout_seconds %g) "
			   "in the %s at step %lld: this rank or one it waits "
			   "for in a collective is dead or stuck; ending the job",
			   (double)idle / 1e9, f->timeout,
			   atomic_load(&f->phase),
			   (long long)atomic_load(&f->step));
		fflush(stderr);
		dtf_comm_abort(f->comm, 1);
	}
	return NULL;
}

void dtf_fault_progress(struct dtf_fault *f, const char *phase, int64_t step)
{
	if (!f)
		return;
	atomic_store(&f->mark_ns, now_ns());
	atomic_store(&f->step, (long long)step);
	atomic_store(&f->phase, phase);
	atomic_store(&f->armed, 1);
}

void dtf_fault_idle(struct dtf_fault *f)
{
	if (f)
		atomic_store(&f->armed, 0);
}

/* ---- setup --------------------------------------------------------------- */

int dtf_fault_new(struct dtf_comm *comm, int rank, double timeout_seconds,
		  struct dtf_fault **out)
{
	*out = NULL;
	struct dtf_fault *f = dtf_calloc(1, sizeof(*f));
	if (!f)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	f->comm = comm;
	f->rank = rank;
	f->timeout = timeout_seconds;
	atomic_store(&f->phase, "start");
	const char *spec = getenv("DTF_FAULT");
	int rc;
	if (spec && *spec && (rc = parse_faults(f, spec)) < 0) {
		dtf_free(f);
		return rc;
	}
	if (!caught_early)
		pending_signal = seen_term = seen_int = 0;
	prepare_second(); /* now with this rank's prefix */
	install_handlers(f->old);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGXFSZ, &sa, &f->old_xfsz);

	if (comm && timeout_seconds > 0) {
		/* the thread takes no signals: they go to the main thread */
		sigset_t all, prev;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &prev);
		int err = pthread_create(&f->thread, NULL, watchdog, f);
		pthread_sigmask(SIG_SETMASK, &prev, NULL);
		if (err) {
			dtf_fault_free(f);
			return dtf_error(DTF_ERR_RUNTIME,
					 "cannot start the watchdog thread: %s",
					 strerror(err));
		}
		f->thread_started = 1;
	}
	*out = f;
	return 0;
}

void dtf_fault_free(struct dtf_fault *f)
{
	if (!f)
		return;
	if (f->thread_started) {
		atomic_store(&f->stop, 1);
		pthread_join(f->thread, NULL);
	}
	for (int i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &f->old[i], NULL);
	sigaction(SIGXFSZ, &f->old_xfsz, NULL);
	dtf_free(f);
}

/* ---- injection ----------------------------------------------------------- */

void dtf_fault_at_step(struct dtf_fault *f, int64_t step)
{
	if (!f)
		return;
	for (int i = 0; i < f->nfaults; i++) {
		const struct fault_spec *s = &f->faults[i];
		if (s->step != step || s->act == ACT_KILL_IN_WRITE ||
		    s->act == ACT_KILL_IN_EXPORT)
			continue;
		dtf_warn("DTF_FAULT: injecting '%s' at step %lld",
			 actions[s->act].name, (long long)step);
		fflush(stderr);
		switch (s->act) {
		case ACT_KILL:
			raise(SIGKILL);
			break;
		case ACT_TERM:
			raise(SIGTERM);
			break;
		case ACT_INT:
			raise(SIGINT);
			break;
		case ACT_USR1:
			raise(SIGUSR1);
			break;
		case ACT_HANG:
			for (;;)
				pause();
		case ACT_EXIT:
			_exit(1);
		case ACT_KILL_IN_WRITE:
		case ACT_KILL_IN_EXPORT:
			break;
		}
	}
}

int dtf_fault_kill_in_write(const struct dtf_fault *f, int64_t step)
{
	if (!f)
		return 0;
	for (int i = 0; i < f->nfaults; i++)
		if (f->faults[i].act == ACT_KILL_IN_WRITE &&
		    (f->faults[i].step < 0 || f->faults[i].step == step))
			return 1;
	return 0;
}

int dtf_fault_kill_in_export(void)
{
	struct dtf_fault f;
	memset(&f, 0, sizeof(f));
	const char *text = getenv("DTF_FAULT");
	if (!text || !*text || parse_faults(&f, text) < 0)
		return 0;
	for (int i = 0; i < f.nfaults; i++)
		if (f.faults[i].act == ACT_KILL_IN_EXPORT)
			return 1;
	return 0;
}
