/*
 * test_data_errors.c - bad input data end to end: `mpirun -np 2 dtf-train`
 * on damaged TFRecord files, each case checking the exit status and the
 * exact message (file, record index, byte offset), every run under
 * `timeout` so a hang fails instead of blocking.  Also: a 0-byte file among
 * good ones, a glob matching nothing, a float_list where int64 is declared,
 * FILE sharding with too few files, on_error skip, uneven shards (3 and 10
 * records) and a gzip file read as uncompressed.
 *
 * This process never starts MPI itself (mpirun inside an MPI singleton
 * fails), so each test may fork.  The binaries come from DTF_BUILD_ROOT.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "data/crc32c.h"
#include "data/example.h"
#include "data/tfrecord.h"

#include "testutil.h"

static char tmpdir[512];

/* 2 shards of 20 synthetic 8x8x1 records, 4 classes; global batch 8. */
static const char job_text[] =
	"name: bad-data\n"
	"seed: 3\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 16}\n"
	"  prefetch: 2\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - flatten\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: %d\n"
	"  epochs: 1\n"
	"  optimizer: {sgd: {learning_rate: 0.1}}\n"
	"logging: {every_steps: 1000}\n";

static void write_job(const char *dir, int batch)
{
	tu_write_file(dir, "job.yaml", job_text, dir, batch);
}

/* A fresh case directory with the two good shards and a job file. */
static const char *case_dir(const char *name, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", tmpdir, name);
	ck_assert_int_eq(tu_run("mkdir -p '%s' && cp %s/good/*.tfrecord '%s'/",
				buf, tmpdir, buf),
			 0);
	write_job(buf, 8);
	return buf;
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-data-errors");
	ck_assert_int_eq(tu_run("mkdir -p %s/good", tmpdir), 0);
	tu_synth(tmpdir, "good/train", 40, 2, "8,8,1", 1);
}

static void teardown(void) { tu_tmpdir_remove(tmpdir); }

/* Bytes of one record of the synthetic shards (all the same size). */
static long record_bytes(const char *dir)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	uint8_t l[8];
	ck_assert_int_eq(fread(l, 1, 8, f), 8);
	fclose(f);
	return (long)(l[0] | l[1] << 8) + 16;
}

/* Run 2 ranks on dir/job.yaml with extra args; return the exit status and
 * the log (stderr) in log. */
static int train2(const char *dir, const char *args, char *log, size_t n)
{
	int st = tu_mpirun(2, NULL, dir, "log",
			   "--threads 1 %s %s/job.yaml", args, dir);
	snprintf(log, n, "%s", tu_slurp(dir, "log"));
	return st;
}

static int count_of(const char *hay, const char *needle)
{
	int k = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		k++;
	return k;
}

/* Expect exit `status` and `error: <path>: record R at byte offset O:
 * <what>` in the log. */
static void expect_record_error(const char *dir, int status, long rec,
				long off, const char *what)
{
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	char want[2048];
	snprintf(want, sizeof(want),
		 "error: %s/train-00001-of-00002.tfrecord: record %ld at byte "
		 "offset %ld: %s\n",
		 dir, rec, off, what);
	ck_assert_msg(st == status, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
}

START_TEST(cut_inside_length)
{
	char dir[1024];
	case_dir("cut-length", dir, sizeof(dir));
	long rec = record_bytes(dir);
	ck_assert_int_eq(tu_run("truncate -s %ld %s/train-00001-of-00002.tfrecord",
				7 * rec + 5, dir),
			 0);
	expect_record_error(dir, 3, 7, 7 * rec,
			    "truncated record header (5 of 12 bytes)");
}
END_TEST

START_TEST(cut_after_length_crc)
{
	char dir[1024];
	case_dir("cut-crc", dir, sizeof(dir));
	long rec = record_bytes(dir);
	ck_assert_int_eq(tu_run("truncate -s %ld %s/train-00001-of-00002.tfrecord",
				7 * rec + 12, dir),
			 0);
	char what[128];
	snprintf(what, sizeof(what), "truncated record data (0 of %ld bytes)",
		 rec - 12);
	expect_record_error(dir, 3, 7, 7 * rec, what);
}
END_TEST

START_TEST(cut_inside_data)
{
	char dir[1024];
	case_dir("cut-data", dir, sizeof(dir));
	long rec = record_bytes(dir);
	ck_assert_int_eq(tu_run("truncate -s %ld %s/train-00001-of-00002.tfrecord",
				7 * rec + 12 + 30, dir),
			 0);
	char what[128];
	snprintf(what, sizeof(what), "truncated record data (30 of %ld bytes)",
		 rec - 12);
	expect_record_error(dir, 3, 7, 7 * rec, what);
}
END_TEST

START_TEST(flipped_data_byte)
{
	char dir[1024], path[1100];
	case_dir("flip", dir, sizeof(dir));
	long rec = record_bytes(dir);
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	tu_patch_xor(path, 3 * rec + 12 + 40, 0x20);
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "error: %s: record 3 at byte offset %ld: data CRC mismatch "
		 "(corrupt record)\n",
		 path, 3 * rec);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	/* rank 0 says why it stopped too */
	ck_assert_msg(strstr(log, "error: stopping: rank 1 failed reading data "
				  "for step 0\n"),
		      "%s", log);
}
END_TEST

