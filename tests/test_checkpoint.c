/*
 * test_checkpoint.c - checkpoints, exact resume, preemption, dead and stuck
 * ranks, dtf-launch restarts, with injected faults (DTF_FAULT).
 *
 * Runs the real binaries (dtf-records synth, mpirun dtf-train, dtf-launch)
 * on 480 synthetic 8x8 records and a tiny CNN (1148 parameters, Adam,
 * dropout, a shuffle buffer): 30 steps per epoch at global batch 16, 60
 * steps in all.  Reference runs of 60 uninterrupted steps on 1 and on 2
 * ranks are made once; every interrupted-and-resumed run must reproduce
 * their final variables bit for bit.  Every mpirun is bounded by timeout(1).
 * Case "directory": checkpoint.dir is checked at start-up (unwritable,
 * locked by a running run, holding an earlier run's checkpoints) and
 * --overwrite-checkpoints starts over, also under dtf-launch.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"
#include "data/crc32c.h"
#include "data/pipeline.h"
#include "train/checkpoint.h"
#include "train/elastic.h"

#include "testutil.h"

static char tmp[256];

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}\n"
	"    - {max_pool2d: {size: 2}}\n"
	"    - flatten\n"
	"    - {dense: {units: %d, activation: relu}}\n"
	"    - {dropout: {rate: 0.25}}\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 60\n"
	"  epochs: 5\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"checkpoint: {every_steps: 10, keep: 3}\n"
	"logging: {every_steps: 10}\n";

#define CKPT_BYTES 16128 /* one checkpoint of this model */

/* dtf-train on `np` ranks, checkpoints in TMP/<dir>, log to TMP/<log>;
 * `extra` goes before the job file with each '@' replaced by TMP, `env`
 * before mpirun. */
static int train(int np, const char *env, const char *dir, const char *extra,
		 const char *log)
{
	char x[1024];
	size_t n = 0;
	for (const char *p = extra; *p && n < sizeof(x) - sizeof(tmp) - 1; p++)
		if (*p == '@')
			n += (size_t)snprintf(x + n, sizeof(x) - n, "%s", tmp);
		else
			x[n++] = *p;
	x[n] = 0;
	return tu_mpirun(np, env, tmp, log,
			 "-t 1 --set checkpoint.dir=%s/%s %s %s/job.yaml", tmp,
			 dir, x, tmp);
}

#define ck_assert_log(log, text) tu_assert_log(tmp, log, text)

#define count_lines(log, text) tu_count_lines(tmp, log, text)

/* Two exported variable files are byte-identical. */
static void assert_same_vars(const char *a, const char *b)
{
	char pa[512], pb[512];
	snprintf(pa, sizeof(pa), "%s/%s", tmp, a);
	snprintf(pb, sizeof(pb), "%s/%s", tmp, b);
	ck_assert_msg(tu_run("cmp -s %s %s", pa, pb) == 0,
		      "%s and %s differ", a, b);
	ck_assert_int_ge(tu_file_size(tmp, a), 16 + 4 * 1148);
}

static void verify(const char *name, const char *want_error)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	struct dtf_ckpt_file f;
	int rc = dtf_ckpt_file_read(path, &f);
	if (!want_error) {
		ck_assert_msg(rc == 0, "%s", dtf_error_msg());
		dtf_ckpt_file_deinit(&f);
		return;
	}
	ck_assert_int_eq(rc, -DTF_ERR_CHECKPOINT);
	ck_assert_msg(strstr(dtf_error_msg(), want_error) != NULL,
		      "wanted '%s', got '%s'", want_error, dtf_error_msg());
}

static void setup(void)
{
	tu_tmpdir_create(tmp, sizeof(tmp), "dtf-ckpt-test");
	tu_synth(tmp, "train", 480, 2, "8,8,1", 1);
	tu_write_file(tmp, "job.yaml", job_text, tmp, 16);
	/* the references: 60 uninterrupted steps, checkpoints on */
	ck_assert_int_eq(train(1, "", "ref1", "--export-variables @/REF1", "ref1.log") , 0);
}

static void teardown(void)
{
	/* a failed test may leave its unwritable directory behind */
	if (geteuid() == 0)
		tu_run("chattr -i %s/ro %s/rot/ckpt-10.dtf 2>/dev/null", tmp, tmp);
	else
		tu_run("chmod 755 %s/ro 2>/dev/null", tmp);
	tu_tmpdir_remove(tmp);
}

/* ---- format ------------------------------------------------------------- */

