/*
 * test_cuda_mock.c - the trainer's GPU path on a mock device.
 *
 * Linked with tests/mock_cuda.c instead of the CUDA backend: the mock
 * implements ops/cuda/cuda.h with host memory and the CPU kernels, so
 * training through the GPU path (CUDA executor: plan translation, staging
 * sets, read-ahead across steps and epochs, statistics behind the
 * gradients, device-side optimizer, parameter upload/download, GPU
 * evaluation) must end with exactly the parameters, loss and accuracy of
 * the CPU path, and allocate nothing inside steps; a checkpoint of the
 * GPU path (its variables and optimizer slots copied from the device)
 * resumes, on the GPU path or on the CPU, to the bits of an uninterrupted
 * run.  It runs everywhere and
 * tests no CUDA code; tests/test_cuda.c does that on a GPU.
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
#include "train/train.h"

#include "testutil.h"

unsigned long dtf_mock_cuda_kernels(void);

static char tmpdir[256];
static struct dtf_comm *comm;

static const char job_text[] =
	"name: tiny-cnn\n"
	"seed: 11\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	TU_SYNTH_FEATURES_8X8
	TU_TINY_CNN_MODEL
	"train:\n"
	"  batch_size: 16\n"
	"  epochs: 3\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 1000}\n";

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-mock-test");
	tu_synth(tmpdir, "train", 488, 3, "8,8,1", 1);
	tu_synth(tmpdir, "test", 100, 1, "8,8,1", 2);
	tu_write_file(tmpdir, "job.yaml", job_text, tmpdir, tmpdir);
	ck_assert_int_eq(dtf_comm_init(NULL, NULL, &comm), 0);
}

static void teardown(void)
{
	dtf_comm_finalize(comm);
	tu_tmpdir_remove(tmpdir);
}

/* Trains in this process with the job file plus `sets` (resuming from
 * checkpoint.dir when `resume`); the exported variables (NAME.bin), their
 * count in *n, and the result in *res when res is not NULL. */
static float *run_job(const char *name, const char **sets, int nsets,
		      int resume, struct dtf_train_result *res, size_t *n)
{
	char path[512], out[512];
	tu_path(path, sizeof(path), tmpdir, "job.yaml");
	snprintf(out, sizeof(out), "%s/%s.bin", tmpdir, name);
	struct dtf_job *job = NULL;
	ck_assert_msg(dtf_job_load(path, sets, nsets, &job) == 0, "%s",
		      dtf_error_msg());
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1,
				      .export_variables = out,
				      .resume = resume};
	struct dtf_train_result own;
	int rc = dtf_train_run(job, comm, &opts, res ? res : &own);
	ck_assert_msg(rc == 0, "%s: %s", name, dtf_error_msg());
	dtf_job_free(job);
	return tu_read_vars(NULL, out, n);
}

static float *train(const char *device, const char *extra,
		    struct dtf_train_result *res, size_t *n)
{
	char dev[64];
	snprintf(dev, sizeof(dev), "device=%s", device);
	const char *sets[] = {dev, extra};
	return run_job(device, sets, extra ? 2 : 1, 0, res, n);
}

static void same_as_cpu(const char *extra)
{
	struct dtf_train_result rc_, rg;
	size_t nc, ng;
	unsigned long k0 = dtf_mock_cuda_kernels();
	/* The mock device runs the reference CPU kernels; compare with the
	 * CPU path on the same kernels (the fast CPU kernels are checked
	 * against the reference in test_fast.c). */
	setenv("DTF_CPU_KERNELS", "reference", 1);
	float *c = train("cpu", extra, &rc_, &nc);
	ck_assert_uint_eq(dtf_mock_cuda_kernels(), k0); /* cpu: no device */
	float *g = train("cuda", extra, &rg, &ng);
	ck_assert_uint_gt(dtf_mock_cuda_kernels(), k0 + 100);
	ck_assert_uint_eq(nc, ng);
	ck_assert_int_eq(rc_.steps, 3 * (488 / 16));
	ck_assert_int_eq(rg.steps, rc_.steps);
	size_t diff = 0, moved = 0;
	for (size_t i = 0; i < nc; i++) {
		diff += memcmp(&c[i], &g[i], sizeof(float)) != 0;
		moved += c[i] != 0.0f;
	}
	printf("%s: %zu parameters, %zu differ; eval loss cpu %.9g gpu-path %.9g, accuracy %.4f %.4f\n",
	       extra ? extra : "adam", nc, diff, rc_.eval_loss, rg.eval_loss,
	       rc_.eval_accuracy, rg.eval_accuracy);
	ck_assert_uint_eq(diff, 0);
	ck_assert_uint_gt(moved, nc / 2);
	ck_assert(rc_.eval_loss == rg.eval_loss);
	ck_assert(rc_.eval_accuracy == rg.eval_accuracy);
	ck_assert_uint_eq(rg.step_allocations, 0);
	free(c);
	free(g);
}

