/*
 * test_config.c - the job file reader: the DESIGN.md sketch parses to the
 * expected struct, defaults are written, overrides graft into the tree, and
 * every error names its position and key exactly.
 *
 * Most cases edit one line of the sketch (SKETCH below, line numbers in the
 * comments) and check the message; positions are 1-based line:col.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/alloc.h"
#include "core/error.h"

#include "testutil.h"

/* The DESIGN.md section 4 sketch, minus the sections not in the language
 * yet (graph, schedule, communication, checkpoint). */
static const char SKETCH[] =
	"name: fashion-mnist-cnn\n"                                        /* 1 */
	"seed: 42\n"                                                       /* 2 */
	"data:\n"                                                          /* 3 */
	"  train: {files: \"datasets/fashion-mnist/train-*.tfrecord\", "
	"shuffle_buffer: 10000}\n"                                         /* 4 */
	"  eval:  {files: \"datasets/fashion-mnist/test-*.tfrecord\"}\n"   /* 5 */
	"  features:\n"                                                    /* 6 */
	"    image: {type: bytes, decode: uint8, shape: [28, 28, 1], "
	"scale: 0.00392156862745098}\n"                                    /* 7 */
	"    label: {type: int64, shape: []}\n"                            /* 8 */
	"model:\n"                                                         /* 9 */
	"  input: image\n"                                                 /* 10 */
	"  layers:\n"                                                      /* 11 */
	"    - {conv2d: {filters: 32, kernel: 5, padding: same, "
	"activation: relu}}\n"                                             /* 12 */
	"    - {max_pool2d: {size: 2}}\n"                                  /* 13 */
	"    - {conv2d: {filters: 64, kernel: 5, padding: same, "
	"activation: relu}}\n"                                             /* 14 */
	"    - {max_pool2d: {size: 2}}\n"                                  /* 15 */
	"    - flatten\n"                                                  /* 16 */
	"    - {dense: {units: 1024, activation: relu}}\n"                 /* 17 */
	"    - {dropout: {rate: 0.4}}\n"                                   /* 18 */
	"    - {dense: {units: 10, name: logits}}\n"                       /* 19 */
	"  loss: {sparse_softmax_cross_entropy: {logits: logits, "
	"labels: label}}\n"                                                /* 20 */
	"  metrics: [accuracy]\n"                                          /* 21 */
	"train:\n"                                                         /* 22 */
	"  batch_size: 128\n"                                              /* 23 */
	"  epochs: 5\n"                                                    /* 24 */
	"  optimizer: {adam: {learning_rate: 0.001}}\n"                    /* 25 */
	"strategy:\n"                                                      /* 26 */
	"  type: multi_worker_mirrored\n"                                  /* 27 */
	"logging: {every_steps: 50, dir: runs/fmnist}\n";                  /* 28 */

/* Only the required keys. */
static const char MINIMAL[] =
	"data:\n"
	"  train: {files: a.tfrecord}\n"
	"  features: {x: {type: float, shape: [4]}, y: {type: int64, shape: []}}\n"
	"model:\n"
	"  input: x\n"
	"  layers: [{dense: {units: 3}}]\n"
	"  loss: {sparse_softmax_cross_entropy: {logits: dense_1, labels: y}}\n"
	"train: {batch_size: 8}\n";

/* SKETCH with the first `from` replaced by `to` (static buffer). */
static const char *edit(const char *from, const char *to)
{
	static char buf[8192];
	const char *at = strstr(SKETCH, from);
	ck_assert_msg(at != NULL, "'%s' not in the sketch", from);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - SKETCH), SKETCH, to,
		 at + strlen(from));
	return buf;
}

/* Load text expecting failure with code `code`; the message. */
static const char *load_fail(const char *text, const char *const *ov, int n,
			     enum dtf_err code)
{
	struct dtf_job *job = (struct dtf_job *)1;
	dtf_error_clear();
	int rc = dtf_job_load_string("graphs/x.yaml", text, ov, n, &job);
	ck_assert_msg(rc == -(int)code, "rc %d (%s), expected %s: %s", rc,
		      dtf_error_name(rc), dtf_error_name(-(int)code),
		      dtf_error_msg());
	ck_assert_ptr_null(job);
	return dtf_error_msg();
}

static struct dtf_job *load_ok(const char *text, const char *const *ov,
			       int n)
{
	struct dtf_job *job = NULL;
	int rc = dtf_job_load_string("graphs/x.yaml", text, ov, n, &job);
	ck_assert_msg(rc == 0, "rc %d: %s", rc, dtf_error_msg());
	ck_assert_ptr_nonnull(job);
	return job;
}

#define ck_assert_msg_is(got, want) ck_assert_str_eq(got, want)
#define ck_assert_has(got, part)                                         \
	ck_assert_msg(strstr(got, part) != NULL, "'%s' lacks '%s'", got, part)

static void check_layer(const struct dtf_layer *l, enum dtf_layer_kind kind,
			const char *name, const char *where)
{
	ck_assert_int_eq(l->kind, kind);
	ck_assert_str_eq(l->name, name);
	ck_assert_str_eq(l->where, where);
}

/* ---- the sketch -------------------------------------------------------- */

/* data.features.*.dtype: int32 ids from uint8 or int8 bytes; the other
 * combinations, and scale or offset on ids, are errors naming the key. */
