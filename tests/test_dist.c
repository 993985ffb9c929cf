/*
 * test_dist.c - strategies, communication and TF_CONFIG, end to end.
 *
 * Runs mpirun dtf-train on a small synthetic data set (as test_train does)
 * and compares the exported parameters after 20 steps with a one_device
 * run at the same global batch (DATA sharding without shuffle gives every
 * step the same examples whatever the number of ranks):
 *  - mirrored, multi_worker_mirrored (flat; hierarchical on 1 and 2
 *    "nodes"), central_storage, parameter_server sync on 2-4 ranks:
 *    max relative difference <= 1e-4;
 *  - fused + overlapped buckets == one allreduce per tensor (bit for bit);
 *  - fp16 compression within 1e-2 of float32 (and not equal to it);
 *    bf16 within 5e-2; 8 ranks each sending 10000 in fp16 sum to 80000
 *    (mean 10000), where the sum without pre-division is inf;
 *  - accumulate_steps 4 at batch B/4 == batch B (1 and 2 ranks);
 *  - every TF_CONFIG error: its own message, exit status 2, no hang;
 *    a loopback address (localhost, 127.x, ::1) among other hosts is an
 *    error naming the task, a cluster all on loopback addresses is not;
 *    a TF_CONFIG cluster (chief, worker, ps) trains like one_device;
 *  - one_device on 2 ranks and mirrored across nodes are job errors;
 *  - L2 weight decay on a variable the loss does not read follows
 *    (1 - lr rate)^steps on one process, mpi, shared memory and 1 or 2 ps;
 *    adamw on 2 ps is one process's bits; clipnorm on 2 ps is a job error;
 *  - on_nonfinite skip and fail; async parameter_server learns;
 *  - linear learning-rate scaling is logged;
 *  - a world of 1 under Slurm's several tasks is exit 2 saying to use
 *    srun --mpi=pmix (a world that matches them trains); "nodes" of one
 *    host name log no per-rank places and take no loopback error.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/tf_config.h"
#include "core/error.h"
#include "distribute/strategy.h"

#include "testutil.h"

static char tmpdir[256];

/* the sections after the tiny CNN (tu_write_tiny_job) */
static const char job_rest[] =
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 20\n"
	"  epochs: 5\n"
	"  optimizer: {adam: {learning_rate: 0.01}}\n"
	"strategy: {type: multi_worker_mirrored}\n"
	"logging: {every_steps: 10}\n";

/* one rank per task: chief, worker 0, ps 0 (Open MPI names the rank) */
static const char wrapper[] =
	"#!/bin/sh\n"
	"case $OMPI_COMM_WORLD_RANK in\n"
	"0) t='\"chief\", \"index\": 0';;\n"
	"1) t='\"worker\", \"index\": 0';;\n"
	"*) t='\"ps\", \"index\": 0';;\n"
	"esac\n"
	"TF_CONFIG=\"{\\\"cluster\\\": {\\\"chief\\\": [\\\"h0:2222\\\"], "
	"\\\"worker\\\": [\\\"h1:2222\\\"], \\\"ps\\\": [\\\"h2:2222\\\"]}, "
	"\\\"task\\\": {\\\"type\\\": $t}}\" exec \"$@\"\n";

/* mpirun -np np dtf-train ... --export-variables NAME.bin 2>NAME.log */
static int train(int np, const char *name, const char *env,
		 const char *sets)
{
	char log[256];
	snprintf(log, sizeof(log), "%s.log", name);
	return tu_mpirun(np, env, tmpdir, log,
			 "--threads 1 --export-variables %s/%s.bin %s "
			 "%s/job.yaml",
			 tmpdir, name, sets ? sets : "", tmpdir);
}

/* max over parameters of |a - b| / max(|a|, 1e-2) */
static double max_rel_diff(const char *a_name, const char *b_name)
{
	char an[128], bn[128];
	snprintf(an, sizeof(an), "%s.bin", a_name);
	snprintf(bn, sizeof(bn), "%s.bin", b_name);
	return tu_vars_rel_diff(tmpdir, bn, an, NULL, NULL, NULL);
}

static void setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-dist-test");
	tu_synth(tmpdir, "train", 480, 1, "8,8,1", 1);
	tu_synth(tmpdir, "test", 200, 1, "8,8,1", 2);
	tu_write_tiny_job(tmpdir, "job.yaml", 0, 1, job_rest);
	tu_write_file(tmpdir, "tf.sh", "%s", wrapper);
	ck_assert_int_eq(tu_run("chmod +x %s/tf.sh", tmpdir), 0);
	/* the reference: one process at global batch 16 */
	ck_assert_int_eq(train(1, "ref", NULL, "--set strategy.type=one_device"), 0);
}

static void teardown(void)
{
	tu_tmpdir_remove(tmpdir);
}

/* ---- equivalence ------------------------------------------------------------- */

