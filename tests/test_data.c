/*
 * test_data.c - Check suite for src/data: CRC-32C, TFRecord framing and its
 * corruption reports, tf.train.Example decoding/encoding, the input
 * pipeline (sharding, shuffling, batching) and glob expansion.
 *
 * Every file is written under a fresh mkdtemp() directory ($TMPDIR or
 * /tmp) and removed afterwards; the real datasets are never read.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "data/crc32c.h"
#include "data/example.h"
#include "data/feature.h"
#include "data/pipeline.h"
#include "data/tfrecord.h"

#include "testutil.h"

/* ---- temp directory ---- */

static char tmpdir[4096];

static void tmp_setup(void)
{
	tu_tmpdir_create(tmpdir, sizeof(tmpdir), "dtf-test-data");
}

static void tmp_teardown(void) { tu_tmpdir_remove(tmpdir); }

/* ---- CRC-32C ---- */

START_TEST(crc_vectors)
{
	uint8_t z[32], ff[32], inc[32], dec[32];
	memset(z, 0, 32);
	memset(ff, 0xff, 32);
	for (int i = 0; i < 32; i++) {
		inc[i] = (uint8_t)i;
		dec[i] = (uint8_t)(31 - i);
	}
	ck_assert_uint_eq(dtf_crc32c(0, "123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(dtf_crc32c(0, z, 32), 0x8A9136AAu);
	ck_assert_uint_eq(dtf_crc32c(0, ff, 32), 0x62A8AB43u);
	ck_assert_uint_eq(dtf_crc32c(0, inc, 32), 0x46DD794Eu);
	ck_assert_uint_eq(dtf_crc32c(0, dec, 32), 0x113FDB5Cu);
	ck_assert_uint_eq(dtf_crc32c(0, "", 0), 0u);
	ck_assert_uint_eq(dtf_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(dtf_crc32c_sw(0, z, 32), 0x8A9136AAu);
	ck_assert_uint_eq(dtf_crc32c_sw(0, ff, 32), 0x62A8AB43u);
}
END_TEST

START_TEST(crc_incremental_and_paths_agree)
{
	uint8_t buf[1000];
	for (int i = 0; i < 1000; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	for (size_t off = 0; off < 9; off++) {
		for (size_t n = 0; n + off <= 1000; n += 37) {
			uint32_t a = dtf_crc32c(0, buf + off, n);
			ck_assert_uint_eq(a, dtf_crc32c_sw(0, buf + off, n));
			size_t k = n / 3;
			uint32_t b = dtf_crc32c(dtf_crc32c(0, buf + off, k),
						buf + off + k, n - k);
			ck_assert_uint_eq(a, b);
		}
	}
	ck_assert_uint_eq(dtf_crc32c(dtf_crc32c(0, "1234", 4), "56789", 5),
			  0xE3069283u);
	/* lengths around the 3-stream blocks (3 x 256, 3 x 4096 bytes) */
	static uint8_t big[40000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 2654435761u >> 13);
	/* and around the folding path's steps (256, 64 and 16 bytes) */
	static const size_t lens[] = {255, 256, 257, 271, 272, 319, 320, 335,
				      511, 512, 513, 767, 768, 769, 1535, 1536,
				      2000, 3088, 12287, 12288, 12289, 13056,
				      39990};
	for (size_t off = 0; off < 3; off++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			ck_assert_uint_eq(dtf_crc32c(0, big + off, lens[i]),
					  dtf_crc32c_sw(0, big + off, lens[i]));
			uint32_t init = 0x9e3779b9u * (uint32_t)(i + 1);
			ck_assert_uint_eq(
				dtf_crc32c(init, big + off, lens[i]),
				dtf_crc32c_sw(init, big + off, lens[i]));
		}
}
END_TEST

START_TEST(crc_mask)
{
	ck_assert_uint_eq(dtf_crc32c_mask(0), 0xa282ead8u);
	/* rotate right 15 then add: 0x00008000 -> 1 + delta */
	ck_assert_uint_eq(dtf_crc32c_mask(0x8000u), 0xa282ead9u);
	uint32_t v[] = {0, 1, 0xE3069283u, 0xffffffffu, 0x12345678u};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		ck_assert_uint_ne(dtf_crc32c_mask(v[i]), v[i]);
		ck_assert_uint_eq(dtf_crc32c_unmask(dtf_crc32c_mask(v[i])),
				  v[i]);
	}
}
END_TEST

/* ---- TFRecord ---- */

static void fill_record(uint8_t *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + (size_t)seed * 13);
}

/* Write records of the given sizes; returns each record's start offset. */
static void write_records(const char *path, const size_t *sizes, int n,
			  long *offsets)
{
	struct dtf_tfrecord_writer *w;
	ck_assert_int_eq(dtf_tfrecord_writer_open(path, &w), 0);
	long off = 0;
	for (int i = 0; i < n; i++) {
		uint8_t *b = malloc(sizes[i] + 1);
		fill_record(b, sizes[i], i);
		ck_assert_int_eq(dtf_tfrecord_writer_write(w, b, sizes[i]), 0);
		free(b);
		if (offsets)
			offsets[i] = off;
		off += (long)sizes[i] + 16;
	}
	ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	ck_assert_int_eq(tu_file_size(NULL, path), off);
}

START_TEST(tfr_round_trip)
{
	char path[8192];
	tu_path(path, sizeof(path), tmpdir, "rt.tfrecord");
	const size_t sizes[] = {0, 1, 7, 8, 100, 0, 4096, 100000, 3};
	const int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
	long offs[16];
	write_records(path, sizes, n, offs);

	struct dtf_tfrecord_reader *r;
	ck_assert_int_eq(dtf_tfrecord_reader_open(path, &r), 0);
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < n; i++) {
			const uint8_t *d;
			size_t len;
			ck_assert_int_eq(dtf_tfrecord_reader_index(r), i);
			ck_assert_uint_eq(dtf_tfrecord_reader_offset(r),
					  (uint64_t)offs[i]);
			ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len),
					 1);
			ck_assert_uint_eq(len, sizes[i]);
			uint8_t *want = malloc(sizes[i] + 1);
			fill_record(want, sizes[i], i);
			ck_assert(memcmp(d, want, sizes[i]) == 0);
			free(want);
		}
		const uint8_t *d;
		size_t len;
		ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 0);
		ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 0);
		ck_assert_int_eq(dtf_tfrecord_reader_rewind(r), 0);
	}
	/* Steady state: a second pass over a reserved reader allocates
	 * nothing. */
	uint64_t a0 = dtf_alloc_count();
	const uint8_t *d;
	size_t len;
	while (dtf_tfrecord_reader_next(r, &d, &len) > 0)
		;
	ck_assert_uint_eq(dtf_alloc_count(), a0);
	/* skip steps over records without reading them */
	ck_assert_int_eq(dtf_tfrecord_reader_rewind(r), 0);
	uint64_t sl;
	ck_assert_int_eq(dtf_tfrecord_reader_skip(r, &sl), 1);
	ck_assert_uint_eq(sl, 0);
	ck_assert_int_eq(dtf_tfrecord_reader_skip(r, &sl), 1);
	ck_assert_uint_eq(sl, 1);
	ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 1);
	ck_assert_uint_eq(len, 7);
	ck_assert_int_eq(dtf_tfrecord_reader_index(r), 3);
	dtf_tfrecord_reader_free(r);
	dtf_tfrecord_reader_free(NULL);

	struct dtf_tfrecord_stats st;
	ck_assert_int_eq(dtf_tfrecord_scan(path, &st), 0);
	ck_assert_int_eq(st.records, n);
	ck_assert_uint_eq(st.bytes, (uint64_t)tu_file_size(NULL, path));
	ck_assert_uint_eq(st.max_record, 100000);
}
END_TEST