START_TEST(gpu_path_equals_cpu_adam)
{
	same_as_cpu(NULL);
}
END_TEST

START_TEST(gpu_path_equals_cpu_sgd_momentum)
{
	same_as_cpu("train.optimizer={sgd: {learning_rate: 0.05, momentum: 0.9, nesterov: true}}");
}
END_TEST

/* A graph-form model over token ids (the image bytes decoded as int32
 * ids: embedding, its scatter-add gradient; layer_norm and its gradients;
 * gelu in GPT-2's tanh form and its gradient) trains through the GPU path
 * to the CPU path's bits. */
static const char emb_job_text[] =
	"name: tiny-embedding\n"
	"seed: 5\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, dtype: int32, shape: [64]}\n"
	"    label: {type: int64, shape: []}\n"
	"model:\n"
	"  graph:\n"
	"    table: {variable: {shape: [256, 4]}}\n"
	"    emb: {embedding: {inputs: [image, table]}}\n"
	"    ln: {layer_norm: {inputs: [emb]}}\n"
	"    act: {gelu: {inputs: [ln], approximate: true}}\n"
	"    flat: {flatten: {inputs: [act]}}\n"
	"    w: {variable: {shape: [256, 4]}}\n"
	"    logits: {matmul: {inputs: [flat, w]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 16\n"
	"  epochs: 2\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 1000}\n";

static float *train_emb(const char *device, struct dtf_train_result *res,
			size_t *n)
{
	char path[512], out[512], dev[64];
	tu_write_file(tmpdir, "emb.yaml", emb_job_text, tmpdir, tmpdir);
	tu_path(path, sizeof(path), tmpdir, "emb.yaml");
	snprintf(out, sizeof(out), "%s/emb-%s.bin", tmpdir, device);
	snprintf(dev, sizeof(dev), "device=%s", device);
	const char *sets[] = {dev};
	struct dtf_job *job = NULL;
	ck_assert_msg(dtf_job_load(path, sets, 1, &job) == 0, "%s",
		      dtf_error_msg());
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1,
				      .export_variables = out};
	int rc = dtf_train_run(job, comm, &opts, res);
	ck_assert_msg(rc == 0, "%s: %s", device, dtf_error_msg());
	dtf_job_free(job);
	return tu_read_vars(NULL, out, n);
}

START_TEST(gpu_path_equals_cpu_embedding)
{
	struct dtf_train_result rc_, rg;
	size_t nc, ng;
	setenv("DTF_CPU_KERNELS", "reference", 1);
	unsigned long k0 = dtf_mock_cuda_kernels();
	float *c = train_emb("cpu", &rc_, &nc);
	ck_assert_uint_eq(dtf_mock_cuda_kernels(), k0);
	float *g = train_emb("cuda", &rg, &ng);
	ck_assert_uint_gt(dtf_mock_cuda_kernels(), k0 + 100);
	/* table, layer_norm gamma and beta (each padded to 16 floats), w */
	ck_assert_uint_eq(nc, 256 * 4 + 16 + 16 + 256 * 4);
	ck_assert_uint_eq(ng, nc);
	ck_assert_int_eq(rg.steps, 2 * (488 / 16));
	size_t diff = 0, moved = 0;
	for (size_t i = 0; i < nc; i++) {
		diff += memcmp(&c[i], &g[i], sizeof(float)) != 0;
		moved += c[i] != 0.0f;
	}
	printf("embedding: %zu parameters, %zu differ; eval loss cpu %.9g gpu-path %.9g, accuracy %.4f %.4f\n",
	       nc, diff, rc_.eval_loss, rg.eval_loss, rc_.eval_accuracy,
	       rg.eval_accuracy);
	ck_assert_uint_eq(diff, 0);
	ck_assert_uint_gt(moved, nc / 2);
	ck_assert(rc_.eval_loss == rg.eval_loss);
	ck_assert(rc_.eval_accuracy > 0.5); /* chance is 0.25 */
	ck_assert_uint_eq(rg.step_allocations, 0);
	free(c);
	free(g);
}
END_TEST