static const struct {
	int np;
	const char *name, *env, *sets;
} same[] = {
	{2, "mirrored2", NULL, "--set strategy.type=mirrored"},
	{4, "mirrored4", NULL, "--set strategy.type=mirrored"},
	{2, "mwm2", NULL, NULL},
	{4, "mwm4", NULL, NULL},
	{2, "hier2", NULL, "--set strategy.communication.hierarchical=true"},
	{4, "hier4x1", NULL, "--set strategy.communication.hierarchical=true"},
	{4, "hier2x2", "DTF_TEST_RANKS_PER_NODE=2",
	 "--set strategy.communication.hierarchical=true"},
	{4, "hier2x2small", "DTF_TEST_RANKS_PER_NODE=2",
	 "--set strategy.communication.hierarchical=true "
	 "--set strategy.communication.bucket_mb=0.001"},
	{2, "central2", NULL, "--set strategy.type=central_storage"},
	{4, "central4", NULL, "--set strategy.type=central_storage "
			      "--set strategy.communication.bucket_mb=0.001"},
	{2, "ps2", NULL, "--set strategy.type=parameter_server"},
	{3, "ps3", NULL, "--set strategy.type=parameter_server"},
	{4, "ps4", NULL, "--set strategy.type=parameter_server --set strategy.num_ps=2"},
	{4, "ps4nooverlap", NULL, "--set strategy.type=parameter_server --set strategy.num_ps=2 "
				  "--set strategy.communication.overlap=false"},
};

START_TEST(strategies_match_one_device)
{
	int i = _i;
	int st = train(same[i].np, same[i].name, same[i].env, same[i].sets);
	char log[64];
	snprintf(log, sizeof(log), "%s.log", same[i].name);
	ck_assert_msg(st == 0, "%s: exit %d\n%s", same[i].name, st,
		      tu_slurp(tmpdir, log));
	double d = max_rel_diff("ref", same[i].name);
	printf("%-14s %d ranks vs one_device after 20 steps: max relative difference %.3g\n",
	       same[i].name, same[i].np, d);
	ck_assert_msg(d <= 1e-4, "%s: %g", same[i].name, d);
}
END_TEST

START_TEST(fused_overlapped_equals_per_tensor)
{
	/* one bucket per tensor, no overlap; several fused buckets started
	 * from backward; one bucket of everything started from backward */
	ck_assert_int_eq(train(2, "per_tensor", NULL,
			       "--set strategy.communication.bucket_mb=1e-9 "
			       "--set strategy.communication.overlap=false"), 0);
	ck_assert_msg(strstr(tu_slurp(tmpdir, "per_tensor.log"), "8 buckets") !=
			      NULL,
		      "%s", tu_slurp(tmpdir, "per_tensor.log"));
	ck_assert_int_eq(train(2, "fused_small", NULL,
			       "--set strategy.communication.bucket_mb=0.0008"), 0);
	ck_assert_int_eq(train(2, "fused_one", NULL, NULL), 0);
	double a = max_rel_diff("per_tensor", "fused_small");
	double b = max_rel_diff("per_tensor", "fused_one");
	printf("per tensor vs fused+overlapped: %.3g (small buckets), %.3g (one bucket)\n",
	       a, b);
	ck_assert(a == 0.0 && b == 0.0);
}
END_TEST

START_TEST(compression_close_to_float32)
{
	ck_assert_int_eq(train(2, "f32", NULL, NULL), 0);
	ck_assert_int_eq(train(2, "fp16", NULL,
			       "--set strategy.communication.compression=fp16"), 0);
	ck_assert_int_eq(train(2, "bf16", NULL,
			       "--set strategy.communication.compression=bf16"), 0);
	double h = max_rel_diff("f32", "fp16"), b = max_rel_diff("f32", "bf16");
	printf("after 20 steps vs float32: fp16 %.3g, bf16 %.3g\n", h, b);
	ck_assert_msg(h <= 1e-2 && h > 0, "fp16 %g", h);
	ck_assert_msg(b <= 5e-2 && b > h, "bf16 %g", b);
}
END_TEST

START_TEST(fp16_eight_ranks_no_overflow)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "timeout 120 mpirun -np 8 %s/tests/dist_probe fp16 10000 >%s/probe.out 2>&1",
		 tu_build_root(), tmpdir);
	ck_assert_int_eq(tu_run("%s", cmd), 0);
	const char *out = tu_slurp(tmpdir, "probe.out");
	printf("8 ranks x 10000.0 in fp16: %s", out);
	ck_assert_msg(strstr(out, "sum 80000 mean 10000 naive inf") != NULL,
		      "%s", out);
}
END_TEST

