/*
 * dtf_records.c - dtf-records: convert, inspect, verify, shard and synthesize
 * TFRecord files of tf.train.Example records.
 *
 *     dtf-records convert-idx --images IMG.gz --labels LBL.gz --out PREFIX
 *                             [--shards N] [--compression C]
 *     dtf-records convert-text --text FILE --out DIR --block-size B
 *                              [--stride S] [--validation-fraction F]
 *                              [--shards N] [--compression C]
 *     dtf-records inspect [--compression C] [--records N] FILE...
 *     dtf-records verify [--compression C] FILE...
 *     dtf-records shard --out PREFIX --shards N [--compression C]
 *                       [--out-compression C] FILE...
 *     dtf-records synth --out PREFIX --count N [--shards S] [--shape H,W,C]
 *                       [--classes K] [--seed X] [--compression C]
 *
 * C is none, gzip or zlib (TFRecordOptions compression_type).
 *
 * Shards are named PREFIX-iiiii-of-nnnnn.tfrecord (TensorFlow's style) and
 * hold contiguous blocks of records; each is written to a temporary name
 * and renamed when complete, so an interrupted run leaves no file that looks
 * finished.  Library calls return DTF_ERR_* codes; this file prints each
 * error once as "dtf-records: <message>" and exits with the code's status
 * (0 ok, 1 other, 2 usage, 3 data error).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/example.h"
#include "data/tfrecord.h"
#include "dtf_config.h"

#define PROG "dtf-records"

/* Philox purpose of synthetic data (local to this tool). */
#define RNG_SYNTH 0x5e7du

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u

static const char usage_text[] =
	"usage: " PROG " COMMAND [OPTION]... [FILE]...\n"
	"\n"
	"Commands:\n"
	"  convert-idx --images IMG.gz --labels LBL.gz --out PREFIX [--shards N]\n"
	"        convert gzipped IDX image/label files (MNIST format) to\n"
	"        PREFIX-iiiii-of-nnnnn.tfrecord shards of tf.train.Example\n"
	"        (image: bytes of rows*cols uint8, label: int64)\n"
	"  convert-text --text FILE --out DIR --block-size B [--stride S]\n"
	"        [--validation-fraction F] [--shards N]\n"
	"        character-level language-model data: DIR/vocab.txt (the\n"
	"        text's sorted distinct bytes), DIR/train-* and\n"
	"        DIR/validation-* shards of windows of B+1 ids (tokens:\n"
	"        bytes of uint8 ids, offset: int64), one every S (default\n"
	"        B) characters; the last F (default 0.1) is validation\n"
	"  inspect [--records N] FILE...\n"
	"        record count, size, CRC check, and the feature schema\n"
	"        inferred from the first N records (default 100)\n"
	"  verify FILE...\n"
	"        check every record's CRCs; stop at the first bad record\n"
	"  shard --out PREFIX --shards N [--out-compression C] FILE...\n"
	"        split or merge the records of FILE... in order into N shards\n"
	"  synth --out PREFIX --count N [--shards S] [--shape H,W,C]\n"
	"        [--classes K] [--seed X]\n"
	"        write learnable synthetic image/label data\n"
	"\n"
	"Every command takes --compression none|gzip|zlib: of the files read\n"
	"(inspect, verify, shard) or written (convert-idx, convert-text, synth).\n"
	"Options: --help (also after a command), --version.\n"
	"Exit status: 0 ok, 1 other failure, 2 usage error, 3 data error.\n"
	"See dtf-records(1).\n";

static int usage_error(const char *fmt, const char *arg)
{
	char msg[512];
	snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
	return dtf_error(DTF_ERR_USAGE, "%s (try '" PROG " --help')", msg);
}

static int parse_compression(const char *opt, const char *s,
			     enum dtf_compression *out)
{
	if (!strcmp(s, "none"))
		*out = DTF_COMPRESSION_NONE;
	else if (!strcmp(s, "gzip"))
		*out = DTF_COMPRESSION_GZIP;
	else if (!strcmp(s, "zlib"))
		*out = DTF_COMPRESSION_ZLIB;
	else
		return dtf_error(DTF_ERR_USAGE,
				 "%s: '%s' is not none, gzip or zlib", opt, s);
	return 0;
}

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi,
		     int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return dtf_error(DTF_ERR_USAGE,
				 "%s: '%s' is not an integer in [%" PRId64
				 ", %" PRId64 "]",
				 opt, s, lo, hi);
	*out = v;
	return 0;
}

/* PREFIX-iiiii-of-nnnnn.tfrecord into a new string (dtf_free it). */
static char *shard_name(const char *prefix, int i, int n, const char *suffix)
{
	size_t len = strlen(prefix) + 40;
	char *s = dtf_malloc(len);
	if (s)
		snprintf(s, len, "%s-%05d-of-%05d.tfrecord%s", prefix, i, n,
			 suffix);
	return s;
}

/*
 * Writes records into shards of contiguous blocks: record r of `total`
 * goes to shard floor(r * nshards / total)'s block [s*total/n, (s+1)*total/n).
 */
