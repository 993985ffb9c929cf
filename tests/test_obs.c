/*
 * test_obs.c - what training shows: event files, trace, metrics, console.
 *
 * Event files are decoded here with the project's TFRecord reader and a
 * protobuf walker written for this test from event.proto / summary.proto
 * (not the writer's code), so a wrong field number or wire type fails.
 * The end-to-end cases run mpirun dtf-train on synthetic data with
 * logging.dir and logging.trace set and check every output against the
 * others: the loss in the event file equals the loss in metrics.jsonl, the
 * trace parses as JSON (python3's json module) with one process per rank.
 * The straggler verdicts are checked on windows of known times (each
 * expected verdict worked out by hand from the rule in obs/straggler.h),
 * then end to end: one of 2 ranks throttled (SIGSTOP/SIGCONT duty cycle,
 * in a child process) is named with its host and cause compute, an
 * even run names no one, a large fault.straggler_factor names no one, and
 * the per-rank times of metrics.jsonl equal those of the event file.
 * The build directory comes from DTF_BUILD_ROOT (set by meson).
 */
#include <check.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "data/tfrecord.h"
#include "obs/obs.h"
#include "obs/straggler.h"
#include "obs/tfevents.h"
#include "obs/trace.h"

#include "testutil.h"

static char tmpdir[256];

static const char job_text[] =
	"name: tiny-obs\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\"}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"  metrics: [accuracy, {top_k_accuracy: {k: 2}}]\n"
	"train:\n"
	"  batch_size: 16\n"
	"  epochs: 2\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 10, dir: \"%s/run\", trace: \"%s/run/trace.json\",\n"
	"          trace_steps: [5, 12]}\n";

static int count_str(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}


static int count_files(const char *pattern)
{
	glob_t g;
	int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
	globfree(&g);
	return n;
}

/* ---- fixtures ---------------------------------------------------------------- */

static void setup_tmp(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-obs-test");
}

static void teardown_tmp(void)
{
	tu_tmpdir_remove(tmpdir);
}

static void setup_job(void)
{
	setup_tmp();
	tu_synth(tmpdir, "train", 480, 1, "8,8,1", 1);
	tu_synth(tmpdir, "test", 200, 1, "8,8,1", 2);
	tu_write_file(tmpdir, "job.yaml", job_text, tmpdir, tmpdir, tmpdir,
		      tmpdir);
}

/* ---- unit: straggler verdicts ------------------------------------------------ */

/* A window in milliseconds: every rank `step` ms, `comm` ms communicating,
 * busy = data + compute (the medians equal to the means). */
static struct dtf_straggler_times win_ms(double step, double data,
					 double compute, double comm,
					 double rtt)
{
	return (struct dtf_straggler_times){
		.step = step * 1e-3, .data_wait = data * 1e-3,
		.compute = compute * 1e-3, .comm = comm * 1e-3,
		.busy_median = (data + compute) * 1e-3,
		.data_wait_median = data * 1e-3,
		.compute_median = compute * 1e-3, .link_rtt = rtt * 1e-3};
}

static void judge(const struct dtf_straggler_times *t, const int *host, int n,
		  double factor, struct dtf_straggler_verdict *v)
{
	double scratch[3 * 8];
	ck_assert_int_le(n, 8);
	dtf_straggler_judge(t, host, n, factor, scratch, v);
}

START_TEST(straggler_even_window_names_no_one)
{
	struct dtf_straggler_times t[4];
	int host[4] = {0, 0, 1, 1};
	struct dtf_straggler_verdict v[4];
	/* 10 to 14 ms of work: within 1.5x of the others' median */
	for (int r = 0; r < 4; r++)
		t[r] = win_ms(30, 1, 9 + r, 20 - r, 0.5);
	judge(t, host, 4, 1.5, v);
	for (int r = 0; r < 4; r++)
		ck_assert_int_eq(v[r].cause, DTF_STRAGGLER_NONE);
}
END_TEST

START_TEST(straggler_slow_compute_is_named_against_the_others_median)
{
	struct dtf_straggler_times t[4];
	int host[4] = {0, 1, 2, 3};
	struct dtf_straggler_verdict v[4];
	/* rank 2 computes 25 ms, the others 10: the others wait 15 ms in
	 * their communication, rank 2 does not (what a sync step does) */
	for (int r = 0; r < 4; r++)
		t[r] = win_ms(30, 1, 9, 20, 0.5);
	t[2] = win_ms(30, 1, 24, 5, 0.5);
	judge(t, host, 4, 1.5, v);
	for (int r = 0; r < 4; r++)
		ck_assert_int_eq(v[r].cause, r == 2 ? DTF_STRAGGLER_COMPUTE
						    : DTF_STRAGGLER_NONE);
	ck_assert_double_eq_tol(v[2].value, 25e-3, 1e-12);
	ck_assert_double_eq_tol(v[2].median, 10e-3, 1e-12);
	/* 2.5x: named at 1.5 and 2.4, not at 2.6 */
	judge(t, host, 4, 2.4, v);
	ck_assert_int_eq(v[2].cause, DTF_STRAGGLER_COMPUTE);
	judge(t, host, 4, 2.6, v);
	ck_assert_int_eq(v[2].cause, DTF_STRAGGLER_NONE);
}
END_TEST

START_TEST(straggler_slow_input_is_named_data_wait)
{
	struct dtf_straggler_times t[3];
	int host[3] = {0, 0, 0};
	struct dtf_straggler_verdict v[3];
	for (int r = 0; r < 3; r++)
		t[r] = win_ms(40, 2, 10, 28, 0.01);
	t[1] = win_ms(40, 20, 11, 9, 0.01); /* waits 18 ms more for data */
	judge(t, host, 3, 1.5, v);
	ck_assert_int_eq(v[0].cause, DTF_STRAGGLER_NONE);
	ck_assert_int_eq(v[1].cause, DTF_STRAGGLER_DATA_WAIT);
	ck_assert_int_eq(v[2].cause, DTF_STRAGGLER_NONE);
	ck_assert_double_eq_tol(v[1].value, 31e-3, 1e-12);
	ck_assert_double_eq_tol(v[1].median, 12e-3, 1e-12);
}
END_TEST

START_TEST(straggler_of_two_ranks_is_the_slower_one)
{
	struct dtf_straggler_times t[2] = {win_ms(30, 0, 10, 20, 0.01),
					   win_ms(30, 0, 21, 9, 0.01)};
	int host[2] = {0, 0};
	struct dtf_straggler_verdict v[2];
	judge(t, host, 2, 1.5, v);
	ck_assert_int_eq(v[0].cause, DTF_STRAGGLER_NONE);
	ck_assert_int_eq(v[1].cause, DTF_STRAGGLER_COMPUTE);
	ck_assert_double_eq_tol(v[1].median, 10e-3, 1e-12);
}
END_TEST

