/*
 * test_use.c - using a trained model: `dtf-train evaluate` and
 * `dtf-train predict`, end to end.
 *
 * Data written here: 256 training records in one file and a test set of
 * 101 records (odd, so 2 ranks never split it evenly) in 3 files of 34,
 * 34 and 33, 8x8x1 uint8 images whose brightest quadrant is the label
 * (with noise, so a short training gets some right and some wrong); the
 * labels are kept here, for counting predictions against them.
 * Trained once in the fixture: a 1-rank run with batch_norm and dropout
 * (checkpoints at steps 6 and 12, evaluating data.eval at the end) and a
 * 2-rank run of the same model without batch_norm (the sharded update of
 * the shared-memory strategy writes its checkpoint).
 *  - evaluate of the final checkpoint, on 1 process, equals what the
 *    training's own final evaluation logged in metrics.jsonl (the same
 *    batches: the same loss to 1e-7 relative, the same accuracy);
 *  - evaluate on 2 ranks equals 1 process (loss 1e-6 relative, the same
 *    correct count, 101 examples: no record twice or missing), sharded
 *    by file and by record, with a global batch of 15 (which 2 ranks do
 *    not divide), for the 2-rank run's checkpoint too, which
 *    also equals that run's own logged evaluation;
 *  - predict: one line per record, each (file, record) once; the
 *    probabilities of all classes sum to 1 and come best first; the
 *    argmax matches the labels kept here exactly as often as evaluate
 *    counts correct; --top-k changes the number of classes written (and
 *    keeps the first); CSV by the extension, with the same values as the
 *    JSON Lines; records without the label feature give the same lines;
 *    --outputs logits differ from log(probabilities) by one
 *    constant per record;
 *  - predict's peak memory over 60000 records is within 2 MiB of its
 *    peak over 3000, both in 20 files (the records would need 15 MiB
 *    decoded, the output lines 3 MiB);
 *  - errors: a missing or corrupt checkpoint exits 4 naming it (a corrupt
 *    newest one in a directory is passed over with a warning, and not
 *    renamed); a glob matching nothing exits 3 naming it; an output in a
 *    missing directory exits 2 before loading anything; a predict that
 *    fails on a bad record exits 3 and leaves neither the output nor its
 *    temporary file, and an earlier output under that name as it was;
 *    predict under mpirun -np 2 exits 2; a predict killed (SIGKILL)
 *    while it writes leaves nothing under the output name.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/example.h"
#include "data/tfrecord.h"

#include "testutil.h"

#define NTEST 101
#define NFILES 3

static char tmpdir[256];
/* label of record r of test file f */
static int labels[NFILES][NTEST];
static const int per_file[NFILES] = {34, 34, 33};

static const char job_text[] =
	"name: use\n"
	"seed: 5\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}\n"
	"%s"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: 16, activation: relu}}\n"
	"    - {dropout: {rate: 0.25}}\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"  metrics: [accuracy]\n"
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 12\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"checkpoint: {dir: \"%s/%s-ckpt\", every_steps: 6, keep: 5}\n"
	"logging: {every_steps: 6, dir: \"%s/%s-logs\"}\n";

static void write_job(const char *name, int batch_norm)
{
	char file[128];
	snprintf(file, sizeof(file), "%s.yaml", name);
	tu_write_file(tmpdir, file, job_text, tmpdir, tmpdir,
		      batch_norm ? "    - {batch_norm: {}}\n" : "", tmpdir, name,
		      tmpdir, name);
}

/* `n` records into DIR/NAME; label r of them into lab[r] (may be NULL);
 * with `bare`, the same records without the label into DIR/BARE too, and
 * with `unl` with the label -1 ("unlabelled") into DIR/UNL. */