START_TEST(tfr_empty_file)
{
	char path[8192];
	tu_path(path, sizeof(path), tmpdir, "empty.tfrecord");
	write_records(path, NULL, 0, NULL);
	struct dtf_tfrecord_stats st;
	ck_assert_int_eq(dtf_tfrecord_scan(path, &st), 0);
	ck_assert_int_eq(st.records, 0);
	ck_assert_uint_eq(st.bytes, 0);
	struct dtf_tfrecord_reader *r;
	const uint8_t *d;
	size_t len;
	ck_assert_int_eq(dtf_tfrecord_reader_open(path, &r), 0);
	ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 0);
	dtf_tfrecord_reader_free(r);
}
END_TEST

START_TEST(tfr_open_missing)
{
	struct dtf_tfrecord_reader *r = (void *)1;
	int rc = dtf_tfrecord_reader_open("/nonexistent/dir/x.tfrecord", &r);
	ck_assert_int_eq(rc, -DTF_ERR_DATA);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(),
				     "/nonexistent/dir/x.tfrecord: cannot open"));
}
END_TEST

/* Three records of 20, 50, 30 bytes at offsets 0, 36, 102 (end 148). */
static const size_t corrupt_sizes[] = {20, 50, 30};

/* Read the file through; expect records before `bad` to read fine and
 * record `bad` to fail with DTF_ERR_DATA and exactly `msg`. Also check that
 * the framing scan reports the same when `scan_sees` (framing errors). */
static void expect_corrupt(const char *path, int bad, const char *what,
			   int scan_sees)
{
	char want[9000];
	long offs[] = {0, 36, 102};
	snprintf(want, sizeof(want), "%s: record %d at byte offset %ld: %s",
		 path, bad, offs[bad], what);
	struct dtf_tfrecord_reader *r;
	ck_assert_int_eq(dtf_tfrecord_reader_open(path, &r), 0);
	const uint8_t *d;
	size_t len;
	for (int i = 0; i < bad; i++)
		ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 1);
	ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(), want);
	dtf_tfrecord_reader_free(r);

	struct dtf_tfrecord_stats st;
	int rc = dtf_tfrecord_scan(path, &st);
	if (scan_sees) {
		ck_assert_int_eq(rc, -DTF_ERR_DATA);
		ck_assert_str_eq(dtf_error_msg(), want);
	} else {
		ck_assert_int_eq(rc, 0);
		ck_assert_int_eq(st.records, 3);
	}
}

static void make_corrupt_base(char *path, size_t n, const char *name)
{
	tu_path(path, n, tmpdir, name);
	long offs[3];
	write_records(path, corrupt_sizes, 3, offs);
	ck_assert_int_eq(offs[1], 36);
	ck_assert_int_eq(offs[2], 102);
}

START_TEST(tfr_corrupt_data_byte)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "flip-data.tfrecord");
	tu_patch_xor(path, 36 + 12 + 17, 0x01);
	expect_corrupt(path, 1, "data CRC mismatch (corrupt record)", 0);
}
END_TEST

START_TEST(tfr_corrupt_data_crc)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "flip-dcrc.tfrecord");
	tu_patch_xor(path, 102 + 12 + 30 + 2, 0x80); /* the data CRC itself */
	expect_corrupt(path, 2, "data CRC mismatch (corrupt record)", 0);
}
END_TEST

START_TEST(tfr_corrupt_length_byte)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "flip-len.tfrecord");
	tu_patch_xor(path, 102 + 0, 0x04); /* 30 -> 26 */
	expect_corrupt(path, 2, "length CRC mismatch (corrupt length field)",
		       1);
}
END_TEST

START_TEST(tfr_corrupt_length_crc)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "flip-lcrc.tfrecord");
	tu_patch_xor(path, 36 + 9, 0x10);
	expect_corrupt(path, 1, "length CRC mismatch (corrupt length field)",
		       1);
}
END_TEST

START_TEST(tfr_cut_in_header)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "cut-hdr.tfrecord");
	tu_cut_file(path, 102 + 5);
	expect_corrupt(path, 2, "truncated record header (5 of 12 bytes)", 1);
	tu_cut_file(path, 102 + 11);
	expect_corrupt(path, 2, "truncated record header (11 of 12 bytes)",
		       1);
}
END_TEST

START_TEST(tfr_cut_in_data)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "cut-data.tfrecord");
	tu_cut_file(path, 36 + 12 + 10);
	expect_corrupt(path, 1, "truncated record data (10 of 54 bytes)", 1);
	/* cut inside the trailing data CRC */
	make_corrupt_base(path, sizeof(path), "cut-dcrc.tfrecord");
	tu_cut_file(path, 148 - 1);
	expect_corrupt(path, 2, "truncated record data (33 of 34 bytes)", 1);
}
END_TEST

/* A pipe is read through the input buffer (no mapping): the same records,
 * in place where they fit in the buffer, copied where they do not. */
START_TEST(tfr_pipe_reads_like_file)
{
	char path[8192], fifo[8192];
	tu_path(path, sizeof(path), tmpdir, "pipe-src.tfrecord");
	tu_path(fifo, sizeof(fifo), tmpdir, "pipe.fifo");
	size_t sizes[] = {0, 5, 4096, 2u << 20, 700000, 3};
	int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
	write_records(path, sizes, n, NULL);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(tu_run("cat '%s' > '%s'", path, fifo) == 0 ? 0 : 1);
	struct dtf_tfrecord_reader *r;
	ck_assert_int_eq(dtf_tfrecord_reader_open(fifo, &r), 0);
	ck_assert_int_eq(dtf_tfrecord_reader_size(r), -1);
	uint8_t *want = malloc(2u << 20);
	for (int i = 0; i < n; i++) {
		const uint8_t *d;
		size_t len;
		ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 1);
		ck_assert_uint_eq(len, sizes[i]);
		fill_record(want, sizes[i], i);
		ck_assert_int_eq(memcmp(d, want, len), 0);
	}
	const uint8_t *d;
	size_t len;
	ck_assert_int_eq(dtf_tfrecord_reader_next(r, &d, &len), 0);
	dtf_tfrecord_reader_free(r);
	free(want);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