START_TEST(format_header_tensors_and_crc)
{
	ck_assert_int_eq(train(1, "", "fmt", "--set train.max_steps=20",
			       "fmt.log"), 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/fmt/ckpt-20.dtf", tmp);
	ck_assert_int_eq(tu_file_size(tmp, "fmt/ckpt-20.dtf"), CKPT_BYTES);
	/* the raw header, read here independently of the reader */
	FILE *fp = fopen(path, "rb");
	unsigned char *raw = malloc(CKPT_BYTES);
	ck_assert_int_eq(fread(raw, 1, CKPT_BYTES, fp), CKPT_BYTES);
	fclose(fp);
	ck_assert(memcmp(raw, "DTFCKPT\0", 8) == 0);
	uint32_t version, hbytes;
	uint64_t fbytes, step;
	memcpy(&version, raw + 8, 4);
	memcpy(&hbytes, raw + 12, 4);
	memcpy(&fbytes, raw + 16, 8);
	memcpy(&step, raw + 24, 8);
	ck_assert_uint_eq(version, 1);
	ck_assert_uint_eq(fbytes, CKPT_BYTES);
	ck_assert_uint_eq(step, 20);
	uint32_t stored;
	memcpy(&stored, raw + hbytes - 4, 4);
	ck_assert_uint_eq(stored, dtf_crc32c(0, raw, hbytes - 4));

	struct dtf_ckpt_file f;
	ck_assert_msg(dtf_ckpt_file_read(path, &f) == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(f.pos.step, 20);
	ck_assert_int_eq(f.pos.epoch, 0);
	ck_assert_int_eq(f.pos.step_in_epoch, 20);
	ck_assert_int_eq(f.pos.world, 1);
	ck_assert_int_eq(f.pos.per_replica_batch, 16);
	ck_assert_int_eq(f.pos.global_batch, 16);
	ck_assert_uint_eq(f.pos.seed, 7);
	/* 6 variables x (value, m, v) + 5 counter tensors */
	ck_assert_int_eq(f.ntensors, 6 * 3 + 5);
	const struct dtf_ckpt_tensor *k = dtf_ckpt_file_find(&f, "dense_1/kernel");
	ck_assert_ptr_nonnull(k);
	ck_assert_int_eq(k->rank, 2);
	ck_assert_int_eq(k->dims[0], 64);
	ck_assert_int_eq(k->dims[1], 16);
	ck_assert_uint_eq(k->nbytes, 64 * 16 * 4);
	ck_assert_uint_eq(k->offset % 64, 0);
	ck_assert_uint_eq(k->crc, dtf_crc32c(0, raw + k->offset, k->nbytes));
	ck_assert_ptr_nonnull(dtf_ckpt_file_find(&f, "optimizer/m/dense_1/kernel"));
	ck_assert_ptr_nonnull(dtf_ckpt_file_find(&f, "optimizer/v/logits/bias"));
	const struct dtf_ckpt_tensor *it =
		dtf_ckpt_file_find(&f, "optimizer/iterations");
	int64_t v[5];
	memcpy(v, f.data + it->offset, 8);
	ck_assert_int_eq(v[0], 20); /* Adam's t */
	const struct dtf_ckpt_tensor *rng = dtf_ckpt_file_find(&f, "rng/state");
	ck_assert_int_eq(rng->dims[0], 3);
	memcpy(v, f.data + rng->offset, 24);
	ck_assert_int_eq(v[0], 7);
	ck_assert_int_eq(v[1], 20);
	ck_assert_int_eq(v[2], 0);
	const struct dtf_ckpt_tensor *pp =
		dtf_ckpt_file_find(&f, "pipeline/position");
	memcpy(v, f.data + pp->offset, 40);
	ck_assert_int_eq(v[0], 0);
	ck_assert_int_eq(v[1], 20);
	ck_assert_int_eq(v[2], 320);
	ck_assert_int_eq(v[3], 1);
	ck_assert_int_eq(v[4], 16);
	uint64_t koff = k->offset;
	dtf_ckpt_file_deinit(&f);
	ck_assert_str_eq(tu_slurp(tmp, "fmt/checkpoint"),
			 "model_checkpoint_path: \"ckpt-20.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-10.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-20.dtf\"\n");

	/* corruptions, each reported with what failed */
	char bad[512];
	snprintf(bad, sizeof(bad), "%s/bad.dtf", tmp);
	raw[koff + 5] ^= 1;
	tu_write_bytes(NULL, bad, raw, CKPT_BYTES);
	verify("bad.dtf", "bad.dtf: tensor 'dense_1/kernel': CRC-32C mismatch");
	raw[koff + 5] ^= 1;
	raw[30] ^= 1; /* the step field */
	tu_write_bytes(NULL, bad, raw, CKPT_BYTES);
	verify("bad.dtf", "header CRC-32C mismatch");
	raw[30] ^= 1;
	tu_write_bytes(NULL, bad, raw, 1000);
	verify("bad.dtf", "bad.dtf: truncated: 1000 of 16128 bytes");
	tu_write_bytes(NULL, bad, "hello", 5);
	verify("bad.dtf", "not a checkpoint");
	free(raw);
}
END_TEST

START_TEST(keep_deletes_older_checkpoints)
{
	ck_assert_int_eq(train(1, "", "keep", "--set checkpoint.keep=2 "
			       "--set train.max_steps=45", "keep.log"), 0);
	/* every 10 steps and at the end: 10 20 30 40 45, the newest 2 kept */
	ck_assert(!tu_exists(tmp, "keep/ckpt-30.dtf"));
	verify("keep/ckpt-40.dtf", NULL);
	verify("keep/ckpt-45.dtf", NULL);
	ck_assert(!tu_exists(tmp, "keep/ckpt-45.dtf.tmp"));
	ck_assert_str_eq(tu_slurp(tmp, "keep/checkpoint"),
			 "model_checkpoint_path: \"ckpt-45.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-40.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-45.dtf\"\n");
}
END_TEST

/* ---- exact resume ------------------------------------------------------- */

START_TEST(exact_resume_one_rank)
{
	/* stop after 27 steps (mid-epoch), resume for the other 33 */
	ck_assert_int_eq(train(1, "", "r1", "--set train.max_steps=27", "r1a.log"), 0);
	ck_assert_int_eq(train(1, "", "r1", "--resume --export-variables @/RES1", "r1b.log"), 0);
	ck_assert_log("r1b.log", "resuming from");
	ck_assert_log("r1b.log", "/r1/ckpt-27.dtf: step 27, epoch 1, batch 27 of 30");
	assert_same_vars("RES1", "REF1");
}
END_TEST

/* Every optimizer's slots are saved and restored (rmsprop keeps three,
 * adamw two), and the schedule, weight decay and clipping resume at the
 * right step.  cosine_decay gets explicit decay_steps: its default (the
 * run's total steps) differs between a run cut short by max_steps and the
 * reference. */
START_TEST(exact_resume_every_optimizer_and_schedule)
{
	static const char *const opts[] = {
		"--set train.optimizer='{rmsprop: {learning_rate: 0.003, momentum: 0.5, centered: true}}' "
		"--set train.schedule='{cosine_decay: {warmup_steps: 10, decay_steps: 50}}' "
		"--set train.clipnorm=0.5",
		"--set train.optimizer='{adamw: {weight_decay: 0.1}}' "
		"--set train.schedule='{piecewise_constant: {boundaries: [20, 40], values: [0.02, 0.01, 0.005]}}' "
		"--set train.weight_decay=0.01",
	};
	for (int k = 0; k < 2; k++) {
		char a[1024], b[1024], c[1024], dir[16], ref[16];
		snprintf(dir, sizeof(dir), "o%d", k);
		snprintf(ref, sizeof(ref), "o%dref", k);
		snprintf(a, sizeof(a), "%s --export-variables @/OREF%d", opts[k], k);
		snprintf(b, sizeof(b), "%s --set train.max_steps=27", opts[k]);
		snprintf(c, sizeof(c), "%s --resume --export-variables @/ORES%d", opts[k], k);
		ck_assert_int_eq(train(1, "", ref, a, "o-ref.log"), 0);
		ck_assert_int_eq(train(1, "", dir, b, "o-a.log"), 0);
		ck_assert_int_eq(train(1, "", dir, c, "o-b.log"), 0);
		ck_assert_log("o-b.log", "resuming from");
		char ra[16], rb[16];
		snprintf(ra, sizeof(ra), "ORES%d", k);
		snprintf(rb, sizeof(rb), "OREF%d", k);
		assert_same_vars(ra, rb);
	}
}
END_TEST

START_TEST(sigterm_on_rank_1_exits_75_and_resumes_exactly)
{
	ck_assert_int_eq(train(2, "", "ref2", "--export-variables @/REF2", "ref2.log"), 0);
	/* SIGTERM reaches rank 1 only, at the start of step 33 */
	int st = train(2, "DTF_FAULT=term:rank=1:step=33", "sig", "", "siga.log");
	ck_assert_int_eq(st, 75);
	/* agreed at the next step boundary: both ranks stop after step 34 */
	ck_assert_log("siga.log", "notice: stop requested by SIGTERM on rank 1 at step 34: checkpoint of step 34 written (");
	ck_assert(strstr(tu_slurp(tmp, "siga.log"), "error:") == NULL);
	verify("sig/ckpt-34.dtf", NULL);
	/* the step counter and Adam's t continue from 34 */
	ck_assert_int_eq(train(2, "", "sig", "--resume --export-variables @/RES2", "sigb.log"), 0);
	ck_assert_log("sigb.log", "/sig/ckpt-34.dtf: step 34, epoch 2, batch 4 of 30");
	ck_assert_log("sigb.log", "step 40/60  epoch 2");
	ck_assert_log("sigb.log", "step 60/60  epoch 2");
	ck_assert(strstr(tu_slurp(tmp, "sigb.log"), "step 30/60") == NULL);
	assert_same_vars("RES2", "REF2");
}
END_TEST

/* ---- crashes ------------------------------------------------------------ */

START_TEST(sigkill_rank_1_under_dtf_launch_equals_uninterrupted)
{
	if (!tu_exists(tmp, "REF2"))
		ck_assert_int_eq(train(2, "", "ref2", "--export-variables @/REF2", "ref2.log"), 0);
	int st = tu_run("DTF_FAULT=kill:rank=1:step=30 timeout 120 %s/dtf-launch "
			"--np 2 --max-restarts 2 --delay 0 -- -t 1 "
			"--set checkpoint.dir=%s/launch --export-variables %s/LAUNCH "
			"%s/job.yaml >/dev/null 2>%s/launch.log",
			tu_build_root(), tmp, tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tu_slurp(tmp, "launch.log"));
	ck_assert_log("launch.log", "dtf-launch: attempt 1 of 3: ");
	ck_assert_log("launch.log", "rank 1");
	ck_assert_log("launch.log", "attempt 1 ended with status 137 (a process was killed by SIGKILL); restarting");
	ck_assert_log("launch.log", "dtf-launch: attempt 2 of 3: ");
	ck_assert_log("launch.log", "dtf-launch: attempt 2 ended: done");
	assert_same_vars("LAUNCH", "REF2");
}
END_TEST

START_TEST(sigkill_during_checkpoint_write_keeps_previous)
{
	int st = train(1, "DTF_FAULT=kill-in-checkpoint-write:step=20", "kw", "",
		       "kwa.log");
	ck_assert_int_ne(st, 0);
	ck_assert_int_ne(st, 75);
	ck_assert(!tu_exists(tmp, "kw/ckpt-20.dtf"));
	long half = tu_file_size(tmp, "kw/ckpt-20.dtf.tmp");
	ck_assert_msg(half > 0 && half < CKPT_BYTES, "temp file of %ld bytes", half);
	verify("kw/ckpt-10.dtf", NULL);
	ck_assert_str_eq(tu_slurp(tmp, "kw/checkpoint"),
			 "model_checkpoint_path: \"ckpt-10.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-10.dtf\"\n");
	ck_assert_int_eq(train(1, "", "kw", "--resume --export-variables @/KW", "kwb.log"), 0);
	ck_assert_log("kwb.log", "/kw/ckpt-10.dtf: step 10");
	assert_same_vars("KW", "REF1");
	ck_assert(!tu_exists(tmp, "kw/ckpt-20.dtf.tmp")); /* replaced, then renamed */
}
END_TEST

START_TEST(truncated_newest_falls_back_to_previous)
{
	tu_run("cp -r %s/ref1 %s/trunc", tmp, tmp);
	char path[512];
	snprintf(path, sizeof(path), "%s/trunc/ckpt-60.dtf", tmp);
	ck_assert_int_eq(truncate(path, CKPT_BYTES / 2), 0);
	ck_assert_int_eq(train(1, "", "trunc", "--resume --export-variables @/TRUNC",
			       "trunc.log"), 0);
	ck_assert_log("trunc.log", "/trunc/ckpt-60.dtf: truncated: 8064 of 16128 bytes; trying the previous checkpoint");
	ck_assert_log("trunc.log", "/trunc/ckpt-50.dtf: step 50");
	ck_assert(tu_exists(tmp, "trunc/ckpt-60.dtf.corrupt"));
	assert_same_vars("TRUNC", "REF1");
	verify("trunc/ckpt-60.dtf", NULL); /* written again */
}
END_TEST

START_TEST(no_verifying_checkpoint_exits_4_unless_fresh_start_allowed)
{
	tu_run("mkdir -p %s/none && printf 'junk' > %s/none/ckpt-10.dtf && "
	       "head -c 100 %s/ref1/ckpt-60.dtf > %s/none/ckpt-60.dtf",
	       tmp, tmp, tmp, tmp);
	ck_assert_int_eq(train(2, "", "none", "--resume", "none.log"), 4);
	ck_assert_log("none.log", "/none/ckpt-60.dtf: truncated: 100 of 16128 bytes; trying the previous checkpoint");
	ck_assert_log("none.log", "/none/ckpt-10.dtf: not a checkpoint (too short); no older checkpoint");
	ck_assert_log("none.log", "no checkpoint in ");
	ck_assert_log("none.log", "/none verifies (2 tried)");
	/* the bad files were moved aside: the same resume again still
	 * finds none that verifies, and a fresh start needs the flag */
	ck_assert(tu_exists(tmp, "none/ckpt-60.dtf.corrupt"));
	ck_assert_int_eq(train(1, "", "none", "--resume --set train.max_steps=5",
			       "none2.log"), 4);
	ck_assert_log("none2.log", "/none verifies: 2 set aside as *.corrupt by an earlier resume, none other");
	ck_assert_int_eq(train(1, "", "none", "--resume --allow-fresh-start "
			       "--set train.max_steps=5", "none2b.log"), 0);
	ck_assert_log("none2b.log", "(2 set aside as *.corrupt): starting from step 0 (--allow-fresh-start)");
	/* a directory without checkpoints is a fresh start */
	ck_assert_int_eq(train(1, "", "none_empty", "--resume --set train.max_steps=5",
			       "none2c.log"), 0);
	ck_assert_log("none2c.log", "starting from step 0");
	tu_run("rm %s/none/ckpt-*.dtf && printf 'junk' > %s/none/ckpt-99.dtf", tmp,
	       tmp);
	ck_assert_int_eq(train(1, "", "none", "--resume --allow-fresh-start "
			       "--set train.max_steps=5", "none3.log"), 0);
	ck_assert_log("none3.log", "verifies: starting from step 0 (--allow-fresh-start)");
}
END_TEST

START_TEST(model_mismatch_lists_differences)
{
	tu_write_file(tmp, "job32.yaml", job_text, tmp, 32);
	int st = tu_mpirun(1, NULL, tmp, "mm.log",
			   "-t 1 --resume --set checkpoint.dir=%s/ref1 "
			   "%s/job32.yaml",
			   tmp, tmp);
	ck_assert_int_eq(st, 4);
	ck_assert_log("mm.log", "/ref1/ckpt-60.dtf: the job's model differs from the checkpoint's (9 differences):");
	ck_assert_log("mm.log", "\n  dense_1/kernel: shape (64, 16) in the checkpoint, (64, 32) in the job");
	ck_assert_log("mm.log", "\n  logits/kernel: shape (16, 4) in the checkpoint, (32, 4) in the job");
	ck_assert_log("mm.log", "\n  optimizer/m/dense_1/bias: shape (16) in the checkpoint, (32) in the job");
	verify("ref1/ckpt-60.dtf", NULL); /* a mismatch is not corruption */
}
END_TEST

START_TEST(full_disk_reported_previous_intact)
{
	tu_run("cp -r %s/ref1 %s/full && rm %s/full/ckpt-60.dtf %s/full/ckpt-50.dtf",
	       tmp, tmp, tmp, tmp);
	/* RLIMIT_FSIZE of 10 blocks (5 or 10 KiB) on dtf-train only */
	int st = tu_run("timeout 60 mpirun -np 1 sh -c 'ulimit -f 10; exec %s/dtf-train "
			"-t 1 --resume --set checkpoint.dir=%s/full %s/job.yaml' "
			">/dev/null 2>%s/full.log",
			tu_build_root(), tmp, tmp, tmp);
	ck_assert_int_eq(st, 4);
	ck_assert_log("full.log", "error: saving the checkpoint of step 50 failed: ");
	ck_assert_log("full.log", "/full/ckpt-50.dtf.tmp: write failed after ");
	ck_assert_log("full.log", "File too large; the previous checkpoint is intact: ");
	ck_assert(!tu_exists(tmp, "full/ckpt-50.dtf"));
	ck_assert(!tu_exists(tmp, "full/ckpt-50.dtf.tmp"));
	verify("full/ckpt-40.dtf", NULL);
	ck_assert_int_eq(train(1, "", "full", "--resume --export-variables @/FULL",
			       "full2.log"), 0);
	assert_same_vars("FULL", "REF1");
}
END_TEST

START_TEST(stuck_rank_ends_job_within_timeout)
{
	int st = train(2, "DTF_FAULT=hang:rank=1:step=5", "hang",
		       "--set fault.timeout_seconds=2", "hang.log");
	ck_assert_msg(st != 0 && st != 124, "status %d", st);
	ck_assert_log("hang.log", "error: no progress for 2 s (fault.timeout_seconds 2) in the training step at step 5");
}
END_TEST

START_TEST(stuck_rank_ends_job_when_mpi_abort_hangs)
{
	/* MPI_Abort that never returns (an mpirun that does not answer):
	 * each rank's watchdog still ends it 3 s after its abort, and the
	 * job with it */
	char env[1024];
	snprintf(env, sizeof(env),
		 "DTF_FAULT=hang:rank=1:step=5 "
		 "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" "
		 "LD_PRELOAD=%s/tests/libmpi_abort_hang.so",
		 tu_build_root());
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int st = train(2, env, "abort_hang", "--set fault.timeout_seconds=2",
		       "abort_hang.log");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) +
		   1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	ck_assert_msg(st == 1, "status %d", st);
	ck_assert_log("abort_hang.log", "error: no progress for 2 s (fault.timeout_seconds 2) in the training step at step 5");
	ck_assert_log("abort_hang.log", "] error: MPI_Abort did not end this rank within 3 s; exiting with status 1\n");
	/* start-up and 5 steps, the watchdog's 2 s, the backstop's 3 s,
	 * mpirun ending the other rank */
	ck_assert_msg(s < 30.0, "%.1f s", s);
}
END_TEST

START_TEST(dead_rank_ends_job_naming_it)
{
	int st = train(2, "DTF_FAULT=kill:rank=1:step=5", "dead", "", "dead.log");
	ck_assert_msg(st != 0 && st != 124 && st != 75, "status %d", st);
	ck_assert_log("dead.log", "process rank 1 with PID");
	ck_assert_log("dead.log", "exited on signal 9 (Killed)");
}
END_TEST

START_TEST(every_seconds_follows_rank_0_clock)
{
	/* rank 1 would never see the time due on its own: only rank 0's
	 * clock counts, through the step's status agreement */
	ck_assert_int_eq(train(2, "", "sec", "--set checkpoint.every_steps=0 "
			       "--set checkpoint.every_seconds=0.000001 "
			       "--set checkpoint.keep=100 --set train.max_steps=8",
			       "sec.log"), 0);
	for (int s = 1; s <= 8; s++) {
		char name[64];
		snprintf(name, sizeof(name), "sec/ckpt-%d.dtf", s);
		verify(name, NULL);
	}
}
END_TEST

/* checkpoint.keep cannot delete a file (immutable): a warning naming it,
 * the file stays, the run goes on. */
START_TEST(keep_rotation_failure_warns)
{
	ck_assert_int_eq(train(1, "", "rot", "--set train.max_steps=10", "rot1.log"), 0);
	if (tu_run("chattr +i %s/rot/ckpt-10.dtf 2>/dev/null", tmp) != 0)
		return; /* no immutable files on this filesystem */
	int st = train(1, "", "rot", "--resume --set checkpoint.keep=1 "
		       "--set train.max_steps=20", "rot2.log");
	tu_run("chattr -i %s/rot/ckpt-10.dtf", tmp);
	ck_assert_int_eq(st, 0);
	char want[700];
	snprintf(want, sizeof(want), "warning: checkpoint.keep 1: cannot delete "
		 "%s/rot/ckpt-10.dtf: Operation not permitted", tmp);
	ck_assert_log("rot2.log", want);
	ck_assert(tu_exists(tmp, "rot/ckpt-10.dtf"));
	ck_assert(tu_exists(tmp, "rot/ckpt-20.dtf"));
}
END_TEST

/* A checkpoint policy (the job's every_steps: 10) without checkpoint.dir
 * trains, and says once, before the first step, that nothing is saved. */
START_TEST(policy_without_dir_warns)
{
	int st = tu_mpirun(2, NULL, tmp, "nodir.log",
			   "--set train.max_steps=12 %s/job.yaml", tmp);
	ck_assert_int_eq(st, 0);
	ck_assert_log("nodir.log",
		      "warning: checkpoint.every_steps is set but checkpoint.dir "
		      "is not: this run writes no checkpoints");
	const char *log = tu_slurp(tmp, "nodir.log");
	const char *w = strstr(log, "checkpoint.every_steps is set");
	ck_assert(strstr(w + 1, "checkpoint.every_steps is set") == NULL);
	ck_assert(w < strstr(log, "step 10/12"));
}
END_TEST

START_TEST(usage_errors)
{
	int st = tu_mpirun(1, NULL, tmp, "u1.log",
			   "--resume %s/job.yaml", tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("u1.log", "resuming needs checkpoint.dir in the job file");
	st = tu_mpirun(1, NULL, tmp, "u2.log",
		       "--set checkpoint.every_step=3 %s/job.yaml", tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("u2.log", "every_steps");
	st = tu_mpirun(1, "DTF_FAULT=explode", tmp, "u3.log",
		       "--set checkpoint.dir=%s/u %s/job.yaml", tmp, tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("u3.log", "DTF_FAULT='explode': expected ACTION");
	/* --allow-fresh-start only means something for a resume */
	st = tu_mpirun(1, NULL, tmp, "u4.log",
		       "--allow-fresh-start --set checkpoint.dir=%s/u "
		       "%s/job.yaml",
		       tmp, tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("u4.log", "error: --allow-fresh-start applies to a resume "
		      "only: give --resume too (or set checkpoint.resume: auto)\n");
	st = tu_run("%s/dtf-train -n -t 2000 %s/job.yaml >/dev/null 2>%s/u5.log",
		    tu_build_root(), tmp, tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("u5.log", "dtf-train: --threads: expected an integer from 1 "
		      "to 1024, got '2000'\n");
	/* checkpoint.dir is made with its parents (mkdir -p) ... */
	ck_assert_int_eq(train(1, "", "deep/er", "--set train.max_steps=5",
			       "u6.log"), 0);
	ck_assert_int_eq(tu_file_size(tmp, "deep/er/ckpt-5.dtf"), CKPT_BYTES);
	/* ... and a file in the way is a checkpoint error, exit status 4 */
	tu_run("printf x > %s/afile", tmp);
	ck_assert_int_eq(train(1, "", "afile/ck", "--set train.max_steps=5",
			       "u7.log"), 4);
	ck_assert_log("u7.log", "/afile/ck: cannot create the checkpoint "
		      "directory: ");
	ck_assert_log("u7.log", "/afile is not a directory\n");
}
END_TEST

START_TEST(config_keys_and_defaults)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmp);
	struct dtf_job *job;
	const char *none[] = {"checkpoint={}"};
	ck_assert_int_eq(dtf_job_load(path, none, 1, &job), 0);
	ck_assert_ptr_null(job->checkpoint.dir);
	ck_assert_int_eq(job->checkpoint.every_steps, 0);
	ck_assert(job->checkpoint.every_seconds == 0.0);
	ck_assert_int_eq(job->checkpoint.keep, 5);
	ck_assert_int_eq(job->checkpoint.resume, 0);
	ck_assert(job->fault.timeout_seconds == 300.0);
	dtf_job_free(job);
	const char *set[] = {"checkpoint.dir=d", "checkpoint.resume=auto",
			     "checkpoint.every_seconds=1.5",
			     "fault.timeout_seconds=20"};
	ck_assert_int_eq(dtf_job_load(path, set, 4, &job), 0);
	ck_assert_str_eq(job->checkpoint.dir, "d");
	ck_assert_int_eq(job->checkpoint.resume, 1);
	ck_assert(job->checkpoint.every_seconds == 1.5);
	ck_assert(job->fault.timeout_seconds == 20.0);
	dtf_job_free(job);
	const char *bad[] = {"checkpoint.keep=0"};
	ck_assert_int_eq(dtf_job_load(path, bad, 1, &job), -DTF_ERR_CONFIG);
	const char *bad2[] = {"checkpoint.resume=always"};
	ck_assert_int_eq(dtf_job_load(path, bad2, 1, &job), -DTF_ERR_CONFIG);
	ck_assert_msg(strstr(dtf_error_msg(), "checkpoint.resume") != NULL,
		      "%s", dtf_error_msg());
}
END_TEST

/* ---- elastic resume ------------------------------------------------------ */

struct idset {
	uint64_t v[1024];
	int n;
};

static int in_set(void *ctx, uint64_t id)
{
	const struct idset *s = ctx;
	for (int i = 0; i < s->n; i++)
		if (s->v[i] == id)
			return 1;
	return 0;
}

/* Read `steps` batches (all when < 0) of rank `rank` of `world` in epoch 1
 * with `skip` left out; add the ids to `into`. */
static void read_ids(const struct dtf_job *job, int rank, int world,
		     int batch, int steps, struct idset *skip,
		     struct dtf_elastic *el, struct idset *into)
{
	char **files;
	int nfiles;
	ck_assert_int_eq(dtf_glob_files(job->data.train_files, &files, &nfiles), 0);
	struct dtf_pipeline_opts po = {
		.files = (const char *const *)files, .nfiles = nfiles,
		.rank = rank, .world = world, .features = job->data.features,
		.nfeatures = job->data.nfeatures, .batch = batch,
		.shuffle_buffer = 64, .seed = job->seed};
	struct dtf_pipeline *p;
	ck_assert_int_eq(dtf_pipeline_open(&po, &p), 0);
	static float img[64 * 64];
	static int32_t lab[64];
	void *dst[2] = {img, lab};
	uint64_t ids[64];
	int64_t remaining = -1;
	if (el)
		ck_assert_int_eq(dtf_elastic_start_epoch(el, p, 1, dst, ids, &remaining), 0);
	else {
		dtf_pipeline_set_exclude(p, in_set, skip);
		ck_assert_int_eq(dtf_pipeline_begin_epoch(p, 1), 0);
	}
	int got = 0, count;
	for (int s = 0; steps < 0 || s < steps; s++) {
		ck_assert_int_eq(dtf_pipeline_next(p, dst, ids, &count), 0);
		if (count == 0)
			break;
		for (int i = 0; i < count; i++)
			into->v[into->n++] = ids[i];
		got += count;
	}
	if (el)
		ck_assert_int_eq(remaining, got);
	dtf_pipeline_free(p);
	dtf_free(files);
}

START_TEST(elastic_resume_reads_every_record_once)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmp);
	struct dtf_job *job;
	ck_assert_int_eq(dtf_job_load(path, NULL, 0, &job), 0);
	/* epoch 2 ran 3 steps on 1 rank at batch 16, then 4 on 2 ranks at 8,
	 * and now goes on with 3 ranks at batch 5 */
	struct dtf_ckpt_position pos = {
		.step = 37, .epoch = 1, .step_in_epoch = 7, .world = 2,
		.per_replica_batch = 8, .global_batch = 16, .nprev = 1,
		.prev = {{1, 16, 3}}};
	ck_assert(dtf_elastic_needed(&pos, 2, 8)); /* earlier segment */
	pos.nprev = 0;
	ck_assert(!dtf_elastic_needed(&pos, 2, 8));
	ck_assert(dtf_elastic_needed(&pos, 1, 16));
	pos.nprev = 1;
	struct dtf_elastic *el;
	ck_assert_msg(dtf_elastic_new(job, &pos, &el) == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(dtf_elastic_consumed(el), 3 * 16 + 4 * 16);
	/* the consumed records, replayed here segment by segment */
	static struct idset seen, none, after;
	seen.n = none.n = after.n = 0;
	read_ids(job, 0, 1, 16, 3, &none, NULL, &seen);
	struct idset first = seen;
	read_ids(job, 0, 2, 8, 4, &first, NULL, &seen);
	read_ids(job, 1, 2, 8, 4, &first, NULL, &seen);
	ck_assert_int_eq(seen.n, 112);
	for (int r = 0; r < 3; r++)
		read_ids(job, r, 3, 5, -1, NULL, el, &after);
	ck_assert_int_eq(after.n, 480 - 112);
	/* nothing read twice, nothing consumed read again, all 480 seen */
	for (int i = 0; i < after.n; i++) {
		ck_assert(!in_set(&seen, after.v[i]));
		for (int k = i + 1; k < after.n; k++)
			ck_assert(after.v[i] != after.v[k]);
	}
	dtf_elastic_free(el);
	dtf_job_free(job);
}
END_TEST

START_TEST(elastic_resume_two_ranks_to_one)
{
	ck_assert_int_eq(train(2, "DTF_FAULT=term:rank=1:step=33", "el", "",
			       "ela.log"), 75);
	/* the same checkpoint, resumed on 2 ranks at per-replica batch 16 */
	ck_assert_int_eq(tu_run("cp -r %s/el %s/el2", tmp, tmp), 0);
	ck_assert_int_eq(train(2, "", "el2", "--resume --set train.batch_size=32",
			       "elc.log"), 0);
	ck_assert_int_eq(train(1, "", "el", "--resume", "elb.log"), 0);
	ck_assert_log("elb.log", "notice: elastic resume at step 34: the checkpoint was written by 2 rank(s) at per-replica batch 8 (global 16), "
		      "this run has 1 at 16 (global 16); the 64 records of epoch 2 read before are left out, 26 steps remain in it");
	ck_assert_log("elb.log", "step 40/60  epoch 2");
	ck_assert_log("elb.log", "step 60/60  epoch 2");
	/* the finished 1-rank run resumed on 2 ranks: nothing is left, and
	 * the readers the elastic filter steers stop before it is freed */
	ck_assert_int_eq(train(2, "", "el", "--resume", "eld.log"), 0);
	ck_assert_log("eld.log", "done: 0 steps");
	/* the data line says once how this run shards, as a fresh run on
	 * that many ranks does: the replay of the 2 ranks' reading that
	 * finds the records consumed logs nothing of its own */
	ck_assert_int_eq(count_lines("ela.log", "data.train: 2 files for 2 "
				     "ranks: shard_policy auto shards by file"),
			 1);
	ck_assert_int_eq(count_lines("ela.log", "shard_policy"), 1);
	ck_assert_int_eq(count_lines("ref1.log", "shard_policy"), 0);
	ck_assert_int_eq(count_lines("elb.log", "shard_policy"),
			 count_lines("ref1.log", "shard_policy"));
	ck_assert_log("elc.log", "notice: elastic resume at step 34: the "
		      "checkpoint was written by 2 rank(s) at per-replica "
		      "batch 8 (global 16), this run has 2 at 16 (global 32)");
	ck_assert_int_eq(count_lines("elc.log", "data.train: 2 files for 2 "
				     "ranks: shard_policy auto shards by file"),
			 1);
	ck_assert_int_eq(count_lines("elc.log", "shard_policy"), 1);
	struct dtf_ckpt_file f;
	char path[512];
	snprintf(path, sizeof(path), "%s/el/ckpt-40.dtf", tmp);
	ck_assert_int_eq(dtf_ckpt_file_read(path, &f), 0);
	/* the first 4 steps of epoch 2 ran on 2 ranks: one earlier segment */
	ck_assert_int_eq(f.pos.nprev, 1);
	ck_assert_int_eq(f.pos.step_in_epoch, 10);
	ck_assert_int_eq(f.pos.world, 1);
	const struct dtf_ckpt_tensor *t = dtf_ckpt_file_find(&f, "pipeline/segments");
	int64_t seg[3];
	memcpy(seg, f.data + t->offset, sizeof(seg));
	ck_assert_int_eq(seg[0], 2);
	ck_assert_int_eq(seg[1], 8);
	ck_assert_int_eq(seg[2], 4);
	dtf_ckpt_file_deinit(&f);
}
END_TEST

START_TEST(dtf_launch_min_np_restarts_with_fewer_ranks)
{
	int st = tu_run("DTF_FAULT=kill:rank=1:step=30 timeout 120 %s/dtf-launch "
			"--np 2 --min-np 1 --max-restarts 1 --delay 0 -- -t 1 "
			"--set checkpoint.dir=%s/minnp %s/job.yaml >/dev/null "
			"2>%s/minnp.log", tu_build_root(), tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tu_slurp(tmp, "minnp.log"));
	ck_assert_log("minnp.log", "restarting from the newest checkpoint with 1 rank(s) in 0 s");
	ck_assert_log("minnp.log", "dtf-launch: attempt 2 of 2: mpirun -n 1 ");
	ck_assert_log("minnp.log", "notice: elastic resume at step 30");
	ck_assert_log("minnp.log", "step 60/60");
}
END_TEST

START_TEST(dtf_launch_gives_up_and_says_why)
{
	int st = tu_run("DTF_FAULT=exit:rank=0:step=3,exit:rank=0:step=3:attempt=2 "
			"timeout 120 %s/dtf-launch --np 1 --max-restarts 1 --delay 0 "
			"-- -t 1 --set checkpoint.dir=%s/giveup %s/job.yaml >/dev/null "
			"2>%s/giveup.log", tu_build_root(), tmp, tmp, tmp);
	ck_assert_int_ne(st, 0);
	ck_assert_log("giveup.log", "dtf-launch: attempt 2 of 2: ");
	ck_assert_log("giveup.log", "dtf-launch: giving up after 2 attempt(s): the last ended with status ");
	/* a job-file error is not retried */
	st = tu_run("timeout 60 %s/dtf-launch --np 1 --max-restarts 3 -- "
		    "--set train.epochs=0 %s/job.yaml >/dev/null 2>%s/nore.log",
		    tu_build_root(), tmp, tmp);
	ck_assert_int_eq(st, 2);
	ck_assert_log("nore.log", "attempt 1 ended with status 2 (a usage or job-file error); a restart would fail the same way");
}
END_TEST

START_TEST(dtf_launch_forwards_sigterm_as_usr1_and_exits_75)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "exec %s/dtf-launch --np 2 -- -t 1 --set "
		 "checkpoint.dir=%s/fwd --set train.max_steps=0 --set "
		 "train.epochs=100000 %s/job.yaml >/dev/null 2>%s/fwd.log",
		 tu_build_root(), tmp, tmp, tmp);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* once training runs, signal dtf-launch; give it 60 s to end */
	for (int i = 0; i < 100 && !tu_exists(tmp, "fwd/ckpt-10.dtf"); i++)
		usleep(100000);
	kill(pid, SIGTERM);
	int st = 0, i;
	for (i = 0; i < 600 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	if (i == 600) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		ck_abort_msg("dtf-launch did not end within 60 s");
	}
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 75, "status 0x%x:\n%s",
		      st, tu_slurp(tmp, "fwd.log"));
	/* mpirun forwards it to the ranks; rank 0 names those that got it */
	ck_assert_log("fwd.log", "notice: stop requested by SIGUSR1 on rank");
	ck_assert_log("fwd.log", "attempt 1 ended with status 75 (stopped by a signal after writing a checkpoint) after dtf-launch was signalled; not restarting");
}
END_TEST