static void write_records(const char *name, int n, int *lab, const char *bare,
			  const char *unl)
{
	char path[512];
	struct dtf_tfrecord_writer *w, *wb = NULL, *wu = NULL;
	struct dtf_example_builder b;
	ck_assert_int_eq(dtf_tfrecord_writer_open(tu_path(path, sizeof(path),
							  tmpdir, name),
						  &w),
			 0);
	if (bare)
		ck_assert_int_eq(dtf_tfrecord_writer_open(
					 tu_path(path, sizeof(path), tmpdir, bare),
					 &wb),
				 0);
	if (unl)
		ck_assert_int_eq(dtf_tfrecord_writer_open(
					 tu_path(path, sizeof(path), tmpdir, unl),
					 &wu),
				 0);
	dtf_example_builder_init(&b);
	for (int r = 0; r < n; r++) {
		uint8_t img[64];
		int64_t label = (int64_t)(tu_next_u64() % 4);
		for (int i = 0; i < 64; i++) {
			int y = i / 8, x = i % 8;
			int q = (y >= 4) * 2 + (x >= 4);
			img[i] = (uint8_t)(tu_next_u64() % 160 +
					   (q == label ? 90 : 0));
		}
		if (lab)
			lab[r] = (int)label;
		const uint8_t *data;
		size_t len;
		if (wb) {
			dtf_example_builder_reset(&b);
			ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "image", img, 64), 0);
			ck_assert_int_eq(dtf_example_builder_finish(&b, &data, &len), 0);
			ck_assert_int_eq(dtf_tfrecord_writer_write(wb, data, len), 0);
		}
		if (wu) {
			int64_t none = -1;
			dtf_example_builder_reset(&b);
			ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "image", img, 64), 0);
			ck_assert_int_eq(dtf_example_builder_add_int64s(&b, "label", &none, 1), 0);
			ck_assert_int_eq(dtf_example_builder_finish(&b, &data, &len), 0);
			ck_assert_int_eq(dtf_tfrecord_writer_write(wu, data, len), 0);
		}
		dtf_example_builder_reset(&b);
		ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "image", img, 64), 0);
		ck_assert_int_eq(dtf_example_builder_add_int64s(&b, "label", &label, 1), 0);
		ck_assert_int_eq(dtf_example_builder_finish(&b, &data, &len), 0);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, data, len), 0);
	}
	dtf_example_builder_deinit(&b);
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	ck_assert_int_eq(dtf_tfrecord_writer_close(wb), 0);
	if (wu)
		ck_assert_int_eq(dtf_tfrecord_writer_close(wu), 0);
}

static int dtf(const char *args, const char *log)
{
	return tu_run("cd %s && timeout 120 %s/dtf-train %s >%s.out 2>%s", tmpdir,
		      tu_build_root(), args, log, log);
}

/* The last line of FILE (in tmpdir) containing `kind` as a JSON object. */
static json_t *last_line(const char *file, const char *kind)
{
	char *text = tu_read_file(tmpdir, file, NULL);
	char want[64];
	snprintf(want, sizeof(want), "\"kind\":\"%s\"", kind);
	json_t *got = NULL;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strstr(line, want))
			continue;
		json_decref(got);
		got = json_loads(line, 0, NULL);
		ck_assert_ptr_nonnull(got);
	}
	free(text);
	ck_assert_msg(got, "no %s line in %s", kind, file);
	return got;
}

static double num(const json_t *o, const char *path)
{
	const json_t *v = o;
	char key[64];
	for (const char *p = path; v && *p;) {
		size_t n = strcspn(p, ".");
		snprintf(key, sizeof(key), "%.*s", (int)n, p);
		v = json_object_get(v, key);
		p += n + (p[n] == '.');
	}
	ck_assert_msg(json_is_number(v), "no number %s", path);
	return json_number_value(v);
}