START_TEST(straggler_excess_below_five_percent_of_the_step_is_not_named)
{
	/* 3x the other's work, but 1 ms more of a 30 ms step (3.3%) */
	struct dtf_straggler_times t[2] = {win_ms(30, 0, 0.5, 29, 0.01),
					   win_ms(30, 0, 1.5, 28, 0.01)};
	int host[2] = {0, 0};
	struct dtf_straggler_verdict v[2];
	judge(t, host, 2, 1.5, v);
	ck_assert_int_eq(v[1].cause, DTF_STRAGGLER_NONE);
	/* 2 ms more of it (6.7%): named */
	t[1] = win_ms(30, 0, 2.5, 27, 0.01);
	judge(t, host, 2, 1.5, v);
	ck_assert_int_eq(v[1].cause, DTF_STRAGGLER_COMPUTE);
}
END_TEST

START_TEST(straggler_slow_link_is_named_on_its_host)
{
	/* ranks 0,1 on host 0, 2,3 on host 1, 4,5 on host 2; ring links
	 * 1->2 (hosts 0-1) and 3->4 (1-2) are host 1's; 5->0 (2-0) is not;
	 * 0->1, 2->3, 4->5 are shared memory (slow ones must not count) */
	struct dtf_straggler_times t[6];
	int host[6] = {0, 0, 1, 1, 2, 2};
	struct dtf_straggler_verdict v[6];
	double rtt[6] = {9, 21, 9, 23, 9, 1};
	for (int r = 0; r < 6; r++)
		t[r] = win_ms(100, 1, 20, 79, rtt[r]);
	judge(t, host, 6, 1.5, v);
	for (int r = 0; r < 6; r++)
		ck_assert_int_eq(v[r].cause, r == 2 || r == 3
						     ? DTF_STRAGGLER_NETWORK
						     : DTF_STRAGGLER_NONE);
	/* host 1's score: its shortest cross link, 21 ms; hosts 0 and 2:
	 * 1 ms each (link 5->0) */
	ck_assert_double_eq_tol(v[2].value, 21e-3, 1e-12);
	ck_assert_double_eq_tol(v[2].median, 1e-3, 1e-12);
	/* an excess under 1% of the step is not named: 0.9 ms of 100 */
	for (int r = 0; r < 6; r++)
		t[r].link_rtt = (rtt[r] < 5 ? 0.1 : 1.0) * 1e-3;
	judge(t, host, 6, 1.5, v);
	for (int r = 0; r < 6; r++)
		ck_assert_int_eq(v[r].cause, DTF_STRAGGLER_NONE);
	/* 1.1 ms of 100: named */
	for (int r = 0; r < 6; r++)
		t[r].link_rtt = (rtt[r] < 5 ? 0.1 : 1.2) * 1e-3;
	judge(t, host, 6, 1.5, v);
	ck_assert_int_eq(v[2].cause, DTF_STRAGGLER_NETWORK);
	for (int r = 0; r < 6; r++)
		t[r].link_rtt = rtt[r] * 1e-3;
	/* a rank slow in compute on that host keeps its own cause */
	t[3] = win_ms(100, 1, 60, 39, rtt[3]);
	judge(t, host, 6, 1.5, v);
	ck_assert_int_eq(v[2].cause, DTF_STRAGGLER_NETWORK);
	ck_assert_int_eq(v[3].cause, DTF_STRAGGLER_COMPUTE);
	/* two hosts: every cross link is both hosts', no verdict */
	int two[6] = {0, 0, 0, 1, 1, 1};
	for (int r = 0; r < 6; r++)
		t[r] = win_ms(100, 1, 20, 79, r == 2 || r == 5 ? 30 : 0.1);
	judge(t, two, 6, 1.5, v);
	for (int r = 0; r < 6; r++)
		ck_assert_int_eq(v[r].cause, DTF_STRAGGLER_NONE);
}
END_TEST

START_TEST(straggler_is_named_after_windows_in_a_row)
{
	struct dtf_straggler *s;
	ck_assert_int_eq(dtf_straggler_new(2, 1.5, 3, &s), 0);
	int host[2] = {0, 0};
	struct dtf_straggler_times slow[2] = {win_ms(30, 0, 10, 20, 0.01),
					      win_ms(30, 0, 25, 5, 0.01)};
	struct dtf_straggler_times even[2] = {win_ms(30, 0, 10, 20, 0.01),
					      win_ms(30, 0, 10, 20, 0.01)};
	const struct dtf_straggler_times *seq[9] = {
		slow, slow, even, slow, slow, slow, slow, even, slow};
	/* named at the 3rd slow window in a row, once; cleared after */
	int named[9] = {0, 0, 0, 0, 0, 1, 0, 0, 0};
	int cleared[9] = {0, 0, 0, 0, 0, 0, 0, 1, 0};
	int streak[9] = {1, 2, 0, 1, 2, 3, 4, 0, 1};
	for (int w = 0; w < 9; w++) {
		struct dtf_straggler_verdict v[2];
		dtf_straggler_update(s, seq[w], host, v);
		ck_assert_msg(v[1].named == named[w] &&
				      v[1].cleared == cleared[w] &&
				      v[1].streak == streak[w],
			      "window %d: named %d cleared %d streak %d", w,
			      v[1].named, v[1].cleared, v[1].streak);
		ck_assert_int_eq(v[0].named + v[0].cleared + v[0].streak, 0);
	}
	dtf_straggler_free(s);
	dtf_straggler_free(NULL);
}
END_TEST

/* ---- unit: event file writer ------------------------------------------------ */

START_TEST(event_file_decodes_to_what_was_written)
{
	struct dtf_tfevents *w;
	ck_assert_int_eq(dtf_tfevents_open(tmpdir, "hostA", 1700000000.25, &w), 0);
	char want[512];
	snprintf(want, sizeof(want), "%s/events.out.tfevents.1700000000.hostA",
		 tmpdir);
	ck_assert_str_eq(dtf_tfevents_path(w), want);
	struct dtf_tfevents_scalar v[3] = {
		{"loss", 0.5f}, {"accuracy", 0.875f}, {"step_time_ms/forward", 12.25f}};
	ck_assert_int_eq(dtf_tfevents_scalars(w, 100, 1700000001.5, v, 3), 0);
	ck_assert_int_eq(dtf_tfevents_session_start(w, 300, 1700000002.0), 0);
	/* a step past 2^31 needs a 5-byte varint */
	ck_assert_int_eq(dtf_tfevents_scalars(w, 5000000000LL, 1700000003.0,
					      v, 1), 0);
	ck_assert_int_eq(dtf_tfevents_close(w), 0);

	struct tu_event_file *ef = malloc(sizeof(*ef));
	tu_events_read(want, ef);
	ck_assert_double_eq(ef->first_wall, 1700000000.25);
	ck_assert_int_eq(ef->nevents, 4);
	ck_assert_int_eq(ef->n, 4);
	ck_assert_float_eq(tu_events_find(ef, 100, "loss")->value, 0.5f);
	ck_assert_float_eq(tu_events_find(ef, 100, "accuracy")->value, 0.875f);
	ck_assert_float_eq(tu_events_find(ef, 100, "step_time_ms/forward")->value,
			   12.25f);
	ck_assert_ptr_nonnull(tu_events_find(ef, 5000000000LL, "loss"));
	ck_assert_int_eq(ef->session_starts, 1);
	ck_assert_int_eq(ef->start_step, 300);
	free(ef);
}
END_TEST