/* A file cut short while a reader has it mapped: the process ends with the
 * data-error status (3) and a message naming the file, not a crash. */
START_TEST(tfr_shrinks_while_read)
{
	char path[8192];
	tu_path(path, sizeof(path), tmpdir, "shrinks.tfrecord");
	size_t sizes[64];
	for (int i = 0; i < 64; i++)
		sizes[i] = 4096;
	write_records(path, sizes, 64, NULL);
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fds[1], 2);
		struct dtf_tfrecord_reader *r;
		if (dtf_tfrecord_reader_open(path, &r))
			_exit(10);
		const uint8_t *d;
		size_t n;
		if (dtf_tfrecord_reader_next(r, &d, &n) != 1)
			_exit(11);
		tu_cut_file(path, 8192);
		while (dtf_tfrecord_reader_next(r, &d, &n) == 1)
			;
		_exit(12); /* reading past the cut must not end quietly */
	}
	close(fds[1]);
	char msg[512] = {0};
	size_t got = 0;
	ssize_t k;
	while (got < sizeof(msg) - 1 &&
	       (k = read(fds[0], msg + got, sizeof(msg) - 1 - got)) > 0)
		got += (size_t)k;
	close(fds[0]);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 3,
		      "status %#x, stderr: %s", status, msg);
	ck_assert_ptr_nonnull(strstr(msg, path));
	ck_assert_ptr_nonnull(strstr(msg, "the file shrank while it was being read"));
}
END_TEST

START_TEST(tfr_huge_length)
{
	char path[8192];
	make_corrupt_base(path, sizeof(path), "huge.tfrecord");
	/* A huge length with the old (now wrong) length CRC. */
	uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00};
	tu_patch_bytes(path, 36, huge, 8);
	uint64_t a0 = dtf_alloc_count();
	expect_corrupt(path, 1, "length CRC mismatch (corrupt length field)",
		       1);
	/* open + reader buffer for 1 record, and the scan's reader: no more */
	ck_assert_uint_le(dtf_alloc_count() - a0, 8);

	/* The same huge length with a valid CRC: reported as truncation
	 * against the file size, before any allocation for it. */
	uint8_t crc[4];
	uint32_t m = dtf_crc32c_mask(dtf_crc32c(0, huge, 8));
	for (int i = 0; i < 4; i++)
		crc[i] = (uint8_t)(m >> (8 * i));
	tu_patch_bytes(path, 36 + 8, crc, 4);
	char what[128];
	snprintf(what, sizeof(what),
		 "truncated record data (100 of %" PRIu64 " bytes)",
		 (uint64_t)0xffffffffffffULL + 4);
	expect_corrupt(path, 1, what, 1);
}
END_TEST

/* ---- Example ---- */

static struct dtf_feature_spec spec(const char *name,
				    enum dtf_feature_type t,
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
	s.offset = 0.0f;
	s.dtype = t == DTF_FEATURE_INT64 ? DTF_INT32 : DTF_FLOAT32;
	return s;
}

START_TEST(ex_numel)
{
	int64_t sh[] = {28, 28, 1};
	struct dtf_feature_spec s = spec("x", DTF_FEATURE_BYTES,
					 DTF_DECODE_UINT8, 3, sh);
	ck_assert_int_eq(dtf_feature_numel(&s), 784);
	s.rank = 0;
	ck_assert_int_eq(dtf_feature_numel(&s), 1);
}
END_TEST

START_TEST(ex_round_trip)
{
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t img[6] = {0, 1, 2, 127, 128, 255};
	float fl[3] = {1.5f, -2.25f, 1e30f};
	float f32raw[2] = {3.0f, -0.5f};
	int64_t iv[4] = {0, -1, 2147483647, -2147483648LL};
	ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "img", img, 6), 0);
	ck_assert_int_eq(dtf_example_builder_add_floats(&b, "fl", fl, 3), 0);
	ck_assert_int_eq(dtf_example_builder_add_int64s(&b, "iv", iv, 4), 0);
	ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "s8", img, 6), 0);
	ck_assert_int_eq(
		dtf_example_builder_add_bytes(&b, "f32", f32raw, 8), 0);
	ck_assert_int_eq(
		dtf_example_builder_add_bytes(&b, "unused", "zzz", 3), 0);
	const uint8_t *d;
	size_t n;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	ck_assert_uint_eq(d[0], 0x0a);

	int64_t s23[] = {2, 3}, s3[] = {3}, s4[] = {4}, s2[] = {2};
	struct dtf_feature_spec sp[5] = {
		spec("img", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 2, s23),
		spec("fl", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 1, s3),
		spec("iv", DTF_FEATURE_INT64, DTF_DECODE_NONE, 1, s4),
		spec("s8", DTF_FEATURE_BYTES, DTF_DECODE_INT8, 1,
		     (int64_t[]){6}),
		spec("f32", DTF_FEATURE_BYTES, DTF_DECODE_FLOAT32, 1, s2),
	};
	sp[0].scale = 0.5f;
	sp[0].offset = 1.0f;
	float o_img[6], o_fl[3], o_s8[6], o_f32[2];
	int32_t o_iv[4];
	void *dst[5] = {o_img, o_fl, o_iv, o_s8, o_f32};
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 5, dst), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(o_img[i], img[i] * 0.5f + 1.0f);
	ck_assert_float_eq(o_fl[0], 1.5f);
	ck_assert_float_eq(o_fl[1], -2.25f);
	ck_assert_float_eq(o_fl[2], 1e30f);
	ck_assert_int_eq(o_iv[0], 0);
	ck_assert_int_eq(o_iv[1], -1);
	ck_assert_int_eq(o_iv[2], 2147483647);
	ck_assert_int_eq(o_iv[3], INT32_MIN);
	ck_assert_float_eq(o_s8[3], 127.0f);
	ck_assert_float_eq(o_s8[4], -128.0f);
	ck_assert_float_eq(o_s8[5], -1.0f);
	ck_assert_float_eq(o_f32[0], 3.0f);
	ck_assert_float_eq(o_f32[1], -0.5f);

	/* int64 to float32 output applies scale */
	sp[2].dtype = DTF_FLOAT32;
	sp[2].scale = 2.0f;
	float o_ivf[4];
	dst[2] = o_ivf;
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 5, dst), 0);
	ck_assert_float_eq(o_ivf[1], -2.0f);

	/* reuse after reset */
	dtf_example_builder_reset(&b);
	int64_t lab = 9;
	dtf_example_builder_add_int64s(&b, "label", &lab, 1);
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	struct dtf_feature_spec ls = spec("label", DTF_FEATURE_INT64,
					  DTF_DECODE_NONE, 0, NULL);
	int32_t ol = 0;
	void *ldst[1] = {&ol};
	ck_assert_int_eq(dtf_example_decode(d, n, &ls, 1, ldst), 0);
	ck_assert_int_eq(ol, 9);
	/* exact wire bytes of Example{label: int64_list [9]} */
	static const uint8_t want[] = {0x0a, 0x10, 0x0a, 0x0e, 0x0a, 0x05,
				       'l',  'a',  'b',  'e',  'l',  0x12,
				       0x05, 0x1a, 0x03, 0x0a, 0x01, 0x09};
	ck_assert_uint_eq(n, 18);
	ck_assert(memcmp(d, want, 18) == 0);
	dtf_example_builder_deinit(&b);
}
END_TEST

