/*
 * test_evaluator.c - the TF_CONFIG evaluator task, end to end.
 *
 * mpirun -np 3 with TF_CONFIG per rank (chief, worker, evaluator) on a
 * small synthetic data set, checkpoints every 5 of 20 steps:
 *  - the evaluator's <logging.dir>/eval/metrics.jsonl has one "eval" line
 *    per checkpoint it logged, steps strictly increasing and among the
 *    checkpointed ones, the last the final step 20; its loss there equals,
 *    within 1e-5 relative, the end-of-run evaluation of the chief of the
 *    same training run without an evaluator (2 ranks, no TF_CONFIG), on
 *    the same number of examples with the same accuracy; the chief writes
 *    no eval lines and eval/ holds the evaluator's event file alone;
 *  - a run resumed with an evaluator ends; its evaluator, finding
 *    checkpoints 5 and 10, evaluates the newest only, then up to step 20;
 *  - a training that fails on a corrupt record (data.on_error: fail) ends
 *    every rank, the evaluator included, with exit status 3 in time;
 *  - an evaluator without checkpoint.dir or data.eval is a job error:
 *    exit status 2 and its message, on every rank before any collective.
 * Every mpirun runs under timeout, so a hang fails the test (status 124).
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/example.h"
#include "data/tfrecord.h"

#include "testutil.h"

static char tmpdir[256];

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 0}\n"
	"%s"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, shape: [8, 8, 1], scale: 0.00392156862745098}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: 16, activation: relu}}\n"
	"    - {dropout: {rate: 0.25}}\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"  metrics: [accuracy]\n"
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 20\n"
	"  epochs: 5\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"strategy: {type: multi_worker_mirrored}\n"
	"%s"
	"logging: {every_steps: 10, dir: \"%s/%s\"}\n";

/* one rank per task: chief, worker 0, evaluator (Open MPI names the rank) */
static const char wrapper[] =
	"#!/bin/sh\n"
	"case $OMPI_COMM_WORLD_RANK in\n"
	"0) t='\"chief\", \"index\": 0';;\n"
	"1) t='\"worker\", \"index\": 0';;\n"
	"*) t='\"evaluator\", \"index\": 0';;\n"
	"esac\n"
	"TF_CONFIG=\"{\\\"cluster\\\": {\\\"chief\\\": [\\\"h0:2222\\\"], "
	"\\\"worker\\\": [\\\"h1:2222\\\"], \\\"evaluator\\\": [\\\"h2:2222\\\"]}, "
	"\\\"task\\\": {\\\"type\\\": $t}}\" exec \"$@\"\n";

/* two ranks: chief and evaluator */
static const char wrapper2[] =
	"#!/bin/sh\n"
	"case $OMPI_COMM_WORLD_RANK in\n"
	"0) t='\"chief\", \"index\": 0';;\n"
	"*) t='\"evaluator\", \"index\": 0';;\n"
	"esac\n"
	"TF_CONFIG=\"{\\\"cluster\\\": {\\\"chief\\\": [\\\"h0:2222\\\"], "
	"\\\"evaluator\\\": [\\\"h2:2222\\\"]}, "
	"\\\"task\\\": {\\\"type\\\": $t}}\" exec \"$@\"\n";

/* The file TMPDIR/NAME in a buffer of its own that the caller may cut
 * into lines (eval_lines does); "" when the file does not exist. */