START_TEST(event_file_never_overwrites_an_earlier_one)
{
	struct dtf_tfevents *a, *b;
	ck_assert_int_eq(dtf_tfevents_open(tmpdir, "h", 1700000000.0, &a), 0);
	ck_assert_int_eq(dtf_tfevents_open(tmpdir, "h", 1700000000.9, &b), 0);
	ck_assert_str_ne(dtf_tfevents_path(a), dtf_tfevents_path(b));
	char want[512];
	snprintf(want, sizeof(want), "%s/events.out.tfevents.1700000000.h.1",
		 tmpdir);
	ck_assert_str_eq(dtf_tfevents_path(b), want);
	ck_assert_int_eq(dtf_tfevents_close(a), 0);
	ck_assert_int_eq(dtf_tfevents_close(b), 0);
	char pattern[512];
	snprintf(pattern, sizeof(pattern), "%s/events.out.tfevents.*", tmpdir);
	ck_assert_int_eq(count_files(pattern), 2);
}
END_TEST

START_TEST(event_file_in_missing_directory_is_io_error)
{
	struct dtf_tfevents *w = (void *)1;
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/no/such/dir", tmpdir);
	ck_assert_int_eq(dtf_tfevents_open(dir, "h", 1.7e9, &w), -DTF_ERR_IO);
	ck_assert_ptr_null(w);
	ck_assert_msg(strstr(dtf_error_msg(), "no/such/dir/events.out.tfevents.") != NULL,
		      "%s", dtf_error_msg());
}
END_TEST

/* ---- unit: trace -------------------------------------------------------------- */

static int json_ok(const char *path)
{
	return tu_run("python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '%s' 2>/dev/null",
		      path);
}

START_TEST(trace_is_valid_json_after_a_kill)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/t.rank0.json", tmpdir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct dtf_trace *t;
		if (dtf_trace_open(path, 0, "h", 10.0, &t) < 0)
			_exit(3);
		for (int s = 1; s <= 50; s++) {
			dtf_trace_span(t, "forward", 0, 10.0 + s, 10.5 + s, s, -1);
			dtf_trace_span(t, "allreduce", 1, 10.5 + s, 10.6 + s, s, 2);
			dtf_trace_flush(t);
		}
		/* spans buffered but never flushed, then killed */
		dtf_trace_span(t, "backward", 0, 70.0, 71.0, 51, -1);
		raise(SIGKILL);
		_exit(4);
	}
	int st;
	waitpid(pid, &st, 0);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	ck_assert_int_eq(json_ok(path), 0);
	char *text = tu_read_file(NULL, path, NULL);
	ck_assert_int_eq(count_str(text, "\"name\":\"forward\""), 50);
	ck_assert_int_eq(count_str(text, "\"name\":\"allreduce\""), 50);
	ck_assert_int_eq(count_str(text, "\"index\":2"), 50);
	ck_assert_int_eq(count_str(text, "\"name\":\"backward\""), 0);
	/* ts in microseconds from the origin (10 s): step 1 starts at 1 s */
	ck_assert_ptr_nonnull(strstr(text, "\"ts\":1000000.000,\"dur\":500000.000"));
	free(text);
}
END_TEST

/* A flush that runs out of space part way leaves the file the valid array
 * of the last good flush (RLIMIT_FSIZE stands in for a full disk). */
START_TEST(trace_is_valid_json_after_a_full_disk)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/full.rank0.json", tmpdir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit lim = {3000, 3000};
		if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
			_exit(5);
		struct dtf_trace *t;
		if (dtf_trace_open(path, 0, "h", 10.0, &t) < 0)
			_exit(3);
		int s, rc = 0;
		for (s = 1; s <= 50 && rc == 0; s++) {
			dtf_trace_span(t, "forward", 0, 10.0 + s, 10.5 + s, s, -1);
			dtf_trace_span(t, "allreduce", 1, 10.5 + s, 10.6 + s, s, 2);
			rc = dtf_trace_flush(t);
		}
		dtf_trace_close(t);
		_exit(rc < 0 && s > 3 ? 0 : 4); /* it did fill up, later */
	}
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	ck_assert_int_eq(json_ok(path), 0);
	char *text = tu_read_file(NULL, path, NULL);
	int n = count_str(text, "\"name\":\"forward\"");
	ck_assert_int_ge(n, 2);
	ck_assert_int_eq(count_str(text, "\"name\":\"allreduce\""), n);
	free(text);
}
END_TEST

START_TEST(trace_merge_joins_ranks)
{
	char p0[512], p1[512], out[512];
	snprintf(out, sizeof(out), "%s/m.json", tmpdir);
	dtf_trace_rank_path(out, 0, p0, sizeof(p0));
	dtf_trace_rank_path(out, 1, p1, sizeof(p1));
	char want[512];
	snprintf(want, sizeof(want), "%s/m.rank1.json", tmpdir);
	ck_assert_str_eq(p1, want);
	const char *in[3] = {p0, p1, "/nonexistent/m.rank2.json"};
	for (int r = 0; r < 2; r++) {
		struct dtf_trace *t;
		ck_assert_int_eq(dtf_trace_open(r ? p1 : p0, r, "h", 0, &t), 0);
		dtf_trace_span(t, "forward", 0, 1, 2, 1, -1);
		ck_assert_int_eq(dtf_trace_close(t), 0);
	}
	int missing = -1;
	ck_assert_int_eq(dtf_trace_merge(out, in, 3, &missing), 0);
	ck_assert_int_eq(missing, 1);
	ck_assert_int_eq(json_ok(out), 0);
	char *text = tu_read_file(NULL, out, NULL);
	ck_assert_int_eq(count_str(text, "\"name\":\"forward\""), 2);
	ck_assert_int_eq(count_str(text, "\"name\":\"process_name\""), 2);
	ck_assert_ptr_nonnull(strstr(text, "\"pid\":1"));
	free(text);
	/* a file that is not an array is named */
	FILE *f = fopen(p1, "w");
	fputs("{\"traceEvents\": []}", f);
	fclose(f);
	ck_assert_int_eq(dtf_trace_merge(out, in, 2, NULL), -DTF_ERR_DATA);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(), "m.rank1.json"));
}
END_TEST