/* Wrap body as a length-delimited field with tag byte `tag`. */
static size_t wrap(uint8_t tag, const uint8_t *body, size_t n, uint8_t *out)
{
	size_t k = 0;
	out[k++] = tag;
	k += dtf_pb_put_varint(out + k, n);
	memmove(out + k, body, n);
	return k + n;
}

/* Example{features{feature{key: name, value: Feature{<list>}}}} around a
 * list body with list tag `ltag` (0x0a bytes, 0x12 float, 0x1a int64). */
static size_t make_example(const char *name, uint8_t ltag,
			   const uint8_t *list, size_t ln, uint8_t *out)
{
	uint8_t a[512], b[512];
	size_t n = wrap(ltag, list, ln, a);          /* Feature body */
	size_t k = wrap(0x0a, (const uint8_t *)name, strlen(name), b);
	k += wrap(0x12, a, n, b + k);                /* map entry body */
	n = wrap(0x0a, b, k, a);                     /* Features body */
	return wrap(0x0a, a, n, out);                /* Example */
}

static int walk_keep(void *ctx, const struct dtf_example_feature_info *f)
{
	*(struct dtf_example_feature_info *)ctx = *f;
	return 0;
}

static int walk_nop(void *ctx, const struct dtf_example_feature_info *f)
{
	(void)ctx;
	(void)f;
	return 0;
}

/* A bytes feature decoded as uint8 or int8 with dtype int32: the raw
 * values as integer ids (scale and offset not applied); float16 or
 * float32 bytes with int32 output are an inconsistent spec. */