/* A bad eval record stops the run at start, before any training step,
 * not at the first evaluation. */
START_TEST(bad_eval_record_found_at_start)
{
	char dir[1024], path[1100];
	case_dir("badeval", dir, sizeof(dir));
	long rec = record_bytes(dir);
	ck_assert_int_eq(tu_run("cp '%s/train-00001-of-00002.tfrecord' "
				"'%s/eval.tfrecord'",
				dir, dir),
			 0);
	snprintf(path, sizeof(path), "%s/eval.tfrecord", dir);
	tu_patch_xor(path, 7 * rec + 12 + 40, 0x20);
	char args[1400];
	snprintf(args, sizeof(args),
		 "--set data.eval.files=%s --set logging.every_steps=1", path);
	static char log[65536];
	int st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "error: %s: record 7 at byte offset %ld: data CRC mismatch "
		 "(corrupt record)\n",
		 path, 7 * rec);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	ck_assert_msg(!strstr(log, "step 1/"), "trained before failing:\n%s",
		      log);
}
END_TEST

/* Write `path`: 20 records of an 8x8 image and label i % 4, except record
 * `bad` with label `label`; its byte offset goes to *off. */
static void write_labels(const char *path, int bad, int64_t label, long *off)
{
	struct dtf_tfrecord_writer *w;
	ck_assert_int_eq(dtf_tfrecord_writer_open(path, &w), 0);
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t img[64];
	long at = 0;
	for (int i = 0; i < 20; i++) {
		int64_t lab = i == bad ? label : i % 4;
		const uint8_t *d;
		size_t n;
		memset(img, i * 9, sizeof(img));
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "image", img, 64);
		dtf_example_builder_add_int64s(&b, "label", &lab, 1);
		ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
		if (i == bad)
			*off = at;
		at += (long)n + 16;
	}
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	dtf_example_builder_deinit(&b);
}

/* A training label outside the 4 classes: exit 3, file, record and byte
 * offset. */
