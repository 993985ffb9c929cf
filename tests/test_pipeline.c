/*
 * test_pipeline.c - Check suite for the input pipeline's tf.data features:
 * compression (gzip, zlib, concatenated members, a compressed file read as
 * none), TensorFlow-written fixtures, shard policies, interleave order
 * (checked against orders printed by tf.data itself), drop_remainder,
 * on_error skip, decoding (float16, variable-length lists, defaults),
 * augmentation, prefetch determinism and exact position (save/restore).
 *
 * Files are written under a fresh mkdtemp() directory and removed after
 * each test; the fixtures come from $DTF_SOURCE_ROOT/tests/fixtures.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "data/example.h"
#include "data/pipeline.h"
#include "data/tfrecord.h"

#include "testutil.h"

/* ---- temp directory ---- */

static char tmpdir[4096];

static void tmp_setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-test-pipeline");
	dtf_log_set_level(DTF_LOG_ERROR); /* notices are expected here */
}

static void tmp_teardown(void) { tu_tmpdir_remove(tmpdir); }

static struct dtf_feature_spec spec(const char *name, enum dtf_feature_type t,
				    enum dtf_decode dec, int rank,
				    const int64_t *shape)
{
	struct dtf_feature_spec s;
	memset(&s, 0, sizeof(s));
	snprintf(s.name, sizeof(s.name), "%s", name);
	s.type = t;
	s.decode = dec;
	s.rank = rank;
	for (int i = 0; i < rank; i++)
		s.shape[i] = shape[i];
	s.scale = 1.0f;
	s.dtype = t == DTF_FEATURE_INT64 ? DTF_INT32 : DTF_FLOAT32;
	return s;
}

/* ---- data set: file f, record r: x = [f, r] float, label = f*1000 + r,
 * img = 4x4x1 uint8 with pixel (y, x) = 4*y + x + (r & 7) ---- */

#define MAXF 8
static char paths[MAXF][8192];

static void write_files(int nfiles, const int *counts,
			enum dtf_compression comp)
{
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	for (int f = 0; f < nfiles; f++) {
		char name[64];
		snprintf(name, sizeof(name), "d-%05d-of-%05d.tfrecord", f,
			 nfiles);
		tu_path(paths[f], sizeof(paths[f]), tmpdir, name);
		struct dtf_tfrecord_writer *w;
		ck_assert_int_eq(dtf_tfrecord_writer_open_c(paths[f], comp, &w),
				 0);
		for (int r = 0; r < counts[f]; r++) {
			float x[2] = {(float)f, (float)r};
			int64_t lab = f * 1000 + r;
			uint8_t img[16];
			for (int i = 0; i < 16; i++)
				img[i] = (uint8_t)(i + (r & 7));
			const uint8_t *d;
			size_t n;
			dtf_example_builder_reset(&b);
			dtf_example_builder_add_floats(&b, "x", x, 2);
			dtf_example_builder_add_int64s(&b, "label", &lab, 1);
			dtf_example_builder_add_bytes(&b, "img", img, 16);
			ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n),
					 0);
			ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
		}
		ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	}
	dtf_example_builder_deinit(&b);
}

static struct dtf_feature_spec specs[3];

static void specs_init(void)
{
	specs[0] = spec("x", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 1,
			(int64_t[]){2});
	specs[1] = spec("label", DTF_FEATURE_INT64, DTF_DECODE_NONE, 0, NULL);
	specs[2] = spec("img", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 3,
			(int64_t[]){4, 4, 1});
}

struct popts {
	int nfiles, rank, world, batch;
	size_t shuffle;
	uint64_t seed;
	struct dtf_read_spec read;
	int drop;
	struct dtf_augment_spec aug;
};

static struct popts popts_default(int nfiles, int batch)
{
	struct popts o;
	memset(&o, 0, sizeof(o));
	o.nfiles = nfiles;
	o.world = 1;
	o.batch = batch;
	o.seed = 7;
	o.read.cycle_length = 1;
	o.read.block_length = 1;
	return o;
}

static int popen_rc(const struct popts *po, struct dtf_pipeline **p)
{
	const char *files[MAXF];
	for (int i = 0; i < po->nfiles; i++)
		files[i] = paths[i];
	specs_init();
	struct dtf_pipeline_opts o = {
		.files = files, .nfiles = po->nfiles, .rank = po->rank,
		.world = po->world, .features = specs, .nfeatures = 3,
		.batch = po->batch, .shuffle_buffer = po->shuffle,
		.seed = po->seed, .read = &po->read,
		.drop_remainder = po->drop, .augment = &po->aug,
	};
	return dtf_pipeline_open(&o, p);
}

static struct dtf_pipeline *popen_ok(const struct popts *po)
{
	struct dtf_pipeline *p = NULL;
	int rc = popen_rc(po, &p);
	ck_assert_msg(rc == 0, "open: %s", dtf_error_msg());
	return p;
}

/* One batch's worth of buffers. */
struct batchbuf {
	float x[64 * 2];
	int32_t lab[64];
	float img[64 * 16];
	uint64_t ids[64];
};

static int next_batch(struct dtf_pipeline *p, struct batchbuf *b, int *count)
{
	void *dst[3] = {b->x, b->lab, b->img};
	return dtf_pipeline_next(p, dst, b->ids, count);
}