static char *slurp(const char *name)
{
	static char buf[1 << 20];
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (!f)
		return buf;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* Write job NAME.yaml: with data.eval and checkpoint.dir NAME-ckpt
 * (every 5 steps) unless told otherwise, logging.dir NAME-logs. */
static void write_job(const char *name, int with_eval, int with_ckpt)
{
	char path[512], eval[512] = "", ckpt[512] = "";
	if (with_eval)
		snprintf(eval, sizeof(eval),
			 "  eval: {files: \"%s/test-*.tfrecord\"}\n", tmpdir);
	if (with_ckpt)
		snprintf(ckpt, sizeof(ckpt),
			 "checkpoint: {dir: \"%s/%s-ckpt\", every_steps: 5, keep: 10}\n",
			 tmpdir, name);
	char logs[300];
	snprintf(logs, sizeof(logs), "%s-logs", name);
	snprintf(path, sizeof(path), "%s/%s.yaml", tmpdir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, job_text, tmpdir, eval, ckpt, tmpdir, logs);
	fclose(f);
}

/* mpirun -np 3 with the TF_CONFIG wrapper: chief, worker, evaluator */
static int run_cluster(const char *name, const char *sets)
{
	return tu_run("timeout 120 mpirun -np 3 %s/tf.sh %s/dtf-train --threads 1 %s "
		      "%s/%s.yaml >/dev/null 2>%s/%s.log",
		      tmpdir, tu_build_root(), sets ? sets : "", tmpdir, name, tmpdir,
		      name);
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-eval-test");
	tu_synth(tmpdir, "train", 480, 1, "8,8,1", 1);
	tu_synth(tmpdir, "test", 200, 1, "8,8,1", 2);
	tu_write_file(tmpdir, "tf.sh", "%s", wrapper);
	tu_write_file(tmpdir, "tf2.sh", "%s", wrapper2);
	ck_assert_int_eq(tu_run("chmod +x %s/tf.sh %s/tf2.sh", tmpdir, tmpdir), 0);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

/* The "eval" lines of a metrics.jsonl: step, loss, accuracy, examples. */
struct eval_line {
	long step;
	double loss, accuracy, examples;
};

static int eval_lines(const char *name, struct eval_line *out, int cap)
{
	char *text = slurp(name);
	int n = 0;
	for (char *line = text; line && *line;) {
		char *next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		if (strstr(line, "\"kind\":\"eval\"") && n < cap) {
			char *s = strstr(line, "\"step\":");
			char *l = strstr(line, "\"loss\":");
			char *a = strstr(line, "\"accuracy\":");
			char *e = strstr(line, "\"examples\":");
			ck_assert_msg(s && l && a && e, "bad eval line: %s", line);
			out[n].step = strtol(s + 7, NULL, 10);
			out[n].loss = strtod(l + 7, NULL);
			out[n].accuracy = strtod(a + 11, NULL);
			out[n].examples = strtod(e + 11, NULL);
			n++;
		}
		line = next;
	}
	return n;
}

static int count_of(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

START_TEST(evaluates_each_checkpoint)
{
	write_job("ev", 1, 1);
	int st = run_cluster("ev", NULL);
	char *log = slurp("ev.log");
	ck_assert_msg(st == 0, "exit %d\n%s", st, log);
	int logged = count_of(log, "evaluator: checkpoint of step ");
	ck_assert_msg(strstr(log, "evaluator: the training ended at step 20;"),
		      "%s", log);

	struct eval_line ev[32];
	int n = eval_lines("ev-logs/eval/metrics.jsonl", ev, 32);
	printf("evaluator: %d checkpoint(s) evaluated:", n);
	for (int i = 0; i < n; i++)
		printf(" step %ld loss %.6g", ev[i].step, ev[i].loss);
	printf("\n");
	ck_assert_int_ge(n, 1);
	ck_assert_int_eq(n, logged); /* one record per evaluated checkpoint */
	for (int i = 0; i < n; i++) {
		ck_assert_msg(ev[i].step % 5 == 0 && ev[i].step >= 5 &&
				      ev[i].step <= 20,
			      "step %ld", ev[i].step);
		if (i > 0)
			ck_assert_int_gt(ev[i].step, ev[i - 1].step);
		ck_assert(ev[i].examples == 200);
	}
	ck_assert_int_eq(ev[n - 1].step, 20);
	/* the chief left evaluation to the evaluator */
	struct eval_line chief[4];
	ck_assert_int_eq(eval_lines("ev-logs/metrics.jsonl", chief, 4), 0);
	ck_assert_int_eq(tu_run("test $(ls %s/ev-logs/eval | grep -c tfevents) = 1",
				tmpdir), 0);
	ck_assert_int_eq(tu_run("test $(ls %s/ev-logs/train | grep -c tfevents) = 1",
				tmpdir), 0);
	char want[64];
	snprintf(want, sizeof(want), "\"task\":\"evaluator\"");
	ck_assert(strstr(slurp("ev-logs/eval/metrics.jsonl"), want));

	/* independently: the same training on 2 ranks without an evaluator,
	 * evaluated by its chief at the end over the 2 shards of data.eval */
	write_job("ref", 1, 1);
	st = tu_mpirun(2, NULL, tmpdir, "ref.log",
		       "--threads 1 %s/ref.yaml", tmpdir);
	ck_assert_msg(st == 0, "exit %d\n%s", st, slurp("ref.log"));
	struct eval_line ref[4];
	int nr = eval_lines("ref-logs/metrics.jsonl", ref, 4);
	ck_assert_int_eq(nr, 1);
	ck_assert_int_eq(ref[0].step, 20);
	double rel = fabs(ev[n - 1].loss - ref[0].loss) / fabs(ref[0].loss);
	printf("final checkpoint: evaluator loss %.6g, chief's eval %.6g: relative difference %.3g\n",
	       ev[n - 1].loss, ref[0].loss, rel);
	ck_assert(rel <= 1e-5);
	ck_assert(ev[n - 1].accuracy == ref[0].accuracy);
	ck_assert(ev[n - 1].examples == ref[0].examples);
}
END_TEST

/* Flip a byte inside record `k` of a file of equal-sized records. */
static void corrupt_record(const char *file, int count, int k)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, file);
	struct stat sb;
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size % count, 0);
	long rec = (long)sb.st_size / count;
	FILE *f = fopen(path, "r+b");
	ck_assert_ptr_nonnull(f);
	long off = (long)k * rec + 12 + 20; /* inside the data */
	fseek(f, off, SEEK_SET);
	int c = fgetc(f);
	fseek(f, off, SEEK_SET);
	fputc(c ^ 0x20, f);
	fclose(f);
}