struct sharder {
	const char *prefix;
	enum dtf_compression compression;
	int nshards, cur;
	int64_t total, written;
	int64_t end; /* first record of the next shard */
	struct dtf_tfrecord_writer *w;
	char *tmp, *final;
};

static int64_t shard_start(const struct sharder *s, int i)
{
	return (int64_t)((__int128)s->total * i / s->nshards);
}

static int sharder_close_current(struct sharder *s)
{
	int rc = dtf_tfrecord_writer_close(s->w);
	s->w = NULL;
	if (!rc && rename(s->tmp, s->final) != 0)
		rc = dtf_error(DTF_ERR_IO, "%s: cannot rename to %s: %s",
			       s->tmp, s->final, strerror(errno));
	if (rc)
		remove(s->tmp);
	dtf_free(s->tmp);
	dtf_free(s->final);
	s->tmp = s->final = NULL;
	return rc;
}

static int sharder_open(struct sharder *s, int i)
{
	s->cur = i;
	s->end = shard_start(s, i + 1);
	s->tmp = shard_name(s->prefix, i, s->nshards, ".tmp");
	s->final = shard_name(s->prefix, i, s->nshards, "");
	if (!s->tmp || !s->final)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	return dtf_tfrecord_writer_open_c(s->tmp, s->compression, &s->w);
}

static int sharder_write(struct sharder *s, const uint8_t *d, size_t n)
{
	int rc;
	while (s->written >= s->end) { /* empty shards when total < n */
		if ((rc = sharder_close_current(s)))
			return rc;
		if ((rc = sharder_open(s, s->cur + 1)))
			return rc;
	}
	s->written++;
	return dtf_tfrecord_writer_write(s->w, d, n);
}

static int sharder_begin(struct sharder *s, const char *prefix, int nshards,
			 int64_t total, enum dtf_compression compression)
{
	memset(s, 0, sizeof(*s));
	s->prefix = prefix;
	s->compression = compression;
	s->nshards = nshards;
	s->total = total;
	return sharder_open(s, 0);
}

/* Close the last shard (and create any empty trailing ones). */
static int sharder_finish(struct sharder *s)
{
	int rc = sharder_close_current(s);
	while (!rc && s->cur + 1 < s->nshards) {
		rc = sharder_open(s, s->cur + 1);
		if (!rc)
			rc = sharder_close_current(s);
	}
	return rc;
}

static void sharder_abort(struct sharder *s)
{
	if (s->w) {
		dtf_tfrecord_writer_close(s->w);
		s->w = NULL;
	}
	if (s->tmp)
		remove(s->tmp);
	dtf_free(s->tmp);
	dtf_free(s->final);
	s->tmp = s->final = NULL;
}

/* ---- convert-idx ---- */