/* Run an epoch: ids in order into ids[], checking x/label against ids;
 * returns the number of examples. */
static int run_epoch(struct dtf_pipeline *p, int epoch, uint64_t *ids,
		     int max, int *nbatches)
{
	struct batchbuf b;
	int total = 0, nb = 0, count;
	ck_assert_int_eq(dtf_pipeline_begin_epoch(p, epoch), 0);
	for (;;) {
		int rc = next_batch(p, &b, &count);
		ck_assert_msg(rc == 0, "next: %s", dtf_error_msg());
		if (!count)
			break;
		nb++;
		for (int i = 0; i < count; i++) {
			uint64_t f = b.ids[i] >> 40, r = b.ids[i] & 0xffffffffffull;
			ck_assert_float_eq(b.x[2 * i], (float)f);
			ck_assert_float_eq(b.x[2 * i + 1], (float)r);
			ck_assert_int_eq(b.lab[i], (int32_t)(f * 1000 + r));
			ck_assert_int_lt(total, max);
			ids[total++] = b.ids[i];
		}
	}
	if (nbatches)
		*nbatches = nb;
	return total;
}

static uint64_t id_of(int f, int r) { return (uint64_t)f << 40 | (uint64_t)r; }

/* ---- compression ---- */

START_TEST(gzip_and_zlib_round_trip)
{
	static const int counts[] = {37, 0, 5};
	for (int c = DTF_COMPRESSION_NONE; c <= DTF_COMPRESSION_ZLIB; c++) {
		write_files(3, counts, (enum dtf_compression)c);
		struct popts o = popts_default(3, 8);
		o.read.compression = (enum dtf_compression)c;
		struct dtf_pipeline *p = popen_ok(&o);
		ck_assert_int_eq(dtf_pipeline_num_records(p), 42);
		struct dtf_pipeline_stats st;
		dtf_pipeline_get_stats(p, &st);
		ck_assert_int_eq(st.empty_files, 1); /* gzip of nothing too */
		uint64_t ids[64];
		ck_assert_int_eq(run_epoch(p, 0, ids, 64, NULL), 42);
		for (int i = 0; i < 37; i++)
			ck_assert_uint_eq(ids[i], id_of(0, i));
		for (int i = 0; i < 5; i++)
			ck_assert_uint_eq(ids[37 + i], id_of(2, i));
		dtf_pipeline_free(p);
	}
	/* the compressed files are really compressed: gzip magic, zlib
	 * header */
	uint8_t h[2];
	FILE *f = fopen(paths[0], "rb");
	ck_assert_int_eq(fread(h, 1, 2, f), 2);
	fclose(f);
	ck_assert_uint_eq(h[0], 0x78);
	ck_assert_uint_eq(((unsigned)h[0] << 8 | h[1]) % 31, 0);
}
END_TEST

/* Two gzip members one after the other read as one stream (gzip -d). */
START_TEST(gzip_concatenated_members)
{
	static const int counts[] = {6, 4};
	write_files(2, counts, DTF_COMPRESSION_NONE);
	char cat[8192];
	tu_path(cat, sizeof(cat), tmpdir, "cat.tfrecord.gz");
	for (int i = 0; i < 2; i++) {
		FILE *in = fopen(paths[i], "rb");
		ck_assert_ptr_nonnull(in);
		gzFile gz = gzopen(cat, i ? "ab" : "wb");
		ck_assert_ptr_nonnull(gz);
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			ck_assert_int_eq(gzwrite(gz, buf, (unsigned)n), (int)n);
		gzclose(gz);
		fclose(in);
	}
	struct dtf_tfrecord_reader *r;
	ck_assert_int_eq(dtf_tfrecord_reader_open_c(cat, DTF_COMPRESSION_GZIP,
						    &r),
			 0);
	const uint8_t *d;
	size_t len;
	int n = 0, rc;
	while ((rc = dtf_tfrecord_reader_next(r, &d, &len)) > 0)
		n++;
	ck_assert_msg(rc == 0, "%s", dtf_error_msg());
	ck_assert_int_eq(n, 10);
	dtf_tfrecord_reader_free(r);
}
END_TEST

START_TEST(gzip_read_as_none_hint)
{
	static const int counts[] = {3};
	write_files(1, counts, DTF_COMPRESSION_GZIP);
	struct popts o = popts_default(1, 2);
	struct dtf_pipeline *p;
	ck_assert_int_eq(popen_rc(&o, &p), -DTF_ERR_DATA);
	char want[9000];
	snprintf(want, sizeof(want),
		 "%s: record 0 at byte offset 0: length CRC mismatch (corrupt "
		 "length field)\nHINT: the file starts with the gzip magic "
		 "bytes (1f 8b): set `compression: gzip` in the job's data "
		 "section, or in data.train or data.eval for those files "
		 "alone (dtf-records: --compression gzip)",
		 paths[0]);
	ck_assert_str_eq(dtf_error_msg(), want);
	write_files(1, counts, DTF_COMPRESSION_ZLIB);
	ck_assert_int_eq(popen_rc(&o, &p), -DTF_ERR_DATA);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(),
				     "\nHINT: the file starts with a zlib "
				     "header: set `compression: zlib`"));
}
END_TEST