START_TEST(training_failure_ends_evaluator)
{
	/* a copy of the training data with record 300 corrupt: read at
	 * about step 18, after checkpoints 5, 10, 15 */
	ck_assert_int_eq(tu_run("mkdir -p %s/bad && cp %s/train-*.tfrecord %s/bad/",
				tmpdir, tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_run("cd %s/bad && mv train-*.tfrecord bad.tfrecord",
				tmpdir), 0);
	corrupt_record("bad/bad.tfrecord", 480, 300);
	write_job("fail", 1, 1);
	char sets[512];
	snprintf(sets, sizeof(sets),
		 "--set data.train.files=%s/bad/bad.tfrecord --set data.on_error=fail",
		 tmpdir);
	int st = run_cluster("fail", sets);
	char *log = slurp("fail.log");
	ck_assert_msg(st == 3, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "data CRC mismatch"), "%s", log);
	ck_assert_msg(strstr(log, "error: evaluator: the training stopped with exit status 3; "),
		      "%s", log);
}
END_TEST

START_TEST(resumed_run)
{
	/* 10 steps, then --resume to 20 with the evaluator beside: the
	 * replicas share the restored checkpoint among themselves */
	write_job("res", 1, 1);
	int st = run_cluster("res", "--set train.max_steps=10");
	ck_assert_msg(st == 0, "exit %d\n%s", st, slurp("res.log"));
	struct eval_line ev[32];
	int n1 = eval_lines("res-logs/eval/metrics.jsonl", ev, 32);
	ck_assert_int_ge(n1, 1);
	ck_assert_int_eq(ev[n1 - 1].step, 10);
	st = run_cluster("res", "--resume");
	char *log = slurp("res.log");
	ck_assert_msg(st == 0, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "resuming from "), "%s", log);
	ck_assert_msg(strstr(log, "evaluator: the training ended at step 20;"),
		      "%s", log);
	int n = eval_lines("res-logs/eval/metrics.jsonl", ev, 32);
	ck_assert_int_ge(n, n1 + 1);
	/* checkpoints 5 and 10 were there when it started: never the older
	 * one (10, or a later one the chief wrote before its first look) */
	ck_assert_int_ge(ev[n1].step, 10);
	for (int i = n1 + 1; i < n; i++)
		ck_assert_int_gt(ev[i].step, ev[i - 1].step);
	ck_assert_int_eq(ev[n - 1].step, 20);
}
END_TEST