START_TEST(ex_bytes_as_int32_ids)
{
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t raw[6] = {0, 1, 83, 127, 128, 255};
	ck_assert_int_eq(dtf_example_builder_add_bytes(&b, "t", raw, 6), 0);
	const uint8_t *d;
	size_t n;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	int64_t s6[] = {6};
	struct dtf_feature_spec sp =
		spec("t", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 1, s6);
	sp.dtype = DTF_INT32;
	sp.scale = 0.5f; /* not applied to ids */
	int32_t ids[6];
	void *dst[1] = {ids};
	ck_assert_int_eq(dtf_example_decode(d, n, &sp, 1, dst), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(ids[i], raw[i]);
	sp.decode = DTF_DECODE_INT8;
	ck_assert_int_eq(dtf_example_decode(d, n, &sp, 1, dst), 0);
	const int32_t s8[6] = {0, 1, 83, 127, -128, -1};
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(ids[i], s8[i]);
	sp.decode = DTF_DECODE_FLOAT16;
	sp.shape[0] = 3;
	ck_assert_int_eq(dtf_example_decode(d, n, &sp, 1, dst), -DTF_ERR_CONFIG);
	dtf_example_builder_deinit(&b);
}
END_TEST

START_TEST(ex_unpacked_and_packed)
{
	uint8_t ex[600];
	int32_t o[3];
	float of[3];
	void *dst[1] = {o};
	struct dtf_feature_spec si = spec("label", DTF_FEATURE_INT64,
					  DTF_DECODE_NONE, 1,
					  (int64_t[]){3});
	/* unpacked int64: 08 03 | 08 <-5 as 10-byte varint> | 08 96 01 */
	uint8_t l1[] = {0x08, 0x03, 0x08, 0xfb, 0xff, 0xff, 0xff, 0xff,
			0xff, 0xff, 0xff, 0xff, 0x01, 0x08, 0x96, 0x01};
	size_t n = make_example("label", 0x1a, l1, sizeof(l1), ex);
	ck_assert_int_eq(dtf_example_decode(ex, n, &si, 1, dst), 0);
	ck_assert_int_eq(o[0], 3);
	ck_assert_int_eq(o[1], -5);
	ck_assert_int_eq(o[2], 150);
	/* mixed: packed [7, 8] then unpacked 9 */
	uint8_t l2[] = {0x0a, 0x02, 0x07, 0x08, 0x08, 0x09};
	n = make_example("label", 0x1a, l2, sizeof(l2), ex);
	ck_assert_int_eq(dtf_example_decode(ex, n, &si, 1, dst), 0);
	ck_assert_int_eq(o[0], 7);
	ck_assert_int_eq(o[1], 8);
	ck_assert_int_eq(o[2], 9);

	/* unpacked float: 0d <f32> x3 */
	struct dtf_feature_spec sf = spec("x", DTF_FEATURE_FLOAT,
					  DTF_DECODE_NONE, 1,
					  (int64_t[]){3});
	float fv[3] = {0.25f, -4.0f, 100.5f};
	uint8_t l3[15];
	for (int i = 0; i < 3; i++) {
		l3[5 * i] = 0x0d;
		memcpy(l3 + 5 * i + 1, &fv[i], 4); /* little-endian host */
	}
	n = make_example("x", 0x12, l3, sizeof(l3), ex);
	dst[0] = of;
	ck_assert_int_eq(dtf_example_decode(ex, n, &sf, 1, dst), 0);
	ck_assert_float_eq(of[0], 0.25f);
	ck_assert_float_eq(of[1], -4.0f);
	ck_assert_float_eq(of[2], 100.5f);
	/* packed float: 0a 0c <12 bytes> */
	uint8_t l4[14] = {0x0a, 0x0c};
	memcpy(l4 + 2, fv, 12);
	n = make_example("x", 0x12, l4, sizeof(l4), ex);
	memset(of, 0, sizeof(of));
	ck_assert_int_eq(dtf_example_decode(ex, n, &sf, 1, dst), 0);
	ck_assert_float_eq(of[2], 100.5f);
	/* packed float with a length not a multiple of 4 */
	l4[1] = 0x0b;
	n = make_example("x", 0x12, l4, 13, ex);
	ck_assert_int_eq(dtf_example_decode(ex, n, &sf, 1, dst),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(), "feature 'x': malformed Example "
					  "(bad packed float_list)");

	/* The walker counts unpacked values too. */
	n = make_example("label", 0x1a, l1, sizeof(l1), ex);
	struct dtf_example_feature_info seen;
	ck_assert_int_eq(dtf_example_walk(ex, n, walk_keep, &seen), 0);
	ck_assert_int_eq(seen.type, DTF_FEATURE_INT64);
	ck_assert_int_eq(seen.count, 3);
	n = make_example("x", 0x12, l3, sizeof(l3), ex);
	ck_assert_int_eq(dtf_example_walk(ex, n, walk_keep, &seen), 0);
	ck_assert_int_eq(seen.type, DTF_FEATURE_FLOAT);
	ck_assert_int_eq(seen.count, 3);
}
END_TEST

struct walk_log {
	char names[4][16];
	enum dtf_feature_type types[4];
	int64_t counts[4];
	uint64_t bytes[4];
	int n;
};

static int walk_cb(void *ctx, const struct dtf_example_feature_info *f)
{
	struct walk_log *w = ctx;
	ck_assert_int_lt(w->n, 4);
	snprintf(w->names[w->n], 16, "%.*s", (int)f->name_len, f->name);
	ck_assert_int_eq(f->has_list, 1);
	w->types[w->n] = f->type;
	w->counts[w->n] = f->count;
	w->bytes[w->n] = f->bytes;
	w->n++;
	return 0;
}

START_TEST(ex_walk)
{
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	uint8_t img[784] = {0};
	int64_t lab[2] = {3, 300};
	float f[5] = {0};
	dtf_example_builder_add_bytes(&b, "image", img, 784);
	dtf_example_builder_add_int64s(&b, "label", lab, 2);
	dtf_example_builder_add_floats(&b, "f", f, 5);
	const uint8_t *d;
	size_t n;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	struct walk_log w;
	memset(&w, 0, sizeof(w));
	ck_assert_int_eq(dtf_example_walk(d, n, walk_cb, &w), 0);
	ck_assert_int_eq(w.n, 3);
	ck_assert_str_eq(w.names[0], "image");
	ck_assert_int_eq(w.types[0], DTF_FEATURE_BYTES);
	ck_assert_int_eq(w.counts[0], 1);
	ck_assert_uint_eq(w.bytes[0], 784);
	ck_assert_str_eq(w.names[1], "label");
	ck_assert_int_eq(w.types[1], DTF_FEATURE_INT64);
	ck_assert_int_eq(w.counts[1], 2);
	ck_assert_str_eq(w.names[2], "f");
	ck_assert_int_eq(w.types[2], DTF_FEATURE_FLOAT);
	ck_assert_int_eq(w.counts[2], 5);
	/* truncated input: an error, never a crash */
	ck_assert_int_eq(dtf_example_walk(d, n - 1, walk_cb, &w),
			 -DTF_ERR_DATA);
	dtf_example_builder_deinit(&b);
}
END_TEST

/* Example with image (bytes, 4) and label (int64 [5]). */
static void build_basic(struct dtf_example_builder *b, const uint8_t **d,
			size_t *n)
{
	uint8_t img[4] = {1, 2, 3, 4};
	int64_t lab = 5;
	dtf_example_builder_init(b);
	dtf_example_builder_add_bytes(b, "image", img, 4);
	dtf_example_builder_add_int64s(b, "label", &lab, 1);
	ck_assert_int_eq(dtf_example_builder_finish(b, d, n), 0);
}

START_TEST(ex_errors)
{
	struct dtf_example_builder b;
	const uint8_t *d;
	size_t n;
	build_basic(&b, &d, &n);
	float img[4], fl;
	int32_t lab, lab2[2];
	void *dst[2] = {img, &lab};
	int64_t s4[] = {4};
	struct dtf_feature_spec sp[2] = {
		spec("image", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 1, s4),
		spec("label", DTF_FEATURE_INT64, DTF_DECODE_NONE, 0, NULL),
	};
	ck_assert_int_eq(dtf_example_decode(d, n, sp, 2, dst), 0);
	ck_assert_int_eq(lab, 5);
	ck_assert_float_eq(img[3], 4.0f);

	/* missing feature */
	struct dtf_feature_spec miss[2] = {
		sp[0], spec("weight", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 0,
			    NULL)};
	void *dst2[2] = {img, &fl};
	ck_assert_int_eq(dtf_example_decode(d, n, miss, 2, dst2),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'weight' is missing from the Example");

	/* wrong type: the record has int64 'label', the job says float */
	struct dtf_feature_spec wt[1] = {
		spec("label", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 0, NULL)};
	void *dst3[1] = {&fl};
	ck_assert_int_eq(dtf_example_decode(d, n, wt, 1, dst3),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'label' is a int64_list but the job "
			 "declares float");
	/* and the other way round: a float_list where int64 is declared */
	dtf_example_builder_reset(&b);
	float one = 1.0f;
	dtf_example_builder_add_floats(&b, "label", &one, 1);
	const uint8_t *d2;
	size_t n2;
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d2, &n2), 0);
	void *dst4[1] = {&lab};
	ck_assert_int_eq(dtf_example_decode(d2, n2, &sp[1], 1, dst4),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'label' is a float_list but the job "
			 "declares int64");
	dtf_example_builder_deinit(&b);

	/* wrong count */
	build_basic(&b, &d, &n);
	struct dtf_feature_spec wc = spec("label", DTF_FEATURE_INT64,
					  DTF_DECODE_NONE, 1,
					  (int64_t[]){2});
	void *dst5[1] = {lab2};
	ck_assert_int_eq(dtf_example_decode(d, n, &wc, 1, dst5),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'label' has 1 values but the job declares "
			 "shape [2] (2 values)");
	/* wrong byte size */
	struct dtf_feature_spec ws = spec("image", DTF_FEATURE_BYTES,
					  DTF_DECODE_UINT8, 2,
					  (int64_t[]){2, 3});
	float img6[6];
	void *dst6[1] = {img6};
	ck_assert_int_eq(dtf_example_decode(d, n, &ws, 1, dst6),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'image' has 4 bytes but the job declares "
			 "shape [2, 3] of uint8 (6 bytes)");
	dtf_example_builder_deinit(&b);

	/* int64 outside int32 */
	dtf_example_builder_init(&b);
	int64_t big = INT64_C(3000000000);
	dtf_example_builder_add_int64s(&b, "label", &big, 1);
	ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n), 0);
	ck_assert_int_eq(dtf_example_decode(d, n, &sp[1], 1, dst4),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'label' value 3000000000 at index 0 is out "
			 "of int32 range");
	dtf_example_builder_deinit(&b);
}
END_TEST