static void assert_rel(double got, double want, double tol, const char *what)
{
	ck_assert_msg(fabs(got - want) <= tol * fabs(want),
		      "%s: %.12g, want %.12g (relative %.3g > %.3g)", what, got,
		      want, fabs(got - want) / fabs(want), tol);
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-use-test");
	tu_rng_seed(2024);
	write_records("train-0.tfrecord", 256, NULL, NULL, NULL);
	for (int f = 0; f < NFILES; f++) {
		char name[64], bare[64], unl[64];
		snprintf(name, sizeof(name), "test-%d.tfrecord", f);
		snprintf(bare, sizeof(bare), "bare-%d.tfrecord", f);
		snprintf(unl, sizeof(unl), "unl-%d.tfrecord", f);
		write_records(name, per_file[f], labels[f], bare, unl);
	}
	write_job("one", 1);
	write_job("two", 0);
	ck_assert_int_eq(dtf("--threads 1 one.yaml", "train-one.log"), 0);
	ck_assert_int_eq(tu_mpirun(2, NULL, tmpdir, "train-two.log",
				   "--threads 1 %s/two.yaml", tmpdir),
			 0);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

/* evaluate's metrics.jsonl line after running it with `args` on np ranks
 * (0: without mpirun) */
static json_t *evaluate(int np, const char *job, const char *args)
{
	char cmd[1024], logs[64];
	snprintf(cmd, sizeof(cmd), "evaluate --threads 1 %s/%s.yaml %s", tmpdir,
		 job, args);
	int rc = np ? tu_mpirun(np, NULL, tmpdir, "evaluate.log", "%s", cmd)
		    : dtf(cmd, "evaluate.log");
	ck_assert_msg(rc == 0, "evaluate %s on %d: exit %d\n%s", args, np, rc,
		      tu_slurp(tmpdir, "evaluate.log"));
	snprintf(logs, sizeof(logs), "%s-logs/metrics.jsonl", job);
	return last_line(logs, "evaluate");
}

START_TEST(evaluate_equals_training)
{
	json_t *train = last_line("one-logs/metrics.jsonl", "eval");
	json_t *ev = evaluate(0, "one", "");
	ck_assert_int_eq((int)num(ev, "step"), 12);
	ck_assert_int_eq((int)num(train, "step"), 12);
	ck_assert_int_eq((int)num(ev, "examples"), NTEST);
	assert_rel(num(ev, "loss"), num(train, "loss"), 1e-7, "loss");
	ck_assert_double_eq(num(ev, "metrics.accuracy"),
			    num(train, "metrics.accuracy"));
	/* a model that is neither untrained nor perfect */
	double acc = num(ev, "metrics.accuracy");
	ck_assert_msg(acc > 0.3 && acc < 0.99, "accuracy %g", acc);
	ck_assert_double_eq_tol(num(ev, "correct"), acc * NTEST, 1e-6);
	char want[600];
	snprintf(want, sizeof(want), "checkpoint: %s/one-ckpt/ckpt-12.dtf\n",
		 tmpdir);
	tu_assert_log(tmpdir, "evaluate.log.out", want);
	tu_assert_log(tmpdir, "evaluate.log.out", "examples: 101\n");
	/* the older checkpoint gives another result */
	char args[512];
	snprintf(args, sizeof(args), "--checkpoint %s/one-ckpt/ckpt-6.dtf",
		 tmpdir);
	json_t *old = evaluate(0, "one", args);
	ck_assert_int_eq((int)num(old, "step"), 6);
	ck_assert(num(old, "loss") != num(ev, "loss"));
	json_decref(old);
	json_decref(ev);
	json_decref(train);
}
END_TEST

START_TEST(evaluate_ranks)
{
	/* the last: a global batch of 15 is 8 per rank on 2 */
	/* off: every rank would read every record; an evaluation still
	 * counts each once */
	static const char *shard[] = {"", "--set data.shard_policy=data",
				      "--set data.shard_policy=off",
				      "--set train.batch_size=15"};
	for (int s = 0; s < 4; s++)
		for (int j = 0; j < 2; j++) {
			const char *job = j ? "two" : "one";
			json_t *a = evaluate(0, job, shard[s]);
			json_t *b = evaluate(2, job, shard[s]);
			ck_assert_int_eq((int)num(a, "examples"), NTEST);
			ck_assert_int_eq((int)num(b, "examples"), NTEST);
			assert_rel(num(b, "loss"), num(a, "loss"), 1e-6, job);
			ck_assert_double_eq(num(b, "correct"), num(a, "correct"));
			json_decref(a);
			json_decref(b);
		}
	tu_assert_log(tmpdir, "evaluate.log", "2 rank(s)");
	/* the 2-rank training's own evaluation, from its sharded update */
	json_t *train = last_line("two-logs/metrics.jsonl", "eval");
	json_t *ev = evaluate(0, "two", "");
	assert_rel(num(ev, "loss"), num(train, "loss"), 1e-6, "two: loss");
	ck_assert_double_eq(num(ev, "metrics.accuracy"),
			    num(train, "metrics.accuracy"));
	json_decref(ev);
	json_decref(train);
}
END_TEST

/* predict into NAME with `args`; the exit status */
static int predict(const char *name, const char *args)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "predict --threads 1 one.yaml --data '%s/test-*.tfrecord' --output %s %s",
		 tmpdir, name, args);
	return dtf(cmd, "predict.log");
}