START_TEST(half_conversions)
{
	/* exact values, the largest half, overflow, RNE ties, subnormals */
	ck_assert(dtf_f16_to_f32(dtf_f32_to_f16(1250.0f)) == 1250.0f);
	ck_assert_uint_eq(dtf_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(dtf_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
	ck_assert_uint_eq(dtf_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie: even */
	ck_assert_uint_eq(dtf_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
	ck_assert_uint_eq(dtf_f32_to_f16(0x1p-24f), 0x0001);
	ck_assert(dtf_f16_to_f32(0x0001) == 0x1p-24f);
	ck_assert_uint_eq(dtf_f32_to_f16(-2.0f), 0xc000);
	ck_assert(isnan(dtf_f16_to_f32(dtf_f32_to_f16(NAN))));
	ck_assert(dtf_f16_to_f32(dtf_f32_to_f16(1e-9f)) == 0.0f);
	ck_assert_uint_eq(dtf_f32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(dtf_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); /* tie */
	ck_assert_uint_eq(dtf_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	ck_assert(dtf_bf16_to_f32(dtf_f32_to_bf16(3e38f)) > 2.9e38f);
	ck_assert(isnan(dtf_bf16_to_f32(dtf_f32_to_bf16(NAN))));
	/* every half converts back to itself */
	for (unsigned h = 0; h < 0x7c00; h++)
		ck_assert_uint_eq(dtf_f32_to_f16(dtf_f16_to_f32((uint16_t)h)), h);
}
END_TEST

START_TEST(accumulation_matches_big_batch)
{
	ck_assert_int_eq(train(1, "acc1", NULL,
			       "--set train.batch_size=4 --set train.accumulate_steps=4"), 0);
	ck_assert_int_eq(train(2, "acc2", NULL,
			       "--set train.batch_size=4 --set train.accumulate_steps=4 "
			       "--set strategy.communication.bucket_mb=0.001"), 0);
	ck_assert_int_eq(train(3, "acc_ps", NULL,
			       "--set train.batch_size=4 --set train.accumulate_steps=4 "
			       "--set strategy.type=parameter_server"), 0);
	double a = max_rel_diff("ref", "acc1"), b = max_rel_diff("ref", "acc2");
	double c = max_rel_diff("ref", "acc_ps");
	printf("k=4 at batch 4 vs batch 16: 1 rank %.3g, 2 ranks %.3g, ps %.3g\n",
	       a, b, c);
	ck_assert(a <= 1e-4 && b <= 1e-4 && c <= 1e-4);
}
END_TEST

/* ---- TF_CONFIG ----------------------------------------------------------------- */

#define W2 "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, "
static const struct {
	int np;
	const char *json, *want;
} tf_errors[] = {
	{2, "{\"cluster\": {\"worker\": [\"a:1\"}",
	 "TF_CONFIG: byte 30: not valid JSON: ']' expected near '}'"},
	/* strict JSON: what a YAML flow mapping would let through */
	{2, W2 "\"task\": {\"type\": \"worker\", \"index\": 0}} trailing",
	 "TF_CONFIG: byte 81: not valid JSON: end of file expected near 'trailing'"},
	{2, W2 "\"cluster\": {\"worker\": [\"c:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
	 "TF_CONFIG: byte 41: not valid JSON: duplicate object key near '\"cluster\"'"},
	{2, W2 "\"task\": {\"type\": \"worker\", \"index\": 0, \"index\": 1}}",
	 "TF_CONFIG: byte 80: not valid JSON: duplicate object key near '\"index\"'"},
	{2, W2 "\"task\": {\"type\": \"worker\", \"index\": \"0\"}}",
	 "TF_CONFIG: task.index must be a JSON number, got the string \"0\""},
	{2, W2 "\"task\": {\"type\": \"worker\", \"index\": 1.5}}",
	 "TF_CONFIG: task.index must be an integer, got 1.5 (a JSON number with a fraction or an exponent is not one)"},
	{2, W2 "\"task\": {\"type\": \"worker\", \"index\": 1e0}}",
	 "TF_CONFIG: task.index must be an integer, got 1 (a JSON number with a fraction or an exponent is not one)"},
	{2, "{'cluster': {\"worker\": [\"a:1\", \"b:1\"]}}",
	 "TF_CONFIG: byte 2: not valid JSON: string or '}' expected near '''"},
	{2, "{cluster: {\"worker\": [\"a:1\", \"b:1\"]}}",
	 "TF_CONFIG: byte 2: not valid JSON: string or '}' expected near 'cluster'"},
	{2, "{\"cluster\": {\"worker\": [a:1, b:1]}}",
	 "TF_CONFIG: byte 25: not valid JSON: invalid token near 'a'"},
	{2, W2 "/* comment */ \"task\": {\"type\": \"worker\", \"index\": 0}}",
	 "TF_CONFIG: byte 41: not valid JSON: string or '}' expected near '/'"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
	 "TF_CONFIG: task index 2 is out of range: cluster.worker has 2 tasks"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": -1}}",
	 "TF_CONFIG: task.index -1 is negative"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
	 "TF_CONFIG: task type 'ps' is not in the cluster (it has: worker)"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
	 "TF_CONFIG: duplicate address 'a:1': cluster.worker[0] and cluster.worker[1]"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\", \"c:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
	 "TF_CONFIG: the cluster has 3 tasks but 2 MPI ranks were started"},
	{2, "{\"cluster\": {\"chief\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
	 "TF_CONFIG: at most one chief is allowed, cluster.chief has 2"},
	{3, "{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"b:1\"], \"evaluator\": [\"c:1\", \"d:1\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
	 "TF_CONFIG: at most one evaluator is allowed, cluster.evaluator has 2"},
	/* the same task on every rank: rank 1 is not worker 0 */
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
	 "TF_CONFIG: rank 1 was given task worker 0, which is rank 0"},
	{2, "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"master\", \"index\": 0}}",
	 "TF_CONFIG: unknown task type 'master'"},
	{2, "[1, 2]", "TF_CONFIG: expected a JSON object"},
	/* a loopback address among other hosts: named, on every rank */
	{2, "{\"cluster\": {\"chief\": [\"h1:2222\"], \"worker\": [\"127.0.0.1:2222\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
	 "TF_CONFIG: cluster.worker[0] is '127.0.0.1:2222', a loopback address, but the cluster spans more than one host (cluster.chief[0] is 'h1:2222')"},
};

START_TEST(tf_config_errors)
{
	int i = _i;
	char path[512];
	snprintf(path, sizeof(path), "%s/tf_config.json", tmpdir);
	FILE *f = fopen(path, "w");
	fputs(tf_errors[i].json, f);
	fclose(f);
	int st = tu_run("TF_CONFIG=\"$(cat %s)\" timeout 60 mpirun -np %d -x TF_CONFIG "
			"%s/dtf-train -q %s/job.yaml >/dev/null 2>%s/tf.log",
			path, tf_errors[i].np, tu_build_root(), tmpdir, tmpdir);
	const char *log = tu_slurp(tmpdir, "tf.log");
	ck_assert_msg(st == 2, "exit %d for %s\n%s", st, tf_errors[i].json, log);
	ck_assert_msg(strstr(log, tf_errors[i].want) != NULL, "no '%s' in:\n%s",
		      tf_errors[i].want, log);
	/* the same bad TF_CONFIG on every rank: every rank says why */
	for (int r = 0; r < tf_errors[i].np && !strstr(tf_errors[i].want, "was given"); r++) {
		char tag[32], line[1024] = "";
		snprintf(tag, sizeof(tag), "[rank %d ", r);
		const char *p = strstr(log, tag);
		if (p)
			snprintf(line, sizeof(line), "%.*s",
				 (int)strcspn(p, "\n"), p);
		ck_assert_msg(strstr(line, tf_errors[i].want) != NULL,
			      "rank %d lacks '%s' in:\n%s", r,
			      tf_errors[i].want, log);
	}
}
END_TEST

/* TF_CONFIG's loopback addresses (dtf_cluster_parse): an error naming the
 * task where the cluster spans hosts, the cluster as is where all of it
 * is on this machine */
static const struct {
	const char *workers, *want;
} loopbacks[] = {
	{"\"h1:1\", \"localhost:1\"", "cluster.worker[1] is 'localhost:1', a loopback address"},
	{"\"LocalHost:1\", \"h2:1\"", "cluster.worker[0] is 'LocalHost:1', a loopback address"},
	{"\"h1:1\", \"[::1]:1\"", "cluster.worker[1] is '[::1]:1', a loopback address"},
	{"\"h1:1\", \"::1\"", "cluster.worker[1] is '::1', a loopback address"},
	{"\"h1:1\", \"127.5.6.7:1\"", "cluster.worker[1] is '127.5.6.7:1', a loopback address"},
	{"\"10.0.0.1:1\", \"[::ffff:127.0.0.1]:1\"", "cluster.worker[1] is '[::ffff:127.0.0.1]:1', a loopback address"},
	{"\"h1:1\", \"a.localhost:1\"", "cluster.worker[1] is 'a.localhost:1', a loopback address"},
	/* one machine: fine */
	{"\"localhost:1\", \"127.0.0.1:2\", \"[::1]:3\"", NULL},
	/* not loopback */
	{"\"h1:1\", \"128.0.0.1:1\", \"[::2]:1\", \"mylocalhost:1\", \"localhost.example:1\"", NULL},
};

START_TEST(tf_config_loopback)
{
	for (size_t i = 0; i < sizeof(loopbacks) / sizeof(loopbacks[0]); i++) {
		char json[512];
		snprintf(json, sizeof(json), "{\"cluster\": {\"worker\": [%s]}, "
			 "\"task\": {\"type\": \"worker\", \"index\": 0}}",
			 loopbacks[i].workers);
		struct dtf_cluster c;
		int rc = dtf_cluster_parse(json, &c);
		if (loopbacks[i].want) {
			ck_assert_msg(rc == -DTF_ERR_CONFIG, "%s: %d", json, rc);
			ck_assert_msg(strstr(dtf_error_msg(), loopbacks[i].want) &&
				      strstr(dtf_error_msg(), "HINT: give every task its host's name"),
				      "no '%s' in: %s", loopbacks[i].want,
				      dtf_error_msg());
			ck_assert_int_eq(c.ntasks, 0);
		} else {
			ck_assert_msg(rc == 0, "%s: %s", json, dtf_error_msg());
			dtf_cluster_deinit(&c);
		}
		dtf_error_clear();
	}
	/* dtf-train --print-cluster says so too (exit 2) */
	tu_write_file(tmpdir, "lo.json", "{\"cluster\": {\"chief\": [\"h1:2222\"], "
		      "\"worker\": [\"localhost:2222\"]}, \"task\": {\"type\": "
		      "\"chief\", \"index\": 0}}");
	int st = tu_run("TF_CONFIG=\"$(cat %s/lo.json)\" timeout 60 %s/dtf-train "
			"--print-cluster %s/job.yaml >%s/lo.log 2>&1",
			tmpdir, tu_build_root(), tmpdir, tmpdir);
	const char *log = tu_slurp(tmpdir, "lo.log");
	ck_assert_msg(st == 2, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "error: TF_CONFIG: cluster.worker[0] is "
			      "'localhost:2222', a loopback address, but the "
			      "cluster spans more than one host (cluster.chief[0] "
			      "is 'h1:2222'): the other hosts cannot reach it there\n"
			      "HINT: give every task its host's name or address "
			      "as the other hosts reach it\n"), "%s", log);
}
END_TEST

START_TEST(tf_config_cluster_trains)
{
	/* chief + worker + ps from TF_CONFIG, one per rank */
	char env[512];
	snprintf(env, sizeof(env), "PATH=%s:$PATH", tmpdir);
	int st = tu_run("timeout 120 mpirun -np 3 %s/tf.sh %s/dtf-train -q --threads 1 "
			"--set strategy.type=parameter_server --export-variables %s/tfc.bin "
			"%s/job.yaml 2>%s/tfc.log >/dev/null",
			tmpdir, tu_build_root(), tmpdir, tmpdir, tmpdir);
	ck_assert_msg(st == 0, "exit %d\n%s", st, tu_slurp(tmpdir, "tfc.log"));
	double d = max_rel_diff("ref", "tfc");
	printf("TF_CONFIG chief+worker+ps vs one_device: %.3g\n", d);
	ck_assert(d <= 1e-4);
	st = tu_run("timeout 60 mpirun -np 3 %s/tf.sh %s/dtf-train --print-cluster "
		    "--set strategy.type=parameter_server %s/job.yaml >%s/pc.out 2>&1",
		    tmpdir, tu_build_root(), tmpdir, tmpdir);
	const char *out = tu_slurp(tmpdir, "pc.out");
	ck_assert_msg(st == 0, "%s", out);
	ck_assert_str_eq(out, "rank 0: chief 0 h0:2222\n"
			      "rank 1: worker 0 h1:2222\n"
			      "rank 2: ps 0 h2:2222\n");
	/* without TF_CONFIG: from the job */
	st = tu_run("timeout 60 mpirun -np 4 %s/dtf-train --print-cluster "
		    "--set strategy.type=parameter_server --set strategy.num_ps=2 "
		    "%s/job.yaml >%s/pc.out 2>&1",
		    tu_build_root(), tmpdir, tmpdir);
	out = tu_slurp(tmpdir, "pc.out");
	ck_assert_msg(st == 0, "%s", out);
	ck_assert_str_eq(out, "rank 0: worker 0 (chief)\nrank 1: worker 1\n"
			      "rank 2: ps 0\nrank 3: ps 1\n");
}
END_TEST

START_TEST(strategy_world_errors)
{
	int st = train(2, "onedev", NULL, "--set strategy.type=one_device");
	ck_assert_int_eq(st, 2);
	ck_assert(strstr(tu_slurp(tmpdir, "onedev.log"),
			 "error: --set strategy.type: strategy one_device runs one process, but 2 ranks were started"));
	st = train(4, "mir_nodes", "DTF_TEST_RANKS_PER_NODE=2",
		   "--set strategy.type=mirrored");
	ck_assert_int_eq(st, 2);
	ck_assert(strstr(tu_slurp(tmpdir, "mir_nodes.log"),
			 "error: --set strategy.type: strategy mirrored keeps its replicas on one node, but the 4 ranks span 2 nodes"));
	/* rank 0 alone finds --export-variables unwritable: both ranks end
	 * (exit 2), neither waits in a collective (timeout 120 exits 124) */
	st = train(2, "export_bad", NULL,
		   "--export-variables /nonexistent-dir/x.bin");
	ck_assert_int_eq(st, 2);
	ck_assert(strstr(tu_slurp(tmpdir, "export_bad.log"),
			 "error: --export-variables /nonexistent-dir/x.bin: cannot write"));
	st = train(2, "ps_only", NULL, "--set strategy.type=parameter_server "
				       "--set strategy.num_ps=2");
	ck_assert_int_eq(st, 2);
	ck_assert(strstr(tu_slurp(tmpdir, "ps_only.log"), "leave no worker among the 2 ranks"));
}
END_TEST

START_TEST(nonfinite_skip_and_fail)
{
	/* a learning rate of 1e30 makes the second step's gradients NaN */
	const char *lr = "--set 'train.optimizer={adam: {learning_rate: 1e30}}'";
	char sets[256];
	snprintf(sets, sizeof(sets), "%s --set train.on_nonfinite=fail", lr);
	int st = train(2, "nf_fail", NULL, sets);
	const char *log = tu_slurp(tmpdir, "nf_fail.log");
	ck_assert_msg(st == 1, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "step 2: the summed gradients hold NaN or Inf"), "%s", log);
	ck_assert_msg(strstr(log, "HINT: lower the learning rate, or set train.on_nonfinite: skip"),
		      "%s", log);
	/* every replica's verdict alike: said once, by rank 0 (counting
	 * reads the file again: log is not used after it) */
	ck_assert_int_eq(tu_count_lines(tmpdir, "nf_fail.log", "the summed gradients hold NaN"), 1);
	/* non-finite at step 1, before any update: not the learning rate */
	st = train(2, "nf_first", NULL,
		   "--set 'model.layers=[flatten, {dense: {units: 4, name: logits, "
		   "kernel_initializer: {constant: {value: 1e38}}}}]'");
	log = tu_slurp(tmpdir, "nf_first.log");
	ck_assert_msg(st == 1, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "step 1: the summed gradients hold NaN or Inf"), "%s", log);
	ck_assert_msg(strstr(log, "HINT: the first step's gradients are already non-finite, "
				  "before any update, so the learning rate is not the cause: "
				  "check the data (NaN or Inf in the inputs) and the model"),
		      "%s", log);
	ck_assert_msg(!strstr(log, "lower the learning rate"), "%s", log);
	snprintf(sets, sizeof(sets), "%s --set train.on_nonfinite=skip "
		 "--set strategy.type=central_storage", lr);
	st = train(2, "nf_skip", NULL, sets);
	log = tu_slurp(tmpdir, "nf_skip.log");
	ck_assert_msg(st == 0, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "step 20: non-finite gradients, update skipped (19 so far)"),
		      "%s", log);
	snprintf(sets, sizeof(sets), "%s --set strategy.type=parameter_server", lr);
	st = train(3, "nf_ps", NULL, sets);
	ck_assert_msg(st == 1, "exit %d\n%s", st, tu_slurp(tmpdir, "nf_ps.log"));
}
END_TEST

START_TEST(async_ps_learns)
{
	int st = train(3, "async", NULL,
		       "--set strategy.type=parameter_server --set strategy.sync=false "
		       "--set strategy.max_staleness=1 --set train.max_steps=0 "
		       "--set train.epochs=3 --set logging.every_steps=1000");
	const char *log = tu_slurp(tmpdir, "async.log");
	ck_assert_msg(st == 0, "exit %d\n%s", st, log);
	const char *p = NULL, *q = log;
	while ((q = strstr(q, "eval loss ")) != NULL) /* the last epoch's */
		p = q++;
	ck_assert_msg(p != NULL, "%s", log);
	/* the line names the step as well as the epoch */
	ck_assert_msg(strstr(log, "epoch 3, step ") != NULL, "%s", log);
	double loss, acc;
	ck_assert_int_eq(sscanf(p, "eval loss %lf accuracy %lf", &loss, &acc), 2);
	printf("async parameter_server, 3 epochs: test accuracy %.3f\n", acc);
	ck_assert(acc > 0.6); /* chance is 0.25 */
}
END_TEST

START_TEST(linear_scaling_logged)
{
	int st = tu_mpirun(2, NULL, tmpdir, "lrs.log",
			   "--threads 1 "
			   "--set 'train.learning_rate_scaling={linear: {warmup_steps: 10}}' "
			   "--set train.max_steps=10 --set logging.every_steps=10 "
			   "%s/job.yaml",
			   tmpdir);
	const char *log = tu_slurp(tmpdir, "lrs.log");
	ck_assert_msg(st == 0, "%s", log);
	ck_assert_msg(strstr(log, "batch: global 16, per replica 8") != NULL, "%s", log);
	ck_assert_msg(strstr(log, "learning rate 0.01, effective 0.02 (linear scaling") != NULL,
		      "%s", log);
	/* step 10 is update 9 of the 10-step warmup: 0.01 * (1 + 9/10) */
	ck_assert_msg(strstr(log, "lr 0.019 ") != NULL, "%s", log);
}
END_TEST

/* A batch error found once the ranks are known points at the batch size
 * given: here an override, named "--set KEY". */
START_TEST(batch_error_names_set)
{
	int st = tu_mpirun(3, NULL, tmpdir, "bat.log",
			   "--threads 1 --set 'train={batch_size: 64}' %s/job.yaml",
			   tmpdir);
	const char *log = tu_slurp(tmpdir, "bat.log");
	ck_assert_msg(st == 2, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "] error: --set train: train.batch_size: the "
				  "global batch 64 is not divisible by the 3 "
				  "replicas\n") != NULL, "%s", log);
}
END_TEST