START_TEST(test_feature_dtype)
{
	static const char text[] =
		"data:\n"
		"  train: {files: a.tfrecord}\n"
		"  features:\n"
		"    x: {type: float, shape: [4]}\n"
		"    t: {type: bytes, decode: uint8, dtype: int32, shape: [5]}\n"
		"    u: {type: bytes, decode: uint8, dtype: float32, shape: [5]}\n"
		"    y: {type: int64, dtype: int32, shape: []}\n"
		"model:\n"
		"  input: x\n"
		"  layers: [{dense: {units: 3}}]\n"
		"  loss: {sparse_softmax_cross_entropy: {logits: dense_1, labels: y}}\n"
		"train: {batch_size: 8}\n";
	struct dtf_job *job = load_ok(text, NULL, 0);
	ck_assert_int_eq(job->data.features[0].dtype, DTF_FLOAT32);
	ck_assert_int_eq(job->data.features[1].dtype, DTF_INT32);
	ck_assert_int_eq(job->data.features[2].dtype, DTF_FLOAT32);
	ck_assert_int_eq(job->data.features[3].dtype, DTF_INT32);
	dtf_job_free(job);
	ck_assert_msg_is(load_fail(edit("{type: int64, shape: []}",
					"{type: int64, dtype: float32, shape: []}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:8:33: data.features.label.dtype: an int64 "
			 "feature decodes to int32 (ids)");
	ck_assert_msg_is(load_fail(edit("decode: uint8, shape: [28, 28, 1]",
					"decode: float16, dtype: int32, shape: [28, 28, 1]"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:7:50: data.features.image.dtype: int32 "
			 "output needs decode: uint8 or int8 (integer ids), not "
			 "float16");
	ck_assert_msg_is(load_fail(edit("decode: uint8, shape: [28, 28, 1]",
					"decode: uint8, dtype: int32, shape: [28, 28, 1]"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:7:82: data.features.image.scale: scale "
			 "applies to float32 output; ids (dtype: int32) are the "
			 "raw values");
	ck_assert_msg_is(load_fail(edit("decode: uint8, shape: [28, 28, 1]",
					"decode: uint8, dtype: int64, shape: [28, 28, 1]"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:7:48: data.features.image.dtype: expected "
			 "one of float32, int32, got 'int64' (did you mean "
			 "'int32'?)");
}
END_TEST

START_TEST(test_sketch_parses)
{
	struct dtf_job *job = load_ok(SKETCH, NULL, 0);

	ck_assert_str_eq(job->path, "graphs/x.yaml");
	ck_assert_str_eq(job->name, "fashion-mnist-cnn");
	ck_assert_uint_eq(job->seed, 42);

	ck_assert_str_eq(job->data.train_files,
			 "datasets/fashion-mnist/train-*.tfrecord");
	ck_assert_str_eq(job->data.eval_files,
			 "datasets/fashion-mnist/test-*.tfrecord");
	ck_assert_int_eq(job->data.shuffle_buffer, 10000);
	ck_assert_int_eq(job->data.nfeatures, 2);
	const struct dtf_feature_spec *img = &job->data.features[0];
	ck_assert_str_eq(img->name, "image");
	ck_assert_int_eq(img->type, DTF_FEATURE_BYTES);
	ck_assert_int_eq(img->decode, DTF_DECODE_UINT8);
	ck_assert_int_eq(img->rank, 3);
	ck_assert_int_eq(img->shape[0], 28);
	ck_assert_int_eq(img->shape[1], 28);
	ck_assert_int_eq(img->shape[2], 1);
	ck_assert(img->scale == (float)0.00392156862745098);
	ck_assert(img->offset == 0.0f);
	ck_assert_int_eq(img->dtype, DTF_FLOAT32);
	const struct dtf_feature_spec *lab = &job->data.features[1];
	ck_assert_str_eq(lab->name, "label");
	ck_assert_int_eq(lab->type, DTF_FEATURE_INT64);
	ck_assert_int_eq(lab->decode, DTF_DECODE_NONE);
	ck_assert_int_eq(lab->rank, 0);
	ck_assert(lab->scale == 1.0f);
	ck_assert(lab->offset == 0.0f);
	ck_assert_int_eq(lab->dtype, DTF_INT32);

	ck_assert_str_eq(job->model.input, "image");
	ck_assert_int_eq(job->model.nlayers, 8);
	const struct dtf_layer *L = job->model.layers;
	check_layer(&L[0], DTF_LAYER_CONV2D, "conv2d_1", "graphs/x.yaml:12:7");
	ck_assert_int_eq(L[0].filters, 32);
	ck_assert_int_eq(L[0].kernel_h, 5);
	ck_assert_int_eq(L[0].kernel_w, 5);
	ck_assert_int_eq(L[0].stride_h, 1);
	ck_assert_int_eq(L[0].stride_w, 1);
	ck_assert_int_eq(L[0].padding, 1);
	ck_assert_int_eq(L[0].use_bias, 1);
	ck_assert_int_eq(L[0].activation, DTF_ACT_RELU);
	check_layer(&L[1], DTF_LAYER_MAX_POOL2D, "max_pool2d_1",
		    "graphs/x.yaml:13:7");
	ck_assert_int_eq(L[1].size_h, 2);
	ck_assert_int_eq(L[1].size_w, 2);
	ck_assert_int_eq(L[1].stride_h, 2);
	ck_assert_int_eq(L[1].stride_w, 2);
	ck_assert_int_eq(L[1].padding, 0);
	check_layer(&L[2], DTF_LAYER_CONV2D, "conv2d_2", "graphs/x.yaml:14:7");
	ck_assert_int_eq(L[2].filters, 64);
	ck_assert_int_eq(L[2].kernel_h, 5);
	ck_assert_int_eq(L[2].kernel_w, 5);
	ck_assert_int_eq(L[2].padding, 1);
	ck_assert_int_eq(L[2].activation, DTF_ACT_RELU);
	check_layer(&L[3], DTF_LAYER_MAX_POOL2D, "max_pool2d_2",
		    "graphs/x.yaml:15:7");
	check_layer(&L[4], DTF_LAYER_FLATTEN, "flatten_1",
		    "graphs/x.yaml:16:7");
	check_layer(&L[5], DTF_LAYER_DENSE, "dense_1", "graphs/x.yaml:17:7");
	ck_assert_int_eq(L[5].units, 1024);
	ck_assert_int_eq(L[5].use_bias, 1);
	ck_assert_int_eq(L[5].activation, DTF_ACT_RELU);
	check_layer(&L[6], DTF_LAYER_DROPOUT, "dropout_1",
		    "graphs/x.yaml:18:7");
	ck_assert(L[6].rate == 0.4f);
	check_layer(&L[7], DTF_LAYER_DENSE, "logits", "graphs/x.yaml:19:7");
	ck_assert_int_eq(L[7].units, 10);
	ck_assert_int_eq(L[7].activation, DTF_ACT_NONE);

	ck_assert_int_eq(job->model.loss, DTF_LOSS_SPARSE_SOFTMAX_XENT);
	ck_assert_str_eq(job->model.loss_logits, "logits");
	ck_assert_str_eq(job->model.loss_labels, "label");
	ck_assert_str_eq(job->model.loss_where, "graphs/x.yaml:20:3");
	ck_assert_int_eq(job->model.metric_accuracy, 1);

	ck_assert_int_eq(job->train.batch_size, 128);
	ck_assert_int_eq(job->train.per_replica_batch_size, 0);
	ck_assert_int_eq(job->train.epochs, 5);
	ck_assert_int_eq(job->train.max_steps, 0);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_ADAM);
	ck_assert(job->train.learning_rate == 0.001);
	ck_assert(job->train.beta_1 == 0.9);
	ck_assert(job->train.beta_2 == 0.999);
	ck_assert(job->train.epsilon == 1e-7);
	ck_assert(job->train.momentum == 0.0);
	ck_assert_int_eq(job->train.nesterov, 0);
	ck_assert_str_eq(job->train.where, "graphs/x.yaml:23:15");

	ck_assert_int_eq(job->strategy.type,
			 DTF_STRATEGY_MULTI_WORKER_MIRRORED);
	ck_assert_int_eq(job->logging.every_steps, 50);
	ck_assert_str_eq(job->logging.dir, "runs/fmnist");
	dtf_job_free(job);
}
END_TEST

START_TEST(test_minimal_defaults)
{
	struct dtf_job *job = load_ok(MINIMAL, NULL, 0);

	ck_assert_str_eq(job->name, "x"); /* graphs/x.yaml */
	ck_assert_uint_eq(job->seed, 42);
	ck_assert_ptr_null(job->data.eval_files);
	ck_assert_int_eq(job->data.shuffle_buffer, 0);
	ck_assert_int_eq(job->data.features[0].rank, 1);
	ck_assert_int_eq(job->data.features[0].shape[0], 4);
	ck_assert_int_eq(job->data.features[0].dtype, DTF_FLOAT32);
	ck_assert_int_eq(job->data.features[0].decode, DTF_DECODE_NONE);
	ck_assert_int_eq(job->model.metric_accuracy, 0);
	ck_assert_int_eq(job->model.layers[0].use_bias, 1);
	ck_assert_int_eq(job->model.layers[0].activation, DTF_ACT_NONE);
	ck_assert_str_eq(job->model.layers[0].name, "dense_1");
	ck_assert_int_eq(job->train.epochs, 1);
	ck_assert_int_eq(job->train.max_steps, 0);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_SGD);
	ck_assert(job->train.learning_rate == 0.01);
	ck_assert(job->train.momentum == 0.0);
	ck_assert_int_eq(job->train.nesterov, 0);
	ck_assert(job->train.beta_1 == 0.9);
	ck_assert(job->train.beta_2 == 0.999);
	ck_assert(job->train.epsilon == 1e-7);
	ck_assert_int_eq(job->strategy.type,
			 DTF_STRATEGY_MULTI_WORKER_MIRRORED);
	ck_assert_int_eq(job->logging.every_steps, 100);
	ck_assert_ptr_null(job->logging.dir);
	ck_assert_int_eq(job->fault.straggler_window_steps, 50);
	ck_assert_int_eq(job->fault.straggler_windows, 3);
	ck_assert(job->fault.straggler_factor == 1.5);
	dtf_job_free(job);
}
END_TEST

/* fault.straggler_*: read, overridden, and a factor of 1 or less (which
 * would name every rank) an error at its position */
START_TEST(test_straggler_keys)
{
	const char *ov[] = {"fault.straggler_windows=2"};
	struct dtf_job *job = load_ok(
		edit("strategy:\n", "fault: {straggler_window_steps: 10, "
				     "straggler_windows: 4, straggler_factor: 2.5}\n"
				     "strategy:\n"),
		ov, 1);
	ck_assert_int_eq(job->fault.straggler_window_steps, 10);
	ck_assert_int_eq(job->fault.straggler_windows, 2);
	ck_assert(job->fault.straggler_factor == 2.5);
	dtf_job_free(job);
	const char *msg = load_fail(edit("strategy:\n",
					 "fault: {straggler_factor: 1}\nstrategy:\n"),
				    NULL, 0, DTF_ERR_CONFIG);
	ck_assert_has(msg, "graphs/x.yaml:26:27: fault.straggler_factor: must be more than 1");
	msg = load_fail(edit("strategy:\n",
			     "fault: {straggler_windows: 0}\nstrategy:\n"),
			NULL, 0, DTF_ERR_CONFIG);
	ck_assert_has(msg, "fault.straggler_windows");
	msg = load_fail(edit("strategy:\n",
			     "fault: {straggler_window_steps: 1000001}\nstrategy:\n"),
			NULL, 0, DTF_ERR_CONFIG);
	ck_assert_has(msg, "graphs/x.yaml:26:33: fault.straggler_window_steps: must be at most 1000000");
	const char *ts[] = {"logging.trace_steps=[3]"};
	ck_assert_msg_is(load_fail(SKETCH, ts, 1, DTF_ERR_CONFIG),
			 "--set logging.trace_steps: logging.trace_steps: "
			 "expected a list [from, to] of two step numbers, got a "
			 "list of 1 item");
}
END_TEST

START_TEST(test_layer_variants)
{
	const char *text = edit(
		"    - {conv2d: {filters: 64, kernel: 5, padding: same, "
		"activation: relu}}\n",
		"    - {conv2d: {filters: 64, kernel: [5, 3], strides: [2, 1], "
		"use_bias: no, activation: linear}}\n"
		"    - relu\n"
		"    - {relu: {name: r}}\n"
		"    - {max_pool2d: {size: [3, 2], strides: 1, padding: same}}\n"
		"    - {dense: {units: 4}}\n");
	struct dtf_job *job = load_ok(text, NULL, 0);
	const struct dtf_layer *L = job->model.layers;

	ck_assert_int_eq(job->model.nlayers, 12);
	check_layer(&L[2], DTF_LAYER_CONV2D, "conv2d_2", "graphs/x.yaml:14:7");
	ck_assert_int_eq(L[2].kernel_h, 5);
	ck_assert_int_eq(L[2].kernel_w, 3);
	ck_assert_int_eq(L[2].stride_h, 2);
	ck_assert_int_eq(L[2].stride_w, 1);
	ck_assert_int_eq(L[2].padding, 0);
	ck_assert_int_eq(L[2].use_bias, 0);
	ck_assert_int_eq(L[2].activation, DTF_ACT_NONE);
	check_layer(&L[3], DTF_LAYER_RELU, "relu_1", "graphs/x.yaml:15:7");
	check_layer(&L[4], DTF_LAYER_RELU, "r", "graphs/x.yaml:16:7");
	check_layer(&L[5], DTF_LAYER_MAX_POOL2D, "max_pool2d_2",
		    "graphs/x.yaml:17:7");
	ck_assert_int_eq(L[5].size_h, 3);
	ck_assert_int_eq(L[5].size_w, 2);
	ck_assert_int_eq(L[5].stride_h, 1);
	ck_assert_int_eq(L[5].stride_w, 1);
	ck_assert_int_eq(L[5].padding, 1);
	/* counted per kind, named ones included (Keras) */
	check_layer(&L[6], DTF_LAYER_DENSE, "dense_1", "graphs/x.yaml:18:7");
	check_layer(&L[7], DTF_LAYER_MAX_POOL2D, "max_pool2d_3",
		    "graphs/x.yaml:19:7");
	check_layer(&L[9], DTF_LAYER_DENSE, "dense_2", "graphs/x.yaml:21:7");
	check_layer(&L[11], DTF_LAYER_DENSE, "logits", "graphs/x.yaml:23:7");
	dtf_job_free(job);
}
END_TEST

START_TEST(test_bool_and_optimizer_forms)
{
	static const char *const yes[] = {"true", "yes", "on", "True", "ON"};
	static const char *const no[] = {"false", "no", "off", "FALSE", "Off"};
	char line[128];
	for (int i = 0; i < 5; i++) {
		for (int v = 0; v < 2; v++) {
			snprintf(line, sizeof(line),
				 "  optimizer: {sgd: {momentum: 0.9, "
				 "nesterov: %s}}\n",
				 v ? yes[i] : no[i]);
			struct dtf_job *job = load_ok(
				edit("  optimizer: {adam: {learning_rate: "
				     "0.001}}\n",
				     line),
				NULL, 0);
			ck_assert_int_eq(job->train.optimizer, DTF_OPT_SGD);
			ck_assert_int_eq(job->train.nesterov, v);
			ck_assert(job->train.momentum == 0.9);
			ck_assert(job->train.learning_rate == 0.01);
			dtf_job_free(job);
		}
	}
	/* a bare name takes the optimizer's defaults */
	struct dtf_job *job = load_ok(
		edit("{adam: {learning_rate: 0.001}}", "adam"), NULL, 0);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_ADAM);
	ck_assert(job->train.learning_rate == 0.001);
	dtf_job_free(job);
	job = load_ok(edit("batch_size: 128", "per_replica_batch_size: 32"),
		      NULL, 0);
	ck_assert_int_eq(job->train.batch_size, 0);
	ck_assert_int_eq(job->train.per_replica_batch_size, 32);
	dtf_job_free(job);
}
END_TEST

START_TEST(test_names)
{
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_CONV2D), "conv2d");
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_MAX_POOL2D),
			 "max_pool2d");
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_FLATTEN), "flatten");
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_DENSE), "dense");
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_DROPOUT), "dropout");
	ck_assert_str_eq(dtf_layer_kind_name(DTF_LAYER_RELU), "relu");
	ck_assert_str_eq(dtf_strategy_name(DTF_STRATEGY_ONE_DEVICE),
			 "one_device");
	ck_assert_str_eq(dtf_strategy_name(DTF_STRATEGY_MIRRORED), "mirrored");
	ck_assert_str_eq(dtf_strategy_name(DTF_STRATEGY_MULTI_WORKER_MIRRORED),
			 "multi_worker_mirrored");
	ck_assert_str_eq(dtf_strategy_name(DTF_STRATEGY_CENTRAL_STORAGE),
			 "central_storage");
	ck_assert_str_eq(dtf_strategy_name(DTF_STRATEGY_PARAMETER_SERVER),
			 "parameter_server");
	dtf_job_free(NULL);
}
END_TEST