/* ---- signals while the job starts ----------------------------------------- */

static void light_setup(void)
{
	tu_tmpdir_create(tmp, sizeof(tmp), "dtf-ckpt-sig");
	signal(SIGPIPE, SIG_IGN); /* a dead reader fails the write, not us */
	tu_synth(tmp, "train", 480, 2, "8,8,1", 1);
	tu_write_file(tmp, "job.yaml", job_text, tmp, 16);
}

static void light_teardown(void) { tu_tmpdir_remove(tmp); }

/* 1 while `sig` is pending for process `pid` (not yet delivered). */
static int signal_pending(pid_t pid, int sig)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	int pending = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long mask;
		if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
		     sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
		    (mask >> (sig - 1) & 1))
			pending = 1;
	}
	if (f)
		fclose(f);
	return pending;
}

/*
 * Starts plain dtf-train on the job file TMP/fifo.yaml, a FIFO, its stderr
 * in TMP/<log>, and returns its PID once it is reading the job (past
 * MPI_Init, blocked in read); *wfd: the FIFO's writing end.
 */
static pid_t start_on_fifo(const char *log, int *wfd)
{
	char fifo[512], logp[512], exe[512];
	tu_path(fifo, sizeof(fifo), tmp, "fifo.yaml");
	tu_path(logp, sizeof(logp), tmp, log);
	snprintf(exe, sizeof(exe), "%s/dtf-train", tu_build_root());
	unlink(fifo);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int nul = open("/dev/null", O_WRONLY);
		if (fd < 0 || nul < 0)
			_exit(127);
		dup2(fd, 2);
		dup2(nul, 1);
		execl(exe, "dtf-train", "-t", "1", fifo, (char *)NULL);
		_exit(127);
	}
	/* a writer can open the FIFO without blocking once the reader has */
	int fd = -1;
	for (int i = 0; i < 600 && fd < 0; i++) {
		fd = open(fifo, O_WRONLY | O_NONBLOCK);
		if (fd < 0)
			usleep(50000);
	}
	if (fd < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		ck_abort_msg("dtf-train did not open its job file within 30 s");
	}
	*wfd = fd;
	return pid;
}