/* file index of a test-F.tfrecord path */
static int file_index(const char *path)
{
	const char *p = strrchr(path, '/');
	ck_assert_msg(p && !strncmp(p, "/test-", 6), "file %s", path);
	return p[6] - '0';
}

/* The JSON lines of FILE, checked: one per test record, each once. */
static json_t **read_jsonl(const char *file)
{
	char *text = tu_read_file(tmpdir, file, NULL);
	json_t **rows = calloc(NTEST, sizeof(*rows));
	int seen[NFILES][NTEST] = {{0}}, n = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		ck_assert_int_lt(n, NTEST);
		json_t *o = json_loads(line, 0, NULL);
		ck_assert_msg(o, "not JSON: %s", line);
		int f = file_index(json_string_value(json_object_get(o, "file")));
		int r = (int)json_integer_value(json_object_get(o, "record"));
		ck_assert(f >= 0 && f < NFILES && r >= 0 && r < per_file[f]);
		ck_assert_int_eq(seen[f][r]++, 0);
		rows[n++] = o;
	}
	ck_assert_int_eq(n, NTEST);
	free(text);
	return rows;
}

static void free_rows(json_t **rows)
{
	for (int i = 0; i < NTEST; i++)
		json_decref(rows[i]);
	free(rows);
}

static double item(const json_t *o, const char *key, int i)
{
	const json_t *v = json_array_get(json_object_get(o, key), (size_t)i);
	ck_assert_msg(json_is_number(v), "%s[%d]", key, i);
	return json_number_value(v);
}