START_TEST(train_label_out_of_range)
{
	char dir[1024], path[1100];
	case_dir("train-label", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	long off = 0;
	write_labels(path, 7, 4, &off);
	ck_assert_int_gt(off, 0);
	expect_record_error(dir, 3, 7, off,
			    "label 4 is outside [0, 4), the classes of layer "
			    "'logits'");
}
END_TEST

/* An eval label outside the classes stops the run at start, on every
 * rank, with the same message as a training label; not "eval loss nan". */
START_TEST(eval_label_out_of_range)
{
	char dir[1024], path[1100];
	case_dir("eval-label", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/eval.tfrecord", dir);
	long off = 0;
	write_labels(path, 13, 11, &off);
	char args[1400];
	snprintf(args, sizeof(args),
		 "--set data.eval.files=%s --set logging.every_steps=1", path);
	static char log[65536];
	int st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "error: %s: record 13 at byte offset %ld: label 11 is outside "
		 "[0, 4), the classes of layer 'logits'\n",
		 path, off);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	/* record 13 is rank 1's (one file, sharded by record); rank 0
	 * learns of it before any collective and says why it stops */
	ck_assert_msg(strstr(log, "error: stopping: rank 1 failed opening data "
				  "before step 0\n"),
		      "%s", log);
	ck_assert_msg(!strstr(log, "step 1/") && !strstr(log, "nan"),
		      "trained or evaluated:\n%s", log);
	/* a negative label too, on rank 0 */
	write_labels(path, 4, -1, &off);
	st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	snprintf(want, sizeof(want),
		 "error: %s: record 4 at byte offset %ld: label -1 is outside "
		 "[0, 4), the classes of layer 'logits'\n",
		 path, off);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
}
END_TEST

START_TEST(huge_length)
{
	char dir[1024], path[1100];
	case_dir("huge", dir, sizeof(dir));
	long rec = record_bytes(dir);
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
	tu_patch_bytes(path, 5 * rec, huge, 8);
	expect_record_error(dir, 3, 5, 5 * rec,
			    "length CRC mismatch (corrupt length field)");
}
END_TEST

START_TEST(empty_file_among_good)
{
	char dir[1024];
	case_dir("empty", dir, sizeof(dir));
	ck_assert_int_eq(tu_run(": > %s/train-00002-of-00003.tfrecord", dir), 0);
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "warning: %s/train-00002-of-00003.tfrecord: empty file (0 records); "
		 "reading on\n",
		 dir);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	ck_assert_msg(strstr(log, "data.train: 3 files for 2 ranks: "
				  "shard_policy auto shards by file"),
		      "%s", log);
}
END_TEST

START_TEST(glob_matches_nothing)
{
	char dir[1024];
	case_dir("noglob", dir, sizeof(dir));
	ck_assert_int_eq(tu_run("rm %s/*.tfrecord", dir), 0);
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "error: data.train.files: no files match '%s/train-*.tfrecord' "
		 "(relative patterns are read from the current directory)\n",
		 dir);
	/* every rank finds it by itself, before any collective, and the
	 * ranks that found the same say it once (rank 0) */
	ck_assert_msg(count_of(log, want) == 1, "not once '%s' in:\n%s",
		      want, log);
	ck_assert_msg(count_of(log, "[rank 0 ") == 1, "%s", log);
	/* fewer records than one batch (the ranks' allreduce): once too */
	case_dir("onebatch", dir, sizeof(dir));
	write_job(dir, 64); /* 32 per replica, 20 records a shard */
	st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(count_of(log, "error: data.train.files: the smallest of "
				    "the 2 shards has 20 record(s), fewer than "
				    "one per-replica batch of 32\n") == 1,
		      "%s", log);
}
END_TEST

/* --dry-run of DIR/job.yaml with `sets` under `mpirun -np np` (0: one
 * process, no mpirun) into DIR/out and DIR/err; its exit status must be
 * `want` */
static void dry_run(const char *dir, int np, const char *sets, int want)
{
	char mpirun[64] = "";
	if (np)
		snprintf(mpirun, sizeof(mpirun), "timeout %d mpirun -np %d",
			 TU_MPIRUN_TIMEOUT_S, np);
	int st = tu_run("%s %s/dtf-train --dry-run %s %s/job.yaml >%s/out 2>%s/err",
			mpirun, tu_build_root(), sets, dir, dir, dir);
	ck_assert_msg(st == want, "%s: exit status %d, expected %d:\n%s", sets,
		      st, want, tu_slurp(dir, "err"));
}

/* --dry-run under mpirun: the table once (rank 0), a job error once, the
 * status on every rank (mpirun reports it); checked on the launcher's
 * ranks, as a run on them would be */