START_TEST(gzip_corrupt_and_cut)
{
	static const int counts[] = {50};
	/* the 50 records are alike in size (labels 0..49: one varint byte) */
	write_files(1, counts, DTF_COMPRESSION_NONE);
	long rec = tu_file_size(NULL, paths[0]) / 50;
	write_files(1, counts, DTF_COMPRESSION_GZIP);
	FILE *f = fopen(paths[0], "rb");
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fclose(f);
	/* cut the compressed stream: reads as truncated data or header */
	ck_assert_int_eq(truncate(paths[0], size / 2), 0);
	struct dtf_tfrecord_stats st;
	ck_assert_int_eq(dtf_tfrecord_scan_c(paths[0], DTF_COMPRESSION_GZIP,
					     &st),
			 -DTF_ERR_DATA);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(), ": truncated record "));
	/* the offset is the record's in the decompressed stream (as
	 * dtf-train(1) says), past the file's bytes before the cut */
	long k = -1, off = -1;
	const char *at = strstr(dtf_error_msg(), ": record ");
	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(sscanf(at, ": record %ld at byte offset %ld", &k, &off), 2);
	ck_assert_msg(k > 0 && off == k * rec && off > size / 2,
		      "record %ld at %ld (records of %ld bytes, %ld compressed "
		      "bytes before the cut): %s",
		      k, off, rec, size / 2, dtf_error_msg());
	/* a corrupt deflate block names zlib's complaint */
	write_files(1, counts, DTF_COMPRESSION_GZIP);
	tu_patch_xor(paths[0], 12, 0xff);
	int rc = dtf_tfrecord_scan_c(paths[0], DTF_COMPRESSION_GZIP, &st);
	ck_assert_int_eq(rc, -DTF_ERR_DATA);
	ck_assert_msg(strstr(dtf_error_msg(), "corrupt gzip stream (zlib: ") ||
			      strstr(dtf_error_msg(), "CRC mismatch"),
		      "%s", dtf_error_msg());
	/* the stream's checksum (the gzip trailer's CRC-32), which zlib
	 * reads at the end: said so, with the command that names the first
	 * damaged record */
	write_files(1, counts, DTF_COMPRESSION_GZIP);
	tu_patch_xor(paths[0], size - 8, 0x01);
	rc = dtf_tfrecord_scan_c(paths[0], DTF_COMPRESSION_GZIP, &st);
	ck_assert_int_eq(rc, -DTF_ERR_DATA);
	ck_assert_msg(strstr(dtf_error_msg(), ": record 49 at byte offset ") &&
			      strstr(dtf_error_msg(), "corrupt gzip stream (zlib: incorrect data check)\n"
						      "HINT: the stream's checksum is read at its end") &&
			      strstr(dtf_error_msg(), "`dtf-records verify --compression gzip "),
		      "%s", dtf_error_msg());
}
END_TEST

/* ---- TensorFlow fixtures ---- */

static void fixture_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/tests/fixtures/%s", tu_source_root(), name);
}

START_TEST(tensorflow_fixtures)
{
	static const char *const names[] = {"tf-none.tfrecord",
					    "tf-gzip.tfrecord",
					    "tf-zlib.tfrecord"};
	struct dtf_feature_spec sp[6];
	sp[0] = spec("raw", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 2,
		     (int64_t[]){2, 3});
	sp[1] = spec("f16", DTF_FEATURE_BYTES, DTF_DECODE_FLOAT16, 1,
		     (int64_t[]){3});
	sp[2] = spec("floats", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 1,
		     (int64_t[]){3});
	sp[3] = spec("ints", DTF_FEATURE_INT64, DTF_DECODE_NONE, 1,
		     (int64_t[]){3});
	sp[4] = spec("var", DTF_FEATURE_INT64, DTF_DECODE_NONE, 1,
		     (int64_t[]){4});
	sp[4].max_length = 4;
	sp[4].pad_value = -1;
	sp[5] = spec("name", DTF_FEATURE_BYTES, DTF_DECODE_INT8, 1,
		     (int64_t[]){5});
	for (int k = 0; k < 3; k++) {
		char path[8192];
		fixture_path(path, sizeof(path), names[k]);
		const char *files[1] = {path};
		struct dtf_read_spec rd = {DTF_SHARD_AUTO, 1, 1,
					   (enum dtf_compression)k,
					   DTF_ON_ERROR_FAIL, 0};
		struct dtf_pipeline_opts o = {
			.files = files, .nfiles = 1, .world = 1,
			.features = sp, .nfeatures = 6, .batch = 5,
			.read = &rd};
		struct dtf_pipeline *p;
		int rc = dtf_pipeline_open(&o, &p);
		ck_assert_msg(rc == 0, "%s: %s", names[k], dtf_error_msg());
		ck_assert_int_eq(dtf_pipeline_num_records(p), 5);
		float raw[5 * 6], f16[5 * 3], fl[5 * 3], name[5 * 5];
		int32_t ints[5 * 3], var[5 * 4];
		uint64_t ids[5];
		void *dst[6] = {raw, f16, fl, ints, var, name};
		int count;
		ck_assert_int_eq(dtf_pipeline_next(p, dst, ids, &count), 0);
		ck_assert_int_eq(count, 5);
		for (int i = 0; i < 5; i++) {
			ck_assert_uint_eq(ids[i], (uint64_t)i);
			for (int j = 0; j < 6; j++)
				ck_assert_float_eq(raw[6 * i + j],
						   (float)(10 * i + j));
			ck_assert_float_eq(f16[3 * i], (float)i);
			ck_assert_float_eq(f16[3 * i + 1], 0.5f);
			ck_assert_float_eq(f16[3 * i + 2], -2.25f);
			ck_assert_float_eq(fl[3 * i], (float)i + 0.5f);
			ck_assert_float_eq(fl[3 * i + 1], (float)-i);
			ck_assert_float_eq(fl[3 * i + 2], 0.25f * (float)i);
			ck_assert_int_eq(ints[3 * i], i);
			ck_assert_int_eq(ints[3 * i + 1], -7 * i);
			ck_assert_int_eq(ints[3 * i + 2], 100000 + i);
			for (int j = 0; j < 4; j++)
				ck_assert_int_eq(var[4 * i + j], j < i ? j : -1);
			const char *want = "rec-";
			for (int j = 0; j < 4; j++)
				ck_assert_float_eq(name[5 * i + j],
						   (float)want[j]);
			ck_assert_float_eq(name[5 * i + 4], (float)('0' + i));
		}
		ck_assert_int_eq(dtf_pipeline_next(p, dst, ids, &count), 0);
		ck_assert_int_eq(count, 0);
		dtf_pipeline_free(p);
	}
}
END_TEST

