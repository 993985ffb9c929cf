/*
 * test_train.c - end-to-end: graph + data + MPI + optimizer.
 *
 * Runs the real binaries (dtf-records synth, then mpirun dtf-train) on a
 * small synthetic data set in a temporary directory, and checks:
 *  - 1 rank at global batch 16 and 2 ranks at 8 per replica reach the same
 *    parameters after 20 steps (data-parallel equivalence, dropout on);
 *  - training lowers the loss and the trained model beats chance;
 *  - no allocation happens inside a step after the first (in-process run);
 *  - a corrupt record stops every rank with exit status 3 and a message
 *    naming file, record and offset; a bad job file exits 2 with line:col.
 * The build directory comes from DTF_BUILD_ROOT (set by meson).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "distribute/comm.h"
#include "train/threads.h"
#include "train/train.h"

#include "testutil.h"

/*
 * Count every heap allocation in the process, Open MPI's and every other
 * library's included: functions defined in the executable interpose on
 * libc's for every shared library (ELF symbol lookup order), and forward
 * to glibc's __libc_* entry points.  Not under AddressSanitizer, which
 * interposes malloc itself.  Calls made from OpenBLAS's own code are
 * counted apart (blas_calls): on CPUs where it picks its Cooperlake
 * kernels (AVX-512 BF16, e.g. AMD Zen 4) its small-matrix sgemm mallocs a
 * buffer per call, which is OpenBLAS's choice, not this project's.
 */
#if defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 0
#else
#define COUNT_MALLOC 1
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static atomic_ulong heap_calls, blas_calls;
/* the address range of OpenBLAS's loaded segments (find_blas) */
static uintptr_t blas_lo = UINTPTR_MAX, blas_hi;
static void count_call(void *caller)
{
	uintptr_t a = (uintptr_t)caller;
	atomic_fetch_add(a >= blas_lo && a < blas_hi ? &blas_calls : &heap_calls, 1);
}
static int find_blas(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size, (void)data;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "openblas"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (lo < blas_lo)
			blas_lo = lo;
		if (lo + ph->p_memsz > blas_hi)
			blas_hi = lo + ph->p_memsz;
	}
	return 0;
}
void *malloc(size_t n)
{
	count_call(__builtin_return_address(0));
	return __libc_malloc(n);
}
void *calloc(size_t n, size_t m)
{
	count_call(__builtin_return_address(0));
	return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n)
{
	count_call(__builtin_return_address(0));
	return __libc_realloc(p, n);
}
void *aligned_alloc(size_t a, size_t n)
{
	count_call(__builtin_return_address(0));
	return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n)
{
	count_call(__builtin_return_address(0));
	*p = __libc_memalign(a, n);
	return *p ? 0 : 12 /* ENOMEM */;
}
void free(void *p) { __libc_free(p); }
#endif

static char tmpdir[256];
/* MPI starts once per process, on first use: the tests that launch mpirun
 * run first, because a process that is already an MPI singleton passes its
 * MPI environment on to the mpirun it starts. */
static struct dtf_comm *comm;

static struct dtf_comm *the_comm(void)
{
	if (!comm)
		ck_assert_int_eq(dtf_comm_init(NULL, NULL, &comm), 0);
	return comm;
}

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 7\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 0}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
	TU_TINY_CNN_MODEL
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 20\n"
	"  epochs: 5\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 10}\n";

static void setup_data(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-train-test");
	tu_synth(tmpdir, "train", 480, 1, "8,8,1", 1);
	tu_synth(tmpdir, "test", 200, 1, "8,8,1", 2);
	tu_write_file(tmpdir, "job.yaml", job_text, tmpdir, tmpdir);
}

static void teardown_data(void)
{
	dtf_comm_finalize(comm);
	comm = NULL;
	tu_tmpdir_remove(tmpdir);
}

START_TEST(one_rank_equals_two_ranks)
{
	ck_assert_int_eq(tu_mpirun(1, NULL, tmpdir, "np1.log",
				   "-q --threads 1 --export-variables %s/np1.bin %s/job.yaml",
				   tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_mpirun(2, NULL, tmpdir, "np2.log",
				   "-q --threads 1 --export-variables %s/np2.bin %s/job.yaml",
				   tmpdir, tmpdir), 0);
	size_t n1, n2, nonzero;
	float *a = tu_read_vars(tmpdir, "np1.bin", &n1);
	float *b = tu_read_vars(tmpdir, "np2.bin", &n2);
	ck_assert_uint_eq(n1, n2);
	double worst = tu_max_rel_diff(b, a, n1, &nonzero);
	int moved = (int)nonzero;
	printf("1 rank vs 2 ranks after 20 steps: %zu floats, max relative difference %.3g\n",
	       n1, worst);
	ck_assert_msg(worst <= 1e-4, "max relative difference %g", worst);
	ck_assert_int_gt(moved, (int)(n1 / 2));
	free(a);
	free(b);
}
END_TEST

/* In process (no fork: MPI is started once): the loss falls, accuracy beats
 * chance, and steps after the first allocate nothing. */
START_TEST(trains_without_step_allocations)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	const char *sets[] = {"train.max_steps=0", "train.epochs=4"};
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load(path, sets, 2, &job), 0);
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1};
	struct dtf_train_result res;
	int rc = dtf_train_run(job, the_comm(), &opts, &res);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(res.steps, 4 * (480 / 16));
	ck_assert_uint_eq(res.step_allocations, 0);
	printf("4 epochs on synthetic data: test accuracy %.3f, loss %.3f\n",
	       res.eval_accuracy, res.eval_loss);
	ck_assert(res.eval_accuracy > 0.6); /* chance is 0.25 */
	ck_assert(res.eval_loss < log(4.0));
	dtf_job_free(job);
}
END_TEST