/* A tiny causal language model over the image bytes as tokens, built of
 * the graph ops a GPT needs (slices of one int32 window as inputs and
 * labels, token and position embeddings added by broadcast, causal
 * attention from matmul, reshape, transpose, batch_matmul with alpha and
 * a causal softmax, a head tied to the token table by transpose_b, the
 * sequence loss over (batch, 8, 256)) trains through the GPU path to the
 * CPU path's bits. */
static const char lm_job_text[] =
	"name: tiny-lm\n"
	"seed: 9\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\", shuffle_buffer: 64}\n"
	"  eval: {files: \"%s/test-*.tfrecord\"}\n"
	"  features:\n"
	"    image: {type: bytes, decode: uint8, dtype: int32, shape: [64]}\n"
	"model:\n"
	"  graph:\n"
	"    x: {slice: {inputs: [image], begin: 0, size: 8}}\n"
	"    y: {slice: {inputs: [image], begin: 1, size: 8}}\n"
	"    wte: {variable: {shape: [256, 8], initializer: {random_normal: {stddev: 0.02}}}}\n"
	"    wpe: {variable: {shape: [8, 8], initializer: {random_normal: {stddev: 0.02}}}}\n"
	"    tok: {embedding: {inputs: [x, wte]}}\n"
	"    h: {add: {inputs: [tok, wpe]}}\n"
	"    ln: {layer_norm: {inputs: [h], epsilon: 1.0e-5}}\n"
	"    wq: {variable: {shape: [8, 8]}}\n"
	"    wk: {variable: {shape: [8, 8]}}\n"
	"    wv: {variable: {shape: [8, 8]}}\n"
	"    q: {matmul: {inputs: [ln, wq]}}\n"
	"    k: {matmul: {inputs: [ln, wk]}}\n"
	"    v: {matmul: {inputs: [ln, wv]}}\n"
	"    qh: {reshape: {inputs: [q], shape: [8, 2, 4]}}\n"
	"    kh: {reshape: {inputs: [k], shape: [8, 2, 4]}}\n"
	"    vh: {reshape: {inputs: [v], shape: [8, 2, 4]}}\n"
	"    qt: {transpose: {inputs: [qh], perm: [0, 2, 1, 3]}}\n"
	"    kt: {transpose: {inputs: [kh], perm: [0, 2, 1, 3]}}\n"
	"    vt: {transpose: {inputs: [vh], perm: [0, 2, 1, 3]}}\n"
	"    att: {batch_matmul: {inputs: [qt, kt], adj_y: true, alpha: 0.5}}\n"
	"    p: {softmax: {inputs: [att], causal: true}}\n"
	"    o: {batch_matmul: {inputs: [p, vt]}}\n"
	"    ot: {transpose: {inputs: [o], perm: [0, 2, 1, 3]}}\n"
	"    merged: {reshape: {inputs: [ot], shape: [8, 8]}}\n"
	"    h2: {add: {inputs: [h, merged]}}\n"
	"    logits: {matmul: {inputs: [h2, wte], transpose_b: true}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: y}}\n"
	"  metrics: [accuracy]\n"
	"train:\n"
	"  batch_size: 16\n"
	"  epochs: 1\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"logging: {every_steps: 1000}\n";

static float *train_lm(const char *device, struct dtf_train_result *res,
		       size_t *n)
{
	char path[512], out[512], dev[64];
	tu_write_file(tmpdir, "lm.yaml", lm_job_text, tmpdir, tmpdir);
	tu_path(path, sizeof(path), tmpdir, "lm.yaml");
	snprintf(out, sizeof(out), "%s/lm-%s.bin", tmpdir, device);
	snprintf(dev, sizeof(dev), "device=%s", device);
	const char *sets[] = {dev};
	struct dtf_job *job = NULL;
	ck_assert_msg(dtf_job_load(path, sets, 1, &job) == 0, "%s",
		      dtf_error_msg());
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1,
				      .export_variables = out};
	int rc = dtf_train_run(job, comm, &opts, res);
	ck_assert_msg(rc == 0, "%s: %s", device, dtf_error_msg());
	dtf_job_free(job);
	return tu_read_vars(NULL, out, n);
}