START_TEST(dry_run_under_mpirun_prints_once)
{
	char dir[1024];
	case_dir("dry", dir, sizeof(dir));
	dry_run(dir, 2, "", 0);
	ck_assert_int_eq(tu_count_lines(dir, "out", "Model: \"bad-data\""), 1);
	/* flatten 8x8x1 into dense 4: 64 * 4 + 4 */
	ck_assert_int_eq(tu_count_lines(dir, "out", "Total params: 260 "), 1);
	/* the global batch of 8 split over 2 replicas */
	ck_assert_int_eq(tu_count_lines(dir, "out", "per-replica batch 4\n"), 1);
	ck_assert_int_eq(tu_count_lines(dir, "out", "ranks: 2 (the launcher's), 2 replica(s), global batch 8\n"), 1);
	dry_run(dir, 2, "--set train.epochs=0", 2);
	ck_assert_int_eq(tu_count_lines(dir, "err", "error: --set train.epochs: "
					"train.epochs: expected a positive "
					"integer, got '0'"),
			 1);
	/* each rank exits 2: mpirun names the first, whichever it is */
	tu_assert_log(dir, "err", "Exit code:    2");
	ck_assert_int_eq(tu_count_lines(dir, "out", "Model: \"bad-data\""), 0);
	/* a global batch that does not split; ps ranks that leave no worker */
	dry_run(dir, 2, "--set train.batch_size=9", 2);
	ck_assert_int_eq(tu_count_lines(dir, "err", "the global batch 9 is not divisible by the 2 replicas"), 1);
	dry_run(dir, 2, "--set strategy.type=parameter_server --set strategy.num_ps=2", 2);
	ck_assert_int_eq(tu_count_lines(dir, "err", "error: --set strategy.num_ps: strategy.num_ps: 2 ps ranks leave no worker among the 2 ranks"), 1);
	/* one process: one replica, no ranks line */
	dry_run(dir, 0, "", 0);
	ck_assert_int_eq(tu_count_lines(dir, "out", "per-replica batch 8\n"), 1);
	ck_assert_int_eq(tu_count_lines(dir, "out", "ranks:"), 0);
}
END_TEST

START_TEST(float_list_declared_int64)
{
	char dir[1024], path[1100];
	case_dir("float-label", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	struct dtf_tfrecord_writer *w;
	ck_assert_int_eq(dtf_tfrecord_writer_open(path, &w), 0);
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t img[64] = {0};
	for (int i = 0; i < 20; i++) {
		float lab = (float)(i % 4);
		const uint8_t *d;
		size_t n;
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "image", img, 64);
		dtf_example_builder_add_floats(&b, "label", &lab, 1);
		ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
	}
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	dtf_example_builder_deinit(&b);
	expect_record_error(dir, 3, 0, 0,
			    "feature 'label' is a float_list but the job "
			    "declares int64");
}
END_TEST

START_TEST(file_policy_too_few_files)
{
	char dir[1024];
	case_dir("file-policy", dir, sizeof(dir));
	ck_assert_int_eq(tu_run("rm %s/train-00001-of-00002.tfrecord", dir), 0);
	static char log[65536];
	int st = train2(dir, "--set data.shard_policy=file", log, sizeof(log));
	ck_assert_msg(st == 2, "exit status %d, log:\n%s", st, log);
	char want[1536];
	snprintf(want, sizeof(want),
		 "error: --set data.shard_policy: data.shard_policy: file: "
		 "data.train.files (%s/train-*.tfrecord) matches 1 file for 2 "
		 "ranks: every rank needs at least one file\n", dir);
	ck_assert_msg(strstr(log, want), "%s", log);
	ck_assert_msg(strstr(log,
			     "every rank needs at least one file\n"
			     "HINT: use shard_policy: auto or data (every rank "
			     "reads every file and keeps every 2nd record), or "
			     "split the data into at least 2 files "
			     "(dtf-records shard --shards 2)\n"),
		      "%s", log);
	/* auto falls back to record sharding and trains */
	st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "data.train: 1 file for 2 ranks: shard_policy "
				  "auto shards by record"),
		      "%s", log);
}
END_TEST