/* ---- end to end ------------------------------------------------------------------ */

static void check_events_match_metrics(const char *metrics)
{
	char pattern[512], path[512];
	struct tu_event_file *ef = malloc(sizeof(*ef));
	snprintf(pattern, sizeof(pattern), "%s/run/train/events.out.tfevents.*",
		 tmpdir);
	tu_one_file(pattern, path, sizeof(path));
	tu_events_read(path, ef);
	static const char *const tags[] = {
		"loss", "accuracy", "learning_rate", "samples_per_second",
		"step_time_ms/data_wait", "step_time_ms/forward",
		"step_time_ms/backward", "step_time_ms/comm",
		"step_time_ms/optimizer"};
	/* 480 / 16 = 30 steps per epoch, 2 epochs, logged every 10 */
	for (int64_t step = 10; step <= 60; step += 10)
		for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
			ck_assert_msg(tu_events_find(ef, step, tags[i]) != NULL,
				      "no %s at step %lld", tags[i], (long long)step);
	/* and 6 per-rank times of each of the 2 ranks at step 50 */
	ck_assert_int_eq(ef->n, 6 * 9 + 2 * 6);
	ck_assert_ptr_nonnull(tu_events_find(ef, 50, "rank_time_ms/compute/rank_1"));
	ck_assert_float_eq(tu_events_find(ef, 30, "learning_rate")->value, 0.01f);
	/* the loss at step 60 is the one metrics.jsonl has */
	const char *line = strstr(metrics, "{\"kind\":\"train\",\"step\":60,");
	ck_assert_ptr_nonnull(line);
	double loss = atof(strstr(line, "\"loss\":") + 7);
	ck_assert_float_eq_tol(tu_events_find(ef, 60, "loss")->value, loss,
			       1e-5 * fabs(loss) + 1e-7);
	float first = tu_events_find(ef, 10, "loss")->value;
	ck_assert_msg(loss < first, "loss did not fall: %g -> %g", first, loss);

	snprintf(pattern, sizeof(pattern), "%s/run/eval/events.out.tfevents.*",
		 tmpdir);
	tu_one_file(pattern, path, sizeof(path));
	tu_events_read(path, ef);
	ck_assert_int_eq(ef->n, 6);
	ck_assert_ptr_nonnull(tu_events_find(ef, 30, "loss"));
	ck_assert_ptr_nonnull(tu_events_find(ef, 60, "accuracy"));
	/* top-2 accuracy is at least the accuracy, as metrics.jsonl says */
	line = strstr(metrics, "{\"kind\":\"eval\",\"step\":60,");
	ck_assert_ptr_nonnull(line);
	double top2 = atof(strstr(line, "\"top_k_accuracy\":") + 17);
	ck_assert_float_eq_tol(tu_events_find(ef, 60, "top_k_accuracy")->value,
			       top2, 1e-6);
	ck_assert_float_ge(top2, tu_events_find(ef, 60, "accuracy")->value);
	ck_assert_int_eq(ef->session_starts, 0);
	free(ef);
}

START_TEST(fashion_style_run_writes_metrics_events_trace)
{
	char path[512];
	ck_assert_int_eq(tu_run("mpirun -np 2 %s/dtf-train --threads 1 %s/job.yaml "
				">%s/out.txt 2>%s/err.txt",
				tu_build_root(), tmpdir, tmpdir, tmpdir), 0);
	/* console: plain lines, no control characters when not a terminal */
	snprintf(path, sizeof(path), "%s/err.txt", tmpdir);
	size_t len;
	char *err = tu_read_file(NULL, path, &len);
	for (size_t i = 0; i < len; i++)
		ck_assert_msg(err[i] == '\n' || (unsigned char)err[i] >= 0x20,
			      "control character %#x at byte %zu:\n%s",
			      (unsigned char)err[i], i, err);
	ck_assert_ptr_nonnull(strstr(err, "step 10/60  epoch 1/2  loss "));
	ck_assert_ptr_nonnull(strstr(err, "step 60/60  epoch 2/2"));
	ck_assert_ptr_nonnull(strstr(err, "ETA "));
	ck_assert_ptr_nonnull(strstr(err, "done: 60 steps in "));
	ck_assert_ptr_nonnull(strstr(err, "peak memory   rank 0 "));
	ck_assert_ptr_nonnull(strstr(err, ", rank 1 "));
	ck_assert_ptr_nonnull(strstr(err, "trace.json (2 rank(s))"));
	free(err);

	/* metrics.jsonl: start, 6 train lines, 2 evals, summary, and the
	 * straggler window of the default 50 steps */
	snprintf(path, sizeof(path), "%s/run/metrics.jsonl", tmpdir);
	char *m = tu_read_file(NULL, path, NULL);
	ck_assert_int_eq(count_str(m, "\n"), 11);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"rank_times\",\"step\":50,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"start\",\"step\":0,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"train\","), 6);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"eval\",\"step\":30,\"epoch\":1,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"eval\",\"step\":60,\"epoch\":2,"), 1);
	ck_assert_int_eq(count_str(m, ",\"top_k_accuracy\":"), 2);
	ck_assert_int_eq(count_str(m, "\"step_time_ms\":{\"data_wait\":"), 6);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"summary\",\"step\":60,"), 1);
	ck_assert_int_eq(count_str(m, "\"peak_rss_mb\":["), 1);
	ck_assert_int_eq(tu_run("python3 -c 'import json,sys\n"
				"for l in open(sys.argv[1]): json.loads(l)' '%s'",
				path), 0);
	check_events_match_metrics(m);
	free(m);

	/* trace: merged, valid, both ranks, steps 5..12 only, rank files gone */
	snprintf(path, sizeof(path), "%s/run/trace.json", tmpdir);
	ck_assert_int_eq(tu_run("python3 - '%s' <<'EOF'\n"
				"import json, sys\n"
				"ev = json.load(open(sys.argv[1]))\n"
				"x = [e for e in ev if e['ph'] == 'X']\n"
				"assert {e['pid'] for e in ev} == {0, 1}, 'pids'\n"
				"steps = {e['args']['step'] for e in x}\n"
				"assert steps == set(range(5, 13)), steps\n"
				"names = {e['name'] for e in x}\n"
				"want = {'step', 'data_wait', 'agree', 'forward', 'backward', 'allreduce', 'optimizer'}\n"
				"assert names == want, names\n"
				"b = [e for e in x if 'index' in e['args']]\n"
				"assert len(x) - len(b) == 2 * 8 * 7, len(x)\n"
				"for e in x:\n"
				"    assert e['dur'] >= 0 and e['ts'] >= 0, e\n"
				"# the buckets: allreduce with args.index 0..k-1 on the\n"
				"# third thread, every step and rank, inside the step\n"
				"step = {(e['pid'], e['args']['step']): e for e in x if e['name'] == 'step'}\n"
				"idx = {}\n"
				"for e in b:\n"
				"    assert e['name'] == 'allreduce' and e['tid'] == 2, e\n"
				"    s = step[(e['pid'], e['args']['step'])]\n"
				"    assert s['ts'] <= e['ts'] and e['ts'] + e['dur'] <= s['ts'] + s['dur'] + 1, (e, s)\n"
				"    idx.setdefault((e['pid'], e['args']['step']), []).append(e['args']['index'])\n"
				"assert set(idx) == set(step), sorted(idx)\n"
				"k = {len(v) for v in idx.values()}\n"
				"assert len(k) == 1 and min(k) >= 1, k\n"
				"for v in idx.values():\n"
				"    assert sorted(v) == list(range(len(v))), v\n"
				"print('buckets per step:', k.pop())\n"
				"EOF",
				path), 0);
	snprintf(path, sizeof(path), "%s/run/trace.rank*.json", tmpdir);
	ck_assert_int_eq(count_files(path), 0);

	/* a second run appends to metrics.jsonl and adds an event file */
	ck_assert_int_eq(tu_mpirun(1, NULL, tmpdir, "err2.txt",
				   "-q --threads 1 --set train.max_steps=10 %s/job.yaml",
				   tmpdir), 0);
	snprintf(path, sizeof(path), "%s/err2.txt", tmpdir);
	char *err2 = tu_read_file(NULL, path, &len);
	ck_assert_msg(len == 0, "--quiet printed:\n%s", err2);
	free(err2);
	snprintf(path, sizeof(path), "%s/run/metrics.jsonl", tmpdir);
	m = tu_read_file(NULL, path, NULL);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"start\","), 2);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"summary\","), 2);
	free(m);
	snprintf(path, sizeof(path), "%s/run/train/events.out.tfevents.*", tmpdir);
	ck_assert_int_eq(count_files(path), 2);
}
END_TEST