START_TEST(gpu_path_equals_cpu_gpt_ops)
{
	struct dtf_train_result rc_, rg;
	size_t nc, ng;
	setenv("DTF_CPU_KERNELS", "reference", 1);
	unsigned long k0 = dtf_mock_cuda_kernels();
	float *c = train_lm("cpu", &rc_, &nc);
	ck_assert_uint_eq(dtf_mock_cuda_kernels(), k0);
	float *g = train_lm("cuda", &rg, &ng);
	ck_assert_uint_gt(dtf_mock_cuda_kernels(), k0 + 100);
	ck_assert_uint_eq(ng, nc);
	ck_assert_int_eq(rg.steps, 488 / 16);
	size_t diff = 0, moved = 0;
	for (size_t i = 0; i < nc; i++) {
		diff += memcmp(&c[i], &g[i], sizeof(float)) != 0;
		moved += c[i] != 0.0f;
	}
	printf("gpt ops: %zu parameters, %zu differ; eval loss cpu %.9g gpu-path %.9g, accuracy %.4f %.4f\n",
	       nc, diff, rc_.eval_loss, rg.eval_loss, rc_.eval_accuracy,
	       rg.eval_accuracy);
	ck_assert_uint_eq(diff, 0);
	ck_assert_uint_gt(moved, nc / 2);
	ck_assert(rc_.eval_loss == rg.eval_loss);
	ck_assert(rc_.eval_accuracy == rg.eval_accuracy);
	/* 256 classes: chance is log(256) = 5.5; the bytes repeat */
	ck_assert(rc_.eval_loss < 5.0);
	ck_assert_uint_eq(rg.step_allocations, 0);
	free(c);
	free(g);
}
END_TEST

/* Train `device` with `sets` (max_steps and checkpoint.dir) and a
 * learning-rate schedule; resume from
 * the checkpoint when `resume`; the exported variables. */
static float *train_ck(const char *name, const char *device,
		       const char *steps, int resume, size_t *n)
{
	char dev[64], ck[512];
	snprintf(dev, sizeof(dev), "device=%s", device);
	snprintf(ck, sizeof(ck), "checkpoint.dir=%s/ck", tmpdir);
	/* a schedule whose warmup and decay span the resume at step 20 */
	const char *sets[] = {dev, steps, ck,
			      "train.schedule={exponential_decay: {decay_steps: 9, decay_rate: 0.7, warmup_steps: 25}}"};
	return run_job(name, sets, 4, resume, NULL, n);
}

START_TEST(gpu_checkpoint_resumes)
{
	setenv("DTF_CPU_KERNELS", "reference", 1);
	size_t n0, n1, n2;
	/* 40 uninterrupted steps (the CPU path: the GPU path's bits, as
	 * gpu_path_equals_cpu_adam shows) */
	tu_run("rm -rf %s/ck", tmpdir);
	float *ref = train_ck("ref40", "cpu", "train.max_steps=40", 0, &n0);
	/* 20 on the GPU path with a checkpoint, 20 more resumed there */
	tu_run("rm -rf %s/ck", tmpdir);
	float *g20 = train_ck("g20", "cuda", "train.max_steps=20", 0, &n1);
	float *g40 = train_ck("g40", "cuda", "train.max_steps=40", 1, &n2);
	ck_assert_uint_eq(n0, n2);
	ck_assert_msg(memcmp(ref, g40, n0 * sizeof(float)) == 0,
		      "resumed on the GPU path: not the uninterrupted bits");
	ck_assert(memcmp(ref, g20, n0 * sizeof(float)) != 0);
	/* the same checkpoint of step 20 resumed on the CPU */
	tu_run("rm -rf %s/ck", tmpdir);
	free(train_ck("g20b", "cuda", "train.max_steps=20", 0, &n1));
	float *c40 = train_ck("c40", "cpu", "train.max_steps=40", 1, &n2);
	ck_assert_msg(memcmp(ref, c40, n0 * sizeof(float)) == 0,
		      "GPU checkpoint resumed on the CPU: not the uninterrupted bits");
	printf("GPU-path checkpoint at step 20 resumed to 40 on the GPU path and on the CPU: same bits as 40 uninterrupted steps (%zu parameters)\n",
	       n0);
	free(ref);
	free(g20);
	free(g40);
	free(c40);
}
END_TEST

/* train.schedule on the GPU path: the rate logged at each step is the
 * closed form (ExponentialDecay after a linear warmup, computed here),
 * the path trains to the CPU path's bits with it, and SGD with a rate
 * that drops to 0 after update 7 ends 16 steps where 8 constant steps
 * end (so the device's optimizer takes the scheduled rate). */