/* ---- decoding: float16, max_length, defaults ---- */

START_TEST(decode_f16_varlen_default)
{
	uint8_t h[12] = {0x00, 0x3c,  /* 1.0 */
			 0x00, 0xc0,  /* -2.0 */
			 0x01, 0x00,  /* smallest subnormal 2^-24 */
			 0xff, 0x7b,  /* 65504, largest normal */
			 0x00, 0x7c,  /* +inf */
			 0x00, 0x80}; /* -0.0 */
	float v3[3] = {1.5f, 2.5f, 3.5f};
	int64_t iv[5] = {1, 2, 3, 4, 5};
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	dtf_example_builder_add_bytes(&b, "h", h, 12);
	dtf_example_builder_add_floats(&b, "v", v3, 3);
	dtf_example_builder_add_int64s(&b, "iv", iv, 5);
	const uint8_t *d;
	size_t n;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	struct dtf_feature_spec sp[4];
	sp[0] = spec("h", DTF_FEATURE_BYTES, DTF_DECODE_FLOAT16, 1,
		     (int64_t[]){6});
	sp[0].scale = 2.0f;
	sp[0].offset = 1.0f;
	sp[1] = spec("v", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 1,
		     (int64_t[]){5});
	sp[1].max_length = 5;
	sp[1].pad_value = -9.0f;
	sp[2] = spec("missing", DTF_FEATURE_INT64, DTF_DECODE_NONE, 1,
		     (int64_t[]){2});
	sp[2].has_default = 1;
	sp[2].default_value = 7;
	sp[3] = spec("iv", DTF_FEATURE_INT64, DTF_DECODE_NONE, 1,
		     (int64_t[]){4});
	sp[3].max_length = 4;
	float hf[6], vf[5];
	int32_t mi[2], ivo[4];
	void *dst[4] = {hf, vf, mi, ivo};
	/* iv has 5 values, more than max_length 4 */
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 4, dst), -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'iv' has 5 values, more than its max_length 4");
	sp[3].max_length = 6;
	sp[3].shape[0] = 6;
	int32_t ivo6[6];
	dst[3] = ivo6;
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 4, dst), 0);
	ck_assert_float_eq(hf[0], 3.0f);
	ck_assert_float_eq(hf[1], -3.0f);
	ck_assert_float_eq(hf[2], 2.0f * ldexpf(1.0f, -24) + 1.0f);
	ck_assert_float_eq(hf[3], 2.0f * 65504.0f + 1.0f);
	ck_assert(isinf(hf[4]) && hf[4] > 0);
	ck_assert_float_eq(hf[5], 1.0f);
	ck_assert_float_eq(vf[0], 1.5f);
	ck_assert_float_eq(vf[2], 3.5f);
	ck_assert_float_eq(vf[3], -9.0f);
	ck_assert_float_eq(vf[4], -9.0f);
	ck_assert_int_eq(mi[0], 7);
	ck_assert_int_eq(mi[1], 7);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(ivo6[i], i + 1);
	ck_assert_int_eq(ivo6[5], 0);
	/* without a default the missing feature is an error */
	sp[2].has_default = 0;
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 4, dst), -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'missing' is missing from the Example");
	dtf_example_builder_deinit(&b);
}
END_TEST

/* ---- sharding ---- */