/* The evaluator checks eval labels against the classes as the training
 * ranks check theirs: one outside [0, 4) stops every rank at start with
 * exit status 3, the evaluator naming file, record and byte offset. */
START_TEST(eval_label_out_of_range_stops_evaluator)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/badlabel.tfrecord", tmpdir);
	struct dtf_tfrecord_writer *w;
	ck_assert_int_eq(dtf_tfrecord_writer_open(path, &w), 0);
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t img[64];
	long at = 0, off = -1;
	for (int i = 0; i < 40; i++) {
		int64_t lab = i == 17 ? 10 : i % 4;
		const uint8_t *d;
		size_t n;
		memset(img, i * 5, sizeof(img));
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "image", img, 64);
		dtf_example_builder_add_int64s(&b, "label", &lab, 1);
		ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
		if (i == 17)
			off = at;
		at += (long)n + 16;
	}
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	dtf_example_builder_deinit(&b);
	write_job("lab", 1, 1);
	int st = tu_run("timeout 120 mpirun -np 2 %s/tf2.sh %s/dtf-train --threads 1 "
			"--set data.eval.files=%s %s/lab.yaml >/dev/null 2>%s/lab.log",
			tmpdir, tu_build_root(), path, tmpdir, tmpdir);
	char *log = slurp("lab.log");
	ck_assert_msg(st == 3, "exit %d\n%s", st, log);
	char want[1024];
	snprintf(want, sizeof(want),
		 "] error: %s: record 17 at byte offset %ld: label 10 is outside "
		 "[0, 4), the classes of layer 'logits'\n",
		 path, off);
	ck_assert_msg(strstr(log, want) && strstr(log, "[rank 1 "),
		      "no '%s' in:\n%s", want, log);
	ck_assert_msg(strstr(log, "error: stopping: rank 1 failed setting up "
				  "before step 0\n"),
		      "%s", log);
	ck_assert_msg(!strstr(log, "nan"), "%s", log);
}
END_TEST

START_TEST(job_errors)
{
	static const struct {
		int eval, ckpt;
		const char *what;
	} cases[] = {{1, 0, "checkpoint.dir"}, {0, 1, "data.eval"}};
	for (int i = 0; i < 2; i++) {
		write_job("bad", cases[i].eval, cases[i].ckpt);
		int st = run_cluster("bad", NULL);
		char *log = slurp("bad.log");
		ck_assert_msg(st == 2, "exit %d\n%s", st, log);
		char want[1024];
		snprintf(want, sizeof(want),
			 "error: %s/bad.yaml: %s: the cluster (TF_CONFIG) has an evaluator task, "
			 "which evaluates each checkpoint on data.eval, but the job has no %s\n"
			 "HINT: set checkpoint.dir, checkpoint.every_steps and data.eval, "
			 "or remove the evaluator from TF_CONFIG\n",
			 tmpdir, cases[i].what, cases[i].what);
		ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
		ck_assert_int_eq(count_of(log, "has an evaluator task"), 1);
	}
}
END_TEST

static Suite *evaluator_suite(void)
{
	Suite *s = suite_create("evaluator");
	TCase *tc = tcase_create("evaluator");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, job_errors);
	tcase_add_test(tc, evaluates_each_checkpoint);
	tcase_add_test(tc, training_failure_ends_evaluator);
	tcase_add_test(tc, resumed_run);
	suite_add_tcase(s, tc);
	/* 2 ranks: chief and evaluator */
	tc = tcase_create("eval_labels");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, eval_label_out_of_range_stops_evaluator);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (system("command -v mpirun >/dev/null 2>&1") != 0)
		return 77;
	return tu_run_suite(evaluator_suite(), 0);
}