/* Sends `sig` to pid and waits until it is delivered. */
static void send_and_wait(pid_t pid, int sig)
{
	ck_assert_int_eq(kill(pid, sig), 0);
	for (int i = 0; i < 200 && signal_pending(pid, sig); i++)
		usleep(10000);
	usleep(50000); /* the handler has run */
}

static int wait_for(pid_t pid, int seconds)
{
	int st = 0, i;
	for (i = 0; i < seconds * 10 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	if (i == seconds * 10) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		ck_abort_msg("dtf-train did not end within %d s", seconds);
	}
	return st;
}

START_TEST(sigterm_while_starting_stops_with_the_notice)
{
	/* SIGTERM arrives while dtf-train reads its job file (after
	 * MPI_Init, before any handler of the training's own) */
	int wfd;
	pid_t pid = start_on_fifo("early.log", &wfd);
	send_and_wait(pid, SIGTERM);
	const char *text = tu_slurp(tmp, "job.yaml");
	/* (fails when the signal killed it: the status below says so) */
	ssize_t w = write(wfd, text, strlen(text));
	(void)w;
	close(wfd);
	int st = wait_for(pid, 60);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 75,
		      "status 0x%x:\n%s", st, tu_slurp(tmp, "early.log"));
	/* stopped at the first step boundary, as a later signal would be */
	ck_assert_log("early.log", "notice: stop requested by SIGTERM on rank 0 at step 1: nothing saved (no checkpoint.dir); exit status 75");
	tu_assert_not_log(tmp, "early.log", "error:");
}
END_TEST