START_TEST(skip_bad_records)
{
	char dir[1024], path[1100];
	case_dir("skip", dir, sizeof(dir));
	long rec = record_bytes(dir);
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	uint8_t c = 0x55;
	tu_patch_bytes(path, 2 * rec + 12 + 9, &c, 1); /* record 2: data CRC */
	ck_assert_int_eq(tu_run("truncate -s %ld %s", 15 * rec + 3, path), 0);
	static char log[65536];
	int st = train2(dir, "--set data.on_error=skip", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	char want[2048];
	snprintf(want, sizeof(want),
		 "warning: skipping a bad record (data.on_error: skip): %s: "
		 "record 2 at byte offset %ld: data CRC mismatch (corrupt "
		 "record)\n",
		 path, 2 * rec);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	snprintf(want, sizeof(want),
		 "warning: skipping the rest of the file (data.on_error: skip): "
		 "%s: record 15 at byte offset %ld: truncated record header (3 "
		 "of 12 bytes)\n",
		 path, 15 * rec);
	ck_assert_msg(strstr(log, want), "no '%s' in:\n%s", want, log);
	ck_assert_msg(strstr(log, "epoch 1: data.train: 1 bad record skipped, "
				  "the rest of 1 file (3 bytes) skipped "
				  "(data.on_error: skip)\n"),
		      "%s", log);
	/* 14 good records on rank 1: 3 steps of 4; rank 0 has 5 */
	ck_assert_msg(strstr(log, "shards are uneven: 3 to 5 steps per rank"),
		      "%s", log);
	/* a bad record and no file cut short: no "the rest of 0 files" */
	case_dir("skip1", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/train-00001-of-00002.tfrecord", dir);
	tu_patch_bytes(path, 2 * rec + 12 + 9, &c, 1);
	st = train2(dir, "--set data.on_error=skip", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "epoch 1: data.train: 1 bad record skipped "
				  "(data.on_error: skip)\n"),
		      "%s", log);
	ck_assert_msg(!strstr(log, "the rest of 0"), "%s", log);
}
END_TEST

START_TEST(uneven_shards_3_and_10)
{
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s/uneven", tmpdir);
	ck_assert_int_eq(tu_run("mkdir -p %s && %s/dtf-records synth --out %s/a "
				"--count 3 --shape 8,8,1 --classes 4 >/dev/null && "
				"%s/dtf-records synth --out %s/b --count 10 --shape "
				"8,8,1 --classes 4 >/dev/null && "
				"mv %s/a-00000-of-00001.tfrecord "
				"%s/train-00000-of-00002.tfrecord && "
				"mv %s/b-00000-of-00001.tfrecord "
				"%s/train-00001-of-00002.tfrecord",
				dir, tu_build_root(), dir, tu_build_root(), dir, dir, dir,
				dir, dir),
		 0);
	write_job(dir, 4); /* global batch 4: 2 per replica */
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "shards are uneven: 1 to 5 steps per rank; "
				  "every rank runs 1 steps per epoch\n"),
		      "%s", log);
	ck_assert_msg(strstr(log, "done: 1 steps"), "%s", log);
}
END_TEST

START_TEST(gzip_read_as_none)
{
	char dir[1024];
	case_dir("gzip", dir, sizeof(dir));
	ck_assert_int_eq(tu_run("cd %s && for f in *.tfrecord; do gzip \"$f\" && "
				"mv \"$f.gz\" \"$f\"; done",
				dir),
			 0);
	static char log[65536];
	int st = train2(dir, "", log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "record 0 at byte offset 0: length CRC "
				  "mismatch (corrupt length field)\nHINT: the "
				  "file starts with the gzip magic bytes (1f "
				  "8b): set `compression: gzip`"),
		      "%s", log);
	st = train2(dir, "--set data.compression=gzip", log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
}
END_TEST

/* A gzip eval set beside plain training files: data.eval.compression
 * applies to the eval files alone, data.compression to both. */
START_TEST(gzip_eval_beside_plain_train)
{
	char dir[1024];
	case_dir("gzip-eval", dir, sizeof(dir));
	ck_assert_int_eq(tu_run("gzip -c '%s/train-00001-of-00002.tfrecord' "
				">'%s/eval.tfrecord'",
				dir, dir),
			 0);
	char args[1400];
	snprintf(args, sizeof(args),
		 "--set data.eval.files=%s/eval.tfrecord "
		 "--set data.eval.compression=gzip",
		 dir);
	static char log[65536];
	int st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	/* the 20 records of the file, over both ranks */
	ck_assert_msg(strstr(log, "; eval loss ") && strstr(log, "(20 examples, "),
		      "%s", log);
	/* data.compression: gzip is for both, with train's own none */
	snprintf(args, sizeof(args),
		 "--set data.eval.files=%s/eval.tfrecord "
		 "--set data.compression=gzip --set data.train.compression=none",
		 dir);
	st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 0, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "(20 examples, "), "%s", log);
	/* without the eval split's key the gzip file is read as plain */
	snprintf(args, sizeof(args), "--set data.eval.files=%s/eval.tfrecord",
		 dir);
	st = train2(dir, args, log, sizeof(log));
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(strstr(log, "HINT: the file starts with the gzip magic "
				  "bytes (1f 8b): set `compression: gzip` in "
				  "the job's data section, or in data.train or "
				  "data.eval for those files alone"),
		      "%s", log);
}
END_TEST

