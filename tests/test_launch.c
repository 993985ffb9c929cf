/*
 * test_launch.c - stopping on a signal, what each launcher reports, and
 * dtf-launch as root.
 *
 * Runs the real binaries (dtf-records synth, mpirun dtf-train, dtf-launch)
 * on 480 synthetic 8x8 records and the tiny CNN of testutil.h, at most 2
 * ranks.  A Ctrl-C is what a terminal sends: SIGINT to every process of the
 * foreground process group, so dtf-launch runs in a process group of its
 * own and the signal goes to the whole group.  Waits are for a file and are
 * bounded; every process a test started (dtf-launch, mpirun, the ranks) is
 * killed by its id before the test asserts, whatever happened.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char tmp[256];

/* the sections after the tiny CNN (tu_write_tiny_job) */
static const char job_rest[] =
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 0\n"
	"  epochs: 100000\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"checkpoint: {every_steps: 10, keep: 3}\n"
	"logging: {every_steps: 10}\n";

static void setup(void)
{
	tu_tmpdir_create(tmp, sizeof(tmp), "dtf-launch-test");
	tu_synth(tmp, "train", 480, 2, "8,8,1", 1);
	tu_write_tiny_job(tmp, "job.yaml", 64, 0, job_rest);
}

static void teardown(void) { tu_tmpdir_remove(tmp); }

#define ck_assert_log(log, text) tu_assert_log(tmp, log, text)

#define ck_assert_not_log(log, text) tu_assert_not_log(tmp, log, text)

#define count_lines(log, text) tu_count_lines(tmp, log, text)

/* The last 1500 bytes of TMP/<log>, for a failure's message (Check's
 * messages are limited). */
static const char *tail(const char *log)
{
	const char *l = tu_slurp(tmp, log);
	size_t n = strlen(l);
	return l + (n > 1500 ? n - 1500 : 0);
}

/* ---- the stop notice ----------------------------------------------------- */

static int train2(const char *fault, const char *dir, const char *log)
{
	char env[256];
	snprintf(env, sizeof(env), "DTF_FAULT=%s", fault);
	return tu_mpirun(2, env, tmp, log,
			 "-t 1 --set checkpoint.dir=%s/%s "
			 "--set train.max_steps=60 %s/job.yaml",
			 tmp, dir, tmp);
}

START_TEST(signal_stop_is_one_notice_naming_the_ranks)
{
	/* rank 1 alone, under plain mpirun */
	ck_assert_int_eq(train2("term:rank=1:step=33", "n1", "n1.log"), 75);
	ck_assert_log("n1.log", "notice: stop requested by SIGTERM on rank 1 at "
				"step 34: checkpoint of step 34 written (");
	ck_assert_log("n1.log", "/n1/ckpt-34.dtf); exit status 75 (mpirun itself "
				"exits 1 when it was sent SIGINT or SIGTERM");
	ck_assert_not_log("n1.log", "error:");
	ck_assert_int_eq(count_lines("n1.log", "stop requested"), 1);
	/* both ranks at the same step */
	ck_assert_int_eq(train2("term:rank=0:step=20,term:rank=1:step=20", "n2",
				"n2.log"), 75);
	ck_assert_log("n2.log", "notice: stop requested by SIGTERM on ranks 0,1 "
				"at step 21: checkpoint of step 21 written (");
	ck_assert_not_log("n2.log", "error:");
	ck_assert_int_eq(count_lines("n2.log", "stop requested"), 1);
	/* different signals: each named with its ranks; SIGUSR1 and SIGINT
	 * to a rank leave mpirun's status 75 */
	ck_assert_int_eq(train2("usr1:rank=0:step=20,int:rank=1:step=20", "n3",
				"n3.log"), 75);
	ck_assert_log("n3.log", "notice: stop requested by SIGUSR1 on rank 0 and "
				"SIGINT on rank 1 at step 21: checkpoint of step 21 "
				"written (");
	ck_assert_log("n3.log", "exit status 75 (mpirun exits 75 too)");
	ck_assert_not_log("n3.log", "error:");
}
END_TEST