/* A resumed run continues the step numbers in metrics.jsonl and starts a
 * new event file whose SessionLog START tells TensorBoard where. */
START_TEST(resume_continues_metrics_and_events)
{
	char path[512];
	ck_assert_int_eq(tu_run("mpirun -np 2 %s/dtf-train -q --threads 1 "
				"--set checkpoint.dir=%s/ckpt --set train.max_steps=20 "
				"%s/job.yaml >/dev/null 2>&1",
				tu_build_root(), tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_mpirun(2, NULL, tmpdir, "resume.txt",
				   "-q --threads 1 --resume --set checkpoint.dir=%s/ckpt "
				   "--set train.max_steps=40 %s/job.yaml",
				   tmpdir, tmpdir), 0);
	snprintf(path, sizeof(path), "%s/run/metrics.jsonl", tmpdir);
	char *m = tu_read_file(NULL, path, NULL);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"start\",\"step\":0,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"start\",\"step\":20,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"train\",\"step\":10,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"train\",\"step\":20,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"train\",\"step\":30,"), 1);
	ck_assert_int_eq(count_str(m, "{\"kind\":\"train\",\"step\":40,"), 1);
	/* 20 steps this run: the summary counts the run's own steps */
	ck_assert_int_eq(count_str(m, "{\"kind\":\"summary\",\"step\":40,"), 1);
	ck_assert_ptr_nonnull(strstr(strstr(m, "{\"kind\":\"summary\",\"step\":40,"),
				     "\"steps\":20,"));
	free(m);
	snprintf(path, sizeof(path), "%s/run/train/events.out.tfevents.*", tmpdir);
	glob_t g;
	ck_assert_int_eq(glob(path, 0, NULL, &g), 0);
	ck_assert_uint_eq(g.gl_pathc, 2);
	struct tu_event_file *ef = malloc(sizeof(*ef));
	int starts = 0;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		tu_events_read(g.gl_pathv[i], ef);
		if (ef->session_starts) {
			starts++;
			ck_assert_int_eq(ef->start_step, 21);
			ck_assert_ptr_nonnull(tu_events_find(ef, 30, "loss"));
			ck_assert_ptr_nonnull(tu_events_find(ef, 40, "loss"));
			ck_assert_ptr_null(tu_events_find(ef, 20, "loss"));
		}
	}
	ck_assert_int_eq(starts, 1);
	globfree(&g);
	free(ef);
}
END_TEST

START_TEST(locked_logging_dir_fails_the_run)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/run", tmpdir);
	mkdir(path, 0777);
	snprintf(path, sizeof(path), "%s/run/metrics.jsonl", tmpdir);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(flock(fd, LOCK_EX), 0);
	int st = tu_mpirun(2, NULL, tmpdir, "lock.txt",
			   "-q --threads 1 %s/job.yaml",
			   tmpdir);
	close(fd);
	snprintf(path, sizeof(path), "%s/lock.txt", tmpdir);
	char *err = tu_read_file(NULL, path, NULL);
	ck_assert_msg(st == 1, "exit status %d:\n%s", st, err);
	ck_assert_msg(strstr(err, "metrics.jsonl: another run is writing to this logging.dir") != NULL,
		      "%s", err);
	ck_assert_msg(strstr(err, "[rank 0 ") != NULL, "%s", err);
	free(err);
}
END_TEST

/* On a terminal (script(1) gives the process a pseudo-terminal) the
 * progress line redraws in place. */
