/*
 * job.h - the parsed job file (DESIGN.md section 4; the reference is
 * dtf-train-job(5)).  Plain data: config/ fills it from YAML, the other
 * modules read it.  Every field has its default written next to it; the
 * parser sets those defaults before reading the file.  Strings are owned by
 * the job (freed by dtf_job_free).  `where` fields keep "file:line:col" of
 * the key for errors found after parsing (graph building, validation).
 */
#ifndef DTF_CONFIG_JOB_H
#define DTF_CONFIG_JOB_H

#include <stdint.h>

#include "data/feature.h"

#define DTF_WHERE_MAX 320

enum dtf_layer_kind {
	DTF_LAYER_CONV2D,
	DTF_LAYER_MAX_POOL2D,
	DTF_LAYER_FLATTEN,
	DTF_LAYER_DENSE,
	DTF_LAYER_DROPOUT,
	DTF_LAYER_RELU,
	DTF_LAYER_COUNT_
};

enum dtf_activation {
	DTF_ACT_NONE = 0, /* default ("linear") */
	DTF_ACT_RELU = 1,
};

struct dtf_layer {
	enum dtf_layer_kind kind;
	char name[DTF_NAME_MAX]; /* "" = generated: "<kind>_<index>" */
	char where[DTF_WHERE_MAX];
	/* conv2d */
	int filters;               /* required */
	int kernel_h, kernel_w;    /* required; "kernel: 5" or [5, 5] */
	int stride_h, stride_w;    /* default 1 (conv2d), = size (pooling) */
	int padding;               /* enum dtf_padding: valid (default) | same;
				      max_pool2d default valid too (Keras) */
	int use_bias;              /* default 1 */
	enum dtf_activation activation; /* default none */
	/* max_pool2d */
	int size_h, size_w;        /* default 2 */
	/* dense */
	int units;                 /* required */
	/* dropout */
	float rate;                /* required, in [0, 1) */
};

enum dtf_loss_kind { DTF_LOSS_SPARSE_SOFTMAX_XENT = 0 };

enum dtf_optimizer_kind { DTF_OPT_SGD = 0, DTF_OPT_ADAM = 1 };

enum dtf_strategy_kind {
	DTF_STRATEGY_ONE_DEVICE = 0,
	DTF_STRATEGY_MIRRORED,
	DTF_STRATEGY_MULTI_WORKER_MIRRORED, /* default */
	DTF_STRATEGY_CENTRAL_STORAGE,
	DTF_STRATEGY_PARAMETER_SERVER,
};

struct dtf_job {
	char *path; /* the job file as given */
	char name[128];   /* default: file name without extension */
	uint64_t seed;    /* default 42 */

	struct {
		char *train_files;     /* glob, required */
		char *eval_files;      /* glob, optional (NULL) */
		int64_t shuffle_buffer; /* default 0 = no shuffle */
		struct dtf_feature_spec *features;
		int nfeatures;
	} data;

	struct {
		char input[DTF_NAME_MAX]; /* feature fed to the first layer */
		struct dtf_layer *layers;
		int nlayers;
		enum dtf_loss_kind loss;
		char loss_logits[DTF_NAME_MAX]; /* layer name */
		char loss_labels[DTF_NAME_MAX]; /* feature name */
		char loss_where[DTF_WHERE_MAX];
		int metric_accuracy; /* metrics: [accuracy] */
	} model;

	struct {
		int64_t batch_size;             /* GLOBAL batch; 0 = unset */
		int64_t per_replica_batch_size; /* 0 = unset; exactly one set */
		int epochs;                     /* default 1 */
		int64_t max_steps;              /* default 0 = no limit */
		enum dtf_optimizer_kind optimizer;
		double learning_rate; /* default 0.01 (sgd), 0.001 (adam) */
		double momentum;      /* sgd, default 0 */
		int nesterov;         /* sgd, default 0 */
		double beta_1;        /* adam, default 0.9 */
		double beta_2;        /* adam, default 0.999 */
		double epsilon;       /* adam, default 1e-7 (Keras) */
		int64_t eval_batch_size; /* per replica; default 0 = as train */
		char where[DTF_WHERE_MAX]; /* of "train:" for batch errors */
	} train;

	struct {
		enum dtf_strategy_kind type;
	} strategy;

	struct {
		int64_t every_steps; /* default 100 */
		char *dir;           /* default NULL: no files */
	} logging;
};

#endif
