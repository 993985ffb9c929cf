/*
 * test_shm.c - the shared-memory gradient reduction (distribute/shm.h) against
 * MPI_Iallreduce, end to end.
 *
 * Trains the tiny CNN of test_dist for 20 steps with
 * strategy.communication.implementation mpi and shared_memory and compares
 * the exported parameters:
 *  - 2 ranks: bit for bit (a + b is commutative), with the default buckets
 *    and overlap, and with small buckets (variables reduced where they lie,
 *    not packed), overlap off and accumulate_steps 2;
 *  - 3 ranks: within 1e-6 relative (the order of a three-way sum may
 *    differ), and within 1e-4 of one_device at the same global batch;
 *  - the sharded update (one copy of the variables in the window, each
 *    replica applies the optimizer to its slices of it): bit for bit as
 *    above; its checkpoint, whose optimizer slots are gathered first,
 *    resumes with MPI to the same bits as an uninterrupted MPI run, and
 *    an MPI checkpoint resumes sharded (restored into the shared copy) to
 *    the same bits; with train.clipnorm, or with batch_norm's
 *    non-trainable moving statistics, the update is whole on every
 *    replica, same bits, and checkpoints (which save the replicas' mean
 *    statistics) leave the training unchanged;
 *  - the start-up line names the implementation in force (auto: shared
 *    memory on one node, MPI across "nodes");
 *  - shared_memory where it cannot apply is a job error (exit 2) naming
 *    the key's file:line:col (or --set KEY) and the reason; a rank that hangs or exits inside the shared-memory path
 *    ends the job (watchdog, mpirun), never a hang.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char tmpdir[256];

/* the sections after the tiny CNN (tu_write_tiny_job) */
static const char job_rest[] =
	"train:\n"
	"  batch_size: 24\n"
	"  max_steps: 20\n"
	"  epochs: 5\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"strategy: {type: multi_worker_mirrored}\n"
	"logging: {every_steps: 10}\n";

/* the tiny CNN with batch_norm after its first convolution */
static const char bn_job_text[] =
	"name: tiny-cnn-bn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 0}\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  input: image\n"
	"  layers:\n"
	"    - {conv2d: {filters: 4, kernel: 3, padding: same}}\n"
	"    - batch_norm\n"
	"    - relu\n"
	"    - flatten\n"
	"    - {dense: {units: 4, name: logits}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 24\n"
	"  max_steps: 20\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"strategy: {type: multi_worker_mirrored}\n"
	"logging: {every_steps: 10}\n";

static const char *job_file = "job.yaml";

/* mpirun -np np dtf-train ... --export-variables NAME.bin 2>NAME.log;
 * the exit status */
static int train(int np, const char *name, const char *env, const char *sets)
{
	char log[256];
	snprintf(log, sizeof(log), "%s.log", name);
	return tu_mpirun(np, env, tmpdir, log,
			 "--threads 1 --export-variables %s/%s.bin %s %s/%s",
			 tmpdir, name, sets ? sets : "", tmpdir, job_file);
}

static const char *log_of(const char *name)
{
	char f[128];
	snprintf(f, sizeof(f), "%s.log", name);
	return tu_slurp(tmpdir, f);
}

/* train, expect exit 0 and `impl` named in the start-up line */
static void train_ok(int np, const char *name, const char *env,
		     const char *sets, const char *impl)
{
	int st = train(np, name, env, sets);
	const char *log = log_of(name);
	ck_assert_msg(st == 0, "%s: exit %d\n%s", name, st, log);
	char want[64];
	snprintf(want, sizeof(want), "implementation %s", impl);
	ck_assert_msg(strstr(log, want) != NULL, "%s: no '%s'\n%s", name, want,
		      log);
}