START_TEST(shard_policy_off_and_file_error)
{
	static const int counts[] = {5, 3};
	write_files(2, counts, DTF_COMPRESSION_NONE);
	/* OFF: both of 2 ranks see all 8 records */
	for (int r = 0; r < 2; r++) {
		struct popts o = popts_default(2, 3);
		o.rank = r;
		o.world = 2;
		o.read.shard_policy = DTF_SHARD_OFF;
		struct dtf_pipeline *p = popen_ok(&o);
		uint64_t ids[16];
		ck_assert_int_eq(run_epoch(p, 0, ids, 16, NULL), 8);
		struct dtf_pipeline_stats st;
		dtf_pipeline_get_stats(p, &st);
		ck_assert_int_eq(st.policy, DTF_SHARD_OFF);
		dtf_pipeline_free(p);
	}
	/* DATA explicitly with enough files for FILE: records alternate */
	struct popts o = popts_default(2, 8);
	o.rank = 1;
	o.world = 2;
	o.read.shard_policy = DTF_SHARD_DATA;
	struct dtf_pipeline *p = popen_ok(&o);
	uint64_t ids[16];
	ck_assert_int_eq(run_epoch(p, 0, ids, 16, NULL), 4);
	ck_assert_uint_eq(ids[0], id_of(0, 1));
	ck_assert_uint_eq(ids[2], id_of(1, 0));
	dtf_pipeline_free(p);
	/* FILE with fewer files than ranks: an error before reading */
	o = popts_default(2, 8);
	o.rank = 2;
	o.world = 3;
	o.read.shard_policy = DTF_SHARD_FILE;
	ck_assert_int_eq(popen_rc(&o, &p), -DTF_ERR_CONFIG);
	ck_assert_str_eq(dtf_error_msg(),
			 "data.shard_policy: file: 2 files for 3 ranks: every "
			 "rank needs at least one file\n"
			 "HINT: use shard_policy: auto or data (every rank "
			 "reads every file and keeps every 3rd record), or "
			 "split the data into at least 3 files (dtf-records "
			 "shard --shards 3)");
}
END_TEST

/* Orders printed by tf.data 2.21 for
 * Dataset.range(4).interleave(lambda f: records of f, cycle_length=C,
 * block_length=B) with 5, 3, 4, 2 records in the 4 files. */
static const int tf_order_c2_b2[][2] = {
	{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2},
	{0, 4}, {2, 0}, {2, 1}, {3, 0}, {3, 1}, {2, 2}, {2, 3}};
static const int tf_order_c3_b1[][2] = {
	{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {0, 2},
	{1, 2}, {2, 2}, {0, 3}, {2, 3}, {0, 4}, {3, 0}, {3, 1}};

START_TEST(interleave_matches_tf_data)
{
	static const int counts[] = {5, 3, 4, 2};
	write_files(4, counts, DTF_COMPRESSION_NONE);
	for (int k = 0; k < 2; k++) {
		struct popts o = popts_default(4, 3);
		o.read.cycle_length = k ? 3 : 2;
		o.read.block_length = k ? 1 : 2;
		struct dtf_pipeline *p = popen_ok(&o);
		uint64_t ids[16];
		ck_assert_int_eq(run_epoch(p, 0, ids, 16, NULL), 14);
		const int(*want)[2] = k ? tf_order_c3_b1 : tf_order_c2_b2;
		for (int i = 0; i < 14; i++)
			ck_assert_uint_eq(ids[i], id_of(want[i][0], want[i][1]));
		dtf_pipeline_free(p);
		/* DATA sharding keeps every 2nd record of the interleaved
		 * stream */
		o.world = 2;
		o.rank = 1;
		o.read.shard_policy = DTF_SHARD_DATA;
		p = popen_ok(&o);
		ck_assert_int_eq(dtf_pipeline_num_records(p), 7);
		ck_assert_int_eq(run_epoch(p, 0, ids, 16, NULL), 7);
		for (int i = 0; i < 7; i++)
			ck_assert_uint_eq(ids[i], id_of(want[2 * i + 1][0],
							want[2 * i + 1][1]));
		dtf_pipeline_free(p);
	}
}
END_TEST

START_TEST(drop_remainder)
{
	static const int counts[] = {5, 3, 4, 2};
	write_files(4, counts, DTF_COMPRESSION_NONE);
	struct popts o = popts_default(4, 4);
	o.drop = 1;
	o.shuffle = 5;
	struct dtf_pipeline *p = popen_ok(&o);
	uint64_t ids[16];
	int nb;
	ck_assert_int_eq(run_epoch(p, 0, ids, 16, &nb), 12);
	ck_assert_int_eq(nb, 3);
	/* the next epoch starts afresh: nothing of epoch 0 leaks into it */
	uint64_t ids1[16];
	ck_assert_int_eq(run_epoch(p, 1, ids1, 16, &nb), 12);
	o.drop = 0;
	struct dtf_pipeline *q = popen_ok(&o);
	uint64_t all[16];
	ck_assert_int_eq(run_epoch(q, 1, all, 16, &nb), 14);
	ck_assert_int_eq(nb, 4);
	ck_assert(memcmp(ids1, all, 12 * sizeof(uint64_t)) == 0);
	dtf_pipeline_free(p);
	dtf_pipeline_free(q);
}
END_TEST

/* ---- on_error: skip ---- */

START_TEST(on_error_skip)
{
	static const int counts[] = {6, 6, 6};
	write_files(3, counts, DTF_COMPRESSION_NONE);
	long recs[3]; /* records of one file are the same size (< 256) */
	for (int i = 0; i < 3; i++) {
		FILE *f = fopen(paths[i], "rb");
		uint8_t l8[8];
		ck_assert_int_eq(fread(l8, 1, 8, f), 8);
		fclose(f);
		recs[i] = (long)l8[0] + 16;
	}
	tu_patch_xor(paths[0], 2 * recs[0] + 12 + 3, 0x10); /* file 0, rec 2 */
	long rec = recs[1];
	ck_assert_int_eq(truncate(paths[1], 4 * rec + 7), 0); /* inside rec 4 */
	tu_patch_xor(paths[2], 1 * recs[2] + 2, 0x01); /* file 2, rec 1 length */

	struct popts o = popts_default(3, 4);
	struct dtf_pipeline *p;
	ck_assert_int_eq(popen_rc(&o, &p), -DTF_ERR_DATA); /* fail: scan */
	char want[9000];
	snprintf(want, sizeof(want),
		 "%s: record 4 at byte offset %ld: truncated record header "
		 "(7 of 12 bytes)",
		 paths[1], 4 * rec);
	ck_assert_str_eq(dtf_error_msg(), want);

	o.read.on_error = DTF_ON_ERROR_SKIP;
	for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
		o.read.prefetch = prefetch;
		p = popen_ok(&o);
		/* file 0: 5 of 6; file 1: 4 (cut); file 2: 1 (cut) */
		ck_assert_int_eq(dtf_pipeline_num_records(p), 10);
		struct dtf_pipeline_stats st;
		dtf_pipeline_get_stats(p, &st);
		ck_assert_int_eq(st.skipped_records, 1);
		ck_assert_int_eq(st.cut_files, 2);
		ck_assert_uint_eq(st.skipped_bytes, (uint64_t)(7 + 5 * recs[2]));
		uint64_t ids[16];
		for (int e = 0; e < 3; e++) { /* never loops, every epoch */
			ck_assert_int_eq(run_epoch(p, e, ids, 16, NULL), 10);
			int k = 0;
			for (int r = 0; r < 6; r++)
				if (r != 2)
					ck_assert_uint_eq(ids[k++], id_of(0, r));
			for (int r = 0; r < 4; r++)
				ck_assert_uint_eq(ids[k++], id_of(1, r));
			ck_assert_uint_eq(ids[k], id_of(2, 0));
		}
		dtf_pipeline_free(p);
	}
}
END_TEST