START_TEST(ex_malformed)
{
	struct dtf_example_builder b;
	const uint8_t *d;
	size_t n;
	build_basic(&b, &d, &n);
	float img[4];
	int32_t lab;
	void *dst[2] = {img, &lab};
	struct dtf_feature_spec sp[2] = {
		spec("image", DTF_FEATURE_BYTES, DTF_DECODE_UINT8, 1,
		     (int64_t[]){4}),
		spec("label", DTF_FEATURE_INT64, DTF_DECODE_NONE, 0, NULL),
	};
	/* every strict prefix is an error (the outer length overruns) */
	uint8_t *copy = malloc(n);
	for (size_t k = 0; k < n; k++) {
		memcpy(copy, d, k);
		ck_assert_int_eq(dtf_example_decode(copy, k, sp, 2, dst),
				 -DTF_ERR_DATA);
	}
	/* every single-byte change decodes or errors, never crashes; an
	 * empty input is an Example with no features */
	for (size_t k = 0; k < n; k++) {
		for (int v = 0; v < 256; v += 17) {
			memcpy(copy, d, n);
			copy[k] = (uint8_t)v;
			int rc = dtf_example_decode(copy, n, sp, 2, dst);
			ck_assert(rc == 0 || rc == -DTF_ERR_DATA);
			dtf_example_walk(copy, n, walk_nop, NULL);
		}
	}
	free(copy);
	ck_assert_int_eq(dtf_example_decode(d, 0, sp, 2, dst),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "feature 'image' is missing from the Example");
	/* an over-long varint (11 bytes) */
	static const uint8_t bad_varint[] = {0x0a, 0x0d, 0x0a, 0x0b, 0x0a,
					     0xff, 0xff, 0xff, 0xff, 0xff,
					     0xff, 0xff, 0xff, 0xff, 0x7f};
	ck_assert_int_eq(dtf_example_decode(bad_varint, sizeof(bad_varint),
					    sp, 2, dst),
			 -DTF_ERR_DATA);
	ck_assert_ptr_nonnull(strstr(dtf_error_msg(), "malformed Example"));
	/* a group wire type */
	static const uint8_t group[] = {0x0b, 0x0c};
	ck_assert_int_eq(dtf_example_decode(group, 2, sp, 2, dst),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "malformed Example (bad field in Example)");
	/* a length reaching past the end */
	static const uint8_t overrun[] = {0x0a, 0x7f, 0x00};
	ck_assert_int_eq(dtf_example_decode(overrun, 3, sp, 2, dst),
			 -DTF_ERR_DATA);
	ck_assert_str_eq(dtf_error_msg(),
			 "malformed Example (Features overruns the record)");
	dtf_example_builder_deinit(&b);
}
END_TEST

/* ---- pipeline ---- */

/* Records per file of the pipeline fixtures. */
static const int pl_counts[] = {5, 3, 4, 2};
#define PL_MAX_FILES 4

/* Record r of file f: x = [f, r] (float), label = f*1000 + r (int64). */
static void write_pl_files(int nfiles, char paths[][8192])
{
	struct dtf_example_builder b;
	dtf_example_builder_init(&b);
	for (int f = 0; f < nfiles; f++) {
		char name[64];
		snprintf(name, sizeof(name), "pl-%05d-of-%05d.tfrecord", f,
			 nfiles);
		tu_path(paths[f], 8192, tmpdir, name);
		struct dtf_tfrecord_writer *w;
		ck_assert_int_eq(dtf_tfrecord_writer_open(paths[f], &w), 0);
		for (int r = 0; r < pl_counts[f]; r++) {
			float x[2] = {(float)f, (float)r};
			int64_t lab = f * 1000 + r;
			const uint8_t *d;
			size_t n;
			dtf_example_builder_reset(&b);
			dtf_example_builder_add_floats(&b, "x", x, 2);
			dtf_example_builder_add_int64s(&b, "label", &lab, 1);
			ck_assert_int_eq(dtf_example_builder_finish(&b, &d, &n),
					 0);
			ck_assert_int_eq(dtf_tfrecord_writer_write(w, d, n), 0);
		}
		ck_assert_int_eq(dtf_tfrecord_writer_close(w), 0);
	}
	dtf_example_builder_deinit(&b);
}

static struct dtf_feature_spec pl_specs[2];

static void pl_specs_init(void)
{
	pl_specs[0] = spec("x", DTF_FEATURE_FLOAT, DTF_DECODE_NONE, 1,
			   (int64_t[]){2});
	pl_specs[1] = spec("label", DTF_FEATURE_INT64, DTF_DECODE_NONE, 0,
			   NULL);
}

static struct dtf_pipeline *pl_open(char paths[][8192], int nfiles, int rank,
				    int world, int batch, size_t shuffle,
				    uint64_t seed)
{
	const char *files[PL_MAX_FILES];
	for (int i = 0; i < nfiles; i++)
		files[i] = paths[i];
	pl_specs_init();
	struct dtf_pipeline_opts o = {
		.files = files, .nfiles = nfiles, .rank = rank,
		.world = world, .features = pl_specs, .nfeatures = 2,
		.batch = batch, .shuffle_buffer = shuffle, .seed = seed,
	};
	struct dtf_pipeline *p = NULL;
	int rc = dtf_pipeline_open(&o, &p);
	ck_assert_msg(rc == 0, "open: %s", dtf_error_msg());
	return p;
}

/* Run one epoch; check every example's data against its id; return the
 * number of examples, ids in order in ids[]. */