/* Whole-process heap calls (libraries included, OpenBLAS's own counted
 * apart: see COUNT_MALLOC) for a run of 1 step and a run of 21 steps are
 * equal: the 20 extra steps allocate nothing. */
START_TEST(extra_steps_allocate_nothing_in_any_library)
{
#if COUNT_MALLOC
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	unsigned long calls[2], blas[2];
	const char *steps[2] = {"train.max_steps=1", "train.max_steps=21"};
	dl_iterate_phdr(find_blas, NULL);
	ck_assert_msg(blas_hi > blas_lo, "OpenBLAS is not loaded");
	for (int i = 0; i < 2; i++) {
		struct dtf_job *job = NULL;
		ck_assert_int_eq(dtf_job_load(path, &steps[i], 1, &job), 0);
		struct dtf_train_opts opts = {.threads = 1, .quiet = 1};
		struct dtf_train_result res;
		unsigned long before = atomic_load(&heap_calls);
		unsigned long blas_before = atomic_load(&blas_calls);
		int rc = dtf_train_run(job, the_comm(), &opts, &res);
		calls[i] = atomic_load(&heap_calls) - before;
		blas[i] = atomic_load(&blas_calls) - blas_before;
		ck_assert_msg(rc == 0, "%s", dtf_error_msg());
		dtf_job_free(job);
	}
	printf("heap calls, whole run: 1 step %lu, 21 steps %lu (and OpenBLAS's own: %lu, %lu)\n",
	       calls[0], calls[1], blas[0], blas[1]);
	ck_assert_uint_gt(calls[0], 0);
	ck_assert_uint_eq(calls[0], calls[1]);
#endif
}
END_TEST

START_TEST(corrupt_record_stops_every_rank)
{
	/* flip a byte inside record 100's data (records are the same size) */
	char path[512];
	tu_path(path, sizeof(path), tmpdir, "train-00000-of-00001.tfrecord");
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	uint64_t len;
	ck_assert_int_eq(fread(&len, 8, 1, f), 1);
	fclose(f);
	long rec = (long)(len + 16), off = 100 * rec + 12 + 20;
	tu_patch_xor(path, off, 0x40);
	int st = tu_mpirun(2, NULL, tmpdir, "bad.log",
			   "-q --threads 1 %s/job.yaml", tmpdir);
	const char *log = tu_slurp(tmpdir, "bad.log");
	ck_assert_msg(st == 3, "exit status %d, log:\n%s", st, log);
	char want[128];
	snprintf(want, sizeof(want), "record 100 at byte offset %ld", 100 * rec);
	ck_assert_msg(strstr(log, want) != NULL, "no '%s' in:\n%s", want, log);
	ck_assert_msg(strstr(log, "train-00000-of-00001.tfrecord") != NULL,
		      "no file name in:\n%s", log);
	/* restore the byte for later tests */
	tu_patch_xor(path, off, 0x40);
}
END_TEST

START_TEST(bad_job_file_exit_2)
{
	char path[512];
	tu_path(path, sizeof(path), tmpdir, "bad.yaml");
	tu_write_file(NULL, path, "train:\n  batch_size: 16\n  epoch: 2\n");
	int st = tu_mpirun(2, NULL, tmpdir, "bad2.log", "%s", path);
	ck_assert_int_eq(st, 2);
	const char *log = tu_slurp(tmpdir, "bad2.log");
	ck_assert_msg(strstr(log, "bad.yaml:3:3") != NULL, "log:\n%s", log);
	ck_assert_msg(strstr(log, "epochs") != NULL, "no suggestion:\n%s", log);
}
END_TEST

static int count_of(const char *hay, const char *needle)
{
	int k = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		k++;
	return k;
}

/* Job-file and --set errors are the same on every rank: rank 0 alone
 * prints them (dtf-train-job(5)), every rank exits 2. */