START_TEST(config_keys)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load(path, NULL, 0, &job), 0);
	ck_assert(job->strategy.bucket_mb == 25 && job->strategy.overlap == 1);
	ck_assert_int_eq(job->strategy.compression, DTF_GRAD_COMPRESSION_NONE);
	ck_assert_int_eq(job->strategy.num_ps, 1);
	ck_assert_int_eq(job->strategy.sync, 1);
	ck_assert_int_eq(job->train.accumulate_steps, 1);
	ck_assert_int_eq(job->train.on_nonfinite, DTF_NONFINITE_FAIL);
	dtf_job_free(job);
	const char *bad[] = {"strategy.communication.compression=fp8"};
	ck_assert_int_eq(dtf_job_load(path, bad, 1, &job), -DTF_ERR_CONFIG);
	ck_assert_msg(strstr(dtf_error_msg(), "strategy.communication.compression"),
		      "%s", dtf_error_msg());
	const char *bad2[] = {"train.learning_rate_scaling={none: {warmup_steps: 3}}"};
	ck_assert_int_eq(dtf_job_load(path, bad2, 1, &job), -DTF_ERR_CONFIG);
	ck_assert_msg(strstr(dtf_error_msg(), "'none' takes no settings"), "%s",
		      dtf_error_msg());
	const char *bad3[] = {"train.accumulate_steps=0"};
	ck_assert_int_eq(dtf_job_load(path, bad3, 1, &job), -DTF_ERR_CONFIG);
}
END_TEST