/* A record that does not decode is skipped too; with fail it names the
 * types. */
START_TEST(on_error_skip_decode)
{
	static const int counts[] = {4};
	write_files(1, counts, DTF_COMPRESSION_NONE);
	/* append a record whose label is a float_list */
	struct dtf_tfrecord_writer *w;
	char extra[8192];
	tu_path(extra, sizeof(extra), tmpdir, "e-00000.tfrecord");
	ck_assert_int_eq(dtf_tfrecord_writer_open(extra, &w), 0);
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	float x[2] = {1, 0}, lab = 3;
	uint8_t img[16] = {0};
	dtf_example_builder_add_floats(&b, "x", x, 2);
	dtf_example_builder_add_floats(&b, "label", &lab, 1);
	dtf_example_builder_add_bytes(&b, "img", img, 16);
	const uint8_t *d;
	size_t n;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	dtf_example_builder_deinit(&b);
	snprintf(paths[1], sizeof(paths[1]), "%s", extra);
	struct popts o = popts_default(2, 8);
	struct dtf_pipeline *p = popen_ok(&o);
	struct batchbuf bb;
	int count;
	ck_assert_int_eq(next_batch(p, &bb, &count), -DTF_ERR_DATA);
	char want[9000];
	snprintf(want, sizeof(want),
		 "%s: record 0 at byte offset 0: feature 'label' is a "
		 "float_list but the job declares int64",
		 extra);
	ck_assert_str_eq(dtf_error_msg(), want);
	/* sticky */
	ck_assert_int_eq(next_batch(p, &bb, &count), -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(), want);
	dtf_pipeline_free(p);
	o.read.on_error = DTF_ON_ERROR_SKIP;
	p = popen_ok(&o);
	ck_assert_int_eq(dtf_pipeline_num_records(p), 4);
	uint64_t ids[8];
	ck_assert_int_eq(run_epoch(p, 0, ids, 8, NULL), 4);
	dtf_pipeline_free(p);
}
END_TEST

/* ---- augmentation ---- */

/* The augmented image is the original (pixel (y, x) = 4y + x + k, k =
 * r & 7) shifted by (dy, dx) in [-pad, pad], possibly
 * mirrored, zeros outside: find such a transform or fail. */
static int check_aug(const float *img, int k, int pad, int *flip_out)
{
	for (int flip = 0; flip < 2; flip++)
		for (int dy = -pad; dy <= pad; dy++)
			for (int dx = -pad; dx <= pad; dx++) {
				int ok = 1;
				for (int y = 0; y < 4 && ok; y++)
					for (int x = 0; x < 4 && ok; x++) {
						int sy = y + dy,
						    sx = (flip ? 3 - x : x) + dx;
						float want =
							sy < 0 || sy > 3 ||
									sx < 0 || sx > 3
								? 0.0f
								: (float)(4 * sy + sx + k);
						ok = img[4 * y + x] == want;
					}
				if (ok) {
					*flip_out = flip;
					return 1;
				}
			}
	return 0;
}