START_TEST(gpu_path_follows_the_schedule)
{
	setenv("DTF_CPU_KERNELS", "reference", 1);
	same_as_cpu("train.schedule={exponential_decay: {decay_steps: 7, decay_rate: 0.5, warmup_steps: 5}}");

	char logdir[600];
	snprintf(logdir, sizeof(logdir), "logging={every_steps: 1, dir: %s/run}", tmpdir);
	const char *sets[] = {"device=cuda", "train.max_steps=20", logdir,
			      "train.schedule={exponential_decay: {decay_steps: 7, decay_rate: 0.5, warmup_steps: 5}}"};
	size_t n;
	free(run_job("gpu-exp", sets, 4, 0, NULL, &n));
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/run", tmpdir);
	char *text = tu_read_file(dir, "metrics.jsonl", NULL);
	int lines = 0;
	for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
		const char *pl = strstr(l, "\"learning_rate\":");
		long long step;
		double lr;
		if (!strstr(l, "\"kind\":\"train\""))
			continue;
		ck_assert_int_eq(sscanf(strstr(l, "\"step\":"), "\"step\":%lld", &step), 1);
		ck_assert_int_eq(sscanf(pl, "\"learning_rate\":%lf", &lr), 1);
		double s = (double)(step - 1);
		double want = s < 5 ? 0.01 * s / 5 : 0.01 * pow(0.5, (s - 5) / 7);
		ck_assert_msg(fabs(lr - want) <= 1e-6 * want + 1e-15,
			      "step %lld: learning_rate %.9g, closed form %.9g", step, lr, want);
		lines++;
	}
	free(text);
	ck_assert_int_eq(lines, 20);

	const char *drop[] = {"device=cuda", "train.max_steps=16",
			      "train.optimizer={sgd: {learning_rate: 0.05}}",
			      "train.schedule={piecewise_constant: {boundaries: [7], values: [0.05, 0.0]}}"};
	const char *eight[] = {"device=cuda", "train.max_steps=8",
			       "train.optimizer={sgd: {learning_rate: 0.05}}"};
	const char *sixteen[] = {"device=cuda", "train.max_steps=16",
				 "train.optimizer={sgd: {learning_rate: 0.05}}"};
	size_t n1, n2, n3;
	float *a = run_job("drop", drop, 4, 0, NULL, &n1);
	float *b = run_job("eight", eight, 3, 0, NULL, &n2);
	float *c = run_job("sixteen", sixteen, 3, 0, NULL, &n3);
	ck_assert_uint_eq(n1, n2);
	ck_assert_msg(memcmp(a, b, n1 * sizeof(float)) == 0,
		      "16 steps with the rate 0 after update 7 differ from 8 steps");
	ck_assert(memcmp(a, c, n1 * sizeof(float)) != 0);
	free(a);
	free(b);
	free(c);
}
END_TEST

/* `mpirun -np 2` of dtf-train (cpu) or dtf-train-mock (cuda, the GPU path
 * on the mock device) with the job file plus `sets`, on the reference
 * kernels; the exported variables NAME.bin, their count in *n. */
static float *mpirun2(const char *name, const char *device, const char *sets,
		      size_t *n)
{
	char out[512], log[128];
	snprintf(out, sizeof(out), "%s/%s.bin", tmpdir, name);
	snprintf(log, sizeof(log), "%s.log", name);
	int gpu = strcmp(device, "cuda") == 0;
	/* this process is an MPI singleton: its PMIx and launch variables
	 * would make the nested mpirun join it */
	int st = tu_run("for v in $(env | sed -n 's/^\\(PMIX_[A-Z0-9_]*\\|OMPI_MCA_ess\\|OMPI_MCA_pmix\\|OMPI_MCA_orte_[a-z_]*\\|OMPI_APP_CTX_NUM_PROCS\\|OMPI_COMMAND\\)=.*/\\1/p'); do unset $v; done; "
			"DTF_CPU_KERNELS=reference timeout %d mpirun -np 2 "
			"%s/%s --threads 1 --quiet --set device=%s%s %s "
			"--export-variables %s %s/job.yaml 2>%s/%s",
			TU_MPIRUN_TIMEOUT_S, tu_build_root(),
			gpu ? "tests/dtf-train-mock" : "dtf-train", device,
			gpu ? " --set allow_gpu_sharing=true" : "", sets,
			out, tmpdir, tmpdir, log);
	ck_assert_msg(st == 0, "%s: exit %d\n%s", name, st,
		      tu_slurp(tmpdir, log));
	return tu_read_vars(NULL, out, n);
}