/* dtf-train run alone with the Slurm variables `env`: exit 2 and `want`
 * with the srun --mpi=pmix hint in its log LOG. */
static void slurm_refused(const char *env, const char *log, const char *want)
{
	int st = tu_run("%s timeout 120 %s/dtf-train --threads 1 %s/job.yaml "
			"2>%s/%s >/dev/null",
			env, tu_build_root(), tmpdir, tmpdir, log);
	const char *text = tu_slurp(tmpdir, log);
	ck_assert_msg(st == 2, "exit %d\n%s", st, text);
	ck_assert_msg(strstr(text, want) && strstr(text, "srun --mpi=pmix"),
		      "%s", text);
}

START_TEST(slurm_world_of_one)
{
	/* as `srun -n 2 --mpi=none dtf-train` starts each task: refused
	 * before MPI_Init */
	slurm_refused("SLURM_NTASKS=2 SLURM_PROCID=1", "slurm1.log",
		      "Slurm started 2 tasks (SLURM_NTASKS=2) but gave this one no PMI");
	/* a PMI that is there but not one this Open MPI speaks: MPI_Init
	 * makes a world of 1 */
	slurm_refused("SLURM_NTASKS=2 SLURM_PROCID=1 PMI_RANK=1", "slurm1b.log",
		      "MPI started a world of 1 rank, but Slurm started 2 tasks (SLURM_NTASKS=2)");
	int st;
	const char *log;
	/* the step's own count wins over the allocation's */
	st = tu_run("SLURM_NTASKS=4 SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0 "
		    "timeout 120 %s/dtf-train --threads 1 --set train.max_steps=2 "
		    "%s/job.yaml 2>%s/slurm_step1.log >/dev/null",
		    tu_build_root(), tmpdir, tmpdir);
	ck_assert_msg(st == 0, "exit %d\n%s", st,
		      tu_slurp(tmpdir, "slurm_step1.log"));
	/* two "nodes" of one host name: not a cross-host run (this
	 * machine's name may well resolve to a loopback address) */
	st = train(2, "slurm2", "SLURM_NTASKS=2 SLURM_PROCID=0 DTF_TEST_RANKS_PER_NODE=1",
		   "--set train.max_steps=2");
	log = tu_slurp(tmpdir, "slurm2.log");
	ck_assert_msg(st == 0, "exit %d\n%s", st, log);
	ck_assert_msg(strstr(log, "on 2 node(s)") && !strstr(log, "interface"),
		      "%s", log);
}
END_TEST

