/*
 * input.h - how the input files are read: the options of the job file's
 * data section that are not per feature (sharding, interleave, compression,
 * bad-record policy, prefetch, augmentation).  Plain data filled by config/
 * and read by data/ (like feature.h), so neither includes the other.  The
 * reference for every key and default is dtf-train-job(5), section DATA.
 */
#ifndef DTF_DATA_INPUT_H
#define DTF_DATA_INPUT_H

#include <stdint.h>

#include "data/feature.h"

/* tf.data.experimental.AutoShardPolicy. */
enum dtf_shard_policy {
	DTF_SHARD_AUTO = 0, /* FILE if files >= ranks, else DATA (default) */
	DTF_SHARD_FILE = 1, /* rank r reads the files i with i % ranks == r */
	DTF_SHARD_DATA = 2, /* every rank reads every file and keeps the
			       records whose index % ranks == rank */
	DTF_SHARD_OFF = 3,  /* every rank reads everything */
};

/* TFRecordOptions.compression_type: the whole file is one compressed
 * stream (gzip members may be concatenated). */
enum dtf_compression {
	DTF_COMPRESSION_NONE = 0,
	DTF_COMPRESSION_GZIP = 1, /* RFC 1952 */
	DTF_COMPRESSION_ZLIB = 2, /* RFC 1950 */
};

/* What a bad record does. */
enum dtf_on_error {
	DTF_ON_ERROR_FAIL = 0, /* stop with exit status 3 (default) */
	DTF_ON_ERROR_SKIP = 1, /* count, report and leave it out */
};

/* Seeded image augmentation of one rank-3 [H, W, C] float feature, keyed by
 * (seed, example id, epoch): the same for any number of ranks. */
struct dtf_augment_spec {
	char feature[DTF_NAME_MAX]; /* "" = no augmentation */
	int crop_padding;    /* pad by this many zeros on each side, then
				crop H x W at a random offset (0 = off) */
	int flip_left_right; /* mirror the W axis with probability 1/2 */
};

/* The most files read at once (cycle_length) and batches ready ahead
 * (prefetch): each holds a reader or a batch's buffers. */
#define DTF_READ_MAX 4096

/* The data section's reading options (defaults as written). */
struct dtf_read_spec {
	enum dtf_shard_policy shard_policy; /* auto */
	int cycle_length;                   /* files read at once, 1 */
	int block_length;                   /* records per file per turn, 1 */
	enum dtf_compression compression;   /* none */
	enum dtf_on_error on_error;         /* fail */
	int prefetch;                       /* batches ready ahead, 2;
					       0 = decode on the caller's thread */
};

/* Names for messages ("auto", "gzip", "skip"). */
const char *dtf_shard_policy_name(enum dtf_shard_policy p);
const char *dtf_compression_name(enum dtf_compression c);

#endif