/* ---- errors ----------------------------------------------------------------- */

START_TEST(test_unknown_key_suggests)
{
	ck_assert_msg_is(load_fail(edit("  epochs: 5", "  epoch: 2"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:24:3: train.epoch: unknown key 'epoch' "
			 "(did you mean 'epochs'?)");
	/* far from every key: the known keys are listed */
	ck_assert_msg_is(
		load_fail(edit("strategy:\n", "profiler: {dir: x}\nstrategy:\n"),
			  NULL, 0, DTF_ERR_CONFIG),
		"graphs/x.yaml:26:1: profiler: unknown key 'profiler' "
		"(known keys: name, seed, data, model, train, strategy, "
		"memory, logging, device, precision, allow_gpu_sharing, checkpoint, fault)");
	ck_assert_msg_is(load_fail(edit("size: 2}", "sise: 2}"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:13:21: model.layers[1].max_pool2d.sise: "
			 "unknown key 'sise' (did you mean 'size'?)");
}
END_TEST

START_TEST(test_unknown_layer_kind)
{
	ck_assert_msg_is(load_fail(edit("{conv2d: {filters: 32",
					"{conv2: {filters: 32"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:12:8: model.layers[0]: unknown layer "
			 "kind 'conv2' (did you mean 'conv2d'?)");
	ck_assert_msg_is(load_fail(edit("    - flatten", "    - flaten"), NULL,
				   0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:16:7: model.layers[4]: unknown layer "
			 "kind 'flaten' (did you mean 'flatten'?)");
}
END_TEST

START_TEST(test_wrong_type)
{
	ck_assert_msg_is(load_fail(edit("batch_size: 128", "batch_size: lots"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:23:15: train.batch_size: expected a "
			 "positive integer, got 'lots'");
	ck_assert_msg_is(load_fail(edit("epochs: 5", "epochs: 2.5"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:24:11: train.epochs: expected a "
			 "positive integer, got '2.5'");
	ck_assert_msg_is(load_fail(edit("epochs: 5", "epochs: 99999999999"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:24:11: train.epochs: expected a "
			 "positive integer, got '99999999999' (at most 2147483647)");
	/* the pipeline's limits are the job's */
	ck_assert_msg_is(load_fail(edit("  features:\n",
					"  prefetch: 4097\n  features:\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:6:13: data.prefetch: expected a "
			 "non-negative integer, got '4097' (at most 4096)");
	ck_assert_msg_is(load_fail(edit("  features:\n",
					"  cycle_length: 0\n  features:\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:6:17: data.cycle_length: expected a "
			 "positive integer, got '0'");
	ck_assert_msg_is(load_fail(edit("  features:\n",
					"  cycle_length: 5000\n  features:\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:6:17: data.cycle_length: expected a "
			 "positive integer, got '5000' (at most 4096)");
	ck_assert_msg_is(
		load_fail(edit("batch_size: 128",
			       "batch_size: 99999999999999999999"),
			  NULL, 0, DTF_ERR_CONFIG),
		"graphs/x.yaml:23:15: train.batch_size: expected a positive "
		"integer, got '99999999999999999999' (at most 9223372036854775807)");
	ck_assert_msg_is(load_fail(edit("learning_rate: 0.001",
					"learning_rate: fast"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:25:37: train.optimizer.adam."
			 "learning_rate: expected a positive number, got "
			 "'fast'");
	ck_assert_msg_is(load_fail(edit("learning_rate: 0.001",
					"learning_rate: 1e999"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:25:37: train.optimizer.adam."
			 "learning_rate: expected a positive number, got "
			 "'1e999'");
	ck_assert_msg_is(load_fail(edit("seed: 42", "seed: abc"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:2:7: seed: expected a non-negative "
			 "integer, got 'abc'");
	ck_assert_msg_is(load_fail(edit("  input: image", "  input: [image]"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:10:10: model.input: expected a string, "
			 "got a list");
	ck_assert_msg_is(load_fail(edit("type: multi_worker_mirrored",
					"type: mirored"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:27:9: strategy.type: expected one of "
			 "one_device, mirrored, multi_worker_mirrored, "
			 "central_storage, parameter_server, got 'mirored' "
			 "(did you mean 'mirrored'?)");
	ck_assert_msg_is(load_fail(edit("train:\n  batch", "train: 5\nx:\n  batch"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:22:8: train: expected a mapping, got "
			 "'5'");
}
END_TEST

START_TEST(test_missing_required)
{
	ck_assert_msg_is(load_fail(edit("{files: \"datasets/fashion-mnist/"
					"train-*.tfrecord\", ",
					"{"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:4:3: data.train: missing required key "
			 "'files'");
	ck_assert_msg_is(load_fail(edit("{units: 1024, ", "{"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:17:8: model.layers[5].dense: missing "
			 "required key 'units' (or 'tied_to')");
	ck_assert_msg_is(load_fail(edit("  input: image\n", ""), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:9:1: model: missing required key "
			 "'input' (the feature fed to the first layer)");
	ck_assert_msg_is(load_fail("seed: 1\n", NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:1:1: missing required key 'data'");
	ck_assert_msg_is(load_fail(edit("decode: uint8, ", ""), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:7:5: data.features.image: missing "
			 "required key 'decode' (a bytes feature needs one of "
			 "uint8, int8, float16, float32)");
	ck_assert_msg_is(load_fail(edit("  batch_size: 128\n", ""), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:22:1: train: missing required key "
			 "'batch_size' (or 'per_replica_batch_size')");
}
END_TEST

START_TEST(test_yaml_syntax)
{
	ck_assert_msg_is(load_fail(edit("  epochs: 5\n", "  epochs: [5\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:25:12: train.epochs: did not find "
			 "expected ',' or ']' (while parsing a flow sequence)");
	/* the nearest key: the one whose value holds the error, or the
	 * last complete one before it ("after") */
	ck_assert_msg_is(load_fail(edit("  input: image\n",
					"  input: image\n   bad: 1\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:11:7: model.input: mapping values are "
			 "not allowed in this context");
	ck_assert_msg_is(load_fail(edit("{adam: {learning_rate: 0.001}}",
					"{adam: {learning_rate: 0.001}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:26:1: after train.optimizer.adam: did "
			 "not find expected ',' or '}' (while parsing a flow "
			 "mapping)");
	ck_assert_has(load_fail(edit("  epochs: 5\n", "  epochs: 5\n\tx: 1\n"),
				NULL, 0, DTF_ERR_CONFIG),
		      ": after train.epochs: found a tab character that "
		      "violates indentation");
	/* in a list item, by its index as --set names it */
	ck_assert_has(load_fail(edit("{dense: {units: 1024, activation: relu}}",
				     "{dense: {units: [1024, activation: relu}}"),
				NULL, 0, DTF_ERR_CONFIG),
		      ":17:46: model.layers.5.dense.units.1.activation: did not find expected");
	ck_assert_msg_is(load_fail("a: 1\n---\nb: 2\n", NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:3:1: a job file holds one YAML "
			 "document; found a second one");
	/* a NUL byte (libyaml gives only its offset): line, column, key */
	char dir[256], path[512];
	tu_tmpdir_create(dir, sizeof(dir), "dtf-config-nul");
	static const char nul[] = "name: t\ntrain:\n  batch_size: 1\0006\n";
	tu_write_bytes(dir, "nul.yaml", nul, sizeof(nul) - 1);
	struct dtf_job *job = NULL;
	ck_assert_int_eq(dtf_job_load(tu_path(path, sizeof(path), dir, "nul.yaml"),
				      NULL, 0, &job),
			 -DTF_ERR_CONFIG);
	char want[1024];
	snprintf(want, sizeof(want),
		 "%s:3:16: train.batch_size: byte 0x00 (NUL) (byte offset 30): "
		 "control characters are not allowed", path);
	ck_assert_msg_is(dtf_error_msg(), want);
	tu_tmpdir_remove(dir);
	/* deep nesting is refused at once (libyaml is quadratic in depth) */
	static char deep[7 + 50000 + 1];
	memcpy(deep, "model: ", 7);
	memset(deep + 7, '[', 50000);
	ck_assert_msg_is(load_fail(deep, NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:1:71: collections nested deeper than "
			 "64 levels");
}
END_TEST

START_TEST(test_bad_values)
{
	ck_assert_msg_is(load_fail(edit("activation: relu}}\n    - {max",
					"use_bias: maybe}}\n    - {max"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:12:66: model.layers[0].conv2d.use_bias: "
			 "expected a boolean (true/false, yes/no, on/off), got "
			 "'maybe'");
	ck_assert_msg_is(load_fail(edit("batch_size: 128", "batch_size: 0"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:23:15: train.batch_size: expected a "
			 "positive integer, got '0'");
	ck_assert_msg_is(load_fail(edit("batch_size: 128", "batch_size: -64"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:23:15: train.batch_size: expected a "
			 "positive integer, got '-64'");
	ck_assert_msg_is(load_fail(edit("  batch_size: 128\n",
					"  batch_size: 128\n"
					"  per_replica_batch_size: 32\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:24:27: train: give batch_size (global) "
			 "or per_replica_batch_size, not both");
	ck_assert_msg_is(load_fail(edit("rate: 0.4", "rate: 1.0"), NULL, 0,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:18:24: model.layers[6].dropout.rate: "
			 "expected a number in [0, 1), got '1.0'");
	ck_assert_msg_is(load_fail(edit("shape: [28, 28, 1]",
					"shape: [28, 0, 1]"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:7:53: data.features.image.shape[1]: "
			 "expected a positive integer, got '0'");
	ck_assert_msg_is(load_fail(edit("{type: int64, shape: []}",
					"{type: int64, decode: uint8, shape: []}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:8:34: data.features.label.decode: only "
			 "a bytes feature has a decode");
	ck_assert_msg_is(load_fail(edit("  epochs: 5\n",
					"  epochs: 5\n  epochs: 6\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:25:3: train.epochs: duplicate key "
			 "(first given at graphs/x.yaml:24:3)");
}
END_TEST

/* data.compression is the default of data.train.compression and
 * data.eval.compression; each split may have its own. */
START_TEST(test_compression_per_split)
{
	struct dtf_job *job = load_ok(SKETCH, NULL, 0);
	ck_assert_int_eq(job->data.train_compression, DTF_COMPRESSION_NONE);
	ck_assert_int_eq(job->data.eval_compression, DTF_COMPRESSION_NONE);
	dtf_job_free(job);
	const char *both[] = {"data.compression=gzip"};
	job = load_ok(SKETCH, both, 1);
	ck_assert_int_eq(job->data.train_compression, DTF_COMPRESSION_GZIP);
	ck_assert_int_eq(job->data.eval_compression, DTF_COMPRESSION_GZIP);
	dtf_job_free(job);
	const char *eval[] = {"data.eval.compression=gzip"};
	job = load_ok(SKETCH, eval, 1);
	ck_assert_int_eq(job->data.train_compression, DTF_COMPRESSION_NONE);
	ck_assert_int_eq(job->data.eval_compression, DTF_COMPRESSION_GZIP);
	dtf_job_free(job);
	/* a split's own key wins over data.compression, in either order */
	job = load_ok(edit("  train: {files:",
			   "  compression: zlib\n  train: {compression: none, files:"),
		      eval, 1);
	ck_assert_int_eq(job->data.train_compression, DTF_COMPRESSION_NONE);
	ck_assert_int_eq(job->data.eval_compression, DTF_COMPRESSION_GZIP);
	ck_assert_int_eq(job->data.read.compression, DTF_COMPRESSION_ZLIB);
	dtf_job_free(job);
	const char *bad[] = {"data.eval.compression=gz"};
	ck_assert_msg_is(load_fail(SKETCH, bad, 1, DTF_ERR_CONFIG),
			 "--set data.eval.compression: data.eval.compression: "
			 "expected one of none, gzip, zlib, got 'gz' (did you "
			 "mean 'gzip'?)");
}
END_TEST

START_TEST(test_cross_references)
{
	ck_assert_msg_is(load_fail(edit("{dropout: {rate: 0.4}}",
					"{dropout: {rate: 0.4, name: logits}}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:19:33: model.layers[7]: duplicate "
			 "layer name 'logits' (also layer 6 at "
			 "graphs/x.yaml:18:7)");
	/* a given name may also clash with a generated one */
	ck_assert_msg_is(load_fail(edit("{units: 10, name: logits}",
					"{units: 10, name: dense_1}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:19:33: model.layers[7]: duplicate "
			 "layer name 'dense_1' (also layer 5 at "
			 "graphs/x.yaml:17:7)");
	ck_assert_msg_is(load_fail(edit("{logits: logits,", "{logits: logit,"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:20:49: model.loss."
			 "sparse_softmax_cross_entropy.logits: no layer named "
			 "'logit' (did you mean 'logits'?)");
	ck_assert_msg_is(load_fail(edit("  input: image", "  input: pixels"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:10:10: model.input: no feature named "
			 "'pixels' in data.features");
	ck_assert_msg_is(load_fail(edit("labels: label}", "labels: image}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:20:65: model.loss."
			 "sparse_softmax_cross_entropy.labels: feature 'image' "
			 "is not an int64 feature (class labels are)");
	ck_assert_msg_is(load_fail(edit("labels: label}", "labels: labels}"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:20:65: model.loss."
			 "sparse_softmax_cross_entropy.labels: no feature "
			 "named 'labels' in data.features (nor a layer) (did you mean "
			 "'label'?)");
	/* shared-memory reduction where the job alone rules it out: at the
	 * key, so --dry-run finds it too */
	ck_assert_msg_is(load_fail(edit("  type: multi_worker_mirrored\n",
					"  type: parameter_server\n"
					"  communication: {implementation: shared_memory}\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:28:35: strategy.communication."
			 "implementation: shared_memory reduces the gradients "
			 "of mirrored or multi_worker_mirrored replicas on one "
			 "node, on the CPU, without compression or "
			 "hierarchical; not with parameter_server\n"
			 "HINT: use implementation auto (shared memory where "
			 "it applies, MPI elsewhere) or mpi");
	const char *fp16[] = {"strategy.communication.compression=fp16",
			      "strategy.communication.implementation=shared_memory"};
	ck_assert_ptr_nonnull(strstr(load_fail(SKETCH, fp16, 2, DTF_ERR_CONFIG),
					 "not with compression"));
	/* where it takes the ranks, distribute/strategy.c names the key's
	 * position kept here */
	struct dtf_job *job = load_ok(edit("  type: multi_worker_mirrored\n",
					   "  type: multi_worker_mirrored\n"
					   "  communication: {implementation: shared_memory}\n"),
				      NULL, 0);
	ck_assert_str_eq(job->strategy.implementation_where,
			 "graphs/x.yaml:28:35");
	dtf_job_free(job);
	job = load_ok(SKETCH, fp16 + 1, 1);
	ck_assert_str_eq(job->strategy.implementation_where,
			 "--set strategy.communication.implementation");
	dtf_job_free(job);
	job = load_ok(SKETCH, NULL, 0);
	ck_assert_str_eq(job->strategy.implementation_where, "");
	/* strategy.type's position, for the checks that take the ranks */
	ck_assert_str_eq(job->strategy.type_where, "graphs/x.yaml:27:9");
	dtf_job_free(job);
	const char *od[] = {"strategy.type=one_device"};
	job = load_ok(SKETCH, od, 1);
	ck_assert_str_eq(job->strategy.type_where, "--set strategy.type");
	dtf_job_free(job);
	/* hierarchical outside multi_worker_mirrored: at the key */
	ck_assert_msg_is(load_fail(edit("  type: multi_worker_mirrored\n",
					"  type: mirrored\n"
					"  communication: {hierarchical: true}\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:28:33: strategy.communication."
			 "hierarchical: applies to multi_worker_mirrored only, "
			 "not mirrored\n"
			 "HINT: set strategy.type: multi_worker_mirrored, or "
			 "remove hierarchical");
	/* the other kinds' options have no effect: errors at the key */
	ck_assert_msg_is(load_fail(edit("  type: multi_worker_mirrored\n",
					"  type: parameter_server\n"
					"  communication: {compression: fp16}\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:28:32: strategy.communication."
			 "compression: applies to the allreduce strategies and "
			 "central_storage, not parameter_server (its pushes and "
			 "pulls are float32)\n"
			 "HINT: remove compression, or use another strategy");
	ck_assert_msg_is(load_fail(edit("  type: multi_worker_mirrored\n",
					"  type: central_storage\n"
					"  max_staleness: 2\n"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:28:18: strategy.max_staleness: applies "
			 "to parameter_server only, not central_storage\n"
			 "HINT: set strategy.type: parameter_server, or remove "
			 "max_staleness");
	const char *sy[] = {"strategy.sync=false"};
	ck_assert_msg_is(load_fail(SKETCH, sy, 1, DTF_ERR_CONFIG),
			 "--set strategy.sync: strategy.sync: applies to "
			 "parameter_server only, not multi_worker_mirrored\n"
			 "HINT: set strategy.type: parameter_server, or remove sync");
	/* where they apply */
	const char *ok[] = {"strategy.type=parameter_server",
			    "strategy.sync=false", "strategy.max_staleness=2"};
	job = load_ok(SKETCH, ok, 3);
	ck_assert_int_eq(job->strategy.sync, 0);
	ck_assert_int_eq(job->strategy.max_staleness, 2);
	dtf_job_free(job);
}
END_TEST

/* ---- overrides ---------------------------------------------------------------- */

START_TEST(test_override_existing)
{
	const char *ov[] = {"train.epochs=1", "seed=7"};
	struct dtf_job *job = load_ok(SKETCH, ov, 2);
	ck_assert_int_eq(job->train.epochs, 1);
	ck_assert_uint_eq(job->seed, 7);
	dtf_job_free(job);
}
END_TEST

START_TEST(test_override_creates)
{
	const char *ov[] = {"train.max_steps=100"};
	struct dtf_job *job = load_ok(MINIMAL, ov, 1);
	ck_assert_int_eq(job->train.max_steps, 100);
	dtf_job_free(job);
	/* whole sections that the file lacks */
	const char *ov2[] = {"logging.dir=runs/x", "strategy.type=mirrored",
			     "data.eval.files=e-*.tfrecord"};
	job = load_ok(MINIMAL, ov2, 3);
	ck_assert_str_eq(job->logging.dir, "runs/x");
	ck_assert_int_eq(job->logging.every_steps, 100);
	ck_assert_int_eq(job->strategy.type, DTF_STRATEGY_MIRRORED);
	ck_assert_str_eq(job->data.eval_files, "e-*.tfrecord");
	dtf_job_free(job);
	/* an empty file: the keys an override made point at it */
	ck_assert_msg_is(load_fail("", NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:1:1: missing required key 'data'");
	ck_assert_msg_is(load_fail("", ov, 1, DTF_ERR_CONFIG),
			 "--set train.max_steps: train: missing required key "
			 "'batch_size' (or 'per_replica_batch_size')");
}
END_TEST

START_TEST(test_override_flow)
{
	const char *ov[] = {
		"train.optimizer={sgd: {learning_rate: 0.1, momentum: 0.5}}",
		"data.features.image.shape=[784]",
		"model.layers.6.dropout.rate=0.25",
		"model.metrics=[]",
	};
	struct dtf_job *job = load_ok(SKETCH, ov, 4);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_SGD);
	ck_assert(job->train.learning_rate == 0.1);
	ck_assert(job->train.momentum == 0.5);
	ck_assert_int_eq(job->data.features[0].rank, 1);
	ck_assert_int_eq(job->data.features[0].shape[0], 784);
	ck_assert(job->model.layers[6].rate == 0.25f);
	ck_assert_int_eq(job->model.metric_accuracy, 0);
	dtf_job_free(job);
	/* a scalar on the way becomes a mapping: "optimizer: adam" */
	const char *ov2[] = {"train.optimizer.adam.beta_1=0.5"};
	job = load_ok(edit("{adam: {learning_rate: 0.001}}", "adam"), ov2, 1);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_ADAM);
	ck_assert(job->train.beta_1 == 0.5);
	ck_assert(job->train.learning_rate == 0.001);
	dtf_job_free(job);
}
END_TEST

/* A --set inside a {kind: {...}} choice that names another kind than the
 * job's is an error naming the override and the job's choice; a value
 * given whole switches. */
START_TEST(test_override_cannot_switch_choice)
{
	const char *ov[] = {"train.optimizer.sgd.learning_rate=0.1"};
	static const char hint[] =
		"HINT: to switch, replace the whole key: --set "
		"train.optimizer='{sgd: {learning_rate: 0.1}}'";
	char want[1024];
	snprintf(want, sizeof(want),
		 "--set train.optimizer.sgd.learning_rate: train.optimizer: "
		 "this would switch the optimizer from 'adam' "
		 "(graphs/x.yaml:25:14) to 'sgd'; a --set inside "
		 "train.optimizer only changes settings of the optimizer the "
		 "job has\n%s",
		 hint);
	ck_assert_msg_is(load_fail(edit("{adam: {learning_rate: 0.001}}", "adam"),
				   ov, 1, DTF_ERR_CONFIG),
			 want);
	/* {adam: {...}} in the file: the sgd key would sit beside adam */
	snprintf(want, sizeof(want),
		 "--set train.optimizer.sgd.learning_rate: train.optimizer: "
		 "this would switch the optimizer from 'adam' "
		 "(graphs/x.yaml:25:15) to 'sgd'; a --set inside "
		 "train.optimizer only changes settings of the optimizer the "
		 "job has\n%s",
		 hint);
	ck_assert_msg_is(load_fail(SKETCH, ov, 1, DTF_ERR_CONFIG), want);
	/* the whole key switches, from either form */
	const char *whole[] = {"train.optimizer={sgd: {learning_rate: 0.1}}"};
	for (int form = 0; form < 2; form++) {
		struct dtf_job *job = load_ok(
			form ? SKETCH
			     : edit("{adam: {learning_rate: 0.001}}", "adam"),
			whole, 1);
		ck_assert_int_eq(job->train.optimizer, DTF_OPT_SGD);
		ck_assert(job->train.learning_rate == 0.1);
		dtf_job_free(job);
	}
	/* the same kind is a setting: adam stays */
	const char *same[] = {"train.optimizer.adam.learning_rate=0.1"};
	struct dtf_job *job = load_ok(SKETCH, same, 1);
	ck_assert_int_eq(job->train.optimizer, DTF_OPT_ADAM);
	ck_assert(job->train.learning_rate == 0.1);
	dtf_job_free(job);
	/* a setting's name where the kind goes is not a switch to an
	 * optimizer of that name: the message names the kind the job has
	 * and the key that sets it */
	const char *lr[] = {"train.optimizer.learning_rate=0.5"};
	for (int form = 0; form < 2; form++)
		ck_assert_msg_is(
			load_fail(form ? SKETCH
				       : edit("{adam: {learning_rate: 0.001}}",
					      "adam"),
				  lr, 1, DTF_ERR_CONFIG),
			"--set train.optimizer.learning_rate: train.optimizer: "
			"'learning_rate' is not an optimizer but a setting of "
			"one: the job's optimizer is 'adam'\n"
			"HINT: --set train.optimizer.adam.learning_rate=0.5");
	/* a name that is neither: the known kinds */
	const char *typo[] = {"train.optimizer.lr=0.5"};
	ck_assert_msg_is(
		load_fail(SKETCH, typo, 1, DTF_ERR_CONFIG),
		"--set train.optimizer.lr: train.optimizer: 'lr' is not an "
		"optimizer (known: sgd, adam, adamw, rmsprop); the job's "
		"optimizer is 'adam'\n"
		"HINT: for a setting of it: --set train.optimizer.adam.lr=0.5");
	/* inside a list too, in the override's own spelling */
	const char *units[] = {"model.layers.7.units=8"};
	ck_assert_has(load_fail(SKETCH, units, 1, DTF_ERR_CONFIG),
		      "'units' is not a layer kind but a setting of one: the "
		      "job's layer kind is 'dense'\n"
		      "HINT: --set model.layers.7.dense.units=8");
	/* any choice, an earlier override's included */
	const char *sched[] = {"train.schedule={cosine_decay: {alpha: 0.1}}",
			       "train.schedule.exponential_decay.decay_rate=0.5"};
	ck_assert_msg_is(
		load_fail(SKETCH, sched, 2, DTF_ERR_CONFIG),
		"--set train.schedule.exponential_decay.decay_rate: "
		"train.schedule: this would switch the schedule from "
		"'cosine_decay' (--set train.schedule) to 'exponential_decay'; "
		"a --set inside train.schedule only changes settings of the "
		"schedule the job has\n"
		"HINT: to switch, replace the whole key: --set "
		"train.schedule='{exponential_decay: {decay_rate: 0.5}}'");
}
END_TEST

START_TEST(test_override_malformed)
{
	static const char *const bad[] = {"train.epochs", "=1", ".epochs=1",
					  "train..epochs=1", "train.=1"};
	for (int i = 0; i < 5; i++) {
		const char *msg = load_fail(SKETCH, &bad[i], 1, DTF_ERR_USAGE);
		ck_assert_has(msg, "expected KEY.PATH=VALUE");
		ck_assert_has(msg, bad[i]);
	}
	const char *ov[] = {"train.epochs=[1"};
	ck_assert_msg_is(load_fail(SKETCH, ov, 1, DTF_ERR_USAGE),
			 "--set train.epochs: bad value '[1': did not find "
			 "expected ',' or ']' (while parsing a flow sequence)");
	const char *ov3[] = {"train.epochs=1\n---\n2"};
	ck_assert_msg_is(load_fail(SKETCH, ov3, 1, DTF_ERR_USAGE),
			 "--set train.epochs: bad value '1\n---\n2': it "
			 "holds more than one YAML document (quote a value "
			 "that contains '---')");
	const char *ov4[] = {"train.epochs=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
			     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]"};
	ck_assert_msg_is(load_fail(SKETCH, ov4, 1, DTF_ERR_USAGE),
			 "--set train.epochs: bad value: collections nested "
			 "deeper than 64 levels");
	/* reported before an error in the file */
	const char *ov2[] = {"nokey"};
	load_fail("a: [", ov2, 1, DTF_ERR_USAGE);
}
END_TEST

START_TEST(test_override_errors_name_set)
{
	const char *ov[] = {"train.epoch=1"};
	ck_assert_msg_is(load_fail(SKETCH, ov, 1, DTF_ERR_CONFIG),
			 "--set train.epoch: train.epoch: unknown key 'epoch' "
			 "(did you mean 'epochs'?)");
	const char *ov2[] = {"train.epochs=1", "train.batch_size=lots"};
	ck_assert_msg_is(load_fail(SKETCH, ov2, 2, DTF_ERR_CONFIG),
			 "--set train.batch_size: train.batch_size: expected a "
			 "positive integer, got 'lots'");
	const char *ov3[] = {"model.layers.0.conv2d.kernel=[5, 0]"};
	ck_assert_msg_is(load_fail(SKETCH, ov3, 1, DTF_ERR_CONFIG),
			 "--set model.layers.0.conv2d.kernel: "
			 "model.layers[0].conv2d.kernel[1]: expected a positive "
			 "integer, got '0'");
	/* the file's own errors keep their positions */
	const char *ov4[] = {"train.epochs=1"};
	ck_assert_msg_is(load_fail(edit("seed: 42", "seed: x"), ov4, 1,
				   DTF_ERR_CONFIG),
			 "graphs/x.yaml:2:7: seed: expected a non-negative "
			 "integer, got 'x'");
}
END_TEST

/* A value given by --set is blamed on "--set KEY", whatever check finds it
 * (a section check, a missing key, a cross-reference). */
START_TEST(test_override_errors_blame_set)
{
	const char *ov[] = {"train.per_replica_batch_size=1000000000"};
	ck_assert_msg_is(load_fail(edit("  batch_size: 128", "  per_replica_batch_size: 8"),
				   ov, 1, DTF_ERR_CONFIG),
			 "--set train.per_replica_batch_size: "
			 "train.per_replica_batch_size: 1000000000 is more "
			 "than 16777216");
	ck_assert_msg_is(load_fail(edit("  batch_size: 128",
					"  per_replica_batch_size: 16777217"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:23:27: train.per_replica_batch_size: "
			 "16777217 is more than 16777216");
	/* the batch errors that need the number of ranks come later, at
	 * train.where: the batch size given */
	struct dtf_job *job = load_ok(SKETCH, NULL, 0);
	ck_assert_str_eq(job->train.where, "graphs/x.yaml:23:15");
	dtf_job_free(job);
	const char *ov2[] = {"train={batch_size: 64}"};
	job = load_ok(SKETCH, ov2, 1);
	ck_assert_str_eq(job->train.where, "--set train");
	dtf_job_free(job);
	const char *ov3[] = {"model={}"};
	ck_assert_msg_is(load_fail(SKETCH, ov3, 1, DTF_ERR_CONFIG),
			 "--set model: model: missing required key 'loss'");
	const char *ov4[] = {"model.input=label"};
	ck_assert_msg_is(load_fail(SKETCH, ov4, 1, DTF_ERR_CONFIG),
			 "--set model.input: model.input: feature 'label' is "
			 "int32 (ids); the model input must be a float32 "
			 "feature, or ids for a first layer that is an "
			 "embedding or a slice");
	const char *ov5[] = {"strategy.type=parameter_server",
			     "checkpoint.dir=ck"};
	ck_assert_msg_is(load_fail(SKETCH, ov5, 2, DTF_ERR_CONFIG),
			 "--set checkpoint.dir: checkpoint.dir: checkpoints "
			 "are not supported with strategy parameter_server "
			 "yet (the ps ranks hold the variables and optimizer "
			 "state)");
}
END_TEST

/* An empty value removes the key, so the job reads as if the file did not
 * have it: its default applies (TF/Keras-style unset).  A required key
 * cannot be removed; a key that is not there is an error (a typo must not
 * pass silently); explicit null stays null. */
START_TEST(test_override_empty_removes)
{
	const char *ov[] = {"train.epochs=", "logging.dir=", "seed=",
			    "model.layers.0.conv2d.activation=",
			    "strategy="};
	struct dtf_job *job = load_ok(SKETCH, ov, 5);
	/* the same job without those lines, read independently */
	static char text[8192];
	snprintf(text, sizeof(text), "%s", edit("  epochs: 5\n", ""));
	char *at = strstr(text, "seed: 42\n");
	ck_assert_ptr_nonnull(at);
	memmove(at, at + 9, strlen(at + 9) + 1);
	at = strstr(text, ", dir: runs/fmnist}");
	ck_assert_ptr_nonnull(at);
	memmove(at, at + 18, strlen(at + 18) + 1);
	at = strstr(text, ", activation: relu}}");
	ck_assert_ptr_nonnull(at);
	memmove(at, at + 18, strlen(at + 18) + 1);
	at = strstr(text, "strategy:\n  type: multi_worker_mirrored\n");
	ck_assert_ptr_nonnull(at);
	memmove(at, at + 40, strlen(at + 40) + 1);
	struct dtf_job *want = load_ok(text, NULL, 0);
	ck_assert_int_eq(job->train.epochs, want->train.epochs);
	ck_assert_int_eq(job->train.epochs, 1);
	ck_assert_uint_eq(job->seed, want->seed);
	ck_assert_ptr_null(want->logging.dir);
	ck_assert_ptr_null(job->logging.dir);
	ck_assert_int_eq(job->model.layers[0].activation,
			 want->model.layers[0].activation);
	ck_assert_int_eq(job->model.layers[2].activation,
			 want->model.layers[2].activation);
	ck_assert_int_ne(job->model.layers[0].activation,
			 job->model.layers[2].activation);
	ck_assert_int_eq(job->strategy.type, want->strategy.type);
	dtf_job_free(want);
	dtf_job_free(job);

	/* later overrides see the key gone, and may set it again */
	const char *ov2[] = {"train.epochs=", "train.epochs=3"};
	job = load_ok(SKETCH, ov2, 2);
	ck_assert_int_eq(job->train.epochs, 3);
	dtf_job_free(job);
	/* a key made by an earlier override */
	const char *ov3[] = {"train.clipnorm=2", "train.clipnorm="};
	job = load_ok(SKETCH, ov3, 2);
	ck_assert(job->train.clipnorm == 0.0);
	dtf_job_free(job);

	/* a required key has no default to fall back on */
	const char *ov4[] = {"train.batch_size="};
	ck_assert_msg_is(load_fail(SKETCH, ov4, 1, DTF_ERR_CONFIG),
			 "--set train.batch_size: train: missing required key "
			 "'batch_size' (or 'per_replica_batch_size'); the "
			 "empty value of --set train.batch_size= removed it, "
			 "and a required key has no default");
	const char *ov5[] = {"model.loss="};
	ck_assert_msg_is(load_fail(SKETCH, ov5, 1, DTF_ERR_CONFIG),
			 "--set model.loss: model: missing required key "
			 "'loss'; the empty value of --set model.loss= removed "
			 "it, and a required key has no default");
	const char *ov6[] = {"data="};
	ck_assert_msg_is(load_fail(SKETCH, ov6, 1, DTF_ERR_CONFIG),
			 "--set data: missing required key 'data'; the empty "
			 "value of --set data= removed it, and a required key "
			 "has no default");
	/* nothing there to remove: a misspelt key is not ignored */
	const char *ov7[] = {"train.epoch="};
	ck_assert_msg_is(load_fail(SKETCH, ov7, 1, DTF_ERR_CONFIG),
			 "--set train.epoch: nothing to remove: the job has "
			 "no key train.epoch (an empty value removes a key so "
			 "that its default applies)");
	const char *ov8[] = {"checkpoint.dir="};
	load_fail(SKETCH, ov8, 1, DTF_ERR_CONFIG);
	/* list items are not keys */
	const char *ov9[] = {"model.layers.1="};
	ck_assert_msg_is(load_fail(SKETCH, ov9, 1, DTF_ERR_USAGE),
			 "--set model.layers.1: an empty value removes a key of "
			 "a mapping; a list item cannot be removed (set the "
			 "whole list instead)");
	const char *ov10[] = {"model.layers.8.dense="};
	ck_assert_msg_is(load_fail(SKETCH, ov10, 1, DTF_ERR_CONFIG),
			 "--set model.layers.8.dense: index 8 is out of "
			 "range: model.layers has 8 items");
	/* null written out stays null, as in the file */
	const char *ov11[] = {"train.epochs=null"};
	ck_assert_msg_is(load_fail(SKETCH, ov11, 1, DTF_ERR_CONFIG),
			 "--set train.epochs: train.epochs: expected a "
			 "positive integer, got null");
}
END_TEST

/* Messages that said the wrong thing. */
START_TEST(test_override_errors_say_what)
{
	const char *ov[] = {"model.layers.8.dense.units=3"};
	ck_assert_msg_is(load_fail(SKETCH, ov, 1, DTF_ERR_CONFIG),
			 "--set model.layers.8.dense.units: index 8 is out of "
			 "range: model.layers has 8 items");
	const char *ov2[] = {"model.layers=[]"};
	ck_assert_msg_is(load_fail(SKETCH, ov2, 1, DTF_ERR_CONFIG),
			 "--set model.layers: model.layers: expected a "
			 "non-empty list of layers, got an empty list");
	const char *ov3[] = {"data.features={}"};
	ck_assert_msg_is(load_fail(SKETCH, ov3, 1, DTF_ERR_CONFIG),
			 "--set data.features: data.features: expected a "
			 "mapping of feature names to {type, shape, ...}, got "
			 "an empty mapping");
	static const char k33[] = "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u."
				  "v.w.x.y.z.a.b.c.d.e.f.g=1";
	const char *ov4[] = {k33};
	char want[256];
	snprintf(want, sizeof(want),
		 "--set '%s': the key has more than 32 components (the most "
		 "a key path may have)", k33);
	ck_assert_msg_is(load_fail(SKETCH, ov4, 1, DTF_ERR_USAGE), want);
	/* 32 components are fine (the unknown key is another matter) */
	const char *ov5[] = {k33 + 2};
	ck_assert_has(load_fail(SKETCH, ov5, 1, DTF_ERR_CONFIG),
		      "unknown key 'b'");
	/* cross-reference errors in the file carry its position */
	ck_assert_msg_is(load_fail(edit("  input: image", "  input: label"),
				   NULL, 0, DTF_ERR_CONFIG),
			 "graphs/x.yaml:10:10: model.input: feature 'label' is "
			 "int32 (ids); the model input must be a float32 "
			 "feature, or ids for a first layer that is an "
			 "embedding or a slice");
	const char *aug[] = {"data.train.augment={feature: label, "
			     "flip_left_right: true}"};
	ck_assert_msg_is(load_fail(SKETCH, aug, 1, DTF_ERR_CONFIG),
			 "--set data.train.augment: data.train.augment.feature: "
			 "feature 'label' is not a float image of shape "
			 "[H, W, C]");
	ck_assert_msg_is(
		load_fail(edit("shuffle_buffer: 10000}",
			       "shuffle_buffer: 10000, augment: {feature: image, "
			       "crop_padding: 29}}"),
			  NULL, 0, DTF_ERR_CONFIG),
		"graphs/x.yaml:4:124: data.train.augment.crop_padding: 29 is "
		"larger than the image 'image' (28 x 28)");
	ck_assert_msg_is(
		load_fail(edit("shuffle_buffer: 10000}",
			       "shuffle_buffer: 10000, augment: {feature: imag, "
			       "flip_left_right: true}}"),
			  NULL, 0, DTF_ERR_CONFIG),
		"graphs/x.yaml:4:103: data.train.augment.feature: no feature "
		"named 'imag' in data.features (did you mean 'image'?)");
}
END_TEST

/* ---- files --------------------------------------------------------------------- */

START_TEST(test_load_file)
{
	char path[] = "/tmp/dtf-test-config-XXXXXX.yaml";
	int fd = mkstemps(path, 5);
	ck_assert_int_ge(fd, 0);
	FILE *fp = fdopen(fd, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(MINIMAL, fp);
	fputs("sed: 3\n", fp); /* line 9 */
	fclose(fp);

	struct dtf_job *job = (struct dtf_job *)1;
	int rc = dtf_job_load(path, NULL, 0, &job);
	ck_assert_int_eq(rc, -DTF_ERR_CONFIG);
	ck_assert_ptr_null(job);
	char want[512];
	snprintf(want, sizeof(want),
		 "%s:9:1: sed: unknown key 'sed' (did you mean 'seed'?)", path);
	ck_assert_str_eq(dtf_error_msg(), want);

	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(MINIMAL, fp);
	fclose(fp);
	const char *ov[] = {"train.epochs=3"};
	rc = dtf_job_load(path, ov, 1, &job);
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_str_eq(job->path, path);
	char base[64];
	snprintf(base, sizeof(base), "%.*s", (int)(strlen(path) - 5 - 5),
		 path + 5); /* minus "/tmp/" and ".yaml" */
	ck_assert_str_eq(job->name, base);
	ck_assert_int_eq(job->train.epochs, 3);
	dtf_job_free(job);
	unlink(path);

	rc = dtf_job_load(path, NULL, 0, &job);
	ck_assert_int_eq(rc, -DTF_ERR_IO);
	ck_assert_has(dtf_error_msg(), path);
	ck_assert_has(dtf_error_msg(), "No such file");
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_test(tc, test_sketch_parses);
	tcase_add_test(tc, test_feature_dtype);
	tcase_add_test(tc, test_minimal_defaults);
	tcase_add_test(tc, test_straggler_keys);
	tcase_add_test(tc, test_layer_variants);
	tcase_add_test(tc, test_bool_and_optimizer_forms);
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_test(tc, test_unknown_key_suggests);
	tcase_add_test(tc, test_unknown_layer_kind);
	tcase_add_test(tc, test_wrong_type);
	tcase_add_test(tc, test_missing_required);
	tcase_add_test(tc, test_yaml_syntax);
	tcase_add_test(tc, test_bad_values);
	tcase_add_test(tc, test_cross_references);
	tcase_add_test(tc, test_compression_per_split);
	suite_add_tcase(s, tc);

	tc = tcase_create("overrides");
	tcase_add_test(tc, test_override_existing);
	tcase_add_test(tc, test_override_creates);
	tcase_add_test(tc, test_override_flow);
	tcase_add_test(tc, test_override_cannot_switch_choice);
	tcase_add_test(tc, test_override_malformed);
	tcase_add_test(tc, test_override_errors_name_set);
	tcase_add_test(tc, test_override_errors_blame_set);
	tcase_add_test(tc, test_override_errors_say_what);
	tcase_add_test(tc, test_override_empty_removes);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_add_test(tc, test_load_file);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}