START_TEST(second_sigterm_ends_at_once_saying_so)
{
	int wfd;
	pid_t pid = start_on_fifo("twice.log", &wfd);
	send_and_wait(pid, SIGTERM);
	send_and_wait(pid, SIGTERM);
	int st = wait_for(pid, 30);
	close(wfd);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
		      "status 0x%x:\n%s", st, tu_slurp(tmp, "twice.log"));
	ck_assert_log("twice.log", "warning: second SIGTERM: ending at once, without waiting for the stop's checkpoint (killed by SIGTERM: exit status 143 in a shell)");
	/* SIGINT counts on its own: one SIGINT after a SIGTERM is the
	 * first SIGINT, a second one ends it */
	pid = start_on_fifo("int.log", &wfd);
	send_and_wait(pid, SIGTERM);
	send_and_wait(pid, SIGINT);
	ck_assert_int_eq(waitpid(pid, &st, WNOHANG), 0);
	send_and_wait(pid, SIGINT);
	st = wait_for(pid, 30);
	close(wfd);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT,
		      "status 0x%x:\n%s", st, tu_slurp(tmp, "int.log"));
	ck_assert_log("int.log", "warning: second SIGINT: ending at once");
}
END_TEST

/* The PID of the dtf-train of world rank `rank` whose command line holds
 * `tag`, or -1 (read from /proc: cmdline and OMPI_COMM_WORLD_RANK). */
