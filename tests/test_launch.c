/*
 * test_launch.c - stopping on a signal, what each launcher reports, and
 * dtf-launch as root.
 *
 * Also dtf-launch's usage errors, its hosts (--min-np leaving out a host
 * that does not answer) and its --bind-to none, with a stand-in mpirun
 * that records its arguments, and the threads a rank gets under each.
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
#include <sched.h>
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

/* ---- usage errors ---------------------------------------------------------- */

/* A stand-in for mpirun in TMP/fake (its name is mpirun, so dtf-launch
 * treats it as Open MPI's): each launch's arguments go to TMP/args, a
 * hostfile it is given as "HOSTFILE: line" after them; it exits with the
 * number in TMP/fail-K for launch K (0 without the file).  The probe
 * (dtf-train --version) of host b fails, of any other host succeeds. */
static const char fake_mpirun[] =
	"#!/bin/sh\n"
	"d=%s\n"
	"case \" $* \" in\n"
	"*' --version '*) case \" $* \" in *' --host b '*) exit 1 ;; esac; exit 0 ;;\n"
	"esac\n"
	"echo \"$*\" >>$d/args\n"
	"k=$(wc -l <$d/args)\n"
	"while [ $# -gt 0 ]; do\n"
	"  [ \"$1\" = --hostfile ] && sed 's/^/HOSTFILE: /' \"$2\" >>$d/hostfiles\n"
	"  shift\n"
	"done\n"
	"[ -f $d/fail-$k ] && exit $(cat $d/fail-$k)\n"
	"exit 0\n";

static void make_fake_mpirun(void)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/fake", tmp);
	ck_assert_int_eq(tu_run("mkdir -p %s", dir), 0);
	tu_write_file(dir, "mpirun", fake_mpirun, tmp);
	ck_assert_int_eq(tu_run("chmod +x %s/mpirun", dir), 0);
}

/* dtf-launch OPTIONS with the stand-in mpirun (--mpirun FAKE[ MPIRUN_OPTS],
 * --dtf-train /bin/true), ENV before it; its exit status.  TMP/args (the
 * launches) and TMP/launch.log (its stderr) start empty. */
static int fake_launch(const char *env, const char *mpirun_opts,
		       const char *options)
{
	tu_run("rm -f %s/args %s/hostfiles %s/fail-*", tmp, tmp, tmp);
	return tu_run("%s timeout 60 %s/dtf-launch --mpirun '%s/fake/mpirun%s%s' "
		      "--dtf-train /bin/true --delay 0 %s >/dev/null 2>%s/launch.log",
		      env ? env : "", tu_build_root(), tmp,
		      mpirun_opts ? " " : "", mpirun_opts ? mpirun_opts : "",
		      options, tmp);
}

static const char *args(void)
{
	return tu_exists(tmp, "args") ? tu_slurp(tmp, "args") : "";
}

/* -n 0 and options dtf-launch does not know are usage errors (exit 2)
 * naming the option, before anything is launched; dtf-train's options
 * go after "--" */