static int pl_epoch(struct dtf_pipeline *p, int epoch, int batch,
		    uint64_t *ids, int max, int *batch_sizes, int *nbatches)
{
	float x[64 * 2];
	int32_t lab[64];
	uint64_t bid[64];
	void *dst[2] = {x, lab};
	int total = 0, nb = 0;
	ck_assert_int_le(batch, 64);
	ck_assert_int_eq(dtf_pipeline_begin_epoch(p, epoch), 0);
	for (;;) {
		int count = -1;
		int rc = dtf_pipeline_next(p, dst, bid, &count);
		ck_assert_msg(rc == 0, "next: %s", dtf_error_msg());
		if (count == 0)
			break;
		ck_assert_int_le(count, batch);
		if (batch_sizes)
			batch_sizes[nb] = count;
		nb++;
		for (int i = 0; i < count; i++) {
			uint64_t f = bid[i] >> 40, r = bid[i] & ((1ull << 40) - 1);
			ck_assert_float_eq(x[2 * i], (float)f);
			ck_assert_float_eq(x[2 * i + 1], (float)r);
			ck_assert_int_eq(lab[i], (int32_t)(f * 1000 + r));
			ck_assert_int_lt(total, max);
			ids[total++] = bid[i];
		}
	}
	/* the epoch stays over */
	int count = -1;
	ck_assert_int_eq(dtf_pipeline_next(p, dst, bid, &count), 0);
	ck_assert_int_eq(count, 0);
	if (nbatches)
		*nbatches = nb;
	return total;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Over all ranks of `world`, ids are disjoint and cover every record of
 * the first nfiles files exactly once; per-rank counts go to counts[]. */
static void check_partition(int nfiles, int world, size_t shuffle,
			    const int64_t *want_counts)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(nfiles, paths);
	uint64_t all[64];
	int nall = 0, expect = 0;
	for (int f = 0; f < nfiles; f++)
		expect += pl_counts[f];
	for (int r = 0; r < world; r++) {
		struct dtf_pipeline *p =
			pl_open(paths, nfiles, r, world, 3, shuffle, 7);
		ck_assert_int_eq(dtf_pipeline_num_records(p), want_counts[r]);
		int n = pl_epoch(p, 0, 3, all + nall, 64 - nall, NULL, NULL);
		ck_assert_int_eq(n, want_counts[r]);
		nall += n;
		dtf_pipeline_free(p);
	}
	ck_assert_int_eq(nall, expect);
	qsort(all, (size_t)nall, sizeof(uint64_t), cmp_u64);
	int k = 0;
	for (int f = 0; f < nfiles; f++)
		for (int r = 0; r < pl_counts[f]; r++)
			ck_assert_uint_eq(all[k++],
					  (uint64_t)f << 40 | (uint64_t)r);
}

START_TEST(pl_file_sharding_world2)
{
	/* 4 files >= 2 ranks: FILE; rank 0 files 0, 2; rank 1 files 1, 3 */
	check_partition(4, 2, 0, (int64_t[]){5 + 4, 3 + 2});
	check_partition(4, 2, 100, (int64_t[]){9, 5});
}
END_TEST

START_TEST(pl_file_sharding_world3)
{
	/* rank 0 files 0, 3; rank 1 file 1; rank 2 file 2 */
	check_partition(4, 3, 0, (int64_t[]){5 + 2, 3, 4});
	check_partition(4, 3, 4, (int64_t[]){7, 3, 4});
}
END_TEST

START_TEST(pl_data_sharding_world2)
{
	/* 1 file < 2 ranks: DATA over 5 records: 0,2,4 | 1,3 */
	check_partition(1, 2, 0, (int64_t[]){3, 2});
	check_partition(1, 2, 2, (int64_t[]){3, 2});
}
END_TEST

START_TEST(pl_data_sharding_world3)
{
	/* 2 files < 3 ranks: DATA over 8 global records: 0,3,6 | 1,4,7 | 2,5 */
	check_partition(2, 3, 0, (int64_t[]){3, 3, 2});
	check_partition(2, 3, 10, (int64_t[]){3, 3, 2});
	/* and which ones: rank 2 of 3 sees global 2 (f0 r2) and 5 (f1 r0) */
	char paths[PL_MAX_FILES][8192];
	write_pl_files(2, paths);
	struct dtf_pipeline *p = pl_open(paths, 2, 2, 3, 8, 0, 1);
	uint64_t ids[8];
	ck_assert_int_eq(pl_epoch(p, 0, 8, ids, 8, NULL, NULL), 2);
	ck_assert_uint_eq(ids[0], 2);
	ck_assert_uint_eq(ids[1], (uint64_t)1 << 40 | 0);
	dtf_pipeline_free(p);
}
END_TEST

START_TEST(pl_no_shuffle_file_order_and_batches)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(4, paths);
	struct dtf_pipeline *p = pl_open(paths, 4, 0, 1, 4, 0, 1);
	ck_assert_int_eq(dtf_pipeline_num_records(p), 14);
	uint64_t ids[14];
	int bs[8], nb;
	ck_assert_int_eq(pl_epoch(p, 0, 4, ids, 14, bs, &nb), 14);
	ck_assert_int_eq(nb, 4);
	ck_assert_int_eq(bs[0], 4);
	ck_assert_int_eq(bs[1], 4);
	ck_assert_int_eq(bs[2], 4);
	ck_assert_int_eq(bs[3], 2); /* the short final batch */
	int k = 0;
	for (int f = 0; f < 4; f++)
		for (int r = 0; r < pl_counts[f]; r++)
			ck_assert_uint_eq(ids[k++],
					  (uint64_t)f << 40 | (uint64_t)r);
	/* shuffle_buffer 1 is no shuffle too */
	dtf_pipeline_free(p);
	p = pl_open(paths, 4, 0, 1, 5, 1, 1);
	uint64_t ids2[14];
	ck_assert_int_eq(pl_epoch(p, 3, 5, ids2, 14, bs, &nb), 14);
	ck_assert_int_eq(nb, 3);
	ck_assert_int_eq(bs[2], 4);
	ck_assert(memcmp(ids, ids2, sizeof(ids)) == 0);
	dtf_pipeline_free(p);
}
END_TEST

START_TEST(pl_shuffle_deterministic)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(4, paths);
	uint64_t a[14], b[14], c[14], d[14], e[14];
	struct dtf_pipeline *p = pl_open(paths, 4, 0, 1, 4, 1000, 42);
	ck_assert_int_eq(pl_epoch(p, 0, 4, a, 14, NULL, NULL), 14);
	ck_assert_int_eq(pl_epoch(p, 1, 4, b, 14, NULL, NULL), 14);
	/* back to epoch 0: the same order again */
	ck_assert_int_eq(pl_epoch(p, 0, 4, c, 14, NULL, NULL), 14);
	dtf_pipeline_free(p);
	ck_assert(memcmp(a, c, sizeof(a)) == 0);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	/* a fresh pipeline with the same seed, different batch: same order */
	p = pl_open(paths, 4, 0, 1, 3, 1000, 42);
	ck_assert_int_eq(pl_epoch(p, 0, 3, d, 14, NULL, NULL), 14);
	dtf_pipeline_free(p);
	ck_assert(memcmp(a, d, sizeof(a)) == 0);
	/* another seed: another order */
	p = pl_open(paths, 4, 0, 1, 4, 1000, 43);
	ck_assert_int_eq(pl_epoch(p, 0, 4, e, 14, NULL, NULL), 14);
	dtf_pipeline_free(p);
	ck_assert(memcmp(a, e, sizeof(a)) != 0);
	/* each is a permutation of all ids, and not file order */
	uint64_t s[14];
	memcpy(s, a, sizeof(s));
	qsort(s, 14, sizeof(uint64_t), cmp_u64);
	int k = 0, in_order = 1;
	for (int f = 0; f < 4; f++)
		for (int r = 0; r < pl_counts[f]; r++, k++) {
			ck_assert_uint_eq(s[k], (uint64_t)f << 40 | (uint64_t)r);
			in_order &= a[k] == s[k];
		}
	ck_assert_int_eq(in_order, 0);
}
END_TEST