static int gz_read_exact(gzFile g, const char *path, void *buf, unsigned n,
			 const char *what)
{
	int got = gzread(g, buf, n);
	if (got < 0) {
		int zerr;
		const char *m = gzerror(g, &zerr);
		return dtf_error(DTF_ERR_DATA, "%s: read error: %s", path,
				 zerr == Z_ERRNO ? strerror(errno) : m);
	}
	if ((unsigned)got < n)
		return dtf_error(DTF_ERR_DATA,
				 "%s: truncated IDX file (end of data inside %s)",
				 path, what);
	return 0;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int cmd_convert_idx(int argc, char **argv)
{
	static const struct option opts[] = {
		{"images", required_argument, NULL, 'i'},
		{"labels", required_argument, NULL, 'l'},
		{"out", required_argument, NULL, 'o'},
		{"shards", required_argument, NULL, 's'},
		{"compression", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *images = NULL, *labels = NULL, *prefix = NULL;
	enum dtf_compression comp = DTF_COMPRESSION_NONE;
	int64_t nshards = 1;
	int c, rc;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'i': images = optarg; break;
		case 'l': labels = optarg; break;
		case 'o': prefix = optarg; break;
		case 's':
			if ((rc = parse_i64("--shards", optarg, 1, 99999,
					    &nshards)))
				return rc;
			break;
		case 'c':
			if ((rc = parse_compression("--compression", optarg,
						    &comp)))
				return rc;
			break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return usage_error("convert-idx: bad option", NULL);
		}
	}
	if (!images || !labels || !prefix)
		return usage_error("convert-idx needs --images, --labels and "
				   "--out",
				   NULL);
	if (optind < argc)
		return usage_error("convert-idx: unexpected argument '%s'",
				   argv[optind]);

	uint8_t *img = NULL;
	struct dtf_example_builder b;
	struct sharder sh;
	memset(&sh, 0, sizeof(sh));
	dtf_example_builder_init(&b);
	gzFile gi = NULL, gl = NULL;
	gi = gzopen(images, "rb");
	if (!gi) {
		rc = dtf_error(DTF_ERR_DATA, "%s: cannot open: %s", images,
			       strerror(errno));
		goto out;
	}
	gl = gzopen(labels, "rb");
	if (!gl) {
		rc = dtf_error(DTF_ERR_DATA, "%s: cannot open: %s", labels,
			       strerror(errno));
		goto out;
	}
	gzbuffer(gi, 1 << 17);
	uint8_t hi[16], hl[8];
	if ((rc = gz_read_exact(gi, images, hi, 16, "the header")) ||
	    (rc = gz_read_exact(gl, labels, hl, 8, "the header")))
		goto out;
	if (be32(hi) != IDX_IMAGES_MAGIC) {
		rc = dtf_error(DTF_ERR_DATA,
			       "%s: not an IDX image file (magic 0x%08x, "
			       "expected 0x%08x: unsigned bytes, 3 dimensions)",
			       images, be32(hi), IDX_IMAGES_MAGIC);
		goto out;
	}
	if (be32(hl) != IDX_LABELS_MAGIC) {
		rc = dtf_error(DTF_ERR_DATA,
			       "%s: not an IDX label file (magic 0x%08x, "
			       "expected 0x%08x: unsigned bytes, 1 dimension)",
			       labels, be32(hl), IDX_LABELS_MAGIC);
		goto out;
	}
	uint32_t n = be32(hi + 4), rows = be32(hi + 8), cols = be32(hi + 12);
	uint32_t nl = be32(hl + 4);
	if (n != nl) {
		rc = dtf_error(DTF_ERR_DATA,
			       "%s has %" PRIu32 " images but %s has %" PRIu32
			       " labels",
			       images, n, labels, nl);
		goto out;
	}
	if (rows == 0 || cols == 0 || rows > 65536 || cols > 65536 ||
	    (uint64_t)rows * cols > (1u << 28)) {
		rc = dtf_error(DTF_ERR_DATA, "%s: bad image size %" PRIu32
					     "x%" PRIu32,
			       images, rows, cols);
		goto out;
	}
	size_t isz = (size_t)rows * cols;
	img = dtf_malloc(isz);
	if (!img) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = sharder_begin(&sh, prefix, (int)nshards, n, comp)))
		goto out;
	char what[64];
	for (uint32_t r = 0; r < n; r++) {
		uint8_t lab;
		snprintf(what, sizeof(what), "image %" PRIu32, r);
		if ((rc = gz_read_exact(gi, images, img, (unsigned)isz, what)))
			goto out;
		snprintf(what, sizeof(what), "label %" PRIu32, r);
		if ((rc = gz_read_exact(gl, labels, &lab, 1, what)))
			goto out;
		int64_t l64 = lab;
		const uint8_t *d;
		size_t dl;
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "image", img, isz);
		dtf_example_builder_add_int64s(&b, "label", &l64, 1);
		if ((rc = dtf_example_builder_finish(&b, &d, &dl)) ||
		    (rc = sharder_write(&sh, d, dl)))
			goto out;
	}
	if ((rc = sharder_finish(&sh)))
		goto out;
	printf("%s: wrote %" PRIu32 " records of %" PRIu32 "x%" PRIu32
	       " images in %d shard%s: %s-*-of-%05d.tfrecord\n",
	       PROG, n, rows, cols, (int)nshards, nshards == 1 ? "" : "s",
	       prefix, (int)nshards);
out:
	if (rc)
		sharder_abort(&sh);
	if (gi)
		gzclose(gi);
	if (gl)
		gzclose(gl);
	dtf_free(img);
	dtf_example_builder_deinit(&b);
	return rc;
}

/* ---- convert-text ---- */

/*
 * Character-level language-model data: the text's distinct bytes, sorted,
 * are the vocabulary (id i = the i-th smallest byte); the last
 * `val_fraction` of the characters (rounded down) are the validation part,
 * the rest the training part.  Each part is cut into windows of block + 1
 * ids starting every `stride` characters from the part's first: the model
 * reads ids [0, block) and predicts ids [1, block + 1).  With stride ==
 * block consecutive windows share one id, so every character of a part
 * but its first is a target exactly once per epoch; a tail shorter than a
 * window (under `stride` characters) is left out.  The windows are fixed
 * records, so the input pipeline's sharding, shuffling and checkpointed
 * position work on them as on any examples.
 */
struct text_part {
	const char *name;  /* "train", "validation" */
	int64_t begin, end; /* characters of the text */
	int shards;
	int64_t windows;
};

static int64_t text_windows(int64_t chars, int64_t block, int64_t stride)
{
	return chars < block + 1 ? 0 : (chars - block - 1) / stride + 1;
}

/* Every window of one part into its shards. */
static int write_text_part(const char *dir, const struct text_part *p,
			   const uint8_t *ids, int64_t block, int64_t stride,
			   enum dtf_compression comp)
{
	size_t len = strlen(dir) + strlen(p->name) + 2;
	char *prefix = dtf_malloc(len);
	struct dtf_example_builder b;
	struct sharder sh;
	int rc;
	memset(&sh, 0, sizeof(sh));
	dtf_example_builder_init(&b);
	if (!prefix) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(prefix, len, "%s/%s", dir, p->name);
	if ((rc = sharder_begin(&sh, prefix, p->shards, p->windows, comp)))
		goto out;
	for (int64_t k = 0; k < p->windows; k++) {
		int64_t at = p->begin + k * stride;
		const uint8_t *d;
		size_t dl;
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "tokens", ids + at,
					      (size_t)block + 1);
		dtf_example_builder_add_int64s(&b, "offset", &at, 1);
		if ((rc = dtf_example_builder_finish(&b, &d, &dl)) ||
		    (rc = sharder_write(&sh, d, dl)))
			goto out;
	}
	rc = sharder_finish(&sh);
