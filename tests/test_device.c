/*
 * test_device.c - device selection and GPU placement; runs on every machine.
 *
 *  - placement: node-local rank r takes GPU r; more ranks than GPUs is an
 *    error with the exact hint, unless sharing maps r to r % GPUs;
 *  - the job keys device / precision / allow_gpu_sharing: defaults, values,
 *    did-you-mean on a bad value;
 *  - `device: cuda` on a machine without a GPU (or a build without CUDA)
 *    exits 1 naming the reason and the way out; `device: auto` there trains
 *    on the CPU and ends with exactly the parameters of `device: cpu`.  On
 *    a machine with a GPU the same test checks the opposite: `device: cuda`
 *    trains, and auto (the GPU) agrees with the CPU within 1e-3.
 *  - dtf_cuda_built() matches DTF_HAVE_CUDA.
 * The binaries are run as MPI singletons (no mpirun needed).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "dtf_config.h"
#include "ops/cuda/cuda.h"
#include "ops/backend.h"

#include "testutil.h"

static char tmpdir[256];

static const char job_text[] =
	"name: tiny\n"
	"seed: 3\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
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
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 10\n"
	"  optimizer: {sgd: {learning_rate: 0.05, momentum: 0.9}}\n"
	"logging: {every_steps: 100}\n";

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-device-test");
	tu_synth(tmpdir, "train", 320, 1, "8,8,1", 5);
	tu_write_file(tmpdir, "job.yaml", job_text, tmpdir);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

/* ---- placement ------------------------------------------------------------ */

START_TEST(placement_one_gpu_per_rank)
{
	int gpu = -1;
	for (int r = 0; r < 8; r++) {
		ck_assert_int_eq(dtf_backend_cuda_place(r, 8, 8, 0, &gpu), 0);
		ck_assert_int_eq(gpu, r);
	}
	/* fewer ranks than GPUs: the first ones are used */
	ck_assert_int_eq(dtf_backend_cuda_place(1, 2, 4, 0, &gpu), 0);
	ck_assert_int_eq(gpu, 1);
}
END_TEST

START_TEST(placement_too_many_ranks)
{
	int gpu = -1;
	ck_assert_int_eq(dtf_backend_cuda_place(5, 6, 4, 0, &gpu), -DTF_ERR_RUNTIME);
	ck_assert_str_eq(dtf_error_msg(),
			 "6 ranks on this node but 4 GPUs visible: each rank needs its own GPU\n"
			 "HINT: start at most 4 ranks per node (mpirun --map-by ppr:4:node), set allow_gpu_sharing: true to share GPUs, or use device: cpu");
	ck_assert_int_eq(gpu, -1);
	ck_assert_int_eq(dtf_backend_cuda_place(0, 2, 1, 0, &gpu), -DTF_ERR_RUNTIME);
	ck_assert_str_eq(dtf_error_msg(),
			 "2 ranks on this node but 1 GPU visible: each rank needs its own GPU\n"
			 "HINT: start at most 1 rank per node (mpirun --map-by ppr:1:node), set allow_gpu_sharing: true to share GPUs, or use device: cpu");
}
END_TEST

START_TEST(placement_sharing)
{
	int gpu = -1, want[6] = {0, 1, 2, 3, 0, 1};
	for (int r = 0; r < 6; r++) {
		ck_assert_int_eq(dtf_backend_cuda_place(r, 6, 4, 1, &gpu), 0);
		ck_assert_int_eq(gpu, want[r]);
	}
}
END_TEST

/* ---- job keys --------------------------------------------------------------- */

static struct dtf_job *load(const char *const *sets, int nsets, int want_rc)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	struct dtf_job *job = NULL;
	int rc = dtf_job_load(path, sets, nsets, &job);
	ck_assert_msg(rc == want_rc, "rc %d: %s", rc, dtf_error_msg());
	return job;
}

START_TEST(keys_defaults_and_values)
{
	struct dtf_job *job = load(NULL, 0, 0);
	ck_assert_int_eq(job->device.kind, DTF_DEVICE_AUTO);
	ck_assert_int_eq(job->device.precision, DTF_PRECISION_FP32);
	ck_assert_int_eq(job->device.allow_gpu_sharing, 0);
	dtf_job_free(job);
	const char *sets[] = {"device=cuda", "precision=tf32",
			      "allow_gpu_sharing=true"};
	job = load(sets, 3, 0);
	ck_assert_int_eq(job->device.kind, DTF_DEVICE_CUDA);
	ck_assert_int_eq(job->device.precision, DTF_PRECISION_TF32);
	ck_assert_int_eq(job->device.allow_gpu_sharing, 1);
	dtf_job_free(job);
	const char *cpu[] = {"device=cpu"};
	job = load(cpu, 1, 0);
	ck_assert_int_eq(job->device.kind, DTF_DEVICE_CPU);
	dtf_job_free(job);
}
END_TEST