START_TEST(progress_line_redraws_on_a_terminal)
{
	if (tu_run("command -v script >/dev/null") != 0)
		return; /* no script(1): nothing to drive a terminal with */
	ck_assert_int_eq(tu_run("script -qec '%s/dtf-train --threads 1 "
				"--set logging.dir=%s/tty --set logging.trace=%s/tty/t.json "
				"%s/job.yaml' /dev/null >%s/tty.txt 2>&1 </dev/null",
				tu_build_root(), tmpdir, tmpdir, tmpdir, tmpdir), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/tty.txt", tmpdir);
	char *out = tu_read_file(NULL, path, NULL);
	ck_assert_msg(strstr(out, "\repoch 1/2  step ") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "samples/s  ETA ") != NULL, "%s", out);
	/* the rate of the step, as the plain lines give it (Adam 0.01) */
	ck_assert_msg(strstr(out, "  lr 0.01  ") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\033[K") != NULL, "%s", out);
	/* the per-step plain lines are not printed on a terminal */
	ck_assert_msg(strstr(out, "step 10/60  epoch") == NULL, "%s", out);
	ck_assert_msg(strstr(out, "done: 60 steps in ") != NULL, "%s", out);
	free(out);
}
END_TEST

/* The bar fills with the steps of the run, the numbers beside it: a run
 * of 9 steps (less than the epoch of 30) ends drawn full at 9/9, and half
 * of a 20-step run is half full. */
START_TEST(progress_bar_fills_with_the_steps_of_the_run)
{
	if (tu_run("command -v script >/dev/null") != 0)
		return; /* no script(1): nothing to drive a terminal with */
	ck_assert_int_eq(tu_run("script -qec '%s/dtf-train --threads 1 "
				"--set train.max_steps=9 --set logging.every_steps=1 "
				"--set logging.dir= --set logging.trace= "
				"--set data.eval= %s/job.yaml' /dev/null >%s/bar.txt "
				"2>&1 </dev/null",
				tu_build_root(), tmpdir, tmpdir), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/bar.txt", tmpdir);
	char *out = tu_read_file(NULL, path, NULL);
	ck_assert_msg(strstr(out, "\repoch 1/1  step 9/9 [====================]  loss ") != NULL,
		      "%s", out);
	/* every step is drawn (logging.every_steps 1): step 4 of 9 is 8 of
	 * the 20 characters, then the arrow */
	ck_assert_msg(strstr(out, "\repoch 1/1  step 4/9 [========>...........]  loss ") != NULL,
		      "%s", out);
	free(out);
}
END_TEST

/* With train.eval_every_steps each evaluation prints one line, with the
 * job's top-k accuracy. */
START_TEST(eval_every_steps_prints_one_line)
{
	ck_assert_int_eq(tu_mpirun(2, NULL, tmpdir, "every.txt",
				   "--threads 1 --set train.max_steps=20 "
				   "--set train.eval_every_steps=10 --set logging.dir= "
				   "--set logging.trace= %s/job.yaml",
				   tmpdir), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/every.txt", tmpdir);
	char *err = tu_read_file(NULL, path, NULL);
	/* steps 10 and 20: one line each, nothing else about them */
	ck_assert_msg(count_str(err, "epoch 1, step 10: ") == 1 &&
			      count_str(err, "epoch 1, step 20: ") == 1,
		      "%s", err);
	ck_assert_msg(count_str(err, "eval loss ") == 2 &&
			      count_str(err, "  top-2 accuracy ") == 2 &&
			      count_str(err, "(200 examples, ") == 2,
		      "%s", err);
	ck_assert_msg(count_str(err, "test loss") == 0, "%s", err);
	free(err);
}
END_TEST

/* The start-up lines name the optimizer and the schedule in force, with
 * their settings (cosine's decay_steps resolved to the run's). */
START_TEST(startup_line_names_optimizer_and_schedule)
{
	ck_assert_int_eq(tu_mpirun(1, NULL, tmpdir, "start.txt",
				   "--threads 1 --set train.max_steps=20 "
				   "--set 'train.schedule="
				   "{cosine_decay: {warmup_steps: 5, alpha: 0.1}}' "
				   "--set logging.dir= --set logging.trace= %s/job.yaml",
				   tmpdir), 0);
	const char *err = tu_slurp(tmpdir, "start.txt");
	ck_assert_msg(count_str(err, "\noptimizer adam lr 0.01 (beta_1 0.9, "
				     "beta_2 0.999, epsilon 1e-07); schedule "
				     "cosine_decay(decay_steps 15, alpha 0.1) "
				     "after 5 warmup steps\n") == 1,
		      "%s", err);
	ck_assert_int_eq(tu_mpirun(1, NULL, tmpdir, "start.txt",
				   "--threads 1 --set train.max_steps=2 "
				   "--set 'train.optimizer="
				   "{sgd: {learning_rate: 0.1, momentum: 0.9}}' "
				   "--set train.clipnorm=1 "
				   "--set 'train.schedule="
				   "{exponential_decay: {decay_steps: 10, decay_rate: 0.5, "
				   "staircase: true}}' "
				   "--set logging.dir= --set logging.trace= %s/job.yaml",
				   tmpdir), 0);
	err = tu_slurp(tmpdir, "start.txt");
	ck_assert_msg(count_str(err, "\noptimizer sgd lr 0.1 (momentum 0.9; "
				     "clipnorm 1); schedule exponential_decay("
				     "decay_steps 10, decay_rate 0.5, staircase)\n") == 1,
		      "%s", err);
	ck_assert_int_eq(tu_mpirun(1, NULL, tmpdir, "start.txt",
				   "--threads 1 --set train.max_steps=2 --set logging.dir= "
				   "--set logging.trace= %s/job.yaml",
				   tmpdir), 0);
	err = tu_slurp(tmpdir, "start.txt");
	ck_assert_msg(count_str(err, "; schedule constant\n") == 1, "%s", err);
}
END_TEST

START_TEST(merge_trace_option_merges_rank_files)
{
	char out[512], p[512];
	snprintf(out, sizeof(out), "%s/k.json", tmpdir);
	for (int r = 0; r < 3; r++) {
		dtf_trace_rank_path(out, r, p, sizeof(p));
		struct dtf_trace *t;
		ck_assert_int_eq(dtf_trace_open(p, r, "h", 0, &t), 0);
		dtf_trace_span(t, "forward", 0, 1, 2, 1, -1);
		ck_assert_int_eq(dtf_trace_close(t), 0);
	}
	ck_assert_int_eq(tu_run("%s/dtf-train --merge-trace %s 2>/dev/null",
				tu_build_root(), out), 0);
	ck_assert_int_eq(json_ok(out), 0);
	char *text = tu_read_file(NULL, out, NULL);
	ck_assert_int_eq(count_str(text, "\"name\":\"forward\""), 3);
	free(text);
	snprintf(p, sizeof(p), "%s/none.json", tmpdir);
	ck_assert_int_eq(tu_run("%s/dtf-train --merge-trace %s 2>/dev/null",
				tu_build_root(), p), 3);
}
END_TEST

/* ---- end to end: stragglers ---------------------------------------------------- */

/* Two ranks of a small CNN, compute-bound (16x16 images, 32 and 64 filters,
 * 128 per replica), 20 steps per epoch, 2 epochs; a straggler window
 * every 10 steps, named after 3 in a row. */
static const char straggler_job[] =
	"name: straggler\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/big-*.tfrecord\"}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, shape: [16, 16, 1], scale: 0.00392156862745098}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 32, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - {conv2d: {filters: 64, kernel: 3, padding: same, activation: relu}}\n"
	"    - flatten\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 256\n"
	"  epochs: 2\n"
	"  optimizer: {sgd: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 20, dir: \"%s/%s\"}\n"
	"fault: {straggler_window_steps: 10, straggler_windows: 3}\n";

static void setup_straggler(void)
{
	setup_tmp();
	tu_synth(tmpdir, "big", 5120, 2, "16,16,1", 1);
}

/* The pid of the dtf-train whose environment holds both `mark` and
 * `rank` ("VAR=value" entries), or 0. */
static pid_t find_rank(const char *mark, const char *rank)
{
	glob_t g;
	pid_t found = 0;
	if (glob("/proc/[0-9]*/comm", 0, NULL, &g) != 0)
		return 0;
	for (size_t i = 0; i < g.gl_pathc && !found; i++) {
		char comm[64] = "", path[96], env[65536];
		FILE *f = fopen(g.gl_pathv[i], "r");
		if (!f)
			continue;
		int ok = fgets(comm, sizeof(comm), f) != NULL;
		fclose(f);
		if (!ok || strcmp(comm, "dtf-train\n"))
			continue;
		snprintf(path, sizeof(path), "%.*s/environ",
			 (int)(strlen(g.gl_pathv[i]) - 5), g.gl_pathv[i]);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, env, sizeof(env) - 1);
		close(fd);
		int has_mark = 0, has_rank = 0;
		if (n < 0)
			n = 0;
		env[n] = 0;
		for (ssize_t k = 0; k < n; k += (ssize_t)strlen(env + k) + 1) {
			has_mark |= !strcmp(env + k, mark);
			has_rank |= !strcmp(env + k, rank);
		}
		if (has_mark && has_rank)
			found = (pid_t)atol(g.gl_pathv[i] + 6);
	}
	globfree(&g);
	return found;
}

/*
 * A CPU throttle on rank 1 of the run whose ranks have DTF_THROTTLE_MARK
 * = mark (other runs on the machine are left alone): a child process
 * waits for it (up to 60 s), then stops it for stop_ms and lets it run
 * for run_ms (SIGSTOP, SIGCONT), over and over until it exits, as a rank
 * on an oversubscribed or power-capped core runs.  The child sleeps with
 * nanosleep between signals (a sleeper is woken on time on a busy
 * machine, where a shell loop's sleep(1) processes are not).
 */
static pid_t throttle_start(const char *mark, int stop_ms, int run_ms)
{
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child > 0)
		return child;
	char want[600];
	snprintf(want, sizeof(want), "DTF_THROTTLE_MARK=%s", mark);
	pid_t rank = 0;
	for (int tries = 0; !rank && tries < 6000; tries++) {
		rank = find_rank(want, "OMPI_COMM_WORLD_RANK=1");
		if (!rank)
			nanosleep(&(struct timespec){0, 10000000}, NULL);
	}
	if (!rank)
		_exit(1);
	struct timespec stop = {0, stop_ms * 1000000L},
			run = {0, run_ms * 1000000L};
	while (kill(rank, SIGSTOP) == 0) {
		nanosleep(&stop, NULL);
		if (kill(rank, SIGCONT) != 0)
			break;
		nanosleep(&run, NULL);
	}
	kill(rank, SIGCONT);
	_exit(0);
}

/* Train NAME (logging.dir tmpdir/NAME, stderr NAME.log) on 2 ranks, rank 1
 * throttled to RUN_MS of every STOP_MS + RUN_MS when stop_ms > 0; `sets`
 * are more options.  The exit status. */
static int straggler_run(const char *name, int stop_ms, int run_ms,
			 const char *sets)
{
	char job[64], mark[512], env[600];
	snprintf(job, sizeof(job), "%s.yaml", name);
	tu_write_file(tmpdir, job, straggler_job, tmpdir, tmpdir, name);
	snprintf(mark, sizeof(mark), "%s/%s", tmpdir, name);
	snprintf(env, sizeof(env), "DTF_THROTTLE_MARK=%s", mark);
	pid_t thr = stop_ms > 0 ? throttle_start(mark, stop_ms, run_ms) : 0;
	char log[64];
	snprintf(log, sizeof(log), "%s.log", name);
	int st = tu_mpirun(2, env, tmpdir, log, "--threads 1 %s %s/%s",
			   sets ? sets : "", tmpdir, job);
	if (thr > 0) { /* it ends with the rank */
		int ws = 0;
		waitpid(thr, &ws, 0);
		ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
			      "the throttle found no rank 1 (status %#x)", ws);
	}
	return st;
}

/* The "rank_times" lines of NAME/metrics.jsonl: how many, and how many
 * windows judged each rank slow for `cause`. */
static int rank_times(const char *name, int slow[2], const char *cause)
{
	char path[512], want[64];
	snprintf(path, sizeof(path), "%s/%s/metrics.jsonl", tmpdir, name);
	char *m = tu_read_file(NULL, path, NULL);
	snprintf(want, sizeof(want), "\"straggler\":\"%s\"", cause);
	int n = 0;
	slow[0] = slow[1] = 0;
	for (char *l = strstr(m, "{\"kind\":\"rank_times\""); l;
	     l = strstr(l + 1, "{\"kind\":\"rank_times\"")) {
		char *end = strchr(l, '\n'), *r1 = strstr(l, "{\"rank\":1,");
		ck_assert_ptr_nonnull(end);
		ck_assert_msg(r1 && r1 < end, "no rank 1 in %.300s", l);
		char *s0 = strstr(l, want);
		if (s0 && s0 < r1)
			slow[0]++;
		char *s1 = strstr(r1, want);
		if (s1 && s1 < end)
			slow[1]++;
		n++;
	}
	free(m);
	return n;
}

/* One of two ranks throttled by SIGSTOP/SIGCONT to a twentieth of the wall
 * clock is named, with this host and cause compute, within the 4 windows
 * (the first possible is the 3rd); the other rank is not; the per-rank
 * times of metrics.jsonl are those of the event file. */
START_TEST(straggler_throttled_rank_is_named_with_cause_compute)
{
	char host[256] = "", want[400];
	gethostname(host, sizeof(host) - 1);
	double t0 = dtf_obs_now();
	ck_assert_int_eq(straggler_run("thr", 90, 5, NULL), 0);
	double wall = dtf_obs_now() - t0;
	const char *log = tu_slurp(tmpdir, "thr.log");
	snprintf(want, sizeof(want),
		 "warning: straggler: rank 1 (host %s), cause compute, for the last 3 window(s) of 10 steps (to step ",
		 host);
	const char *w = strstr(log, want);
	if (!w) /* what the windows were: the metrics */
		printf("%s", tu_slurp(tmpdir, "thr/metrics.jsonl"));
	ck_assert_msg(w != NULL, "no '%s' in\n%s", want,
		      tu_slurp(tmpdir, "thr.log"));
	long step = strtol(w + strlen(want), NULL, 10);
	printf("throttled rank 1 named at step %ld (cause compute) in a run of %.1f s:\n%.400s\n",
	       step, wall, w);
	fflush(stdout);
	ck_assert_int_ge(step, 30);
	ck_assert_int_le(step, 40);
	ck_assert_ptr_null(strstr(log, "straggler: rank 0"));
	int slow[2];
	ck_assert_int_eq(rank_times("thr", slow, "compute"), 4);
	printf("windows judged slow in compute: rank 0 %d, rank 1 %d of 4\n",
	       slow[0], slow[1]);
	fflush(stdout);
	ck_assert_int_ge(slow[1], 3);
	ck_assert_int_gt(slow[1], slow[0]);
	/* the events: rank_time_ms/PART/rank_R at every window, equal to
	 * the metrics line's numbers (float32) */
	char pattern[512], path[512];
	snprintf(pattern, sizeof(pattern), "%s/thr/train/events.out.tfevents.*",
		 tmpdir);
	tu_one_file(pattern, path, sizeof(path));
	struct tu_event_file *ef = malloc(sizeof(*ef));
	tu_events_read(path, ef);
	snprintf(path, sizeof(path), "%s/thr/metrics.jsonl", tmpdir);
	char *m = tu_read_file(NULL, path, NULL);
	static const char *const parts[6] = {"step", "data_wait", "compute",
					     "comm", "busy_median", "link_rtt"};
	for (int64_t s = 10; s <= 40; s += 10) {
		char head[64];
		snprintf(head, sizeof(head), "{\"kind\":\"rank_times\",\"step\":%lld,",
			 (long long)s);
		const char *line = strstr(m, head);
		ck_assert_msg(line != NULL, "no %s", head);
		for (int r = 0; r < 2; r++) {
			char rk[32], host_key[300];
			snprintf(rk, sizeof(rk), "{\"rank\":%d,", r);
			const char *at = strstr(line, rk);
			ck_assert_ptr_nonnull(at);
			snprintf(host_key, sizeof(host_key), "{\"rank\":%d,\"host\":\"%s\",", r, host);
			ck_assert_msg(strncmp(at, host_key, strlen(host_key)) == 0,
				      "%.200s", at);
			for (int i = 0; i < 6; i++) {
				char key[48], tag[96];
				snprintf(key, sizeof(key), "\"%s_ms\":", parts[i]);
				snprintf(tag, sizeof(tag), "rank_time_ms/%s/rank_%d",
					 parts[i], r);
				const char *k = strstr(at, key);
				ck_assert_ptr_nonnull(k);
				double v = atof(k + strlen(key));
				const struct tu_event_scalar *e =
					tu_events_find(ef, s, tag);
				ck_assert_msg(e != NULL, "no %s at %lld", tag,
					      (long long)s);
				ck_assert_float_eq_tol(e->value, v,
						       1e-6 * fabs(v) + 1e-9);
			}
		}
	}
	/* when: the window's line carries the seconds since the start */
	char head[64];
	snprintf(head, sizeof(head), "{\"kind\":\"rank_times\",\"step\":%ld,",
		 step);
	const char *el = strstr(strstr(m, head), "\"elapsed_s\":");
	ck_assert_ptr_nonnull(el);
	printf("named %.2f s after the start of training (step %ld)\n",
	       atof(el + 12), step);
	free(m);
	free(ef);
}
END_TEST

/* The same job unthrottled names no one, and throttled with
 * fault.straggler_factor 100 (the throttle makes rank 1's work 2 to 20
 * times the other's, the machine's load deciding: on a loaded machine the
 * other rank waits for the cores too, the throttled one less, as it is
 * woken with priority after each stop) names no one and
 * judges no window slow. */
START_TEST(straggler_even_run_and_large_factor_name_no_one)
{
	int slow[2];
	ck_assert_int_eq(straggler_run("even", 0, 0, NULL), 0);
	const char *log = tu_slurp(tmpdir, "even.log");
	ck_assert_msg(strstr(log, "straggler: rank") == NULL, "%s", log);
	ck_assert_int_eq(rank_times("even", slow, "compute"), 4);
	printf("even run: windows judged slow in compute: rank 0 %d, rank 1 %d of 4\n",
	       slow[0], slow[1]);
	ck_assert_int_eq(straggler_run("f100", 90, 5,
				       "--set fault.straggler_factor=100"), 0);
	log = tu_slurp(tmpdir, "f100.log");
	ck_assert_msg(strstr(log, "straggler: rank") == NULL, "%s", log);
	ck_assert_int_eq(rank_times("f100", slow, "compute"), 4);
	ck_assert_int_eq(slow[0] + slow[1], 0);
}
END_TEST

static Suite *obs_suite(void)
{
	Suite *s = suite_create("obs");
	TCase *tc = tcase_create("event_files");
	tcase_add_checked_fixture(tc, setup_tmp, teardown_tmp);
	tcase_add_test(tc, event_file_decodes_to_what_was_written);
	tcase_add_test(tc, event_file_never_overwrites_an_earlier_one);
	tcase_add_test(tc, event_file_in_missing_directory_is_io_error);
	suite_add_tcase(s, tc);

	tc = tcase_create("straggler_verdicts");
	tcase_add_test(tc, straggler_even_window_names_no_one);
	tcase_add_test(tc, straggler_slow_compute_is_named_against_the_others_median);
	tcase_add_test(tc, straggler_slow_input_is_named_data_wait);
	tcase_add_test(tc, straggler_of_two_ranks_is_the_slower_one);
	tcase_add_test(tc, straggler_excess_below_five_percent_of_the_step_is_not_named);
	tcase_add_test(tc, straggler_slow_link_is_named_on_its_host);
	tcase_add_test(tc, straggler_is_named_after_windows_in_a_row);
	suite_add_tcase(s, tc);

	tc = tcase_create("stragglers");
	tcase_add_checked_fixture(tc, setup_straggler, teardown_tmp);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, straggler_throttled_rank_is_named_with_cause_compute);
	tcase_add_test(tc, straggler_even_run_and_large_factor_name_no_one);
	suite_add_tcase(s, tc);

	tc = tcase_create("trace");
	tcase_add_checked_fixture(tc, setup_tmp, teardown_tmp);
	tcase_add_test(tc, trace_is_valid_json_after_a_kill);
	tcase_add_test(tc, trace_is_valid_json_after_a_full_disk);
	tcase_add_test(tc, trace_merge_joins_ranks);
	tcase_add_test(tc, merge_trace_option_merges_rank_files);
	suite_add_tcase(s, tc);

	tc = tcase_create("end_to_end");
	tcase_add_checked_fixture(tc, setup_job, teardown_tmp);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, fashion_style_run_writes_metrics_events_trace);
	tcase_add_test(tc, resume_continues_metrics_and_events);
	tcase_add_test(tc, locked_logging_dir_fails_the_run);
	tcase_add_test(tc, progress_line_redraws_on_a_terminal);
	tcase_add_test(tc, progress_bar_fills_with_the_steps_of_the_run);
	tcase_add_test(tc, eval_every_steps_prints_one_line);
	tcase_add_test(tc, startup_line_names_optimizer_and_schedule);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(obs_suite(), 1);
}