/* dtf-records: synth gzip, merge 3 shards into 2 (zlib), verify, inspect
 * with the inferred schema. */
START_TEST(records_tool_shard_and_inspect)
{
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s/tool", tmpdir);
	ck_assert_int_eq(tu_run("mkdir -p %s && cd %s && %s/dtf-records synth "
				"--out s --count 50 --shards 3 --shape 4,4,2 "
				"--compression gzip >/dev/null && %s/dtf-records "
				"shard --compression gzip --out-compression zlib "
				"--out m --shards 2 s-*.tfrecord >/dev/null && "
				"%s/dtf-records verify --compression zlib "
				"m-*.tfrecord >verify.txt && %s/dtf-records "
				"inspect --compression zlib --records 10 "
				"m-00001-of-00002.tfrecord >inspect.txt",
				dir, dir, tu_build_root(), tu_build_root(), tu_build_root(),
				tu_build_root()),
			 0);
	const char *buf = tu_slurp(dir, "verify.txt");
	ck_assert_str_eq(buf, "m-00000-of-00002.tfrecord: 25 records, all CRCs "
			      "OK\nm-00001-of-00002.tfrecord: 25 records, all "
			      "CRCs OK\ntotal: 50 records in 2 files\n");
	buf = tu_slurp(dir, "inspect.txt");
	ck_assert_msg(strstr(buf, "  schema (first 10 records):\n"
				  "    image: {type: bytes, decode: uint8, "
				  "shape: [32]}  # 32 bytes; or float16 [16]; "
				  "or float32 [8]\n"
				  "    label: {type: int64, shape: []}\n"),
		      "%s", buf);
	/* a record that is no Example: inspect names its index and offset */
	static const uint8_t bad[] = {
		/* record 0: an empty Example (field 1, length 0) */
		2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x00, 0, 0, 0, 0,
		/* record 1: three 0xff bytes */
		3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0, 0};
	uint8_t rec[sizeof(bad)];
	memcpy(rec, bad, sizeof(bad));
	/* fill in the masked CRCs: length at +8, data after it */
	size_t at = 0, lens[2] = {2, 3};
	for (int i = 0; i < 2; i++) {
		uint32_t c = dtf_crc32c_mask(dtf_crc32c(0, rec + at, 8));
		memcpy(rec + at + 8, &c, 4);
		c = dtf_crc32c_mask(dtf_crc32c(0, rec + at + 12, lens[i]));
		memcpy(rec + at + 12 + lens[i], &c, 4);
		at += 16 + lens[i];
	}
	tu_write_bytes(dir, "notex.tfrecord", rec, sizeof(rec));
	ck_assert_int_eq(tu_run("%s/dtf-records inspect %s/notex.tfrecord "
				">%s/notex.txt 2>/dev/null",
				tu_build_root(), dir, dir),
			 3);
	buf = tu_slurp(dir, "notex.txt");
	ck_assert_msg(strstr(buf, "  record 1 at byte offset 18: malformed "
				  "Example (bad tag in Example)\n"),
		      "%s", buf);
	/* reading the zlib shards as gzip fails with a data error */
	ck_assert_int_eq(tu_run("%s/dtf-records verify --compression gzip "
				"%s/m-00000-of-00002.tfrecord 2>/dev/null",
				tu_build_root(), dir),
			 3);
}
END_TEST

/* Reads every record of `path` as convert-text's (tokens: block + 1 uint8
 * ids as float32, offset) into tokens[k * (block + 1) ...] and offsets[k];
 * returns the record count. */