/* ---- processes ----------------------------------------------------------- */

#define MAX_PROCS 32

/* A command started in a process group of its own, and the processes seen
 * under it (pid and name, so that a pid reused later is left alone). */
struct group {
	pid_t pid;
	int n;
	pid_t procs[MAX_PROCS];
	char names[MAX_PROCS][32];
};

static void proc_name(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, (int)size, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

/* Add pid's descendants (Linux /proc/PID/task/PID/children) to g. */
static void collect(struct group *g, pid_t pid)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid,
		 (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	int c;
	while (g->n < MAX_PROCS && fscanf(f, "%d", &c) == 1) {
		int known = 0;
		for (int i = 0; i < g->n; i++)
			known |= g->procs[i] == c;
		if (known)
			continue;
		g->procs[g->n] = c;
		proc_name(c, g->names[g->n], sizeof(g->names[0]));
		g->n++;
		collect(g, c);
	}
	fclose(f);
}

/* `sh -c cmd` in a new process group, with the signals a shell started from
 * a terminal would have (default actions, nothing blocked). */
static void start_group(struct group *g, const char *cmd)
{
	memset(g, 0, sizeof(*g));
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setpgid(0, 0);
		const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGQUIT};
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	g->pid = pid;
}

/* Wait up to `seconds` for the group's command; 1 and its wait status in
 * *st when it ended. */