START_TEST(predict_classes)
{
	char want[1024];
	json_t *ev = evaluate(0, "one", "");
	ck_assert_int_eq(predict("all.jsonl", "--top-k 4"), 0);
	tu_assert_log(tmpdir, "predict.log", "predict: 101 records in ");
	tu_assert_log(tmpdir, "predict.log", " records/s");
	json_t **rows = read_jsonl("all.jsonl");
	int correct = 0;
	for (int i = 0; i < NTEST; i++) {
		const json_t *o = rows[i];
		int f = file_index(json_string_value(json_object_get(o, "file")));
		int r = (int)json_integer_value(json_object_get(o, "record"));
		ck_assert_int_eq(json_array_size(json_object_get(o, "classes")), 4);
		double sum = 0;
		int seen = 0;
		for (int k = 0; k < 4; k++) {
			double p = item(o, "probabilities", k);
			ck_assert(p >= 0 && p <= 1);
			if (k)
				ck_assert(p <= item(o, "probabilities", k - 1));
			sum += p;
			seen |= 1 << (int)item(o, "classes", k);
		}
		ck_assert_int_eq(seen, 15);
		ck_assert_msg(fabs(sum - 1) < 1e-6, "sum %.9g", sum);
		correct += (int)item(o, "classes", 0) == labels[f][r];
	}
	ck_assert_int_eq(correct, (int)num(ev, "correct"));

	/* --top-k 2 (and the default 1): fewer classes, the same first */
	ck_assert_int_eq(predict("two.jsonl", "--top-k 2"), 0);
	ck_assert_int_eq(predict("one.jsonl", ""), 0);
	json_t **two = read_jsonl("two.jsonl"), **one = read_jsonl("one.jsonl");
	for (int i = 0; i < NTEST; i++) {
		ck_assert_int_eq(json_array_size(json_object_get(two[i], "classes")), 2);
		ck_assert_int_eq(json_array_size(json_object_get(one[i], "classes")), 1);
		ck_assert_double_eq(item(two[i], "classes", 1), item(rows[i], "classes", 1));
		ck_assert_double_eq(item(one[i], "classes", 0), item(rows[i], "classes", 0));
		ck_assert_double_eq(item(one[i], "probabilities", 0),
				    item(rows[i], "probabilities", 0));
	}

	/* records without the labels: the same lines */
	snprintf(want, sizeof(want), "--top-k 4 --data '%s/bare-*.tfrecord'", tmpdir);
	ck_assert_int_eq(predict("bare.jsonl", want), 0);
	char *with = tu_read_file(tmpdir, "all.jsonl", NULL);
	char *without = tu_read_file(tmpdir, "bare.jsonl", NULL);
	for (char *p = strstr(without, "/bare-"); p; p = strstr(p, "/bare-"))
		memcpy(p, "/test-", 6);
	ck_assert_str_eq(without, with);
	free(without);
	/* labelled -1 ("unlabelled"), which only the loss would read: the
	 * same lines too */
	snprintf(want, sizeof(want), "--top-k 4 --data '%s/unl-*.tfrecord'", tmpdir);
	ck_assert_int_eq(predict("unl.jsonl", want), 0);
	without = tu_read_file(tmpdir, "unl.jsonl", NULL);
	for (char *p = strstr(with, "/test-"); p; p = strstr(p + 5, "/test-"))
		memmove(p + 4, p + 5, strlen(p + 5) + 1), memcpy(p, "/unl-", 5);
	ck_assert_str_eq(without, with);
	free(with);
	free(without);

	/* CSV by the extension: a header, then the same values */
	ck_assert_int_eq(predict("two.csv", "--top-k 2"), 0);
	char *csv = tu_read_file(tmpdir, "two.csv", NULL);
	char *save = NULL, *line = strtok_r(csv, "\n", &save);
	ck_assert_str_eq(line, "file,record,class_1,probability_1,class_2,probability_2");
	for (int i = 0; i < NTEST; i++) {
		line = strtok_r(NULL, "\n", &save);
		ck_assert_ptr_nonnull(line);
		snprintf(want, sizeof(want), "%s,%lld,%d,%.9g,%d,%.9g",
			 json_string_value(json_object_get(two[i], "file")),
			 (long long)json_integer_value(json_object_get(two[i], "record")),
			 (int)item(two[i], "classes", 0),
			 item(two[i], "probabilities", 0),
			 (int)item(two[i], "classes", 1),
			 item(two[i], "probabilities", 1));
		ck_assert_str_eq(line, want);
	}
	ck_assert_ptr_null(strtok_r(NULL, "\n", &save));
	free(csv);
	ck_assert(!tu_exists(tmpdir, "two.csv.tmp"));
	free_rows(one);
	free_rows(two);
	free_rows(rows);
	json_decref(ev);
}
END_TEST

START_TEST(predict_logits)
{
	ck_assert_int_eq(predict("p.jsonl", "--top-k 4"), 0);
	ck_assert_int_eq(predict("l.jsonl", "--outputs logits"), 0);
	json_t **p = read_jsonl("p.jsonl"), **l = read_jsonl("l.jsonl");
	int varied = 0;
	for (int i = 0; i < NTEST; i++) {
		ck_assert_int_eq(json_array_size(json_object_get(l[i], "logits")), 4);
		ck_assert_ptr_null(json_object_get(l[i], "probabilities"));
		/* log p_c - logit_c is one constant over the classes c */
		double c0 = 0;
		for (int k = 0; k < 4; k++) {
			int c = (int)item(p[i], "classes", k);
			double d = log(item(p[i], "probabilities", k)) -
				   item(l[i], "logits", c);
			if (k == 0)
				c0 = d;
			ck_assert_msg(fabs(d - c0) < 1e-5, "row %d: %.9g vs %.9g",
				      i, d, c0);
		}
		varied += fabs(item(l[i], "logits", 0) - item(l[i], "logits", 1)) > 1e-3;
	}
	ck_assert_int_gt(varied, NTEST / 2);
	/* --top-k with logits is a usage error */
	ck_assert_int_eq(predict("x.jsonl", "--outputs logits --top-k 2"), 2);
	ck_assert_int_eq(predict("x.jsonl", "--top-k 5"), 2);
	tu_assert_log(tmpdir, "predict.log", "--top-k 5: the model has 4 classes");
	free_rows(p);
	free_rows(l);
}
END_TEST