static int read_windows(const char *path, int block, float *tokens,
			int32_t *offsets, int max)
{
	struct dtf_feature_spec sp[2];
	memset(sp, 0, sizeof(sp));
	snprintf(sp[0].name, sizeof(sp[0].name), "tokens");
	sp[0].type = DTF_FEATURE_BYTES, sp[0].decode = DTF_DECODE_UINT8;
	sp[0].rank = 1, sp[0].shape[0] = block + 1, sp[0].scale = 1.0f;
	sp[0].dtype = DTF_FLOAT32;
	snprintf(sp[1].name, sizeof(sp[1].name), "offset");
	sp[1].type = DTF_FEATURE_INT64, sp[1].dtype = DTF_INT32;
	sp[1].scale = 1.0f;
	struct dtf_tfrecord_reader *r;
	const uint8_t *d;
	size_t n;
	int k = 0;
	ck_assert_int_eq(dtf_tfrecord_reader_open(path, &r), 0);
	while (dtf_tfrecord_reader_next(r, &d, &n) > 0) {
		ck_assert_int_lt(k, max);
		void *dst[2] = {tokens + (size_t)k * (block + 1), offsets + k};
		ck_assert_msg(dtf_example_decode(d, n, sp, 2, dst) == 0, "%s",
			      dtf_error_msg());
		k++;
	}
	dtf_tfrecord_reader_free(r);
	return k;
}

/* dtf-records convert-text: the vocabulary (sorted distinct bytes), the
 * training and validation parts (the last 25% here), windows of block + 1
 * ids every stride characters, shards of contiguous windows; usage and
 * data errors. */