START_TEST(pl_no_alloc_after_first_epoch)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(4, paths);
	uint64_t ids[14];
	for (size_t shuffle = 0; shuffle <= 6; shuffle += 6) {
		struct dtf_pipeline *p = pl_open(paths, 4, 0, 1, 4, shuffle, 9);
		ck_assert_int_eq(pl_epoch(p, 0, 4, ids, 14, NULL, NULL), 14);
		uint64_t a0 = dtf_alloc_count();
		ck_assert_int_eq(pl_epoch(p, 1, 4, ids, 14, NULL, NULL), 14);
		ck_assert_int_eq(pl_epoch(p, 2, 4, ids, 14, NULL, NULL), 14);
		ck_assert_uint_eq(dtf_alloc_count(), a0);
		dtf_pipeline_free(p);
	}
}
END_TEST

START_TEST(pl_errors)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(2, paths);
	/* a wrong declared type names file, record, offset and feature */
	const char *files[2] = {paths[0], paths[1]};
	struct dtf_feature_spec sp[1] = {spec("x", DTF_FEATURE_INT64,
					      DTF_DECODE_NONE, 1,
					      (int64_t[]){2})};
	struct dtf_pipeline_opts o = {
		.files = files, .nfiles = 2, .rank = 0, .world = 1,
		.features = sp, .nfeatures = 1, .batch = 2, .seed = 1,
	};
	struct dtf_pipeline *p;
	ck_assert_int_eq(dtf_pipeline_open(&o, &p), 0);
	int32_t xi[4];
	uint64_t ids[2];
	void *dst[1] = {xi};
	int count;
	ck_assert_int_eq(dtf_pipeline_next(p, dst, ids, &count),
			 -DTF_ERR_DATA);
	char want[9000];
	snprintf(want, sizeof(want),
		 "%s: record 0 at byte offset 0: feature 'x' is a float_list "
		 "but the job declares int64",
		 paths[0]);
	ck_assert_str_eq(dtf_error_msg(), want);
	dtf_pipeline_free(p);

	/* a corrupt data byte in file 1, record 2 shows when read */
	long size0 = tu_file_size(NULL, paths[1]);
	long rec = size0 / 3; /* equal-sized records */
	tu_patch_xor(paths[1], 2 * rec + 12 + 3, 0x40);
	p = pl_open(paths, 2, 0, 1, 8, 0, 1);
	float x[16];
	int32_t lab[8];
	uint64_t id8[8];
	void *dst2[2] = {x, lab};
	ck_assert_int_eq(dtf_pipeline_next(p, dst2, id8, &count), -DTF_ERR_DATA);
	snprintf(want, sizeof(want),
		 "%s: record 2 at byte offset %ld: data CRC mismatch "
		 "(corrupt record)",
		 paths[1], 2 * rec);
	ck_assert_str_eq(dtf_error_msg(), want);
	dtf_pipeline_free(p);

	/* a corrupt length is seen at open by the framing scan */
	tu_patch_xor(paths[1], rec + 1, 0x01);
	pl_specs_init();
	o.features = pl_specs;
	o.nfeatures = 2;
	ck_assert_int_eq(dtf_pipeline_open(&o, &p), -DTF_ERR_DATA);
	snprintf(want, sizeof(want),
		 "%s: record 1 at byte offset %ld: length CRC mismatch "
		 "(corrupt length field)",
		 paths[1], rec);
	ck_assert_str_eq(dtf_error_msg(), want);
	dtf_pipeline_free(NULL);
}
END_TEST

START_TEST(pl_glob)
{
	char paths[PL_MAX_FILES][8192];
	write_pl_files(4, paths);
	char pat[8192];
	tu_path(pat, sizeof(pat), tmpdir, "pl-*.tfrecord");
	char **files;
	int n;
	ck_assert_int_eq(dtf_glob_files(pat, &files, &n), 0);
	ck_assert_int_eq(n, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_str_eq(files[i], paths[i]);
	dtf_free(files);
	tu_path(pat, sizeof(pat), tmpdir, "nothing-*.tfrecord");
	ck_assert_int_eq(dtf_glob_files(pat, &files, &n), -DTF_ERR_DATA);
	char want[9000];
	snprintf(want, sizeof(want), "no files match '%s'", pat);
	ck_assert_str_eq(dtf_error_msg(), want);
}
END_TEST

static Suite *data_suite(void)
{
	Suite *s = suite_create("data");
	TCase *tc = tcase_create("crc32c");
	tcase_add_test(tc, crc_vectors);
	tcase_add_test(tc, crc_incremental_and_paths_agree);
	tcase_add_test(tc, crc_mask);
	suite_add_tcase(s, tc);

	tc = tcase_create("tfrecord");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, tfr_round_trip);
	tcase_add_test(tc, tfr_empty_file);
	tcase_add_test(tc, tfr_open_missing);
	tcase_add_test(tc, tfr_corrupt_data_byte);
	tcase_add_test(tc, tfr_corrupt_data_crc);
	tcase_add_test(tc, tfr_corrupt_length_byte);
	tcase_add_test(tc, tfr_corrupt_length_crc);
	tcase_add_test(tc, tfr_cut_in_header);
	tcase_add_test(tc, tfr_cut_in_data);
	tcase_add_test(tc, tfr_huge_length);
	tcase_add_test(tc, tfr_shrinks_while_read);
	tcase_add_test(tc, tfr_pipe_reads_like_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("example");
	tcase_add_test(tc, ex_numel);
	tcase_add_test(tc, ex_round_trip);
	tcase_add_test(tc, ex_bytes_as_int32_ids);
	tcase_add_test(tc, ex_unpacked_and_packed);
	tcase_add_test(tc, ex_walk);
	tcase_add_test(tc, ex_errors);
	tcase_add_test(tc, ex_malformed);
	suite_add_tcase(s, tc);

	tc = tcase_create("pipeline");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, pl_file_sharding_world2);
	tcase_add_test(tc, pl_file_sharding_world3);
	tcase_add_test(tc, pl_data_sharding_world2);
	tcase_add_test(tc, pl_data_sharding_world3);
	tcase_add_test(tc, pl_no_shuffle_file_order_and_batches);
	tcase_add_test(tc, pl_shuffle_deterministic);
	tcase_add_test(tc, pl_no_alloc_after_first_epoch);
	tcase_add_test(tc, pl_errors);
	tcase_add_test(tc, pl_glob);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(data_suite(), 1);
}
