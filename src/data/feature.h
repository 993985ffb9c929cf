/*
 * feature.h - the feature schema: how one tf.train.Example feature becomes
 * a fixed-shape tensor.  Filled by config/ from the job file's data.features,
 * read by data/ when decoding; shared so neither includes the other.
 */
#ifndef DTF_DATA_FEATURE_H
#define DTF_DATA_FEATURE_H

#include <stdint.h>

#define DTF_MAX_RANK 8
#define DTF_NAME_MAX 64

/* The kind of list the feature holds in the Example (tf.train.Feature). */
enum dtf_feature_type {
	DTF_FEATURE_BYTES = 0, /* bytes_list */
	DTF_FEATURE_FLOAT = 1, /* float_list */
	DTF_FEATURE_INT64 = 2, /* int64_list */
};

/* How a bytes feature is decoded (one bytes value, raw little-endian). */
enum dtf_decode {
	DTF_DECODE_NONE = 0, /* not a bytes feature */
	DTF_DECODE_UINT8 = 1,
	DTF_DECODE_INT8 = 2,
	DTF_DECODE_FLOAT32 = 3,
	DTF_DECODE_FLOAT16 = 4, /* IEEE 754 binary16, little-endian */
};

/* Element type of the decoded tensor. */
enum dtf_dtype {
	DTF_FLOAT32 = 0,
	DTF_INT32 = 1,
};

struct dtf_feature_spec {
	char name[DTF_NAME_MAX];
	enum dtf_feature_type type;
	enum dtf_decode decode; /* bytes only */
	int rank;               /* 0 for a scalar */
	int64_t shape[DTF_MAX_RANK];
	float scale;  /* decoded value = raw * scale + offset (float32 out) */
	float offset;
	/* Output dtype: int64 features decode to DTF_INT32 (labels, ids;
	 * values outside int32 are a data error); bytes features decoded as
	 * uint8 or int8 to DTF_INT32 when the job says `dtype: int32` (token
	 * ids, scale and offset not applied); everything else to
	 * DTF_FLOAT32. */
	enum dtf_dtype dtype;
	/* > 0: a variable-length float or int64 list of at most max_length
	 * values (shape [max_length]), padded with pad_value after the last
	 * value (tf.io.FixedLenSequenceFeature / RaggedFeature.to_tensor);
	 * more values is a data error.  0: exactly numel values. */
	int64_t max_length;
	float pad_value; /* output value (scale and offset not applied) */
	/* A missing feature fills every element with default_value (an
	 * output value, as tf.io.FixedLenFeature's default_value) instead of
	 * being an error. */
	int has_default;
	double default_value;
};

/* Number of elements of one example of the feature (product of shape). */
int64_t dtf_feature_numel(const struct dtf_feature_spec *f);

#endif
