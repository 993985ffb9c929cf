/*
 * test_launch.c - stopping on a signal, what each launcher reports, and
 * dtf-launch as root.
 *
 * Runs the real binaries (dtf-records synth, mpirun dtf-train, dtf-launch)
 * on 480 synthetic 8x8 records and the tiny CNN of testutil.h, at most 2
 * ranks; every mpirun is bounded by timeout(1).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char tmp[256];
static const char *build_root;

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	TU_SYNTH_FEATURES_8X8
	TU_TINY_CNN_MODEL
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 0\n"
	"  epochs: 100000\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"checkpoint: {every_steps: 10, keep: 3}\n"
	"logging: {every_steps: 10}\n";

static void setup(void)
{
	build_root = tu_build_root();
	tu_tmpdir_create(tmp, sizeof(tmp), "dtf-launch-test");
	tu_synth(tmp, "train", 480, 2, "8,8,1", 1);
	tu_write_file(tmp, "job.yaml", job_text, tmp);
}

static void teardown(void) { tu_tmpdir_remove(tmp); }

#define ck_assert_log(log, text)                                          \
	do {                                                              \
		const char *l_ = tu_slurp(tmp, log);                      \
		size_t n_ = strlen(l_);                                   \
		ck_assert_msg(strstr(l_, text) != NULL,                   \
			      "no '%s' in %s:\n...%s", text, log,          \
			      l_ + (n_ > 2000 ? n_ - 2000 : 0));          \
	} while (0)

#define ck_assert_not_log(log, text)                                      \
	do {                                                              \
		const char *l_ = tu_slurp(tmp, log);                      \
		const char *h_ = strstr(l_, text);                        \
		ck_assert_msg(h_ == NULL, "'%s' in %s: ...%.300s", text,   \
			      log, h_ ? h_ : "");                         \
	} while (0)

/* Lines of TMP/<log> that contain `text`. */
static int count_lines(const char *log, const char *text)
{
	int n = 0;
	for (const char *l = tu_slurp(tmp, log); *l;) {
		const char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		const char *hit = strstr(l, text);
		n += hit && hit < l + len;
		l += len + (end != NULL);
	}
	return n;
}

/* ---- the stop notice ----------------------------------------------------- */

static int train2(const char *fault, const char *dir, const char *log)
{
	return tu_run("DTF_FAULT=%s timeout 120 mpirun -np 2 %s/dtf-train -t 1 "
		      "--set checkpoint.dir=%s/%s --set train.max_steps=60 "
		      "%s/job.yaml >/dev/null 2>%s/%s",
		      fault, build_root, tmp, dir, tmp, tmp, log);
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
	return s;
}

int main(void)
{
	return tu_run_suite(launch_suite(), 1);
}