START_TEST(augment_keyed_by_example_and_epoch)
{
	static const int counts[] = {40, 40};
	write_files(2, counts, DTF_COMPRESSION_NONE);
	struct popts o = popts_default(2, 8);
	o.aug.crop_padding = 1;
	o.aug.flip_left_right = 1;
	snprintf(o.aug.feature, sizeof(o.aug.feature), "img");
	float by_id[2][80][16];
	int seen[2][80] = {{0}};
	int flips = 0, shifted = 0;
	for (int world = 1; world <= 2; world++) {
		for (int rank = 0; rank < world; rank++) {
			o.world = world;
			o.rank = rank;
			o.shuffle = world == 1 ? 0 : 13;
			o.read.prefetch = rank;
			struct dtf_pipeline *p = popen_ok(&o);
			for (int e = 0; e < 2; e++) {
				struct batchbuf b;
				int count;
				ck_assert_int_eq(dtf_pipeline_begin_epoch(p, e), 0);
				while (next_batch(p, &b, &count) == 0 && count) {
					for (int i = 0; i < count; i++) {
						int f = (int)(b.ids[i] >> 40),
						    r = (int)(b.ids[i] & 0xff);
						float *img = b.img + 16 * i;
						int flip;
						ck_assert(check_aug(img, r & 7, 1,
								    &flip));
						flips += flip;
						shifted += img[0] == 0.0f && (r & 7);
						int slot = 40 * f + r;
						if (world == 1) {
							memcpy(by_id[e][slot], img,
							       sizeof(by_id[e][slot]));
							seen[e][slot] = 1;
						} else {
							ck_assert(seen[e][slot]);
							ck_assert(memcmp(by_id[e][slot],
									 img, 64) == 0);
						}
					}
				}
			}
			dtf_pipeline_free(p);
		}
	}
	/* both transforms happen, and epochs differ */
	ck_assert_int_gt(flips, 20);
	ck_assert_int_gt(shifted, 20);
	int differ = 0;
	for (int s = 0; s < 80; s++)
		differ += memcmp(by_id[0][s], by_id[1][s], 64) != 0;
	ck_assert_int_gt(differ, 20);
}
END_TEST

/* ---- prefetch and exact position ---- */

/* A bigger set: 4 files of 150 records. */
static const int big_counts[] = {150, 150, 150, 150};

/* Collect `nb` batches (ids and images) from p; returns batches read
 * (crossing into the next epoch when one ends). */
static void collect(struct dtf_pipeline *p, int *epoch, int nb,
		    uint64_t *ids, float *imgs, int batch)
{
	struct batchbuf b;
	for (int k = 0; k < nb; k++) {
		int count;
		ck_assert_int_eq(next_batch(p, &b, &count), 0);
		if (count == 0) {
			ck_assert_int_eq(dtf_pipeline_begin_epoch(p, ++*epoch),
					 0);
			ck_assert_int_eq(next_batch(p, &b, &count), 0);
		}
		ck_assert_int_eq(count, batch);
		memcpy(ids + (size_t)k * batch, b.ids, batch * sizeof(uint64_t));
		memcpy(imgs + (size_t)k * batch * 16, b.img,
		       (size_t)batch * 16 * sizeof(float));
	}
}

static struct popts big_opts(int prefetch)
{
	struct popts o = popts_default(4, 4);
	o.shuffle = 64;
	o.drop = 1;
	o.read.cycle_length = 3;
	o.read.block_length = 2;
	o.read.prefetch = prefetch;
	o.aug.crop_padding = 1;
	o.aug.flip_left_right = 1;
	snprintf(o.aug.feature, sizeof(o.aug.feature), "img");
	return o;
}

START_TEST(prefetch_is_deterministic)
{
	write_files(4, big_counts, DTF_COMPRESSION_GZIP);
	enum { NB = 320 }; /* more than two epochs of 150 batches */
	static uint64_t ids[3][NB * 4];
	static float imgs[3][NB * 4 * 16];
	int prefetch[3] = {0, 1, 4};
	struct timespec ts = {0, 20000};
	for (int k = 0; k < 3; k++) {
		struct popts o = big_opts(prefetch[k]);
		o.read.compression = DTF_COMPRESSION_GZIP;
		struct dtf_pipeline *p = popen_ok(&o);
		int epoch = 0;
		ck_assert_int_eq(dtf_pipeline_begin_epoch(p, 0), 0);
		/* collect in pieces with pauses so the producer runs ahead
		 * by different amounts */
		for (int part = 0; part < 4; part++) {
			collect(p, &epoch, NB / 4, ids[k] + part * NB, 
				imgs[k] + part * NB * 16, 4);
			if (k)
				nanosleep(&ts, NULL);
		}
		dtf_pipeline_free(p);
	}
	ck_assert(memcmp(ids[0], ids[1], sizeof(ids[0])) == 0);
	ck_assert(memcmp(ids[0], ids[2], sizeof(ids[0])) == 0);
	ck_assert(memcmp(imgs[0], imgs[1], sizeof(imgs[0])) == 0);
	ck_assert(memcmp(imgs[0], imgs[2], sizeof(imgs[0])) == 0);
}
END_TEST