/* A linear model with a variable z (4x4 ones) that the loss never reads;
 * L2 weight decay 0.5 (kernels: w and z), sgd at lr 0.1.  Line 23 is
 * clipnorm (column 13). */
static const char decay_job[] =
	"name: decay\n"
	"seed: 3\n"
	"data:\n"
	"  train: {files: \"%s/train-*.tfrecord\"}\n"
	"  shard_policy: data\n"
	TU_SYNTH_FEATURES_8X8
	"model:\n"
	"  graph:\n"
	"    w: {variable: {shape: [64, 4], initializer: glorot_uniform}}\n"
	"    b: {variable: {shape: [4], initializer: ones}}\n"
	"    z: {variable: {shape: [4, 4], initializer: ones}}\n"
	"    flat: {flatten: {inputs: [image]}}\n"
	"    mm: {matmul: {inputs: [flat, w]}}\n"
	"    logits: {bias_add: {inputs: [mm, b]}}\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}\n"
	"train:\n"
	"  batch_size: 16\n"
	"  max_steps: 3\n"
	"  optimizer: {sgd: {learning_rate: 0.1}}\n"
	"  weight_decay: 0.5\n"
	"  clipnorm: 1000\n";

/* mpirun -np np dtf-train decay.yaml, its variables in NAME.bin */
static void train_decay(int np, const char *name, const char *sets)
{
	char log[64];
	snprintf(log, sizeof(log), "%s.log", name);
	int st = tu_mpirun(np, NULL, tmpdir, log,
			   "--threads 1 --export-variables %s/%s.bin %s "
			   "%s/decay.yaml",
			   tmpdir, name, sets, tmpdir);
	ck_assert_msg(st == 0, "%s: exit %d\n%s", name, st,
		      tu_slurp(tmpdir, log));
}