out:
	if (rc)
		sharder_abort(&sh);
	dtf_example_builder_deinit(&b);
	dtf_free(prefix);
	return rc;
}

/* DIR/vocab.txt: the vocabulary's bytes in id order, nothing else. */
static int write_vocab(const char *dir, const uint8_t *vocab, int n)
{
	size_t len = strlen(dir) + 16;
	char *path = dtf_malloc(len), *tmp = dtf_malloc(len + 4);
	int rc = 0;
	if (!path || !tmp) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(path, len, "%s/vocab.txt", dir);
	snprintf(tmp, len + 4, "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot create: %s", tmp,
			       strerror(errno));
		goto out;
	}
	int bad = fwrite(vocab, 1, (size_t)n, f) != (size_t)n;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path) != 0) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot write: %s", path,
			       strerror(errno));
		remove(tmp);
	}
out:
	dtf_free(path);
	dtf_free(tmp);
	return rc;
}

static int parse_fraction(const char *opt, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0.0 && v < 1.0))
		return dtf_error(DTF_ERR_USAGE,
				 "%s: '%s' is not a number in [0, 1)", opt, s);
	*out = v;
	return 0;
}

static int cmd_convert_text(int argc, char **argv)
{
	static const struct option opts[] = {
		{"text", required_argument, NULL, 't'},
		{"out", required_argument, NULL, 'o'},
		{"block-size", required_argument, NULL, 'b'},
		{"stride", required_argument, NULL, 'S'},
		{"validation-fraction", required_argument, NULL, 'v'},
		{"shards", required_argument, NULL, 's'},
		{"compression", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *text = NULL, *dir = NULL;
	enum dtf_compression comp = DTF_COMPRESSION_NONE;
	int64_t block = -1, stride = 0, nshards = 1;
	double vfrac = 0.1;
	int c, rc = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': text = optarg; break;
		case 'o': dir = optarg; break;
		case 'b': rc = parse_i64("--block-size", optarg, 1, 1 << 20, &block); break;
		case 'S': rc = parse_i64("--stride", optarg, 1, 1 << 20, &stride); break;
		case 'v': rc = parse_fraction("--validation-fraction", optarg, &vfrac); break;
		case 's': rc = parse_i64("--shards", optarg, 1, 99999, &nshards); break;
		case 'c': rc = parse_compression("--compression", optarg, &comp); break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return usage_error("convert-text: bad option", NULL);
		}
		if (rc)
			return rc;
	}
	if (!text || !dir || block < 0)
		return usage_error("convert-text needs --text, --out and "
				   "--block-size",
				   NULL);
	if (optind < argc)
		return usage_error("convert-text: unexpected argument '%s'",
				   argv[optind]);
	if (!stride)
		stride = block;
	if (stride > block)
		return dtf_error(DTF_ERR_USAGE,
				 "convert-text: --stride %" PRId64 " is more "
				 "than --block-size %" PRId64 " (characters "
				 "between windows would never be targets)",
				 stride, block);

	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	FILE *f = fopen(text, "rb");
	if (!f)
		return dtf_error(DTF_ERR_DATA, "%s: cannot open: %s", text,
				 strerror(errno));
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? 2 * cap : 1 << 20;
			uint8_t *nb = dtf_realloc(buf, ncap);
			if (!nb) {
				rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
				goto out;
			}
			buf = nb, cap = ncap;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		rc = dtf_error(DTF_ERR_DATA, "%s: read error: %s", text,
			       strerror(errno));
		goto out;
	}

	/* the vocabulary, then the text as ids in place */
	uint8_t vocab[256], id_of[256];
	int seen[256] = {0}, nv = 0;
	for (size_t i = 0; i < len; i++)
		seen[buf[i]] = 1;
	for (int v = 0; v < 256; v++)
		if (seen[v]) {
			id_of[v] = (uint8_t)nv;
			vocab[nv++] = (uint8_t)v;
		}
	for (size_t i = 0; i < len; i++)
		buf[i] = id_of[buf[i]];

	int64_t nval = (int64_t)((double)len * vfrac);
	struct text_part parts[2] = {
		{"train", 0, (int64_t)len - nval, (int)nshards, 0},
		{"validation", (int64_t)len - nval, (int64_t)len, 1, 0},
	};
	for (int i = 0; i < 2; i++) {
		parts[i].windows = text_windows(parts[i].end - parts[i].begin,
						block, stride);
		if (parts[i].windows == 0 && (i == 0 || nval > 0)) {
			rc = dtf_error(DTF_ERR_DATA,
				       "%s: the %s part has %" PRId64
				       " characters, fewer than one window "
				       "of --block-size + 1 = %" PRId64,
				       text, parts[i].name,
				       parts[i].end - parts[i].begin,
				       block + 1);
			goto out;
		}
	}
	if (parts[0].windows < parts[0].shards) {
		rc = dtf_error(DTF_ERR_USAGE,
			       "convert-text: --shards %d is more than the %" PRId64
			       " windows of the train part (shards would be empty)",
			       parts[0].shards, parts[0].windows);
		goto out;
	}
	if ((rc = write_vocab(dir, vocab, nv)))
		goto out;
	for (int i = 0; i < 2; i++) {
		if (i == 1 && nval == 0)
			continue;
		if ((rc = write_text_part(dir, &parts[i], buf, block, stride,
					  comp)))
			goto out;
		printf("%s: %s: characters [%" PRId64 ", %" PRId64 "), %" PRId64
		       " windows of %" PRId64 " ids (stride %" PRId64
		       ") in %d shard%s: %s/%s-*-of-%05d.tfrecord\n",
		       PROG, parts[i].name, parts[i].begin, parts[i].end,
		       parts[i].windows, block + 1, stride, parts[i].shards,
		       parts[i].shards == 1 ? "" : "s", dir, parts[i].name,
		       parts[i].shards);
	}
	printf("%s: %zu characters, vocabulary of %d bytes: %s/vocab.txt\n",
	       PROG, len, nv, dir);