static pid_t rank_pid(const char *tag, int rank)
{
	char want[64];
	snprintf(want, sizeof(want), "OMPI_COMM_WORLD_RANK=%d", rank);
	DIR *proc = opendir("/proc");
	struct dirent *de;
	while (proc && (de = readdir(proc))) {
		int pid = atoi(de->d_name);
		char path[300], buf[8192];
		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		int has_tag = 0, is_train = 0;
		for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
			buf[n] = 0;
			has_tag |= strstr(buf + i, tag) != NULL;
			is_train |= strstr(buf + i, "/dtf-train") != NULL && i == 0;
		}
		if (!has_tag || !is_train)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/environ", pid);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
			if (!strcmp(buf + i, want)) {
				closedir(proc);
				return pid;
			}
	}
	if (proc)
		closedir(proc);
	return -1;
}

START_TEST(sigterm_to_a_ps_rank_ends_the_job)
{
	/* a parameter server has no step boundary to stop at: SIGTERM ends
	 * it at once (its default action), and mpirun the job */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "exec timeout 120 mpirun -np 3 %s/dtf-train -t 1 --set "
		 "strategy.type=parameter_server --set train.max_steps=0 --set "
		 "train.epochs=100000 --set logging.every_steps=10 %s/job.yaml "
		 ">/dev/null 2>%s/ps.log",
		 tu_build_root(), tmp, tmp);
	tu_write_file(tmp, "ps.log", "%s", "");
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 600 && !strstr(tu_slurp(tmp, "ps.log"), "step 20/"); i++)
		usleep(100000);
	pid_t ps = rank_pid(tmp, 2); /* the ps: the last rank */
	ck_assert_msg(ps > 0, "no rank 2:\n%s", tu_slurp(tmp, "ps.log"));
	ck_assert_int_eq(kill(ps, SIGTERM), 0);
	int st = wait_for(pid, 60);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 124,
		      "status 0x%x:\n%s", st, tu_slurp(tmp, "ps.log"));
	tu_assert_log(tmp, "ps.log", "rank 2 with PID");
	tu_assert_log(tmp, "ps.log", "exited on signal 15 (Terminated)");
}
END_TEST

/* ---- resume: what the start-up says ---------------------------------------- */

START_TEST(resume_lines_after_a_batch_change_and_past_max_steps)
{
	/* 34 steps on 1 rank at global batch 16: epoch 2, 4 batches in */
	ck_assert_int_eq(train(1, "", "rb", "--set train.max_steps=34", "rba.log"), 0);
	ck_assert(tu_exists(tmp, "rb/ckpt-34.dtf"));
	ck_assert_int_eq(tu_run("cp -r %s/rb %s/rb2 && cp -r %s/rb %s/rb3 && cp -r %s/rb %s/rb4",
				tmp, tmp, tmp, tmp, tmp, tmp), 0);
	/* another seed: said, with the consequence and the seed to give */
	ck_assert_int_eq(train(1, "", "rb4", "--resume --set seed=9 --set train.max_steps=35",
			       "rbs.log"), 0);
	tu_assert_log(tmp, "rbs.log", "notice: the job's seed 9 is not the checkpoint's 7: the rest of epoch 2 is taken from the new seed's shuffle");
	tu_assert_log(tmp, "rbs.log", "HINT: --set seed=7 continues exactly");
	/* at global batch 32 (15 steps per epoch), the 4 batches done are
	 * the checkpoint's; 480 - 64 records left make 13 of this run's */
	ck_assert_int_eq(train(1, "", "rb", "--resume --set train.batch_size=32",
			       "rbb.log"), 0);
	tu_assert_log(tmp, "rbb.log", "/rb/ckpt-34.dtf: step 34, epoch 2, after 4 batch(es) of it at the checkpoint's global batch 16\n");
	tu_assert_log(tmp, "rbb.log", "the 64 records of epoch 2 read before are left out, 13 steps remain in it");
	tu_assert_not_log(tmp, "rbb.log", " of 15");
	tu_assert_not_log(tmp, "rbb.log", "seed");
	/* max_steps below (and at) the checkpoint's step: exit 0 with a
	 * notice, even under --quiet, and the checkpoint left alone */
	ck_assert_int_eq(train(1, "", "rb2", "--resume --quiet --set train.max_steps=20",
			       "rbc.log"), 0);
	tu_assert_log(tmp, "rbc.log", "notice: the checkpoint's step 34 is past train.max_steps 20: nothing to train; exit status 0\n"
		      "HINT: raise train.max_steps (e.g. --set train.max_steps=64) to train on");
	ck_assert_int_eq(train(1, "", "rb3", "--resume --set train.max_steps=34", "rbd.log"), 0);
	tu_assert_log(tmp, "rbd.log", "notice: the checkpoint's step 34 is already at train.max_steps 34: nothing to train");
	ck_assert(tu_exists(tmp, "rb2/ckpt-34.dtf"));
	/* the end of train.epochs (60 steps: 2 of 30): the same, for epochs */
	ck_assert_int_eq(train(1, "", "rb3", "--resume --set train.max_steps=0 --set train.epochs=2",
			       "rbe.log"), 0);
	ck_assert(tu_exists(tmp, "rb3/ckpt-60.dtf"));
	ck_assert_int_eq(train(1, "", "rb3", "--resume --set train.max_steps=0 --set train.epochs=2",
			       "rbf.log"), 0);
	tu_assert_log(tmp, "rbf.log", "notice: the checkpoint's step 60 is the end of train.epochs 2 (30 steps per epoch): nothing to train; exit status 0\n"
		      "HINT: raise train.epochs (e.g. --set train.epochs=3) to train on");
	/* a resume that trains says nothing of the kind */
	tu_assert_not_log(tmp, "rbe.log", "nothing to train");
}
END_TEST