START_TEST(records_tool_convert_text)
{
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s/text", tmpdir);
	/* 42 characters: 17 distinct bytes, a newline among them */
	static const char text[] = "to be, or not to be\nthat is the question:!";
	const int len = (int)sizeof(text) - 1, block = 4, stride = 3;
	tu_run("mkdir -p %s", dir);
	tu_write_bytes(dir, "t.txt", text, (size_t)len);
	ck_assert_int_eq(tu_run("cd %s && %s/dtf-records convert-text --text "
				"t.txt --out . --block-size 4 --stride 3 "
				"--validation-fraction 0.25 --shards 2 "
				">log.txt",
				dir, tu_build_root()),
			 0);
	/* the vocabulary, computed here: distinct bytes in byte order */
	int seen[256] = {0}, id_of[256], nv = 0;
	char vocab[256];
	for (int i = 0; i < len; i++)
		seen[(unsigned char)text[i]] = 1;
	for (int v = 0; v < 256; v++)
		if (seen[v]) {
			id_of[v] = nv;
			vocab[nv++] = (char)v;
		}
	size_t vlen;
	char *got = tu_read_file(dir, "vocab.txt", &vlen);
	ck_assert_uint_eq(vlen, (size_t)nv);
	ck_assert(memcmp(got, vocab, vlen) == 0);
	ck_assert_int_eq(got[0], '\n');
	free(got);
	/* 10 validation characters [32, 42); 32 training ones */
	const int nval = len / 4, ntrain = len - nval;
	const int parts[2][2] = {{0, ntrain}, {ntrain, len}};
	const char *files[2][3] = {
		{"train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord", NULL},
		{"validation-00000-of-00001.tfrecord", NULL, NULL}};
	for (int p = 0; p < 2; p++) {
		int chars = parts[p][1] - parts[p][0];
		int want = (chars - block - 1) / stride + 1, k = 0;
		float tok[64 * 5];
		int32_t off[64];
		for (int f = 0; files[p][f]; f++) {
			char path[1200];
			snprintf(path, sizeof(path), "%s/%s", dir, files[p][f]);
			int nk = read_windows(path, block, tok + k * (block + 1),
					      off + k, 64 - k);
			/* contiguous blocks of nearly equal size */
			ck_assert_int_eq(nk, p ? want : (f ? want - want / 2 : want / 2));
			k += nk;
		}
		ck_assert_int_eq(k, want);
		for (int w = 0; w < k; w++) {
			int at = parts[p][0] + w * stride;
			ck_assert_int_eq(off[w], at);
			for (int j = 0; j <= block; j++)
				ck_assert_msg(tok[w * (block + 1) + j] ==
						      (float)id_of[(unsigned char)text[at + j]],
					      "part %d window %d id %d", p, w, j);
		}
	}
	const char *log = tu_slurp(dir, "log.txt");
	ck_assert_msg(strstr(log, "train: characters [0, 32), 10 windows of 5 ids "
				  "(stride 3) in 2 shards"), "%s", log);
	ck_assert_msg(strstr(log, "validation: characters [32, 42), 2 windows"),
		      "%s", log);
	ck_assert_msg(strstr(log, "42 characters, vocabulary of 17 bytes"), "%s", log);
	/* the stride defaults to the block size: 32 characters, 7 windows */
	ck_assert_int_eq(tu_run("cd %s && %s/dtf-records convert-text --text "
				"t.txt --out . --block-size 4 --validation-fraction "
				"0.25 >log2.txt", dir, tu_build_root()), 0);
	ck_assert_msg(strstr(tu_slurp(dir, "log2.txt"),
			     "train: characters [0, 32), 7 windows of 5 ids "
			     "(stride 4) in 1 shard"), "%s", tu_slurp(dir, "log2.txt"));
	/* a stride past the block would skip targets: usage error */
	ck_assert_int_eq(tu_run("cd %s && %s/dtf-records convert-text --text "
				"t.txt --out . --block-size 4 --stride 5 2>err.txt",
				dir, tu_build_root()), 2);
	ck_assert_msg(strstr(tu_slurp(dir, "err.txt"), "--stride 5 is more than "
			     "--block-size 4"), "%s", tu_slurp(dir, "err.txt"));
	/* a part shorter than one window: data error naming the part */
	ck_assert_int_eq(tu_run("cd %s && %s/dtf-records convert-text --text "
				"t.txt --out . --block-size 36 2>err.txt",
				dir, tu_build_root()), 3);
	ck_assert_msg(strstr(tu_slurp(dir, "err.txt"), "t.txt: the validation "
			     "part has 4 characters, fewer than one window of "
			     "--block-size + 1 = 37"), "%s", tu_slurp(dir, "err.txt"));
	ck_assert_int_eq(tu_run("cd %s && %s/dtf-records convert-text --text "
				"nosuch.txt --out . --block-size 4 2>/dev/null",
				dir, tu_build_root()), 3);
	/* more shards than windows would leave some empty: usage error,
	 * nothing written */
	ck_assert_int_eq(tu_run("mkdir -p %s/many && cd %s && %s/dtf-records "
				"convert-text --text t.txt --out many --block-size 4 "
				"--validation-fraction 0.25 --shards 8 2>err.txt",
				dir, dir, tu_build_root()), 2);
	ck_assert_msg(strstr(tu_slurp(dir, "err.txt"), "--shards 8 is more than "
			     "the 7 windows of the train part (shards would be "
			     "empty)"), "%s", tu_slurp(dir, "err.txt"));
	ck_assert_int_eq(tu_run("test -z \"$(ls %s/many)\"", dir), 0);
}
END_TEST

static Suite *errors_suite(void)
{
	Suite *s = suite_create("data_errors");
	TCase *tc = tcase_create("framing");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, cut_inside_length);
	tcase_add_test(tc, cut_after_length_crc);
	tcase_add_test(tc, cut_inside_data);
	tcase_add_test(tc, flipped_data_byte);
	tcase_add_test(tc, huge_length);
	tcase_add_test(tc, bad_eval_record_found_at_start);
	tcase_add_test(tc, train_label_out_of_range);
	tcase_add_test(tc, eval_label_out_of_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, empty_file_among_good);
	tcase_add_test(tc, glob_matches_nothing);
	tcase_add_test(tc, float_list_declared_int64);
	tcase_add_test(tc, file_policy_too_few_files);
	tcase_add_test(tc, dry_run_under_mpirun_prints_once);
	tcase_add_test(tc, gzip_read_as_none);
	tcase_add_test(tc, gzip_eval_beside_plain_train);
	suite_add_tcase(s, tc);

	tc = tcase_create("recovery");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, skip_bad_records);
	tcase_add_test(tc, uneven_shards_3_and_10);
	tcase_add_test(tc, records_tool_shard_and_inspect);
	tcase_add_test(tc, records_tool_convert_text);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(errors_suite(), 1);
}