/* predict's peak memory in MiB over `n` synthetic records in `shards`
 * files (the same number of files for both runs: what is allocated per
 * file, and kept by a sanitizer's quarantine of freed blocks, is the same;
 * the reader maps the file it reads, at most 170 KiB here) */
static double peak_mib(int n, int shards)
{
	char dir[512], args[1024];
	snprintf(dir, sizeof(dir), "%s/many%d", tmpdir, n);
	tu_synth(tmpdir, dir + strlen(tmpdir) + 1, n, shards, "8,8,1", 3);
	snprintf(args, sizeof(args),
		 "predict --threads 1 one.yaml --set data.prefetch=2 --data '%s-*' --output many.csv --top-k 3",
		 dir);
	ck_assert_int_eq(dtf(args, "many.log"), 0);
	const char *log = tu_slurp(tmpdir, "many.log");
	char want[64];
	snprintf(want, sizeof(want), "predict: %d records in ", n);
	ck_assert_msg(strstr(log, want), "%s", log);
	const char *m = strstr(log, "peak memory ");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(tu_count_lines(tmpdir, "many.csv", "many"), n);
	return strtod(m + strlen("peak memory "), NULL);
}

START_TEST(predict_bounded_memory)
{
	double small = peak_mib(3000, 20), large = peak_mib(60000, 20);
	ck_assert_msg(large - small < 2, "peak %.1f MiB over 3000 records, %.1f over 60000",
		      small, large);
}
END_TEST