START_TEST(keys_bad_values)
{
	const char *a[] = {"device=gpu"};
	ck_assert_ptr_null(load(a, 1, -DTF_ERR_CONFIG));
	ck_assert_str_eq(dtf_error_msg(),
			 "--set device: device: expected one of auto, cpu, cuda, got 'gpu' (did you mean 'cpu'?)");
	const char *b[] = {"precision=fp16"};
	ck_assert_ptr_null(load(b, 1, -DTF_ERR_CONFIG));
	ck_assert_str_eq(dtf_error_msg(),
			 "--set precision: precision: expected one of fp32, tf32, got 'fp16' (did you mean 'fp32'?)");
}
END_TEST

/* ---- selection, end to end ------------------------------------------------------ */

START_TEST(cuda_without_gpu_fails_auto_uses_cpu)
{
	char why[256];
	int ngpus = dtf_cuda_device_count(why, sizeof(why));
	int st = tu_run("%s/dtf-train -q --set device=cuda --export-variables %s/cuda.bin %s/job.yaml 2>%s/cuda.log",
			tu_build_root(), tmpdir, tmpdir, tmpdir);
	const char *log = tu_slurp(tmpdir, "cuda.log");
	if (ngpus == 0) {
		ck_assert_msg(st == 1, "device: cuda without a GPU: exit %d, log:\n%s",
			      st, log);
		char want[512];
		snprintf(want, sizeof(want),
			 "device: cuda, but this rank has no GPU: %s\n", why);
		ck_assert_msg(strstr(log, want) != NULL, "log:\n%s", log);
		ck_assert_msg(strstr(log, "HINT: use device: auto or device: cpu to train on the CPU") != NULL,
			      "log:\n%s", log);
		if (!dtf_cuda_built())
			ck_assert_msg(strstr(log, "built without CUDA") != NULL,
				      "log:\n%s", log);
	} else {
		ck_assert_msg(st == 0, "device: cuda with %d GPU(s): exit %d, log:\n%s",
			      ngpus, st, log);
	}
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=auto --export-variables %s/auto.bin %s/job.yaml 2>/dev/null",
				tu_build_root(), tmpdir, tmpdir), 0);
	ck_assert_int_eq(tu_run("%s/dtf-train -q --set device=cpu --export-variables %s/cpu.bin %s/job.yaml 2>/dev/null",
				tu_build_root(), tmpdir, tmpdir), 0);
	size_t na, nc;
	float *a = tu_read_vars(tmpdir, "auto.bin", &na);
	float *c = tu_read_vars(tmpdir, "cpu.bin", &nc);
	ck_assert_uint_eq(na, nc);
	size_t moved;
	double worst = tu_max_rel_diff(a, c, na, &moved);
	printf("device auto vs cpu (%d GPUs): %zu floats, max relative difference %.3g\n",
	       ngpus, na, worst);
	if (ngpus == 0)
		ck_assert_msg(memcmp(a, c, na * sizeof(float)) == 0,
			      "auto without a GPU must be the CPU run, bit for bit (worst %g)",
			      worst);
	else
		ck_assert_msg(worst <= 1e-3, "GPU vs CPU: %g", worst);
	ck_assert_uint_gt(moved, na / 2);
	free(a);
	free(c);
}
END_TEST

START_TEST(built_flag_matches_config)
{
	ck_assert_int_eq(dtf_cuda_built(), DTF_HAVE_CUDA);
	char why[256] = "";
	int n = dtf_cuda_device_count(why, sizeof(why));
	ck_assert_int_ge(n, 0);
	if (n == 0)
		ck_assert_msg(why[0] != 0, "no reason given for 0 devices");
	printf("CUDA built: %d; devices: %d%s%s\n", dtf_cuda_built(), n,
	       n ? "" : "; ", n ? "" : why);
}
END_TEST

static Suite *device_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("placement");
	tcase_add_test(tc, placement_one_gpu_per_rank);
	tcase_add_test(tc, placement_too_many_ranks);
	tcase_add_test(tc, placement_sharing);
	suite_add_tcase(s, tc);
	tc = tcase_create("keys");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_add_test(tc, keys_defaults_and_values);
	tcase_add_test(tc, keys_bad_values);
	suite_add_tcase(s, tc);
	tc = tcase_create("selection");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, built_flag_matches_config);
	tcase_add_test(tc, cuda_without_gpu_fails_auto_uses_cpu);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(device_suite(), 1);
}