out:
	fclose(f);
	dtf_free(buf);
	return rc;
}

/* ---- inspect / verify / shard ---- */

/* Read every record of `path` checking both CRCs; *records counts the
 * good ones. */
static int read_all(const char *path, enum dtf_compression comp,
		    int64_t *records)
{
	struct dtf_tfrecord_reader *r;
	const uint8_t *d;
	size_t n;
	*records = 0;
	int rc = dtf_tfrecord_reader_open_c(path, comp, &r);
	if (rc)
		return rc;
	while ((rc = dtf_tfrecord_reader_next(r, &d, &n)) > 0)
		(*records)++;
	dtf_tfrecord_reader_free(r);
	return rc;
}

#define SCHEMA_MAX 64

/* What the first records say about one feature. */
struct schema_entry {
	char name[DTF_NAME_MAX];
	int types;            /* bit per enum dtf_feature_type seen */
	int64_t min_count, max_count;
	uint64_t min_bytes, max_bytes; /* bytes_list: bytes of one value */
	int64_t records;      /* records that have it */
};

struct schema {
	struct schema_entry e[SCHEMA_MAX];
	int n;
	int overflow;
};

static int schema_visit(void *ctx, const struct dtf_example_feature_info *f)
{
	struct schema *sc = ctx;
	char name[DTF_NAME_MAX];
	snprintf(name, sizeof(name), "%.*s", (int)f->name_len, f->name);
	struct schema_entry *e = NULL;
	for (int i = 0; i < sc->n; i++)
		if (!strcmp(sc->e[i].name, name))
			e = &sc->e[i];
	if (!e) {
		if (sc->n == SCHEMA_MAX) {
			sc->overflow = 1;
			return 0;
		}
		e = &sc->e[sc->n++];
		memset(e, 0, sizeof(*e));
		snprintf(e->name, sizeof(e->name), "%s", name);
		e->min_count = INT64_MAX;
		e->min_bytes = UINT64_MAX;
	}
	if (!f->has_list)
		return 0;
	e->types |= 1 << f->type;
	e->records++;
	if (f->count < e->min_count)
		e->min_count = f->count;
	if (f->count > e->max_count)
		e->max_count = f->count;
	if (f->type == DTF_FEATURE_BYTES && f->count == 1) {
		if (f->bytes < e->min_bytes)
			e->min_bytes = f->bytes;
		if (f->bytes > e->max_bytes)
			e->max_bytes = f->bytes;
	}
	return 0;
}