static double max_rel_diff(const char *a_name, const char *b_name,
			   int *same_bits)
{
	char an[128], bn[128];
	snprintf(an, sizeof(an), "%s.bin", a_name);
	snprintf(bn, sizeof(bn), "%s.bin", b_name);
	size_t n;
	double worst = tu_vars_rel_diff(tmpdir, bn, an, &n, NULL, same_bits);
	ck_assert_uint_gt(n, 100);
	return worst;
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-shm-test");
	tu_synth(tmpdir, "train", 480, 1, "8,8,1", 1);
	tu_write_tiny_job(tmpdir, "job.yaml", 0, 0, job_rest);
	tu_write_file(tmpdir, "job_bn.yaml", bn_job_text, tmpdir);
	job_file = "job.yaml";
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

#define MPI_IMPL "--set strategy.communication.implementation=mpi "
#define SHM_IMPL "--set strategy.communication.implementation=shared_memory "

START_TEST(two_ranks_same_bits_as_mpi)
{
	int same = 0;
	train_ok(2, "mpi2", NULL, MPI_IMPL, "mpi");
	train_ok(2, "shm2", NULL, SHM_IMPL, "shared_memory");
	double d = max_rel_diff("mpi2", "shm2", &same);
	printf("2 ranks, shared_memory vs mpi: max relative difference %.3g\n", d);
	ck_assert_msg(same && d == 0.0, "%g", d);
	ck_assert_msg(strstr(log_of("shm2"), "update sharded") != NULL, "%s",
		      log_of("shm2"));
	/* auto on one node is shared memory */
	train_ok(2, "auto2", NULL, NULL, "shared_memory");
	ck_assert(max_rel_diff("mpi2", "auto2", &same) == 0.0 && same);
	/* the parameters moved: the comparison is not of two initial states */
	train_ok(2, "mpi2_0", NULL, MPI_IMPL "--set train.max_steps=1", "mpi");
	ck_assert(max_rel_diff("mpi2", "mpi2_0", NULL) > 1e-3);
}
END_TEST

START_TEST(two_ranks_small_buckets_accumulation)
{
	/* buckets of a few variables each, non-contiguous in the gradient
	 * vector; no overlap; two micro-batches per update */
	const char *x = "--set strategy.communication.bucket_mb=0.0008 "
			"--set strategy.communication.overlap=false "
			"--set train.accumulate_steps=2 ";
	char a[512], b[512];
	snprintf(a, sizeof(a), MPI_IMPL "%s", x);
	snprintf(b, sizeof(b), SHM_IMPL "%s", x);
	train_ok(2, "mpi2s", NULL, a, "mpi");
	train_ok(2, "shm2s", NULL, b, "shared_memory");
	int same = 0;
	double d = max_rel_diff("mpi2s", "shm2s", &same);
	printf("2 ranks, small buckets, no overlap, accumulate 2: %.3g\n", d);
	ck_assert_msg(same && d == 0.0, "%g", d);
	ck_assert_msg(strstr(log_of("shm2s"), "1 bucket") == NULL,
		      "%s", log_of("shm2s"));
}
END_TEST

/* 10 steps with implementation `first` and a checkpoint in NAME/, then
 * resumed with `then` to step 20 (NAME10, NAME20): the same bits as the
 * uninterrupted "ref20" */
static void resume_same_bits(const char *name, const char *first,
			     const char *first_impl, const char *then,
			     const char *then_impl)
{
	char a[512], run[64];
	snprintf(a, sizeof(a), "%s--set train.max_steps=10 "
		 "--set checkpoint.dir=%s/%s", first, tmpdir, name);
	snprintf(run, sizeof(run), "%s10", name);
	train_ok(2, run, NULL, a, first_impl);
	snprintf(a, sizeof(a), "%s--resume --set checkpoint.dir=%s/%s", then,
		 tmpdir, name);
	snprintf(run, sizeof(run), "%s20", name);
	train_ok(2, run, NULL, a, then_impl);
	ck_assert_msg(strstr(log_of(run), "step 10") != NULL, "%s",
		      log_of(run));
	/* the resumed run's first step may set up; none after it allocates */
	ck_assert_msg(strstr(log_of(run), "allocations happened") == NULL,
		      "%s", log_of(run));
	int same = 0;
	double d = max_rel_diff("ref20", run, &same);
	printf("2 ranks, %s 10 steps + resumed with %s 10 vs 20: %.3g\n",
	       first_impl, then_impl, d);
	ck_assert_msg(same && d == 0.0, "%g", d);
}

START_TEST(sharded_checkpoint_resumes_as_mpi)
{
	/* 10 sharded steps with a checkpoint, 10 more resumed with MPI:
	 * Adam's m and v of every range must be in the checkpoint, or the
	 * resumed steps differ from 20 uninterrupted ones */
	train_ok(2, "ref20", NULL, MPI_IMPL, "mpi");
	resume_same_bits("ck", SHM_IMPL, "shared_memory", MPI_IMPL, "mpi");
	/* the other way: an MPI checkpoint restored into the shared copy */
	resume_same_bits("ckm", MPI_IMPL, "mpi", SHM_IMPL, "shared_memory");
	ck_assert_msg(strstr(log_of("ckm20"), "update sharded") != NULL, "%s",
		      log_of("ckm20"));
	int same = 0;
	char a[512];
	/* clipnorm needs the global norm: the update stays whole */
	train_ok(2, "clip_shm", NULL, SHM_IMPL "--set train.clipnorm=0.5",
		 "shared_memory");
	ck_assert_msg(strstr(log_of("clip_shm"), "update whole") != NULL, "%s",
		      log_of("clip_shm"));
	train_ok(2, "clip_mpi", NULL, MPI_IMPL "--set train.clipnorm=0.5", "mpi");
	ck_assert(max_rel_diff("clip_mpi", "clip_shm", &same) == 0.0 && same);
	/* batch_norm's moving statistics are each replica's until averaged:
	 * the variables stay per replica, the update whole */
	job_file = "job_bn.yaml";
	train_ok(2, "bn_shm", NULL, SHM_IMPL, "shared_memory");
	ck_assert_msg(strstr(log_of("bn_shm"),
			     "update whole on every replica (non-trainable variables)") != NULL,
		      "%s", log_of("bn_shm"));
	train_ok(2, "bn_mpi", NULL, MPI_IMPL, "mpi");
	ck_assert(max_rel_diff("bn_mpi", "bn_shm", &same) == 0.0 && same);
	/* a checkpoint saves the replicas' mean moving statistics without
	 * changing the ones they go on with: the same bits as no checkpoint */
	snprintf(a, sizeof(a), "--set checkpoint.dir=%s/bnck "
		 "--set checkpoint.every_steps=5", tmpdir);
	train_ok(2, "bn_ck", NULL, a, "shared_memory");
	ck_assert(max_rel_diff("bn_shm", "bn_ck", &same) == 0.0 && same);
	job_file = "job.yaml";
}
END_TEST

START_TEST(three_ranks_close_to_mpi)
{
	train_ok(3, "mpi3", NULL, MPI_IMPL, "mpi");
	train_ok(3, "shm3", NULL, SHM_IMPL, "shared_memory");
	ck_assert_int_eq(train(1, "one", NULL, "--set strategy.type=one_device"), 0);
	double d = max_rel_diff("mpi3", "shm3", NULL);
	double o = max_rel_diff("one", "shm3", NULL);
	printf("3 ranks, shared_memory vs mpi: %.3g; vs one_device: %.3g\n", d, o);
	ck_assert_msg(d <= 1e-6, "%g", d);
	ck_assert_msg(o <= 1e-4, "%g", o);
}
END_TEST

START_TEST(auto_across_nodes_is_mpi)
{
	train_ok(2, "auto_nodes", "DTF_TEST_RANKS_PER_NODE=1", NULL, "mpi");
	train_ok(2, "auto_mirrored", NULL, "--set strategy.type=mirrored",
		 "shared_memory");
	train_ok(2, "auto_fp16", NULL,
		 "--set strategy.communication.compression=fp16", "mpi");
}
END_TEST

static const struct {
	const char *env, *sets, *msg;
} errors[] = {
	{NULL, "--set strategy.communication.compression=fp16",
	 "implementation: shared_memory reduces the gradients of mirrored or multi_worker_mirrored replicas on one node, on the CPU, without compression or hierarchical; not with compression"},
	{NULL, "--set strategy.type=central_storage", "not with central_storage"},
	{NULL, "--set strategy.type=parameter_server", "not with parameter_server"},
	{NULL, "--set strategy.communication.hierarchical=true", "not with hierarchical"},
	{"DTF_TEST_RANKS_PER_NODE=1", NULL, "not with ranks on several nodes"},
	{NULL, "--set device=cuda", "not with device cuda"},
};

START_TEST(shared_memory_where_it_cannot_apply)
{
	int i = _i;
	char sets[512];
	snprintf(sets, sizeof(sets), SHM_IMPL "%s",
		 errors[i].sets ? errors[i].sets : "");
	int st = train(2, "err", errors[i].env, sets);
	const char *log = log_of("err");
	ck_assert_msg(st == 2, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, errors[i].msg) != NULL, "%s", log);
	ck_assert_msg(strstr(log, "HINT: use implementation auto") != NULL,
		      "%s", log);
	/* a job error names where the key was given and the key, whether
	 * the job alone rules it out (config) or the ranks do (strategy) */
	ck_assert_msg(strstr(log, "error: --set strategy.communication."
				  "implementation: strategy.communication."
				  "implementation: shared_memory reduces") != NULL,
		      "%s", log);
}
END_TEST