START_TEST(dtf_launch_usage_errors)
{
	make_fake_mpirun();
	static const struct {
		const char *options, *want;
	} bad[] = {
		{"-n 0 job.yaml", "dtf-launch: -n: expected a positive integer, got '0'"},
		{"--np 0 job.yaml", "dtf-launch: --np: expected a positive integer, got '0'"},
		{"-n 2 --min-np 0 job.yaml", "dtf-launch: --min-np: expected a positive integer, got '0'"},
		{"-n two job.yaml", "dtf-launch: -n: expected a positive integer, got 'two'"},
		{"--delay x job.yaml", "dtf-launch: --delay: expected a non-negative integer, got 'x'"},
		{"--probe-timeout 0 job.yaml", "dtf-launch: --probe-timeout: expected a positive integer, got '0'"},
		{"--foo job.yaml", "dtf-launch: unknown option '--foo' (dtf-train's options go after --, mpirun's inside --mpirun)"},
		{"-n 2 -t 1 job.yaml", "dtf-launch: unknown option '-t' (dtf-train's options go after --"},
		{"-np 4 job.yaml", "dtf-launch: unknown option '-np' (dtf-launch's is -n N or --np N)"},
		{"-n", "dtf-launch: option '-n' needs a value"},
		{"-H a --hostfile /dev/null job.yaml", "dtf-launch: give --host or --hostfile, not both"},
		{"--hostfile /nonexistent/hosts job.yaml", "dtf-launch: --hostfile /nonexistent/hosts: cannot read it"},
		{"--mpirun srun -H a job.yaml", "dtf-launch: --host and --hostfile are Open MPI mpirun's, but the launcher is 'srun'"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int st = fake_launch(NULL, NULL, bad[i].options);
		ck_assert_msg(st == 2, "dtf-launch %s: exit %d:\n%s", bad[i].options,
			      st, tail("launch.log"));
		ck_assert_log("launch.log", bad[i].want);
		ck_assert_log("launch.log", "Try 'dtf-launch --help'.");
		ck_assert_msg(!tu_exists(tmp, "args"), "dtf-launch %s launched %s",
			      bad[i].options, args());
	}
	/* --option=VALUE is --option VALUE; dtf-train's options after -- */
	ck_assert_int_eq(fake_launch(NULL, NULL, "--np=2 --max-restarts=0 -- -t 1 job.yaml"), 0);
	ck_assert_msg(strstr(args(), "-n 2 ") && strstr(args(), "/bin/true --resume -t 1 job.yaml"),
		      "%s", args());
}
END_TEST

/* ---- hosts ----------------------------------------------------------------- */

/* --min-np with hosts: after a failed attempt the host that does not
 * answer the probe (b) is left out, and the ranks drop to what the hosts
 * left have room for; a host list inside --mpirun is handled as
 * dtf-launch's own, a hostfile is passed on without the lost host */
START_TEST(dtf_launch_leaves_out_lost_hosts)
{
	make_fake_mpirun();
	/* a:2 + c = 3 slots left of 5 */
	tu_run("rm -f %s/args; echo 1 >%s/fail-1", tmp, tmp);
	int st = tu_run("timeout 60 %s/dtf-launch --mpirun '%s/fake/mpirun' --dtf-train "
		    "/bin/true --delay 0 -H a:2,b:2,c -n 5 --min-np 2 --max-restarts 1 "
		    "-- -t 1 job.yaml >/dev/null 2>%s/hosts.log",
		    tu_build_root(), tmp, tmp);
	ck_assert_msg(st == 0, "exit %d\n%s", st, tail("hosts.log"));
	ck_assert_log("hosts.log", "dtf-launch: host(s) b did not answer (mpirun -n 1 "
				   "--host HOST /bin/true --version within 10 s): leaving them out");
	ck_assert_log("hosts.log", "restarting from the newest checkpoint with 3 rank(s) on a,c in 0 s");
	ck_assert_msg(strstr(args(), "--host a:2,b:2,c -n 5 ") &&
		      strstr(args(), "--host a:2,c -n 3 "), "%s", args());
	/* the same host list inside --mpirun; a rank lost, no host lost:
	 * one rank fewer on the same hosts */
	tu_run("rm -f %s/args; echo 137 >%s/fail-1", tmp, tmp);
	st = tu_run("timeout 60 %s/dtf-launch --mpirun '%s/fake/mpirun -H a,c' --dtf-train "
		    "/bin/true --delay 0 -n 2 --min-np 1 --max-restarts 1 "
		    "-- -t 1 job.yaml >/dev/null 2>%s/hosts2.log",
		    tu_build_root(), tmp, tmp);
	ck_assert_msg(st == 0, "exit %d\n%s", st, tail("hosts2.log"));
	ck_assert_not_log("hosts2.log", "did not answer");
	ck_assert_log("hosts2.log", "ended with status 137 (a process was killed by "
				    "SIGKILL); restarting from the newest checkpoint "
				    "with 1 rank(s) on a,c in 0 s");
	ck_assert_msg(strstr(args(), "--host a,c -n 2 ") &&
		      strstr(args(), "--host a,c -n 1 "), "%s", args());
	/* a hostfile: its lines without b's (6 slots, 4 left) */
	tu_write_file(tmp, "hosts", "# the hosts\na slots=2\nb slots=2 max_slots=2\n\nc slots=2\n");
	tu_run("rm -f %s/args %s/hostfiles; echo 1 >%s/fail-1", tmp, tmp, tmp);
	st = tu_run("timeout 60 %s/dtf-launch --mpirun '%s/fake/mpirun --hostfile %s/hosts' "
		    "--dtf-train /bin/true --delay 0 -n 6 --min-np 1 --max-restarts 1 "
		    "-- -t 1 job.yaml >/dev/null 2>%s/hosts3.log",
		    tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "exit %d\n%s", st, tail("hosts3.log"));
	ck_assert_log("hosts3.log", "with 4 rank(s) on a,c in 0 s");
	ck_assert_str_eq(tu_slurp(tmp, "hostfiles"),
			 "HOSTFILE: a slots=2\nHOSTFILE: b slots=2 max_slots=2\n"
			 "HOSTFILE: c slots=2\n"
			 "HOSTFILE: a slots=2\nHOSTFILE: c slots=2\n");
	ck_assert_msg(strstr(args(), " -n 4 ") != NULL, "%s", args());
	/* no host answers: no restart */
	tu_run("rm -f %s/args; echo 1 >%s/fail-1", tmp, tmp);
	st = tu_run("timeout 60 %s/dtf-launch --mpirun '%s/fake/mpirun' --dtf-train "
		    "/bin/true --delay 0 -H b,b -n 2 --min-np 1 --max-restarts 1 "
		    "-- job.yaml >/dev/null 2>%s/hosts4.log",
		    tu_build_root(), tmp, tmp);
	ck_assert_int_eq(st, 1);
	ck_assert_log("hosts4.log", "dtf-launch: attempt 1 ended with status 1 (a "
				    "runtime failure, or another rank failed), and no "
				    "host answers (mpirun -n 1 --host HOST /bin/true "
				    "--version within 10 s: b,b); not restarting");
	ck_assert_int_eq(count_lines("hosts4.log", "dtf-launch: attempt "), 2);
}
END_TEST

/* ---- binding ---------------------------------------------------------------- */

/* CPUs of this machine's first core (its hardware threads) */
static long cpus_per_core(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "r");
	long n = 0, a, b;
	if (!f)
		return 1;
	while (fscanf(f, "%ld", &a) == 1) {
		b = a;
		int c = fgetc(f);
		if (c == '-' && fscanf(f, "%ld", &b) == 1)
			c = fgetc(f);
		n += b - a + 1;
		if (c != ',')
			break;
	}
	fclose(f);
	return n > 0 ? n : 1;
}