/* One line of the job file's data.features for an inferred feature. */
static void print_schema(const struct schema *sc, int64_t nrec)
{
	static const char *const types[] = {"bytes", "float", "int64"};
	printf("  schema (first %" PRId64 " record%s):\n", nrec,
	       nrec == 1 ? "" : "s");
	for (int i = 0; i < sc->n; i++) {
		const struct schema_entry *e = &sc->e[i];
		printf("    %s: ", e->name);
		if (!e->types) {
			printf("# no value list in any record\n");
			continue;
		}
		if (e->types & (e->types - 1)) {
			printf("# mixed list types (bytes %d, float %d, int64 "
			       "%d)\n",
			       !!(e->types & 1), !!(e->types & 2),
			       !!(e->types & 4));
			continue;
		}
		int t = e->types == 1 ? 0 : e->types == 2 ? 1 : 2;
		const char *opt = e->records < nrec ? ", default: 0" : "";
		if (t == 0) {
			if (e->max_count != 1 || e->min_count != 1)
				printf("{type: bytes}  # %" PRId64 " to %" PRId64
				       " values: only one value of raw bytes is "
				       "decoded\n",
				       e->min_count, e->max_count);
			else if (e->min_bytes == e->max_bytes) {
				uint64_t b = e->min_bytes;
				printf("{type: bytes, decode: uint8, shape: "
				       "[%" PRIu64 "]%s}  # %" PRIu64 " bytes",
				       b, opt, b);
				if (b % 2 == 0)
					printf("; or float16 [%" PRIu64 "]",
					       b / 2);
				if (b % 4 == 0)
					printf("; or float32 [%" PRIu64 "]",
					       b / 4);
				printf("\n");
			}
			else
				printf("{type: bytes}  # %" PRIu64 " to %" PRIu64
				       " bytes: not a fixed shape\n",
				       e->min_bytes, e->max_bytes);
		} else if (e->min_count == e->max_count) {
			if (e->min_count == 1)
				printf("{type: %s, shape: []%s}\n", types[t], opt);
			else
				printf("{type: %s, shape: [%" PRId64 "]%s}\n",
				       types[t], e->min_count, opt);
		} else {
			printf("{type: %s, max_length: %" PRId64 "%s}  # %" PRId64
			       " to %" PRId64 " values\n",
			       types[t], e->max_count, opt, e->min_count,
			       e->max_count);
		}
	}
	if (sc->overflow)
		printf("    # more than %d features: the rest not shown\n",
		       SCHEMA_MAX);
}

/* Infer the schema from the first `limit` records of `path`. */
static int show_schema(const char *path, enum dtf_compression comp,
		       int64_t limit)
{
	struct dtf_tfrecord_reader *r;
	const uint8_t *d;
	size_t n;
	int rc = dtf_tfrecord_reader_open_c(path, comp, &r);
	if (rc)
		return rc;
	static struct schema sc;
	memset(&sc, 0, sizeof(sc));
	int64_t k = 0;
	uint64_t at = 0;
	while (k < limit && (at = dtf_tfrecord_reader_offset(r),
			     rc = dtf_tfrecord_reader_next(r, &d, &n)) > 0) {
		int wr = dtf_example_walk(d, n, schema_visit, &sc);
		if (wr) {
			printf("  record %" PRId64 " at byte offset %" PRIu64
			       ": %s\n",
			       k, at, dtf_error_msg());
			rc = wr;
			break;
		}
		k++;
	}
	dtf_tfrecord_reader_free(r);
	if (k)
		print_schema(&sc, k);
	return rc < 0 ? rc : 0;
}