/* The same with the key in the job file: its line and column, found at
 * start where the reason depends on the ranks (several nodes, simulated)
 * or on the device (device cuda: refused before any CUDA call, so no GPU
 * is needed). */
START_TEST(shared_memory_errors_name_file_line_col)
{
	static const char strat[] = "strategy: {type: multi_worker_mirrored}\n";
	static const char mine[] = "strategy:\n"
				   "  type: multi_worker_mirrored\n"
				   "  communication: {implementation: shared_memory}\n";
	char text[4096], path[512], want[1024];
	snprintf(text, sizeof(text), "%s", tu_slurp(tmpdir, "job.yaml"));
	char *at = strstr(text, strat);
	ck_assert_ptr_nonnull(at);
	ck_assert_uint_lt(strlen(text) - strlen(strat) + strlen(mine),
			  sizeof(text));
	memmove(at + strlen(mine), at + strlen(strat),
		strlen(at + strlen(strat)) + 1);
	memcpy(at, mine, strlen(mine));
	int line = 3; /* the communication line, 1-based */
	for (const char *c = text; c < at; c++)
		line += *c == '\n';
	tu_write_file(tmpdir, "shm.yaml", "%s", text);
	snprintf(path, sizeof(path), "%s/shm.yaml", tmpdir);

	static const struct {
		const char *env, *sets, *why;
	} cases[] = {
		{"DTF_TEST_RANKS_PER_NODE=1", "", "ranks on several nodes"},
		{"", "--set device=cuda", "device cuda"},
	};
	for (int i = 0; i < 2; i++) {
		int st = tu_mpirun(2, cases[i].env, tmpdir, "pos.log",
				   "--threads 1 %s %s", cases[i].sets, path);
		const char *log = log_of("pos");
		ck_assert_msg(st == 2, "exit %d\n%s", st, log);
		/* the value's column: "  communication: {implementation: " */
		snprintf(want, sizeof(want),
			 "] error: %s:%d:35: strategy.communication."
			 "implementation: shared_memory reduces the gradients "
			 "of mirrored or multi_worker_mirrored replicas on one "
			 "node, on the CPU, without compression or "
			 "hierarchical; not with %s\n"
			 "HINT: use implementation auto (shared memory where "
			 "it applies, MPI elsewhere) or mpi\n",
			 path, line, cases[i].why);
		ck_assert_msg(strstr(log, want) != NULL, "no '%s' in\n%s",
			      want, log);
	}
	/* the job alone: the same position from the job reader */
	int st = tu_run("%s/dtf-train --dry-run --set "
			"strategy.type=central_storage %s 2>%s/pos.log "
			">/dev/null",
			tu_build_root(), path, tmpdir);
	snprintf(want, sizeof(want),
		 "error: %s:%d:35: strategy.communication.implementation: "
		 "shared_memory reduces", path, line);
	ck_assert_msg(st == 2 && strstr(log_of("pos"), want) != NULL,
		      "exit %d, no '%s' in\n%s", st, want, log_of("pos"));
}
END_TEST