/* --bind-to none where each rank's threads would share the core (2 ranks
 * or fewer) or socket Open MPI binds it to, and not where they fit or the
 * user chose a binding or mapping */
START_TEST(dtf_launch_bind_to_none)
{
	make_fake_mpirun();
	static const struct {
		const char *env, *mpirun, *options;
		int bind; /* 1: --bind-to none added */
	} cases[] = {
		{NULL, NULL, "-n 1 -- -t 64 job.yaml", 1},
		{NULL, NULL, "-n 2 -- --threads 64 job.yaml", 1},
		{NULL, NULL, "-n 2 -- --threads=64 job.yaml", 1},
		{NULL, NULL, "-n 3 -- -t 64 job.yaml", 1},
		{NULL, NULL, "-n 2 -- -t 1 job.yaml", 0},
		{"OPENBLAS_NUM_THREADS=64", NULL, "-n 1 -- job.yaml", 1},
		{"OPENBLAS_NUM_THREADS=1", NULL, "-n 1 -- job.yaml", 0},
		/* the user's binding, mapping or MCA policy */
		{NULL, "--bind-to core", "-n 1 -- -t 64 job.yaml", 0},
		{NULL, "--map-by ppr:1:node:pe=4", "-n 1 -- -t 64 job.yaml", 0},
		{"OMPI_MCA_hwloc_base_binding_policy=core", NULL, "-n 1 -- -t 64 job.yaml", 0},
		{"OMPI_MCA_rmaps_base_mapping_policy=socket", NULL, "-n 1 -- -t 64 job.yaml", 0},
		/* mpirun decides the ranks */
		{NULL, NULL, "-- -t 64 job.yaml", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char opts[256];
		snprintf(opts, sizeof(opts), "--max-restarts 0 %s", cases[i].options);
		int st = fake_launch(cases[i].env, cases[i].mpirun, opts);
		ck_assert_msg(st == 0, "%s: exit %d\n%s", opts, st, tail("launch.log"));
		int has = strstr(args(), "--bind-to none") != NULL;
		ck_assert_msg(has == cases[i].bind, "%s %s (mpirun %s): %s",
			      cases[i].env ? cases[i].env : "", opts,
			      cases[i].mpirun ? cases[i].mpirun : "", args());
		/* never a second --bind-to beside the user's */
		if (cases[i].mpirun && strstr(cases[i].mpirun, "--bind-to"))
			ck_assert_ptr_null(strstr(strstr(args(), "--bind-to") + 1,
						  "--bind-to"));
	}
	/* a launcher that is not Open MPI's mpirun gets neither this nor the
	 * keepalive options */
	ck_assert_int_eq(tu_run("cp %s/fake/mpirun %s/fake/launcher", tmp, tmp), 0);
	ck_assert_int_eq(tu_run("timeout 60 %s/dtf-launch --mpirun %s/fake/launcher "
				"--dtf-train /bin/true --max-restarts 0 -n 1 -- -t 64 "
				"job.yaml >/dev/null 2>%s/launcher.log",
				tu_build_root(), tmp, tmp), 0);
	ck_assert_log("launcher.log", "fake/launcher -n 1 /bin/true --resume -t 64 job.yaml\n");
	/* the keepalive options: each unless the command or the
	 * environment sets it */
	ck_assert_int_eq(fake_launch("OMPI_MCA_oob_tcp_keepalive_probes=7",
				     "--mca oob_tcp_keepalive_time 9",
				     "--max-restarts 0 -n 2 -- -t 1 job.yaml"), 0);
	ck_assert_msg(strstr(args(), "--mca oob_tcp_keepalive_time 9 -n 2 "
				     "--mca oob_tcp_keepalive_intvl 2 /bin/true") != NULL,
		      "%s", args());
	ck_assert_int_eq(fake_launch(NULL, NULL, "--max-restarts 0 -n 2 -- -t 1 job.yaml"), 0);
	ck_assert_msg(strstr(args(), "-n 2 --mca oob_tcp_keepalive_time 5 "
				     "--mca oob_tcp_keepalive_intvl 2 "
				     "--mca oob_tcp_keepalive_probes 3 /bin/true") != NULL,
		      "%s", args());
	/* dtf-train's default: this machine's CPUs for 1 rank, more than a
	 * core's when the machine has more than one core */
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int st = fake_launch("env -u OPENBLAS_NUM_THREADS", NULL,
			     "--max-restarts 0 -n 1 -- job.yaml");
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(strstr(args(), "--bind-to none") != NULL,
			 online > cpus_per_core());
}
END_TEST

/* The effect, under the real mpirun: 1 rank, dtf-train's default threads.
 * Plain mpirun binds the rank to one core and dtf-train keeps to its
 * affinity; under dtf-launch it gets the machine's CPUs (those this test
 * may use). */
static int threads_logged(const char *log)
{
	const char *text = tu_slurp(tmp, log); /* valid until the next slurp */
	const char *p = strstr(text, " thread(s) per rank");
	ck_assert_msg(p != NULL, "no thread count in\n%s", tail(log));
	while (p > text && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return atoi(p);
}

START_TEST(dtf_launch_bind_to_none_gives_the_threads)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	long mine = CPU_COUNT(&set);
	long want = mine < online ? mine : online;
	if (online <= cpus_per_core() || want < 2) {
		fprintf(stderr, "dtf_launch_bind_to_none_gives_the_threads: one "
			"core, nothing to test\n");
		return;
	}
	int st = tu_run("env -u OPENBLAS_NUM_THREADS timeout 120 mpirun -n 1 "
			"%s/dtf-train --set train.max_steps=2 %s/job.yaml "
			">/dev/null 2>%s/plain.log", tu_build_root(), tmp, tmp);
	ck_assert_msg(st == 0, "%s", tail("plain.log"));
	st = tu_run("env -u OPENBLAS_NUM_THREADS timeout 120 %s/dtf-launch -n 1 "
		    "--max-restarts 0 -- --set train.max_steps=2 --set "
		    "checkpoint.dir=%s/bind %s/job.yaml >/dev/null 2>%s/bind.log",
		    tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "%s", tail("bind.log"));
	ck_assert_log("bind.log", "--bind-to none");
	printf("1 rank, default threads: %d under mpirun, %d under dtf-launch "
	       "(%ld CPUs, %ld per core)\n", threads_logged("plain.log"),
	       threads_logged("bind.log"), online, cpus_per_core());
	ck_assert_int_le(threads_logged("plain.log"), cpus_per_core());
	ck_assert_int_eq(threads_logged("bind.log"), want);
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
	tcase_add_test(tc, dtf_launch_usage_errors);
	tc = add_case(s, "hosts");
	tcase_add_test(tc, dtf_launch_leaves_out_lost_hosts);
	tc = add_case(s, "binding");
	tcase_add_test(tc, dtf_launch_bind_to_none);
	tcase_add_test(tc, dtf_launch_bind_to_none_gives_the_threads);
	return s;
}

int main(void)
{
	return tu_run_suite(launch_suite(), 1);
}