/* how many variables of NAME.bin are within 1e-6 of want */
static int count_near(const char *name, double want)
{
	char f[64];
	snprintf(f, sizeof(f), "%s.bin", name);
	size_t n;
	float *v = tu_read_vars(tmpdir, f, &n);
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += fabs((double)v[i] - want) < 1e-6;
	free(v);
	return k;
}

START_TEST(weight_decay_same_on_every_strategy)
{
	tu_write_file(tmpdir, "decay.yaml", decay_job, tmpdir);
	train_decay(1, "dref", "--set strategy.type=one_device");
	train_decay(2, "dmpi", "--set strategy.communication.implementation=mpi");
	train_decay(2, "dshm", "");
	train_decay(2, "dps", "--set strategy.type=parameter_server");
	train_decay(3, "dps2", "--set strategy.type=parameter_server "
			       "--set strategy.num_ps=2 --set train.clipnorm=0");
	/* z gets no loss gradient: p <- p (1 - lr rate) each step, so
	 * (1 - 0.05)^3 after 3; the bias (not decayed, moved by the loss)
	 * leaves no other variable there */
	const char *runs[] = {"dref", "dmpi", "dshm", "dps", "dps2"};
	for (int i = 0; i < 5; i++) {
		int k = count_near(runs[i], 0.857375);
		printf("weight decay, %s: %d of z's 16 at (1 - 0.05)^3\n",
		       runs[i], k);
		ck_assert_msg(k == 16, "%s: %d variables at 0.857375", runs[i], k);
	}
	/* the rest as one process: the ps decays the kernel alone too */
	for (int i = 1; i < 4; i++) {
		double d = max_rel_diff("dref", runs[i]);
		printf("weight decay, %s against one_device: max relative difference %.3g\n",
		       runs[i], d);
		ck_assert_msg(d <= 1e-5, "%s: %g", runs[i], d);
	}
	/* one worker and two ps: the update of one process, with the
	 * learning rate's bits (here adamw, bias decayed instead) */
	const char *w = "--set train.optimizer='{adamw: {learning_rate: 0.01, "
			"weight_decay: 0.1}}' --set train.weight_decay='{rate: "
			"0.5, groups: [bias]}' --set train.clipnorm=0";
	char sets[512];
	train_decay(1, "drefw", w);
	snprintf(sets, sizeof(sets), "%s --set strategy.type=parameter_server "
		 "--set strategy.num_ps=2", w);
	train_decay(3, "dpsw", sets);
	int bits = 0;
	tu_vars_rel_diff(tmpdir, "dpsw.bin", "drefw.bin", NULL, NULL, &bits);
	ck_assert_msg(bits, "adamw on 2 ps differs from one process");
	ck_assert_int_eq(count_near("drefw", 0.857375), 0);
	/* clipnorm's global norm is on no ps of several */
	int st = tu_mpirun(3, NULL, tmpdir, "dclip.log",
			   "--threads 1 --set strategy.type=parameter_server "
			   "--set strategy.num_ps=2 %s/decay.yaml", tmpdir);
	ck_assert_int_eq(st, 2);
	tu_assert_log(tmpdir, "dclip.log", "/decay.yaml:23:13: train.clipnorm: clipping by the global norm needs every gradient, and each of the 2 ps ranks");
}
END_TEST