static int wait_group(struct group *g, int seconds, int *st)
{
	for (int i = 0; i < seconds * 10; i++) {
		collect(g, g->pid);
		if (waitpid(g->pid, st, WNOHANG) == g->pid)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* SIGKILL everything the group started that is still there: the group, and
 * each process seen under it (mpirun and the ranks may run in groups or
 * sessions of their own). */
static void kill_group(struct group *g)
{
	int st;
	kill(-g->pid, SIGKILL);
	for (int i = 0; i < g->n; i++) {
		char now[32];
		proc_name(g->procs[i], now, sizeof(now));
		if (now[0] && !strcmp(now, g->names[i]))
			kill(g->procs[i], SIGKILL);
	}
	waitpid(g->pid, &st, WNOHANG);
}

/* Up to `seconds` for TMP/<name> to exist while the group runs. */
static int wait_file(struct group *g, const char *name, int seconds)
{
	for (int i = 0; i < seconds * 10; i++) {
		collect(g, g->pid);
		if (tu_exists(tmp, name))
			return 1;
		usleep(100000);
	}
	return 0;
}

/* The step of the newest checkpoint in TMP/<dir> (its index file), or -1. */
static long newest_step(const char *dir)
{
	char name[256];
	snprintf(name, sizeof(name), "%s/checkpoint", dir);
	if (!tu_exists(tmp, name))
		return -1;
	long step = -1;
	const char *idx = tu_slurp(tmp, name);
	const char *p = strstr(idx, "\"ckpt-");
	if (p)
		step = strtol(p + 6, NULL, 10);
	return step;
}

/* ---- Ctrl-C and SIGTERM to dtf-launch ------------------------------------ */

/*
 * dtf-launch on 2 ranks, signalled as a terminal or a session manager
 * signals a job: `sig` to its whole process group once the first
 * checkpoint exists.  It must forward the stop to the ranks (SIGUSR1
 * through mpirun), exit 75, and leave a checkpoint a resume continues.
 */
static void group_signal_stops_with_75(int sig, const char *tag)
{
	char cmd[2048], dir[64], log[64], idx[96];
	snprintf(dir, sizeof(dir), "grp-%s", tag);
	snprintf(log, sizeof(log), "grp-%s.log", tag);
	/* the index, written with the first checkpoint (checkpoint.keep
	 * deletes the early ones soon) */
	snprintf(idx, sizeof(idx), "%s/checkpoint", dir);
	snprintf(cmd, sizeof(cmd),
		 "exec %s/dtf-launch --np 2 --delay 0 -- -t 1 --set "
		 "checkpoint.dir=%s/%s %s/job.yaml >/dev/null 2>%s/%s",
		 tu_build_root(), tmp, dir, tmp, tmp, log);
	struct group g;
	start_group(&g, cmd);
	int started = wait_file(&g, idx, 120);
	int st = 0, ended = 0;
	if (started) {
		collect(&g, g.pid);
		kill(-g.pid, sig);
		ended = wait_group(&g, 120, &st);
	}
	kill_group(&g);
	ck_assert_msg(started, "no %s within 120 s:\n%s", idx,
		      tail(log));
	ck_assert_msg(ended, "dtf-launch did not end within 120 s of %s:\n%s",
		      tag, tail(log));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 75,
		      "%s to the group: wait status 0x%x, wanted exit 75:\n%s",
		      tag, st, tail(log));
	ck_assert_log(log, "attempt 1 ended with status 75 (stopped by a signal "
			   "after writing a checkpoint) after dtf-launch was "
			   "signalled; not restarting");
	ck_assert_int_eq(count_lines(log, "dtf-launch: attempt "), 2);
	/* the ranks got SIGUSR1 from mpirun, not mpirun's SIGTERM */
	ck_assert_log(log, "notice: stop requested by SIGUSR1 on rank");
	ck_assert_log(log, "; exit status 75 (dtf-launch exits 75 too when it "
			   "was signalled itself; otherwise it restarts from "
			   "this checkpoint)");
	ck_assert_not_log(log, "error:");

	/* the checkpoint of the stop is the newest, and it continues */
	long step = newest_step(dir);
	ck_assert_msg(step >= 10, "no checkpoint index in %s", dir);
	const char *at = strstr(strstr(tu_slurp(tmp, log), "stop requested"),
				" at step ");
	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(strtol(at + 9, NULL, 10), step);
	char want[128], rlog[64];
	snprintf(rlog, sizeof(rlog), "grp-%s-resume.log", tag);
	st = tu_mpirun(2, NULL, tmp, rlog,
		       "-t 1 --resume --set checkpoint.dir=%s/%s "
		       "--set train.max_steps=%ld %s/job.yaml",
		       tmp, dir, step + 5, tmp);
	ck_assert_msg(st == 0, "resume: status %d:\n%s", st, tail(rlog));
	snprintf(want, sizeof(want), "/ckpt-%ld.dtf: step %ld,", step, step);
	ck_assert_log(rlog, want);
}

START_TEST(ctrl_c_to_dtf_launch_exits_75_and_resumes)
{
	group_signal_stops_with_75(SIGINT, "int");
}
END_TEST

START_TEST(sigterm_to_dtf_launch_group_exits_75_and_resumes)
{
	group_signal_stops_with_75(SIGTERM, "term");
}
END_TEST

/* A terminal that closes sends SIGHUP: the same stop, not an orphaned
 * mpirun training on. */
START_TEST(sighup_to_dtf_launch_group_exits_75)
{
	group_signal_stops_with_75(SIGHUP, "hup");
}
END_TEST

/* ---- root ------------------------------------------------------------------ */

/* The environment meson gives the tests allows mpirun to run as root;
 * these runs take that permission away. */
#define NO_ROOT_ENV "env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "

START_TEST(dtf_launch_as_root)
{
	if (geteuid() != 0) {
		fprintf(stderr, "dtf_launch_as_root: not root, nothing to test\n");
		return;
	}
	/* without permission: one attempt, the advice, exit 2 */
	int st = tu_run(NO_ROOT_ENV "timeout 120 %s/dtf-launch --np 2 --delay 0 "
			"-- -t 1 --set checkpoint.dir=%s/root0 --set "
			"train.max_steps=5 %s/job.yaml >/dev/null 2>%s/root0.log",
			tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 2, "status %d:\n%s", st, tail("root0.log"));
	ck_assert_int_eq(count_lines("root0.log", "dtf-launch: attempt "), 2);
	ck_assert_log("root0.log", "dtf-launch: attempt 1 ended with status 1: "
				   "mpirun refuses to run as root; pass "
				   "--allow-run-as-root to dtf-launch, or set "
				   "OMPI_ALLOW_RUN_AS_ROOT=1 and "
				   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; not restarting");
	/* dtf-launch --allow-run-as-root passes it to mpirun */
	st = tu_run(NO_ROOT_ENV "timeout 120 %s/dtf-launch --allow-run-as-root "
		    "--np 2 --delay 0 -- -t 1 --set checkpoint.dir=%s/root1 "
		    "--set train.max_steps=5 %s/job.yaml >/dev/null "
		    "2>%s/root1.log", tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tail("root1.log"));
	ck_assert_log("root1.log", "dtf-launch: attempt 1 of 4: mpirun "
				   "--allow-run-as-root -n 2 ");
	/* so does a --mpirun command that has it */
	st = tu_run(NO_ROOT_ENV "timeout 120 %s/dtf-launch --mpirun 'mpirun "
		    "--allow-run-as-root' --np 2 --delay 0 -- -t 1 --set "
		    "checkpoint.dir=%s/root2 --set train.max_steps=5 "
		    "%s/job.yaml >/dev/null 2>%s/root2.log",
		    tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tail("root2.log"));
	/* the environment's permission: it runs, nothing added to mpirun's
	 * command line */
	st = tu_run("timeout 120 %s/dtf-launch --np 2 --delay 0 -- -t 1 --set "
		    "checkpoint.dir=%s/root3 --set train.max_steps=5 "
		    "%s/job.yaml >/dev/null 2>%s/root3.log",
		    tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tail("root3.log"));
	ck_assert_log("root3.log", "dtf-launch: attempt 1 of 4: mpirun -n 2 ");
	ck_assert_not_log("root3.log", "--allow-run-as-root");
}
END_TEST

/* A dtf-train that cannot be run is a usage error before any attempt, not
 * four attempts each reported as a killed process. */
START_TEST(dtf_launch_without_dtf_train)
{
	int st = tu_run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
			"timeout 60 %s/dtf-launch --dtf-train %s/missing -n 1 -- "
			"%s/job.yaml >/dev/null 2>%s/nobin.log",
			tu_build_root(), tmp, tmp, tmp);
	ck_assert_int_eq(st, 2);
	char want[600];
	snprintf(want, sizeof(want), "dtf-launch: cannot run dtf-train: '%s/missing' "
		 "is not an executable file (give its path with --dtf-train PATH)", tmp);
	ck_assert_log("nobin.log", want);
	ck_assert_not_log("nobin.log", "attempt 1");
}
END_TEST

static TCase *add_case(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *launch_suite(void)
{
	/* one case each, so that CK_RUN_CASE=NAME runs one */
	Suite *s = suite_create("launch");
	TCase *tc = add_case(s, "notice");
	tcase_add_test(tc, signal_stop_is_one_notice_naming_the_ranks);
	tc = add_case(s, "group_signals");
	tcase_add_test(tc, ctrl_c_to_dtf_launch_exits_75_and_resumes);
	tcase_add_test(tc, sigterm_to_dtf_launch_group_exits_75_and_resumes);
	tcase_add_test(tc, sighup_to_dtf_launch_group_exits_75);
	tc = add_case(s, "root");
	tcase_add_test(tc, dtf_launch_as_root);
	tc = add_case(s, "usage");
	tcase_add_test(tc, dtf_launch_without_dtf_train);
	return s;
}

int main(void)
{
	return tu_run_suite(launch_suite(), 1);
}