START_TEST(errors)
{
	char args[1024];
	/* a missing checkpoint file */
	snprintf(args, sizeof(args), "evaluate one.yaml --checkpoint %s/nope.dtf", tmpdir);
	ck_assert_int_eq(dtf(args, "err.log"), 4);
	tu_assert_log(tmpdir, "err.log", "nope.dtf: cannot open");
	/* a corrupt one, named; in a directory the older one is used */
	char ck[512];
	tu_path(ck, sizeof(ck), tmpdir, "bad-ckpt");
	ck_assert_int_eq(tu_run("cp -r %s/one-ckpt %s", tmpdir, ck), 0);
	char newest[600];
	snprintf(newest, sizeof(newest), "%s/ckpt-12.dtf", ck);
	tu_patch_xor(newest, 400, 0x40);
	snprintf(args, sizeof(args), "evaluate one.yaml --checkpoint %s", newest);
	ck_assert_int_eq(dtf(args, "err.log"), 4);
	tu_assert_log(tmpdir, "err.log", "ckpt-12.dtf");
	snprintf(args, sizeof(args), "evaluate one.yaml --checkpoint %s", ck);
	ck_assert_int_eq(dtf(args, "err.log"), 0);
	tu_assert_log(tmpdir, "err.log", "trying the previous checkpoint");
	tu_assert_log(tmpdir, "err.log.out", "step: 6\n");
	ck_assert(tu_exists(ck, "ckpt-12.dtf"));
	ck_assert(!tu_exists(ck, "ckpt-12.dtf.corrupt"));
	/* no checkpoint in a directory */
	snprintf(args, sizeof(args), "evaluate one.yaml --checkpoint %s", tmpdir);
	ck_assert_int_eq(dtf(args, "err.log"), 4);
	tu_assert_log(tmpdir, "err.log", "no checkpoint (ckpt-<step>.dtf) in this directory");
	/* a misspelt subcommand is named as such */
	ck_assert_int_eq(dtf("evalute one.yaml", "err.log"), 2);
	tu_assert_log(tmpdir, "err.log", "'evalute' is not a subcommand (evaluate, predict, export, generate) nor a job file");
	ck_assert_int_eq(dtf("one.yaml extra.yaml", "err.log"), 2);
	tu_assert_log(tmpdir, "err.log", "expected exactly one job file");
	/* a glob matching nothing */
	ck_assert_int_eq(dtf("evaluate one.yaml --data 'none-*.tfrecord'", "err.log"), 3);
	tu_assert_log(tmpdir, "err.log", "none-*.tfrecord");
	ck_assert_int_eq(predict("x.csv", "--data 'none-*.tfrecord'"), 3);
	tu_assert_log(tmpdir, "predict.log", "none-*.tfrecord");
	ck_assert(!tu_exists(tmpdir, "x.csv") && !tu_exists(tmpdir, "x.csv.tmp"));
	/* an output that cannot be written: before any work */
	ck_assert_int_eq(predict("nodir/x.csv", ""), 2);
	tu_assert_log(tmpdir, "predict.log", "--output nodir/x.csv: cannot write");
	tu_assert_not_log(tmpdir, "predict.log", "predicting with");
	ck_assert_int_eq(predict("x.txt", ""), 2);
	/* a bad record: nothing under the output name, the earlier output
	 * kept */
	ck_assert_int_eq(tu_run("cp %s/test-0.tfrecord %s/cut-0.tfrecord && "
				"cp %s/test-1.tfrecord %s/cut-1.tfrecord",
				tmpdir, tmpdir, tmpdir, tmpdir),
			 0);
	char cut[512];
	tu_cut_file(tu_path(cut, sizeof(cut), tmpdir, "cut-1.tfrecord"),
		    tu_file_size(tmpdir, "cut-1.tfrecord") - 10);
	tu_write_file(tmpdir, "kept.csv", "earlier\n");
	snprintf(args, sizeof(args),
		 "predict one.yaml --data '%s/cut-*.tfrecord' --output kept.csv",
		 tmpdir);
	ck_assert_int_eq(dtf(args, "err.log"), 3);
	tu_assert_log(tmpdir, "err.log", "cut-1.tfrecord");
	ck_assert_str_eq(tu_slurp(tmpdir, "kept.csv"), "earlier\n");
	ck_assert(!tu_exists(tmpdir, "kept.csv.tmp"));
	/* predict is one process */
	ck_assert_int_eq(tu_mpirun(2, NULL, tmpdir, "err.log",
				   "predict %s/one.yaml --data '%s/test-*' --output %s/y.csv",
				   tmpdir, tmpdir, tmpdir),
			 2);
	tu_assert_log(tmpdir, "err.log", "predict runs as one process");
	ck_assert(!tu_exists(tmpdir, "y.csv"));
}
END_TEST

/* SIGKILL in the middle of a predict: nothing under the output name */
START_TEST(predict_killed)
{
	tu_synth(tmpdir, "big", 200000, 20, "8,8,1", 4);
	int rc = tu_run(
		"cd %s && { %s/dtf-train predict --threads 1 one.yaml --data 'big-*' "
		"--output killed.jsonl 2>kill.log & pid=$!; n=0; "
		"until grep -q 'predicting with' kill.log || [ $n -gt 600 ]; do "
		"sleep 0.05; n=$((n+1)); done; kill -9 $pid; wait $pid; "
		"echo $? >kill.rc; }",
		tmpdir, tu_build_root());
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(tu_slurp(tmpdir, "kill.rc"), "137\n");
	ck_assert(!tu_exists(tmpdir, "killed.jsonl"));
	ck_assert(tu_exists(tmpdir, "killed.jsonl.tmp"));
}
END_TEST

static Suite *use_suite(void)
{
	Suite *s = suite_create("use");
	TCase *tc = tcase_create("use");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, evaluate_equals_training);
	tcase_add_test(tc, evaluate_ranks);
	tcase_add_test(tc, predict_classes);
	tcase_add_test(tc, predict_logits);
	tcase_add_test(tc, predict_bounded_memory);
	tcase_add_test(tc, errors);
	tcase_add_test(tc, predict_killed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (system("command -v mpirun >/dev/null 2>&1") != 0)
		return 77;
	return tu_run_suite(use_suite(), 1);
}