START_TEST(save_restore_same_next_100_batches)
{
	write_files(4, big_counts, DTF_COMPRESSION_NONE);
	enum { NB = 100 };
	for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
		/* save after 37 batches of epoch 1; also after 120, so the
		 * next 100 cross into epoch 2 */
		for (int at = 37; at <= 120; at += 83) {
			struct popts o = big_opts(prefetch);
			struct dtf_pipeline *a = popen_ok(&o);
			static uint64_t ida[NB * 4], idb[NB * 4], skip[200 * 4];
			static float ima[NB * 64], imb[NB * 64], skimg[200 * 64];
			int ea = 0, eb;
			uint64_t ids0[600];
			ck_assert_int_eq(run_epoch(a, 0, ids0, 600, NULL), 600);
			ea = 1;
			ck_assert_int_eq(dtf_pipeline_begin_epoch(a, 1), 0);
			collect(a, &ea, at, skip, skimg, 4);
			struct dtf_pipeline_state st;
			dtf_pipeline_save(a, &st);
			ck_assert_int_eq(st.epoch, 1);
			ck_assert_int_eq(st.consumed, at * 4);
			uint8_t bytes[DTF_PIPELINE_STATE_BYTES];
			dtf_pipeline_state_encode(&st, bytes);
			collect(a, &ea, NB, ida, ima, 4);

			/* a fresh pipeline (another process in real life) */
			struct dtf_pipeline_state st2;
			ck_assert_int_eq(dtf_pipeline_state_decode(
						 bytes, sizeof(bytes), &st2),
					 0);
			struct dtf_pipeline *b = popen_ok(&o);
			ck_assert_int_eq(dtf_pipeline_restore(b, &st2), 0);
			eb = (int)st2.epoch;
			collect(b, &eb, NB, idb, imb, 4);
			ck_assert_int_eq(ea, eb);
			ck_assert(memcmp(ida, idb, sizeof(ida)) == 0);
			ck_assert(memcmp(ima, imb, sizeof(ima)) == 0);
			/* and restoring in the same pipeline works too */
			ck_assert_int_eq(dtf_pipeline_restore(a, &st2), 0);
			eb = (int)st2.epoch;
			collect(a, &eb, NB, idb, imb, 4);
			ck_assert(memcmp(ida, idb, sizeof(ida)) == 0);
			dtf_pipeline_free(a);
			dtf_pipeline_free(b);
		}
	}
}
END_TEST

START_TEST(restore_refuses_other_settings)
{
	write_files(4, big_counts, DTF_COMPRESSION_NONE);
	struct popts o = big_opts(0);
	struct dtf_pipeline *a = popen_ok(&o);
	struct dtf_pipeline_state st;
	dtf_pipeline_save(a, &st);
	st.consumed = 8;
	o.shuffle = 65;
	struct dtf_pipeline *b = popen_ok(&o);
	ck_assert_int_eq(dtf_pipeline_restore(b, &st), -DTF_ERR_CHECKPOINT);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(),
				     "pipeline position was saved under other "
				     "data settings"));
	st.consumed = 601;
	ck_assert_int_eq(dtf_pipeline_restore(a, &st), -DTF_ERR_CHECKPOINT);
	uint8_t bytes[DTF_PIPELINE_STATE_BYTES] = {0};
	ck_assert_int_eq(dtf_pipeline_state_decode(bytes, sizeof(bytes), &st),
			 -DTF_ERR_CHECKPOINT);
	ck_assert_int_eq(dtf_pipeline_state_decode(bytes, 31, &st),
			 -DTF_ERR_CHECKPOINT);
	dtf_pipeline_free(a);
	dtf_pipeline_free(b);
}
END_TEST

START_TEST(prefetch_no_alloc_after_first_epoch)
{
	write_files(4, big_counts, DTF_COMPRESSION_NONE);
	struct popts o = big_opts(2);
	struct dtf_pipeline *p = popen_ok(&o);
	uint64_t ids[600];
	ck_assert_int_eq(run_epoch(p, 0, ids, 600, NULL), 600);
	uint64_t a0 = dtf_alloc_count();
	ck_assert_int_eq(run_epoch(p, 1, ids, 600, NULL), 600);
	ck_assert_int_eq(run_epoch(p, 2, ids, 600, NULL), 600);
	ck_assert_uint_eq(dtf_alloc_count(), a0);
	dtf_pipeline_free(p);
}
END_TEST

static Suite *pipeline_suite(void)
{
	Suite *s = suite_create("pipeline");
	TCase *tc = tcase_create("compression");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, gzip_and_zlib_round_trip);
	tcase_add_test(tc, gzip_concatenated_members);
	tcase_add_test(tc, gzip_read_as_none_hint);
	tcase_add_test(tc, gzip_corrupt_and_cut);
	tcase_add_test(tc, tensorflow_fixtures);
	suite_add_tcase(s, tc);

	tc = tcase_create("decode");
	tcase_add_test(tc, decode_f16_varlen_default);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, shard_policy_off_and_file_error);
	tcase_add_test(tc, interleave_matches_tf_data);
	tcase_add_test(tc, drop_remainder);
	tcase_add_test(tc, augment_keyed_by_example_and_epoch);
	suite_add_tcase(s, tc);

	tc = tcase_create("bad_data");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, on_error_skip);
	tcase_add_test(tc, on_error_skip_decode);
	suite_add_tcase(s, tc);

	tc = tcase_create("prefetch_position");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, prefetch_is_deterministic);
	tcase_add_test(tc, save_restore_same_next_100_batches);
	tcase_add_test(tc, restore_refuses_other_settings);
	tcase_add_test(tc, prefetch_no_alloc_after_first_epoch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(pipeline_suite(), 1);
}