START_TEST(failing_rank_ends_job)
{
	/* hangs: the watchdog; exits without MPI_Finalize: mpirun */
	int st = train(2, "hang", "DTF_FAULT=hang:rank=1:step=3",
		       SHM_IMPL "--set fault.timeout_seconds=2");
	const char *log = log_of("hang");
	ck_assert_msg(st != 0 && st != 124, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "no progress for 2 s") != NULL, "%s", log);
	st = train(2, "exit", "DTF_FAULT=exit:rank=0:step=3", SHM_IMPL);
	log = log_of("exit");
	ck_assert_msg(st != 0 && st != 124, "exit %d\n%s", st, log);
}
END_TEST

static Suite *shm_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc = tcase_create("shared_memory");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, two_ranks_same_bits_as_mpi);
	tcase_add_test(tc, two_ranks_small_buckets_accumulation);
	tcase_add_test(tc, sharded_checkpoint_resumes_as_mpi);
	tcase_add_test(tc, three_ranks_close_to_mpi);
	tcase_add_test(tc, auto_across_nodes_is_mpi);
	tcase_add_loop_test(tc, shared_memory_where_it_cannot_apply, 0,
			    (int)(sizeof(errors) / sizeof(errors[0])));
	tcase_add_test(tc, shared_memory_errors_name_file_line_col);
	tcase_add_test(tc, failing_rank_ends_job);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(shm_suite(), 0);
}