/* ---- the directory: checked at start, owned by one run ------------------- */

/* How TMP/<name> was made a directory this process cannot create files
 * in, so the caller can undo it. */
enum unwritable { UW_NONE, UW_CHATTR, UW_BIND, UW_CHMOD };

/*
 * Make TMP/<name> (created here) unwritable for dtf-train: as root with
 * chattr +i where the filesystem supports it, else as root by a
 * read-only bind mount in a private mount namespace (*prefix, put before
 * mpirun), else (not root) mode 0555.  *reason: strerror of what a create
 * there fails with.  UW_NONE: none of them works here.
 */
static enum unwritable make_unwritable(const char *name, char *prefix,
				       size_t n, const char **reason)
{
	char dir[300];
	tu_path(dir, sizeof(dir), tmp, name);
	ck_assert_int_eq(tu_run("mkdir -p %s", dir), 0);
	prefix[0] = 0;
	if (geteuid() != 0) {
		ck_assert_int_eq(chmod(dir, 0555), 0);
		*reason = "Permission denied";
		return UW_CHMOD;
	}
	if (tu_run("chattr +i %s 2>/dev/null", dir) == 0) {
		*reason = "Operation not permitted";
		return UW_CHATTR;
	}
	snprintf(prefix, n,
		 "unshare -m --propagation private sh -c 'mount --bind %s %s && "
		 "mount -o remount,bind,ro %s && exec \"$@\"' sh",
		 dir, dir, dir);
	if (tu_run("%s true 2>/dev/null", prefix) == 0) {
		*reason = "Read-only file system";
		return UW_BIND;
	}
	prefix[0] = 0;
	return UW_NONE;
}

static void undo_unwritable(const char *name, enum unwritable how)
{
	char dir[512];
	tu_path(dir, sizeof(dir), tmp, name);
	if (how == UW_CHATTR)
		tu_run("chattr -i %s", dir);
	else if (how == UW_CHMOD)
		chmod(dir, 0755);
}

START_TEST(unwritable_dir_fails_before_training_on_every_rank)
{
	char prefix[2048];
	const char *reason = NULL;
	enum unwritable how = make_unwritable("ro", prefix, sizeof(prefix),
					      &reason);
	if (how == UW_NONE) {
		printf("no way to make a directory unwritable here: skipped\n");
		return;
	}
	/* no checkpoint before the end: today's only save */
	int st = train(2, prefix, "ro", "--set checkpoint.every_steps=0 "
		       "--export-variables @/RO", "ro.log");
	undo_unwritable("ro", how);
	ck_assert_int_eq(st, 4);
	char want[768];
	snprintf(want, sizeof(want), "error: checkpoint.dir %s/ro is not writable: %s/ro/", tmp, tmp);
	ck_assert_log("ro.log", want);
	ck_assert_log("ro.log", reason);
	/* found before the first step, on rank 0 alone, told to rank 1 */
	ck_assert(strstr(tu_slurp(tmp, "ro.log"), "step 10/60") == NULL);
	ck_assert(strstr(tu_slurp(tmp, "ro.log"), "saving the checkpoint") == NULL);
	ck_assert_int_eq(count_lines("ro.log", "is not writable"), 1);
	ck_assert_int_le(tu_file_size(tmp, "RO"), 0); /* nothing exported */
	ck_assert_int_eq(tu_run("test -z \"$(ls -A %s/ro)\"", tmp), 0);

	/* the lock file of an earlier run is there and opens: the probe
	 * file is what cannot be made; a resume is checked the same way */
	tu_write_file(tmp, "ro/checkpoint.lock", "%s", "");
	how = make_unwritable("ro", prefix, sizeof(prefix), &reason);
	st = train(1, prefix, "ro", "--resume", "ro2.log");
	undo_unwritable("ro", how);
	ck_assert_int_eq(st, 4);
	ck_assert_log("ro2.log", want);
	ck_assert_log("ro2.log", reason);
	if (how == UW_CHATTR || how == UW_CHMOD)
		ck_assert_log("ro2.log", "/ro/checkpoint.probe.tmp: cannot create: ");
	ck_assert(strstr(tu_slurp(tmp, "ro2.log"), "step 10/60") == NULL);
	ck_assert_int_eq(tu_run("test \"$(ls -A %s/ro)\" = checkpoint.lock", tmp), 0);
}
END_TEST

/* The directory's entries, sorted, one per line. */
static const char *listing(const char *name)
{
	static char text[4096];
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls -A %s/%s", tmp, name);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(text, 1, sizeof(text) - 1, p);
	text[n] = 0;
	pclose(p);
	return text;
}

START_TEST(rerun_without_resume_refuses_and_keeps_checkpoints)
{
	/* the previous run's checkpoints 40, 50 and 60 */
	ck_assert_int_eq(tu_run("rm -rf %s/again && cp -r %s/ref1 %s/again",
				tmp, tmp, tmp), 0);
	/* the same command again, on 2 ranks: a fresh run would save step
	 * 10 and used to delete 40, 50 and 60 as "newer" */
	ck_assert_int_eq(train(2, "", "again", "", "again.log"), 4);
	char want[768];
	snprintf(want, sizeof(want),
		 "error: checkpoint.dir %s/again holds 3 checkpoint(s) of an earlier run, "
		 "steps 40 to 60 (the newest %s/again/ckpt-60.dtf)", tmp, tmp);
	ck_assert_log("again.log", want);
	ck_assert_log("again.log", "HINT: --resume continues that run from its newest "
		      "checkpoint; --overwrite-checkpoints deletes them and starts "
		      "over from step 0");
	ck_assert_int_eq(count_lines("again.log", "error:"), 1);
	ck_assert(strstr(tu_slurp(tmp, "again.log"), "step 10/60") == NULL);
	for (int s = 40; s <= 60; s += 10) {
		char a[600], b[600];
		snprintf(a, sizeof(a), "%s/again/ckpt-%d.dtf", tmp, s);
		snprintf(b, sizeof(b), "%s/ref1/ckpt-%d.dtf", tmp, s);
		ck_assert_msg(tu_run("cmp -s %s %s", a, b) == 0, "%s changed", a);
	}
	ck_assert(!tu_exists(tmp, "again/ckpt-10.dtf"));
	ck_assert_int_eq(tu_run("cmp -s %s/again/checkpoint %s/ref1/checkpoint",
				tmp, tmp), 0);
	/* with checkpoint.resume: auto the same command continues it */
	ck_assert_int_eq(train(1, "", "again", "--set checkpoint.resume=auto",
			       "again2.log"), 0);
	ck_assert_log("again2.log", "/again/ckpt-60.dtf: step 60");
}
END_TEST