static const struct option read_opts[] = {
	{"compression", required_argument, NULL, 'c'},
	{"records", required_argument, NULL, 'r'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* Options of inspect and verify; *first gets the index of the first
 * FILE.  Returns 1 after --help. */
static int parse_read_opts(int argc, char **argv, const char *cmd,
			   enum dtf_compression *comp, int64_t *records,
			   int *first)
{
	int c, rc;
	while ((c = getopt_long(argc, argv, "", read_opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if ((rc = parse_compression("--compression", optarg,
						    comp)))
				return rc;
			break;
		case 'r':
			if (!records)
				return usage_error("%s: bad option", cmd);
			if ((rc = parse_i64("--records", optarg, 1, INT64_MAX,
					    records)))
				return rc;
			break;
		case 'h': fputs(usage_text, stdout); return 1;
		default: return usage_error("%s: bad option", cmd);
		}
	}
	if (optind >= argc)
		return usage_error("%s needs at least one FILE", cmd);
	*first = optind;
	return 0;
}

static int cmd_inspect(int argc, char **argv)
{
	int nbad = 0, last = 0, first;
	enum dtf_compression comp = DTF_COMPRESSION_NONE;
	int64_t limit = 100;
	int rc = parse_read_opts(argc, argv, "inspect", &comp, &limit, &first);
	if (rc)
		return rc < 0 ? rc : 0;
	for (int i = first; i < argc; i++) {
		const char *path = argv[i];
		int64_t n;
		printf("%s\n", path);
		FILE *f = fopen(path, "rb");
		if (!f) {
			printf("  error: cannot open: %s\n", strerror(errno));
			nbad++;
			last = -DTF_ERR_DATA;
			continue;
		}
		long long size = -1;
		if (fseeko(f, 0, SEEK_END) == 0)
			size = (long long)ftello(f);
		fclose(f);
		rc = read_all(path, comp, &n);
		char check[1024];
		snprintf(check, sizeof(check), "%s",
			 rc ? dtf_error_msg() : "all CRCs OK");
		printf("  records: %" PRId64 "%s\n", n,
		       rc ? " readable before the first error" : "");
		printf("  bytes: %lld%s\n", size,
		       comp ? " (compressed)" : "");
		printf("  check: %s\n", check);
		int frc = show_schema(path, comp, limit);
		if (rc || frc) {
			nbad++;
			last = rc ? rc : frc;
		}
	}
	if (nbad)
		return dtf_error(last == -DTF_ERR_NOMEM ? DTF_ERR_NOMEM
							: DTF_ERR_DATA,
				 "inspect: %d of %d file%s failed the check",
				 nbad, argc - first,
				 argc - first == 1 ? "" : "s");
	return 0;
}

static int cmd_verify(int argc, char **argv)
{
	int first;
	enum dtf_compression comp = DTF_COMPRESSION_NONE;
	int rc = parse_read_opts(argc, argv, "verify", &comp, NULL, &first);
	if (rc)
		return rc < 0 ? rc : 0;
	int64_t total = 0;
	for (int i = first; i < argc; i++) {
		int64_t n;
		rc = read_all(argv[i], comp, &n);
		if (rc)
			return rc;
		printf("%s: %" PRId64 " records, all CRCs OK\n", argv[i], n);
		total += n;
	}
	if (argc - first > 1)
		printf("total: %" PRId64 " records in %d files\n", total,
		       argc - first);
	return 0;
}

static int cmd_shard(int argc, char **argv)
{
	static const struct option opts[] = {
		{"out", required_argument, NULL, 'o'},
		{"shards", required_argument, NULL, 's'},
		{"compression", required_argument, NULL, 'c'},
		{"out-compression", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *prefix = NULL;
	enum dtf_compression in = DTF_COMPRESSION_NONE, out = in;
	int out_set = 0;
	int64_t nshards = 0;
	int c, rc = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'o': prefix = optarg; break;
		case 's': rc = parse_i64("--shards", optarg, 1, 99999, &nshards); break;
		case 'c': rc = parse_compression("--compression", optarg, &in); break;
		case 'C':
			rc = parse_compression("--out-compression", optarg, &out);
			out_set = 1;
			break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return usage_error("shard: bad option", NULL);
		}
		if (rc)
			return rc;
	}
	if (!prefix || !nshards || optind >= argc)
		return usage_error("shard needs --out, --shards and at least "
				   "one FILE",
				   NULL);
	if (!out_set)
		out = in;
	/* count first (framing), so the blocks can be cut evenly */
	int64_t total = 0;
	for (int i = optind; i < argc; i++) {
		struct dtf_tfrecord_stats st;
		if ((rc = dtf_tfrecord_scan_c(argv[i], in, &st)))
			return rc;
		total += st.records;
	}
	struct sharder sh;
	memset(&sh, 0, sizeof(sh));
	struct dtf_tfrecord_reader *r = NULL;
	if ((rc = sharder_begin(&sh, prefix, (int)nshards, total, out)))
		goto out;
	for (int i = optind; i < argc; i++) {
		if (r)
			rc = dtf_tfrecord_reader_reopen(r, argv[i]);
		else
			rc = dtf_tfrecord_reader_open_c(argv[i], in, &r);
		if (rc)
			goto out;
		const uint8_t *d;
		size_t n;
		while ((rc = dtf_tfrecord_reader_next(r, &d, &n)) > 0)
			if ((rc = sharder_write(&sh, d, n)))
				goto out;
		if (rc < 0)
			goto out;
	}
	if (sh.written != total) {
		rc = dtf_error(DTF_ERR_DATA,
			       "shard: the input changed while reading (%" PRId64
			       " records counted, %" PRId64 " read)",
			       total, sh.written);
		goto out;
	}
	if ((rc = sharder_finish(&sh)))
		goto out;
	printf("%s: wrote %" PRId64 " records from %d file%s in %d shard%s: "
	       "%s-*-of-%05d.tfrecord\n",
	       PROG, total, argc - optind, argc - optind == 1 ? "" : "s",
	       (int)nshards, nshards == 1 ? "" : "s", prefix, (int)nshards);
out:
	if (rc)
		sharder_abort(&sh);
	dtf_tfrecord_reader_free(r);
	return rc;
}

/* ---- synth ---- */

static int parse_shape(const char *s, int64_t shape[3])
{
	char *end;
	const char *p = s;
	for (int i = 0; i < 3; i++) {
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (errno || end == p || v < 1 || v > 4096 ||
		    (i < 2 ? *end != ',' : *end != '\0'))
			return dtf_error(DTF_ERR_USAGE,
					 "--shape: '%s' is not H,W,C (positive "
					 "integers up to 4096)",
					 s);
		shape[i] = v;
		p = end + 1;
	}
	return 0;
}

static int cmd_synth(int argc, char **argv)
{
	static const struct option opts[] = {
		{"out", required_argument, NULL, 'o'},
		{"count", required_argument, NULL, 'n'},
		{"shards", required_argument, NULL, 's'},
		{"shape", required_argument, NULL, 'p'},
		{"classes", required_argument, NULL, 'k'},
		{"seed", required_argument, NULL, 'x'},
		{"compression", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *prefix = NULL;
	enum dtf_compression comp = DTF_COMPRESSION_NONE;
	int64_t count = -1, nshards = 1, classes = 10, seed = 1;
	int64_t shape[3] = {28, 28, 1};
	int c, rc;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'o': prefix = optarg; break;
		case 'n': rc = parse_i64("--count", optarg, 0, INT64_C(1) << 40, &count); break;
		case 's': rc = parse_i64("--shards", optarg, 1, 99999, &nshards); break;
		case 'p': rc = parse_shape(optarg, shape); break;
		case 'k': rc = parse_i64("--classes", optarg, 1, 1 << 20, &classes); break;
		case 'x': rc = parse_i64("--seed", optarg, 0, INT64_MAX, &seed); break;
		case 'c': rc = parse_compression("--compression", optarg, &comp); break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return usage_error("synth: bad option", NULL);
		}
		if (c != 'o' && rc)
			return rc;
	}
	if (!prefix || count < 0)
		return usage_error("synth needs --out and --count", NULL);
	if (optind < argc)
		return usage_error("synth: unexpected argument '%s'",
				   argv[optind]);
	if (nshards > count && count > 0)
		return dtf_error(DTF_ERR_USAGE,
				 "synth: --shards %" PRId64 " is more than "
				 "--count %" PRId64 " (shards would be empty)",
				 nshards, count);
	int64_t hw = shape[0] * shape[1];
	if (hw < classes)
		return dtf_error(DTF_ERR_USAGE,
				 "synth: H*W (%" PRId64 ") must be at least "
				 "--classes (%" PRId64 ")",
				 hw, classes);
	size_t isz = (size_t)(hw * shape[2]);
	struct dtf_philox_key key =
		dtf_philox_make_key((uint64_t)seed, RNG_SYNTH);
	uint8_t *img = dtf_malloc(isz);
	struct dtf_example_builder b;
	struct sharder sh;
	memset(&sh, 0, sizeof(sh));
	dtf_example_builder_init(&b);
	if (!img) {
		rc = dtf_error(DTF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = sharder_begin(&sh, prefix, (int)nshards, count, comp)))
		goto out;
	for (int64_t r = 0; r < count; r++) {
		uint32_t w[4];
		uint32_t ctr[4] = {0, (uint32_t)r, (uint32_t)(r >> 32), 0};
		dtf_philox4x32(key, ctr, w);
		int64_t label = (int64_t)(w[0] % (uint32_t)classes);
		/* Pixels of the label's band (a 1/K slice of the flattened
		 * image plane) are bright, the rest dark; both noisy. */
		for (size_t i = 0; i < isz; i += 4) {
			uint32_t pc[4] = {(uint32_t)(i / 4) + 1, (uint32_t)r,
					  (uint32_t)(r >> 32), 1};
			dtf_philox4x32(key, pc, w);
			for (size_t j = 0; j < 4 && i + j < isz; j++) {
				int64_t pix = (int64_t)((i + j) /
							(size_t)shape[2]);
				int band = (int)(pix * classes / hw);
				unsigned noise = w[j] & 63;
				img[i + j] = (uint8_t)(band == label
							       ? 160 + noise
							       : 20 + noise);
			}
		}
		const uint8_t *d;
		size_t dl;
		dtf_example_builder_reset(&b);
		dtf_example_builder_add_bytes(&b, "image", img, isz);
		dtf_example_builder_add_int64s(&b, "label", &label, 1);
		if ((rc = dtf_example_builder_finish(&b, &d, &dl)) ||
		    (rc = sharder_write(&sh, d, dl)))
			goto out;
	}
	if ((rc = sharder_finish(&sh)))
		goto out;
	printf("%s: wrote %" PRId64 " synthetic records (%" PRId64 "x%" PRId64
	       "x%" PRId64 ", %" PRId64 " classes) in %d shard%s\n",
	       PROG, count, shape[0], shape[1], shape[2], classes,
	       (int)nshards, nshards == 1 ? "" : "s");
out:
	if (rc)
		sharder_abort(&sh);
	dtf_free(img);
	dtf_example_builder_deinit(&b);
	return rc;
}

int main(int argc, char **argv)
{
	int rc;
	if (argc < 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") ||
	    !strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version")) {
		printf("%s %s\n", PROG, DTF_VERSION);
		return 0;
	}
	/* Subcommand parsing starts at argv[1] as its argv[0]. */
	optind = 1;
	if (!strcmp(cmd, "convert-idx"))
		rc = cmd_convert_idx(argc - 1, argv + 1);
	else if (!strcmp(cmd, "convert-text"))
		rc = cmd_convert_text(argc - 1, argv + 1);
	else if (!strcmp(cmd, "inspect"))
		rc = cmd_inspect(argc - 1, argv + 1);
	else if (!strcmp(cmd, "verify"))
		rc = cmd_verify(argc - 1, argv + 1);
	else if (!strcmp(cmd, "synth"))
		rc = cmd_synth(argc - 1, argv + 1);
	else if (!strcmp(cmd, "shard"))
		rc = cmd_shard(argc - 1, argv + 1);
	else
		rc = usage_error("unknown command '%s'", cmd);
	if (rc < 0) {
		fflush(stdout);
		fprintf(stderr, "%s: %s\n", PROG, dtf_error_msg());
	}
	return dtf_error_exit_status(rc);
}