static Suite *dist_suite(void)
{
	Suite *s = suite_create("dist");
	TCase *tc = tcase_create("strategies");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, half_conversions);
	tcase_add_test(tc, config_keys);
	tcase_add_loop_test(tc, strategies_match_one_device, 0,
			    (int)(sizeof(same) / sizeof(same[0])));
	tcase_add_test(tc, fused_overlapped_equals_per_tensor);
	tcase_add_test(tc, compression_close_to_float32);
	tcase_add_test(tc, fp16_eight_ranks_no_overflow);
	tcase_add_test(tc, accumulation_matches_big_batch);
	tcase_add_test(tc, batch_error_names_set);
	tcase_add_test(tc, strategy_world_errors);
	tcase_add_test(tc, nonfinite_skip_and_fail);
	tcase_add_test(tc, async_ps_learns);
	tcase_add_test(tc, weight_decay_same_on_every_strategy);
	tcase_add_test(tc, linear_scaling_logged);
	tcase_add_test(tc, slurm_world_of_one);
	suite_add_tcase(s, tc);
	/* a case of its own, so that CK_RUN_CASE=tf_config runs these */
	tc = tcase_create("tf_config");
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, tf_config_errors, 0,
			    (int)(sizeof(tf_errors) / sizeof(tf_errors[0])));
	tcase_add_test(tc, tf_config_loopback);
	tcase_add_test(tc, tf_config_cluster_trains);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(dist_suite(), 0);
}