START_TEST(overwrite_checkpoints_starts_over)
{
	ck_assert_int_eq(tu_run("rm -rf %s/over && cp -r %s/ref1 %s/over && "
				"printf 'x' > %s/over/ckpt-70.dtf.corrupt && "
				"printf 'x' > %s/over/notes.txt && "
				"cp %s/over/ckpt-50.dtf %s/over/ckpt-0050.dtf",
				tmp, tmp, tmp, tmp, tmp, tmp, tmp), 0);
	ck_assert_int_eq(train(2, "", "over", "--overwrite-checkpoints "
			       "--set train.max_steps=25 --export-variables @/OVER",
			       "over.log"), 0);
	char want[768];
	snprintf(want, sizeof(want),
		 "deleted 3 checkpoint(s) of an earlier run, steps 40 to 60, "
		 "from %s/over (--overwrite-checkpoints)", tmp);
	ck_assert_log("over.log", want);
	ck_assert_log("over.log", "step 10/25");
	/* only this run's files, the lock, and what was not a checkpoint
	 * (no name this program writes: step 50 is ckpt-50.dtf) */
	ck_assert_str_eq(listing("over"), "checkpoint\ncheckpoint.lock\n"
			 "ckpt-0050.dtf\nckpt-10.dtf\nckpt-20.dtf\nckpt-25.dtf\n"
			 "notes.txt\n");
	ck_assert_str_eq(tu_slurp(tmp, "over/checkpoint"),
			 "model_checkpoint_path: \"ckpt-25.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-10.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-20.dtf\"\n"
			 "all_model_checkpoint_paths: \"ckpt-25.dtf\"\n");
	struct dtf_ckpt_file f;
	char path[512];
	snprintf(path, sizeof(path), "%s/over/ckpt-25.dtf", tmp);
	ck_assert_msg(dtf_ckpt_file_read(path, &f) == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(f.pos.step, 25);
	ck_assert_int_eq(f.pos.world, 2);
	dtf_ckpt_file_deinit(&f);
	/* --resume and --overwrite-checkpoints contradict each other */
	ck_assert_int_eq(train(1, "", "over", "--resume --overwrite-checkpoints",
			       "over2.log"), 2);
	ck_assert_log("over2.log", "error: --overwrite-checkpoints starts a new run: "
		      "it cannot be given with --resume\n");
	ck_assert(tu_exists(tmp, "over/ckpt-25.dtf"));
}
END_TEST

START_TEST(second_run_on_a_locked_dir_is_refused)
{
	/* run A, long, holds checkpoint.dir "shared" */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "exec mpirun -np 1 %s/dtf-train -t 1 --set checkpoint.dir=%s/shared "
		 "--set train.max_steps=0 --set train.epochs=100000 %s/job.yaml "
		 ">/dev/null 2>%s/locka.log", tu_build_root(), tmp, tmp, tmp);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && !tu_exists(tmp, "shared/ckpt-10.dtf"); i++)
		usleep(100000);
	/* run B: a resume, or a fresh start that would delete A's files */
	int st1 = train(1, "", "shared", "--resume --set train.max_steps=5",
			"lockb.log");
	int st2 = train(2, "", "shared", "--overwrite-checkpoints "
			"--set train.max_steps=5", "lockc.log");
	kill(pid, SIGUSR1); /* A checkpoints and stops */
	int st = 0, i;
	for (i = 0; i < 600 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	if (i == 600) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		ck_abort_msg("run A did not end within 60 s");
	}
	ck_assert_int_eq(st1, 4);
	ck_assert_int_eq(st2, 4);
	char want[768];
	snprintf(want, sizeof(want),
		 "error: checkpoint.dir %s/shared: another run is using it "
		 "(%s/shared/checkpoint.lock is locked)", tmp, tmp);
	ck_assert_log("lockb.log", want);
	ck_assert_log("lockc.log", want);
	ck_assert(strstr(tu_slurp(tmp, "lockc.log"), "deleted") == NULL);
	ck_assert_log("locka.log", "notice: stop requested by SIGUSR1 on rank 0");
	/* A's files only, its newest named by the index and verifying */
	int64_t newest = -1;
	char dir[512];
	tu_path(dir, sizeof(dir), tmp, "shared");
	ck_assert_int_eq(dtf_checkpoint_latest(dir, &newest), 0);
	ck_assert_int_ge(newest, 10);
	char name[64];
	snprintf(name, sizeof(name), "shared/ckpt-%lld.dtf", (long long)newest);
	verify(name, NULL);
	ck_assert(!tu_exists(tmp, "shared/ckpt-5.dtf"));
	/* A has ended: the lock went with it */
	ck_assert_int_eq(train(1, "", "shared", "--resume --set train.max_steps=5",
			       "lockd.log"), 0);
}
END_TEST

START_TEST(dtf_launch_overwrites_once_then_resumes)
{
	/* an earlier run's 40, 50 and 60; this one is killed at step 25 */
	ck_assert_int_eq(tu_run("rm -rf %s/lover && cp -r %s/ref1 %s/lover",
				tmp, tmp, tmp), 0);
	int st = tu_run("DTF_FAULT=kill:rank=0:step=25 timeout 120 %s/dtf-launch "
			"--np 1 --max-restarts 1 --delay 0 -- -t 1 --overwrite-checkpoints "
			"--set checkpoint.dir=%s/lover --export-variables %s/LOVER "
			"%s/job.yaml >/dev/null 2>%s/lover.log",
			tu_build_root(), tmp, tmp, tmp, tmp);
	ck_assert_msg(st == 0, "status %d:\n%s", st, tu_slurp(tmp, "lover.log"));
	ck_assert_log("lover.log", "/dtf-train --overwrite-checkpoints -t 1 ");
	ck_assert_log("lover.log", "deleted 3 checkpoint(s) of an earlier run, steps 40 to 60");
	ck_assert_log("lover.log", "dtf-launch: attempt 2 of 2: ");
	ck_assert_log("lover.log", "/dtf-train --resume -t 1 --set ");
	/* the restart continued the new run (from 10 or 20, as the write of
	 * 20 may have been cut by the kill), not the old one */
	const char *l = tu_slurp(tmp, "lover.log");
	ck_assert_msg(strstr(l, "/lover/ckpt-10.dtf: step 10, epoch 1") ||
		      strstr(l, "/lover/ckpt-20.dtf: step 20, epoch 1"),
		      "%s", l);
	ck_assert_int_eq(count_lines("lover.log", "deleted "), 1);
	assert_same_vars("LOVER", "REF1");
}
END_TEST

static Suite *checkpoint_suite(void)
{
	Suite *s = suite_create("checkpoint");
	TCase *tc = tcase_create("fault_tolerance");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, format_header_tensors_and_crc);
	tcase_add_test(tc, keep_deletes_older_checkpoints);
	tcase_add_test(tc, exact_resume_one_rank);
	tcase_add_test(tc, exact_resume_every_optimizer_and_schedule);
	tcase_add_test(tc, sigterm_on_rank_1_exits_75_and_resumes_exactly);
	tcase_add_test(tc, sigkill_rank_1_under_dtf_launch_equals_uninterrupted);
	tcase_add_test(tc, sigkill_during_checkpoint_write_keeps_previous);
	tcase_add_test(tc, truncated_newest_falls_back_to_previous);
	tcase_add_test(tc, no_verifying_checkpoint_exits_4_unless_fresh_start_allowed);
	tcase_add_test(tc, model_mismatch_lists_differences);
	tcase_add_test(tc, full_disk_reported_previous_intact);
	tcase_add_test(tc, stuck_rank_ends_job_within_timeout);
	tcase_add_test(tc, stuck_rank_ends_job_when_mpi_abort_hangs);
	tcase_add_test(tc, dead_rank_ends_job_naming_it);
	tcase_add_test(tc, every_seconds_follows_rank_0_clock);
	tcase_add_test(tc, usage_errors);
	tcase_add_test(tc, policy_without_dir_warns);
	tcase_add_test(tc, keep_rotation_failure_warns);
	tcase_add_test(tc, config_keys_and_defaults);
	tcase_add_test(tc, elastic_resume_reads_every_record_once);
	tcase_add_test(tc, elastic_resume_two_ranks_to_one);
	tcase_add_test(tc, dtf_launch_min_np_restarts_with_fewer_ranks);
	tcase_add_test(tc, dtf_launch_gives_up_and_says_why);
	tcase_add_test(tc, dtf_launch_forwards_sigterm_as_usr1_and_exits_75);
	suite_add_tcase(s, tc);
	/* checkpoint.dir checked at start and owned by one run */
	tc = tcase_create("directory");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, unwritable_dir_fails_before_training_on_every_rank);
	tcase_add_test(tc, rerun_without_resume_refuses_and_keeps_checkpoints);
	tcase_add_test(tc, overwrite_checkpoints_starts_over);
	tcase_add_test(tc, second_run_on_a_locked_dir_is_refused);
	tcase_add_test(tc, dtf_launch_overwrites_once_then_resumes);
	suite_add_tcase(s, tc);
	/* signals in the start-up, and a second one */
	tc = tcase_create("signals");
	tcase_add_unchecked_fixture(tc, light_setup, light_teardown);
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, sigterm_while_starting_stops_with_the_notice);
	tcase_add_test(tc, second_sigterm_ends_at_once_saying_so);
	tcase_add_test(tc, sigterm_to_a_ps_rank_ends_the_job);
	suite_add_tcase(s, tc);
	tc = tcase_create("resume_lines");
	tcase_add_unchecked_fixture(tc, light_setup, light_teardown);
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, resume_lines_after_a_batch_change_and_past_max_steps);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(checkpoint_suite(), 0);
}