/* Two replicas on the GPU path: the device's gradients come to the host
 * and the strategy sums them in its buckets, as on the CPU, so every
 * setting of the reduction acts on the GPU path as there: the same bits
 * as the CPU path on 2 ranks, with fp16 compression (whose rounding
 * changes the variables: the compression ran), with accumulation, and
 * with the hierarchical reduction over two nodes. */
START_TEST(gpu_path_reduces_through_the_strategy)
{
	static const struct {
		const char *name, *sets;
	} cases[] = {
		{"plain", "--set train.max_steps=12"},
		{"fp16", "--set train.max_steps=12 --set strategy.communication.compression=fp16"},
		{"accumulate", "--set train.max_steps=6 --set train.accumulate_steps=2"},
		{"hierarchical", "--set train.max_steps=12 --set strategy.type=multi_worker_mirrored --set strategy.communication.hierarchical=true"},
	};
	float *plain = NULL;
	size_t np = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char cn[64], gn[64];
		snprintf(cn, sizeof(cn), "cpu-%s", cases[i].name);
		snprintf(gn, sizeof(gn), "gpu-%s", cases[i].name);
		/* two "nodes" of one rank each for the hierarchical case */
		if (strcmp(cases[i].name, "hierarchical") == 0)
			setenv("DTF_TEST_RANKS_PER_NODE", "1", 1);
		size_t nc, ng;
		float *c = mpirun2(cn, "cpu", cases[i].sets, &nc);
		float *g = mpirun2(gn, "cuda", cases[i].sets, &ng);
		unsetenv("DTF_TEST_RANKS_PER_NODE");
		ck_assert_uint_eq(nc, ng);
		size_t diff = 0;
		for (size_t j = 0; j < nc; j++)
			diff += memcmp(&c[j], &g[j], sizeof(float)) != 0;
		printf("2 ranks, %s: %zu parameters, %zu differ between the CPU and the GPU path\n",
		       cases[i].name, nc, diff);
		ck_assert_msg(diff == 0, "%s: %zu of %zu variables differ", cases[i].name, diff, nc);
		if (i == 0) {
			plain = g;
			np = ng;
		} else {
			if (strcmp(cases[i].name, "fp16") == 0)
				ck_assert_msg(memcmp(plain, g, np * sizeof(float)) != 0,
					      "fp16 compression changed nothing on the GPU path");
			free(g);
		}
		free(c);
	}
	free(plain);
}
END_TEST

/* An op or geometry the backend lacks: auto trains on the CPU (the same
 * parameters, no device kernel), cuda is a job error naming the node. */
START_TEST(unsupported_falls_back_or_fails)
{
	setenv("DTF_MOCK_REFUSE_CONV", "1", 1);
	struct dtf_train_result r1, r2;
	size_t n1, n2;
	unsigned long k0 = dtf_mock_cuda_kernels();
	float *c = train("cpu", NULL, &r1, &n1);
	float *a = train("auto", NULL, &r2, &n2);
	ck_assert_uint_eq(dtf_mock_cuda_kernels(), k0);
	ck_assert_uint_eq(n1, n2);
	ck_assert(memcmp(a, c, n1 * sizeof(float)) == 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	const char *sets[] = {"device=cuda"};
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load(path, sets, 1, &job), 0);
	struct dtf_train_opts opts = {.threads = 1, .quiet = 1};
	ck_assert_int_eq(dtf_train_run(job, comm, &opts, &r1), -DTF_ERR_CONFIG);
	ck_assert_str_eq(dtf_error_msg(),
			 "node 'conv2d_1/conv2d': mock: conv2d refused");
	dtf_job_free(job);
	unsetenv("DTF_MOCK_REFUSE_CONV");
	free(c);
	free(a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cuda_mock");
	TCase *tc = tcase_create("trainer_gpu_path");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, gpu_path_equals_cpu_adam);
	tcase_add_test(tc, gpu_path_equals_cpu_sgd_momentum);
	tcase_add_test(tc, gpu_path_equals_cpu_embedding);
	tcase_add_test(tc, gpu_path_equals_cpu_gpt_ops);
	tcase_add_test(tc, unsupported_falls_back_or_fails);
	tcase_add_test(tc, gpu_checkpoint_resumes);
	tcase_add_test(tc, gpu_path_follows_the_schedule);
	tcase_add_test(tc, gpu_path_reduces_through_the_strategy);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 0); /* MPI starts once */
}