START_TEST(job_errors_printed_once)
{
	char path[512];
	tu_path(path, sizeof(path), tmpdir, "bad.yaml");
	tu_write_file(NULL, path, "train:\n  batch_size: 16\n  epoch: 2\n");
	int st = tu_mpirun(2, NULL, tmpdir, "once.log", "%s", path);
	const char *log = tu_slurp(tmpdir, "once.log");
	ck_assert_msg(st == 2, "exit status %d, log:\n%s", st, log);
	char want[1024];
	snprintf(want, sizeof(want),
		 "error: %s:3:3: train.epoch: unknown key 'epoch' (did you "
		 "mean 'epochs'?)\n",
		 path);
	ck_assert_msg(count_of(log, want) == 1 && count_of(log, "error: ") == 1 &&
			      strstr(log, "[rank 0 ") && !strstr(log, "[rank 1 "),
		      "not once, by rank 0:\n%s", log);
	st = tu_mpirun(2, NULL, tmpdir, "once.log",
		       "--set train.epochs=x %s/job.yaml", tmpdir);
	log = tu_slurp(tmpdir, "once.log");
	ck_assert_msg(st == 2, "exit status %d, log:\n%s", st, log);
	ck_assert_msg(count_of(log, "error: --set train.epochs: train.epochs: "
				    "expected a positive integer, got 'x'\n") == 1 &&
			      count_of(log, "error: ") == 1,
		      "not once:\n%s", log);
}
END_TEST

START_TEST(batch_not_divisible_exit_2)
{
	int st = tu_mpirun(2, NULL, NULL, NULL,
			   "--set train.batch_size=15 %s/job.yaml", tmpdir);
	ck_assert_int_eq(st, 2);
}
END_TEST

/* Mistakes found before any training: exit 2 (3 for data) and a message. */
START_TEST(usage_errors_before_training)
{
	ck_assert_int_eq(tu_run("%s%s/dtf-train %s/no-such-job.yaml 2>/dev/null",
				tu_exe_wrapper(), tu_build_root(), tmpdir), 2);
	ck_assert_int_eq(tu_mpirun(1, NULL, NULL, NULL,
				   "--export-variables %s/no-such-dir/v.bin %s/job.yaml",
				   tmpdir, tmpdir), 2);
	/* 8 ranks at 60 examples per replica: 480 records leave none for
	 * rank 7 (DATA sharding of one file: 60 each, so 61 is too many) */
	int st = tu_mpirun(2, NULL, tmpdir, "short.log",
			   "-q --threads 1 --set train.batch_size=482 %s/job.yaml",
			   tmpdir);
	ck_assert_int_eq(st, 3);
	const char *log = tu_slurp(tmpdir, "short.log");
	ck_assert_msg(strstr(log, "has 240 record(s), fewer than one per-replica batch of 241"),
		      "%s", log);
}
END_TEST

/* threads per rank: --threads, else OPENBLAS_NUM_THREADS when it is a
 * number, else the cores per local rank (an unusable value warned about) */
START_TEST(threads_from_the_option_and_the_environment)
{
	unsetenv("OPENBLAS_NUM_THREADS");
	int cores = dtf_threads_choose(0, 1);
	ck_assert_int_ge(cores, 1);
	setenv("OPENBLAS_NUM_THREADS", "3", 1);
	ck_assert_int_eq(dtf_threads_choose(0, 1), 3);
	ck_assert_int_eq(dtf_threads_choose(5, 1), 5);
	static const char *const bad[] = {"abc", "2x", "0", "-1", "99999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("OPENBLAS_NUM_THREADS", bad[i], 1);
		ck_assert_int_eq(dtf_threads_choose(0, 1), cores);
	}
	unsetenv("OPENBLAS_NUM_THREADS");
}
END_TEST

static Suite *train_suite(void)
{
	Suite *s = suite_create("train");
	TCase *tc = tcase_create("end_to_end");
	tcase_add_unchecked_fixture(tc, setup_data, teardown_data);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, one_rank_equals_two_ranks);
	tcase_add_test(tc, bad_job_file_exit_2);
	tcase_add_test(tc, job_errors_printed_once);
	tcase_add_test(tc, batch_not_divisible_exit_2);
	tcase_add_test(tc, usage_errors_before_training);
	tcase_add_test(tc, corrupt_record_stops_every_rank);
	/* in process (MPI singleton) from here on */
	tcase_add_test(tc, trains_without_step_allocations);
	tcase_add_test(tc, extra_steps_allocate_nothing_in_any_library);
	suite_add_tcase(s, tc);
	TCase *th = tcase_create("threads");
	tcase_add_test(th, threads_from_the_option_and_the_environment);
	suite_add_tcase(s, th);
	return s;
}

int main(void)
{
	/* MPI may be initialised once per process: run in this process */
	return tu_run_suite(train_suite(), 0);
}
