/*
 * tfrecord.c - TFRecord framing: reader, writer and framing-only scan.
 *
 * Design: the reader keeps one growing record buffer and one input buffer,
 * both kept across dtf_tfrecord_reader_reopen(), so reading many files
 * costs no allocation per record or per file in steady state.  Bytes come
 * through `struct source`, a read/skip/rewind/close table: a plain file
 * read with read(2) into the input buffer (a record that lies wholly in
 * that buffer is checked and handed out in place, with no copy), or
 * a zlib inflate stream over the file (gzip or zlib wrapper; a gzip member
 * that ends with more input behind it is followed by the next member, as
 * gzip(1) does).  The z_stream lives in the reader and is reset, not
 * reallocated, per file.  The reader tracks the byte offset (of the
 * uncompressed stream) itself, so messages need no tell() from the source.
 *
 * Checks are ordered so corrupt input never drives an allocation: the
 * length is used only after its CRC matches, and for regular files a length
 * running past the end of the file is reported as truncation before the
 * buffer grows.  Where the size is unknown (compressed streams) the record
 * buffer grows geometrically as bytes actually arrive, so it never exceeds
 * twice the data present.
 */
#include "data/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "data/crc32c.h"
#include "data/input.h"

/* Input buffer of readers (plain files and compressed input), bytes: big
 * enough that most records are handed out in place and that read(2) calls
 * are few, small enough to stay in a core's L2 cache. */
#define IO_BUFFER (1024 * 1024)
#define WRITE_BUFFER (1024 * 1024)

/* A byte source.  read returns bytes read (fewer than n only at end of
 * input) or -1 with errno set; skip moves forward n bytes, rewind goes back
 * to byte 0 (both 0 or -1 with errno).  size returns the total size in bytes
 * or -1 when unknown (a pipe, a compressed stream).  peek (NULL where the
 * source cannot) returns the next n bytes in place without consuming them,
 * valid until the next call, or NULL when it cannot (fewer left, an error:
 * read then reports it). */
struct source {
	long long (*read)(void *ctx, void *buf, size_t n);
	const uint8_t *(*peek)(void *ctx, size_t n);
	int (*skip)(void *ctx, uint64_t n);
	int (*rewind)(void *ctx);
	long long (*size)(void *ctx);
	void (*close)(void *ctx);
};

/* A plain file: unread bytes are buf[pos, end). */
struct fin {
	int fd;
	uint8_t *buf; /* IO_BUFFER bytes (the reader's iobuf) */
	size_t pos, end;
};

/* read(2) that retries on EINTR: bytes read, 0 at end, -1 with errno. */
static ssize_t read_some(int fd, void *buf, size_t n)
{
	ssize_t k;
	do
		k = read(fd, buf, n);
	while (k < 0 && errno == EINTR);
	return k;
}

static long long file_read(void *ctx, void *dst, size_t n)
{
	struct fin *f = ctx;
	uint8_t *d = dst;
	size_t done = 0;
	while (done < n) {
		if (f->pos == f->end) {
			f->pos = f->end = 0;
			ssize_t k;
			if (n - done >= IO_BUFFER) { /* big: no detour */
				k = read_some(f->fd, d + done, n - done);
				if (k < 0)
					return -1;
				if (k == 0)
					break;
				done += (size_t)k;
				continue;
			}
			k = read_some(f->fd, f->buf, IO_BUFFER);
			if (k < 0)
				return -1;
			if (k == 0)
				break;
			f->end = (size_t)k;
		}
		size_t take = f->end - f->pos;
		if (take > n - done)
			take = n - done;
		memcpy(d + done, f->buf + f->pos, take);
		f->pos += take;
		done += take;
	}
	return (long long)done;
}

/* peek: the bytes are moved into the input buffer (at most IO_BUFFER). */
static const uint8_t *file_peek(void *ctx, size_t n)
{
	struct fin *f = ctx;
	if (n > IO_BUFFER)
		return NULL;
	if (f->end - f->pos >= n)
		return f->buf + f->pos;
	memmove(f->buf, f->buf + f->pos, f->end - f->pos);
	f->end -= f->pos;
	f->pos = 0;
	while (f->end < n) {
		ssize_t k = read_some(f->fd, f->buf + f->end,
				      IO_BUFFER - f->end);
		if (k <= 0)
			return NULL;
		f->end += (size_t)k;
	}
	return f->buf;
}

static int file_skip(void *ctx, uint64_t n)
{
	struct fin *f = ctx;
	if (n <= f->end - f->pos) {
		f->pos += (size_t)n;
		return 0;
	}
	n -= f->end - f->pos;
	f->pos = f->end = 0;
	if (n > (uint64_t)INT64_MAX) {
		errno = EOVERFLOW;
		return -1;
	}
	return lseek(f->fd, (off_t)n, SEEK_CUR) < 0 ? -1 : 0;
}

static int file_rewind(void *ctx)
{
	struct fin *f = ctx;
	f->pos = f->end = 0;
	return lseek(f->fd, 0, SEEK_SET) < 0 ? -1 : 0;
}

static long long file_size(void *ctx)
{
	struct stat st;
	if (fstat(((struct fin *)ctx)->fd, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	return (long long)st.st_size;
}

static void file_close(void *ctx)
{
	struct fin *f = ctx;
	close(f->fd);
	f->fd = -1;
}

static const struct source file_source = {
	file_read, file_peek, file_skip, file_rewind, file_size, file_close,
};

/*
 * A plain regular file mapped whole: bytes map[pos, size).  Mapping spares
 * the copy read(2) makes.  A file that shrinks while mapped would raise
 * SIGBUS on the lost pages; every mapping is listed in `guard` so that the
 * SIGBUS handler (installed once, at the first mapping) can name the file
 * and end the process with the data-error status instead of a crash.  A
 * fault outside every listed mapping goes to the handler there was before.
 */
struct fmap {
	int fd;
	const uint8_t *map;
	uint64_t size, pos;
	int slot; /* in guard[] */
};

#define GUARD_SLOTS 256
static struct {
	atomic_flag taken;
	_Atomic(uintptr_t) base; /* 0: free */
	size_t size;
	const char *path;
} guard[GUARD_SLOTS];
static struct sigaction guard_prev;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_status; /* exit status of a data error */
static char guard_prefix[192]; /* "[rank N host] error: " */

static void put_str(const char *s)
{
	ssize_t k = write(2, s, strlen(s));
	(void)k;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	for (int i = 0; i < GUARD_SLOTS; i++) {
		uintptr_t b = atomic_load_explicit(&guard[i].base,
						   memory_order_acquire);
		if (b && a >= b && a - b < guard[i].size) {
			put_str(guard_prefix);
			put_str(guard[i].path);
			put_str(": the file shrank while it was being read "
				"(SIGBUS on a mapped page); input files must "
				"not change during a run\n");
			_exit(guard_status);
		}
	}
	/* not ours: the previous disposition takes the re-executed fault */
	if (guard_prev.sa_flags & SA_SIGINFO) {
		guard_prev.sa_sigaction(sig, si, uc);
		return;
	}
	sigaction(SIGBUS, &guard_prev, NULL);
}

static void guard_install(void)
{
	guard_status = dtf_error_exit_status(-DTF_ERR_DATA);
	dtf_log_prefix(DTF_LOG_ERROR, guard_prefix, sizeof(guard_prefix));
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &guard_prev);
}

/* A guard slot for [base, base + size) or -1 when all are taken. */
static int guard_add(const void *base, size_t size, const char *path)
{
	pthread_once(&guard_once, guard_install);
	for (int i = 0; i < GUARD_SLOTS; i++)
		if (!atomic_flag_test_and_set(&guard[i].taken)) {
			guard[i].size = size;
			guard[i].path = path;
			atomic_store_explicit(&guard[i].base, (uintptr_t)base,
					      memory_order_release);
			return i;
		}
	return -1;
}

static void guard_remove(int i)
{
	atomic_store_explicit(&guard[i].base, 0, memory_order_release);
	atomic_flag_clear(&guard[i].taken);
}

static long long map_read(void *ctx, void *dst, size_t n)
{
	struct fmap *m = ctx;
	uint64_t left = m->size - m->pos;
	if (n > left)
		n = (size_t)left;
	memcpy(dst, m->map + m->pos, n);
	m->pos += n;
	return (long long)n;
}

static const uint8_t *map_peek(void *ctx, size_t n)
{
	struct fmap *m = ctx;
	return n <= m->size - m->pos ? m->map + m->pos : NULL;
}

static int map_skip(void *ctx, uint64_t n)
{
	struct fmap *m = ctx;
	m->pos = n > m->size - m->pos ? m->size : m->pos + n;
	return 0;
}

static int map_rewind(void *ctx)
{
	((struct fmap *)ctx)->pos = 0;
	return 0;
}

static long long map_size(void *ctx)
{
	return (long long)((struct fmap *)ctx)->size;
}

static void map_close(void *ctx)
{
	struct fmap *m = ctx;
	guard_remove(m->slot);
	munmap((void *)m->map, (size_t)m->size);
	close(m->fd);
	m->map = NULL;
	m->fd = -1;
}

static const struct source map_source = {
	map_read, map_peek, map_skip, map_rewind, map_size, map_close,
};

/* Inflate state of a compressed reader (kept across files). */
struct zin {
	z_stream zs;
	int inited;     /* inflateInit2 done */
	FILE *f;        /* the compressed file, unbuffered */
	uint8_t *in;    /* IO_BUFFER bytes of compressed input */
	int wbits;      /* 15 + 16 gzip, 15 zlib */
	int file_eof;   /* no more compressed bytes */
	int ended;      /* the last member ended and nothing follows */
	char msg[128];  /* what zlib said about corrupt input */
};

/* Read up to n uncompressed bytes; -1 with errno on an I/O error, -2 with
 * z->msg set on corrupt compressed data. */
static long long z_read(void *ctx, void *buf, size_t n)
{
	struct zin *z = ctx;
	size_t got = 0;
	while (got < n && !z->ended) {
		if (z->zs.avail_in == 0 && !z->file_eof) {
			size_t k = fread(z->in, 1, IO_BUFFER, z->f);
			if (k < IO_BUFFER) {
				if (ferror(z->f))
					return -1;
				z->file_eof = 1;
			}
			z->zs.next_in = z->in;
			z->zs.avail_in = (uInt)k;
		}
		size_t want = n - got;
		if (want > (1u << 30))
			want = 1u << 30;
		z->zs.next_out = (Bytef *)buf + got;
		z->zs.avail_out = (uInt)want;
		int ret = inflate(&z->zs, Z_NO_FLUSH);
		got += want - z->zs.avail_out;
		if (ret == Z_STREAM_END) {
			/* Another member behind this one? */
			if (z->zs.avail_in == 0 && !z->file_eof) {
				size_t k = fread(z->in, 1, IO_BUFFER, z->f);
				if (k < IO_BUFFER) {
					if (ferror(z->f))
						return -1;
					z->file_eof = 1;
				}
				z->zs.next_in = z->in;
				z->zs.avail_in = (uInt)k;
			}
			if (z->zs.avail_in == 0)
				z->ended = 1;
			else
				inflateReset(&z->zs);
			continue;
		}
		if (ret == Z_OK)
			continue;
		if (ret == Z_BUF_ERROR && z->zs.avail_in == 0 && z->file_eof)
			break; /* compressed stream cut short: fewer bytes */
		if (ret == Z_BUF_ERROR)
			continue;
		snprintf(z->msg, sizeof(z->msg), "%s",
			 ret == Z_MEM_ERROR ? "out of memory"
			 : z->zs.msg        ? z->zs.msg
					    : "corrupt data");
		return -2;
	}
	return (long long)got;
}

static int z_skip(void *ctx, uint64_t n)
{
	(void)ctx;
	(void)n;
	errno = ESPIPE; /* never called: the size is unknown */
	return -1;
}

static int z_rewind(void *ctx)
{
	struct zin *z = ctx;
	clearerr(z->f);
	if (fseeko(z->f, 0, SEEK_SET) != 0)
		return -1;
	inflateReset2(&z->zs, z->wbits);
	z->zs.avail_in = 0;
	z->file_eof = 0;
	z->ended = 0;
	return 0;
}

static long long z_size(void *ctx)
{
	(void)ctx;
	return -1;
}

static void z_close(void *ctx)
{
	struct zin *z = ctx;
	if (z->f)
		fclose(z->f);
	z->f = NULL;
}

static const struct source zlib_source = {
	z_read, NULL, z_skip, z_rewind, z_size, z_close,
};

struct dtf_tfrecord_reader {
	const struct source *src;
	void *ctx;          /* the source's state (&f or &z) */
	char *path;         /* for messages */
	size_t path_cap;    /* bytes allocated for path */
	char *iobuf;        /* IO_BUFFER bytes: file or compressed input */
	uint8_t *buf;       /* record data */
	size_t cap;         /* bytes allocated for buf */
	int64_t index;      /* next record */
	uint64_t offset;    /* byte offset of the next record */
	long long size;     /* file size in bytes, -1 if unknown */
	enum dtf_compression compression;
	struct fin f;       /* plain files */
	struct fmap m;
	struct zin z;       /* compressed sources */
	int resumable;      /* the last error left the reader at the next
			       record (a data CRC mismatch) */
};

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void store_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The common error prefix: path, record index and offset of its start. */
#define REC_FMT "%s: record %" PRId64 " at byte offset %" PRIu64 ": "
#define REC_ARGS(r) (r)->path, (r)->index, (r)->offset

/* A failed source read: got is -1 (errno) or -2 (corrupt compressed data,
 * the message in r->z.msg). */
static int read_error(const struct dtf_tfrecord_reader *r, long long got)
{
	/* "incorrect data check": the stream's own checksum, which zlib
	 * compares at the stream's end, after every record it holds */
	if (got == -2 && strstr(r->z.msg, "data check"))
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "corrupt %s stream (zlib: %s)\n"
				 "HINT: the stream's checksum is read at its end, so the damage may be in any record before this one; "
				 "`dtf-records verify --compression %s %s` names the first damaged record",
				 REC_ARGS(r),
				 dtf_compression_name(r->compression),
				 r->z.msg, dtf_compression_name(r->compression),
				 r->path);
	if (got == -2)
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "corrupt %s stream (zlib: %s)",
				 REC_ARGS(r),
				 dtf_compression_name(r->compression),
				 r->z.msg);
	return dtf_error(DTF_ERR_DATA, REC_FMT "read error: %s", REC_ARGS(r),
			 strerror(errno));
}

static int set_path(struct dtf_tfrecord_reader *r, const char *path)
{
	size_t n = strlen(path) + 1;
	if (n > r->path_cap) {
		char *p = dtf_malloc(n);
		if (!p)
			return dtf_error(DTF_ERR_NOMEM, "%s: out of memory",
					 path);
		dtf_free(r->path);
		r->path = p;
		r->path_cap = n;
	}
	memcpy(r->path, path, n);
	return 0;
}

static void close_source(struct dtf_tfrecord_reader *r)
{
	if (r->ctx)
		r->src->close(r->ctx);
	r->ctx = NULL;
}

int dtf_tfrecord_reader_reopen(struct dtf_tfrecord_reader *r,
			       const char *path)
{
	close_source(r);
	r->index = 0;
	r->offset = 0;
	r->size = -1;
	int rc = set_path(r, path);
	if (rc)
		return rc;
	if (r->compression == DTF_COMPRESSION_NONE) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return dtf_error(DTF_ERR_DATA, "%s: cannot open: %s",
					 path, strerror(errno));
#ifdef POSIX_FADV_SEQUENTIAL
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
		struct stat st;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
			void *m = mmap(NULL, (size_t)st.st_size, PROT_READ,
				       MAP_PRIVATE, fd, 0);
			int slot = -1;
			if (m != MAP_FAILED &&
			    (slot = guard_add(m, (size_t)st.st_size,
					      r->path)) < 0)
				munmap(m, (size_t)st.st_size);
			if (slot >= 0) {
				madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
				r->m = (struct fmap){fd, m, (uint64_t)st.st_size,
						     0, slot};
				r->src = &map_source;
				r->ctx = &r->m;
				r->size = (long long)st.st_size;
				return 0;
			}
		}
		r->f = (struct fin){fd, (uint8_t *)r->iobuf, 0, 0};
		r->src = &file_source;
		r->ctx = &r->f;
		r->size = r->src->size(r->ctx);
		return 0;
	}
	FILE *f = fopen(path, "rb");
	if (!f)
		return dtf_error(DTF_ERR_DATA, "%s: cannot open: %s", path,
				 strerror(errno));
	struct zin *z = &r->z;
	setvbuf(f, NULL, _IONBF, 0); /* z->in is the buffer */
	z->wbits = r->compression == DTF_COMPRESSION_GZIP ? 15 + 16 : 15;
	int zr;
	if (!z->inited) {
		memset(&z->zs, 0, sizeof(z->zs));
		zr = inflateInit2(&z->zs, z->wbits);
		z->inited = zr == Z_OK;
	} else {
		zr = inflateReset2(&z->zs, z->wbits);
	}
	if (zr != Z_OK) {
		fclose(f);
		return dtf_error(DTF_ERR_NOMEM, "%s: cannot start zlib: %s",
				 path, zr == Z_MEM_ERROR ? "out of memory"
							  : "bad parameters");
	}
	z->in = (uint8_t *)r->iobuf;
	z->f = f;
	z->zs.avail_in = 0;
	z->file_eof = 0;
	z->ended = 0;
	z->msg[0] = 0;
	r->src = &zlib_source;
	r->ctx = z;
	return 0;
}

int dtf_tfrecord_reader_open_c(const char *path,
			       enum dtf_compression compression,
			       struct dtf_tfrecord_reader **out)
{
	int rc;
	*out = NULL;
	const char *name = path ? path : "(reader)";
	if ((unsigned)compression > DTF_COMPRESSION_ZLIB)
		return dtf_error(DTF_ERR_USAGE, "%s: unknown compression %d",
				 name, (int)compression);
	struct dtf_tfrecord_reader *r = dtf_calloc(1, sizeof(*r));
	if (!r)
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory", name);
	r->compression = compression;
	r->iobuf = dtf_malloc(IO_BUFFER);
	if (!r->iobuf) {
		rc = dtf_error(DTF_ERR_NOMEM, "%s: out of memory", name);
		goto out_free;
	}
	rc = path ? dtf_tfrecord_reader_reopen(r, path) : 0;
	if (rc)
		goto out_free;
	*out = r;
	return 0;
out_free:
	dtf_tfrecord_reader_free(r);
	return rc;
}

int dtf_tfrecord_reader_open(const char *path,
			     struct dtf_tfrecord_reader **out)
{
	return dtf_tfrecord_reader_open_c(path, DTF_COMPRESSION_NONE, out);
}

int dtf_tfrecord_reader_reserve_path(struct dtf_tfrecord_reader *r,
				     size_t len)
{
	if (len + 1 <= r->path_cap)
		return 0;
	char *p = dtf_malloc(len + 1);
	if (!p)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	if (r->path)
		memcpy(p, r->path, strlen(r->path) + 1);
	else
		p[0] = 0;
	if (r->ctx == &r->m)
		guard[r->m.slot].path = p;
	dtf_free(r->path);
	r->path = p;
	r->path_cap = len + 1;
	return 0;
}

int dtf_tfrecord_reader_reserve(struct dtf_tfrecord_reader *r, size_t bytes)
{
	if (bytes <= r->cap)
		return 0;
	uint8_t *b = dtf_realloc(r->buf, bytes);
	if (!b)
		return dtf_error(DTF_ERR_NOMEM,
				 "%s: out of memory for a record of %zu bytes",
				 r->path, bytes);
	r->buf = b;
	r->cap = bytes;
	return 0;
}

/* The hint for a compressed file read as uncompressed (first header). */
static const char *compression_hint(const struct dtf_tfrecord_reader *r,
				    const uint8_t *h)
{
	if (r->compression != DTF_COMPRESSION_NONE || r->offset != 0)
		return "";
	if (h[0] == 0x1f && h[1] == 0x8b)
		return "\nHINT: the file starts with the gzip magic bytes "
		       "(1f 8b): set `compression: gzip` in the job's data "
		       "section, or in data.train or data.eval for those files "
		       "alone (dtf-records: --compression gzip)";
	if ((h[0] & 0x0f) == 8 && (h[0] >> 4) <= 7 &&
	    ((unsigned)h[0] << 8 | h[1]) % 31 == 0)
		return "\nHINT: the file starts with a zlib header: set "
		       "`compression: zlib` in the job's data section, or in "
		       "data.train or data.eval for those files alone "
		       "(dtf-records: --compression zlib)";
	return "";
}

/*
 * Read and check the 12-byte header of the next record: 1 with *len set,
 * 0 at a clean end of file, or a negative error.  Also rejects a length
 * that runs past the end of a regular file.
 */
static int read_header(struct dtf_tfrecord_reader *r, uint64_t *len)
{
	uint8_t h[DTF_TFRECORD_HEADER];
	if (!r->ctx)
		return dtf_error(DTF_ERR_DATA, "%s: file is not open",
				 r->path ? r->path : "(none)");
	long long got = r->src->read(r->ctx, h, sizeof(h));
	if (got < 0)
		return read_error(r, got);
	if (got == 0)
		return 0;
	if (got < (long long)sizeof(h))
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "truncated record header (%lld of %d "
					 "bytes)%s",
				 REC_ARGS(r), got, DTF_TFRECORD_HEADER,
				 got >= 2 ? compression_hint(r, h) : "");
	uint32_t want = load_le32(h + 8);
	if (dtf_crc32c_mask(dtf_crc32c(0, h, 8)) != want)
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "length CRC mismatch (corrupt length "
					 "field)%s",
				 REC_ARGS(r), compression_hint(r, h));
	*len = load_le64(h);
	if (r->size >= 0) {
		uint64_t end = r->offset + sizeof(h);
		uint64_t left = (uint64_t)r->size > end ? (uint64_t)r->size - end
							: 0;
		if (*len > left || left - *len < 4)
			return dtf_error(DTF_ERR_DATA,
					 REC_FMT "truncated record data (%" PRIu64
						 " of %" PRIu64 " bytes)",
					 REC_ARGS(r), left,
					 *len > UINT64_MAX - 4 ? UINT64_MAX
							       : *len + 4);
	}
	return 1;
}

/* First growth step of the record buffer for a stream of unknown size. */
#define STREAM_CHUNK ((size_t)1 << 20)

int dtf_tfrecord_reader_next(struct dtf_tfrecord_reader *r,
			     const uint8_t **data, size_t *len)
{
	uint64_t n;
	r->resumable = 0;
	int rc = read_header(r, &n);
	if (rc <= 0)
		return rc;
	if (n > SIZE_MAX / 2 - 4)
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "record length %" PRIu64 " too large",
				 REC_ARGS(r), n);
	uint8_t c[4];
	long long got = 0;
	const uint8_t *rec =
		r->src->peek ? r->src->peek(r->ctx, (size_t)n + 4) : NULL;
	if (rec) {
		/* in place: the data and its CRC, mapped or buffered (the
		 * skip stays inside what peek made available) */
		memcpy(c, rec + n, 4);
		r->src->skip(r->ctx, n + 4);
		got = (long long)n + 4;
	} else if (r->size >= 0 || n <= r->cap || n <= STREAM_CHUNK) {
		/* Never zero-size: a 0-byte record needs a valid pointer. */
		rc = dtf_tfrecord_reader_reserve(r, n ? (size_t)n : 1);
		if (rc)
			return rc;
		got = r->src->read(r->ctx, r->buf, (size_t)n);
		if (got < 0)
			return read_error(r, got);
	} else {
		/* Unknown size: grow only as bytes arrive, so a length that
		 * lies costs at most twice what the stream holds. */
		while ((uint64_t)got < n) {
			size_t want = r->cap > (size_t)got ? r->cap
							   : 2 * (size_t)got;
			if (want < STREAM_CHUNK)
				want = STREAM_CHUNK;
			if (want > n)
				want = (size_t)n;
			if ((rc = dtf_tfrecord_reader_reserve(r, want)))
				return rc;
			long long k = r->src->read(r->ctx, r->buf + got,
						   want - (size_t)got);
			if (k < 0)
				return read_error(r, k);
			got += k;
			if ((size_t)got < want)
				break;
		}
	}
	if ((uint64_t)got == n) {
		long long gc = r->src->read(r->ctx, c, 4);
		if (gc < 0)
			return read_error(r, gc);
		got += gc;
	}
	if ((uint64_t)got < n + 4)
		return dtf_error(DTF_ERR_DATA,
				 REC_FMT "truncated record data (%lld of %" PRIu64
					 " bytes)",
				 REC_ARGS(r), got, n + 4);
	if (!rec)
		rec = r->buf;
	if (dtf_crc32c_mask(dtf_crc32c(0, rec, (size_t)n)) != load_le32(c)) {
		rc = dtf_error(DTF_ERR_DATA,
			       REC_FMT "data CRC mismatch (corrupt record)",
			       REC_ARGS(r));
		/* The framing held: the next record can still be read. */
		r->index++;
		r->offset += n + DTF_TFRECORD_OVERHEAD;
		r->resumable = 1;
		return rc;
	}
	*data = rec;
	*len = (size_t)n;
	r->index++;
	r->offset += n + DTF_TFRECORD_OVERHEAD;
	return 1;
}

int dtf_tfrecord_reader_resumable(const struct dtf_tfrecord_reader *r)
{
	return r->resumable;
}

long long dtf_tfrecord_reader_size(const struct dtf_tfrecord_reader *r)
{
	return r->size;
}

int dtf_tfrecord_reader_skip(struct dtf_tfrecord_reader *r, uint64_t *len)
{
	uint64_t n;
	r->resumable = 0;
	int rc = read_header(r, &n);
	if (rc <= 0)
		return rc;
	if (r->size < 0) {
		/* Unknown size: read through so truncation is still seen. */
		uint8_t tmp[4096];
		uint64_t left = n + 4;
		while (left) {
			size_t want = left < sizeof(tmp) ? (size_t)left
							 : sizeof(tmp);
			long long got = r->src->read(r->ctx, tmp, want);
			if (got < 0)
				return read_error(r, got);
			if ((size_t)got < want)
				return dtf_error(
					DTF_ERR_DATA,
					REC_FMT "truncated record data (%" PRIu64
						" of %" PRIu64 " bytes)",
					REC_ARGS(r), n + 4 - left + (uint64_t)got,
					n + 4);
			left -= (uint64_t)got;
		}
	} else if (r->src->skip(r->ctx, n + 4) != 0) {
		return dtf_error(DTF_ERR_DATA, REC_FMT "seek error: %s",
				 REC_ARGS(r), strerror(errno));
	}
	if (len)
		*len = n;
	r->index++;
	r->offset += n + DTF_TFRECORD_OVERHEAD;
	return 1;
}

int dtf_tfrecord_reader_rewind(struct dtf_tfrecord_reader *r)
{
	if (!r->ctx)
		return dtf_error(DTF_ERR_DATA, "%s: file is not open",
				 r->path ? r->path : "(none)");
	r->index = 0;
	r->offset = 0;
	if (r->src->rewind(r->ctx) != 0)
		return dtf_error(DTF_ERR_DATA, "%s: cannot rewind: %s",
				 r->path, strerror(errno));
	return 0;
}

int64_t dtf_tfrecord_reader_index(const struct dtf_tfrecord_reader *r)
{
	return r->index;
}

uint64_t dtf_tfrecord_reader_offset(const struct dtf_tfrecord_reader *r)
{
	return r->offset;
}

const char *dtf_tfrecord_reader_path(const struct dtf_tfrecord_reader *r)
{
	return r->path;
}

void dtf_tfrecord_reader_free(struct dtf_tfrecord_reader *r)
{
	if (!r)
		return;
	close_source(r); /* before iobuf goes: stdio may flush into it */
	if (r->z.inited)
		inflateEnd(&r->z.zs);
	dtf_free(r->iobuf);
	dtf_free(r->buf);
	dtf_free(r->path);
	dtf_free(r);
}

int dtf_tfrecord_scan_c(const char *path, enum dtf_compression compression,
			struct dtf_tfrecord_stats *stats)
{
	struct dtf_tfrecord_reader *r;
	memset(stats, 0, sizeof(*stats));
	int rc = dtf_tfrecord_reader_open_c(path, compression, &r);
	if (rc)
		return rc;
	uint64_t len;
	while ((rc = dtf_tfrecord_reader_skip(r, &len)) > 0) {
		stats->records++;
		if (len > stats->max_record)
			stats->max_record = len;
	}
	stats->bytes = r->offset;
	dtf_tfrecord_reader_free(r);
	return rc;
}

int dtf_tfrecord_scan(const char *path, struct dtf_tfrecord_stats *stats)
{
	return dtf_tfrecord_scan_c(path, DTF_COMPRESSION_NONE, stats);
}

struct dtf_tfrecord_writer {
	FILE *f;
	char *path;
	char *iobuf;
	int failed; /* errno of the first failed write, or 0 */
	enum dtf_compression compression;
	int zinit;       /* deflateInit2 done */
	z_stream zs;
	uint8_t *zout;   /* IO_BUFFER bytes of compressed output */
};

int dtf_tfrecord_writer_open_c(const char *path,
			       enum dtf_compression compression,
			       struct dtf_tfrecord_writer **out)
{
	int rc;
	*out = NULL;
	if ((unsigned)compression > DTF_COMPRESSION_ZLIB)
		return dtf_error(DTF_ERR_USAGE, "%s: unknown compression %d",
				 path, (int)compression);
	struct dtf_tfrecord_writer *w = dtf_calloc(1, sizeof(*w));
	if (!w)
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory", path);
	w->compression = compression;
	w->path = dtf_strdup(path);
	w->iobuf = dtf_malloc(WRITE_BUFFER);
	if (compression != DTF_COMPRESSION_NONE)
		w->zout = dtf_malloc(IO_BUFFER);
	if (!w->path || !w->iobuf ||
	    (compression != DTF_COMPRESSION_NONE && !w->zout)) {
		rc = dtf_error(DTF_ERR_NOMEM, "%s: out of memory", path);
		goto out_free;
	}
	if (compression != DTF_COMPRESSION_NONE) {
		/* TensorFlow's ZlibCompressionOptions: level
		 * Z_DEFAULT_COMPRESSION, window 15 (+16 for gzip). */
		int wbits = compression == DTF_COMPRESSION_GZIP ? 15 + 16 : 15;
		if (deflateInit2(&w->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED,
				 wbits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
			rc = dtf_error(DTF_ERR_NOMEM, "%s: cannot start zlib",
				       path);
			goto out_free;
		}
		w->zinit = 1;
	}
	w->f = fopen(path, "wb");
	if (!w->f) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot create: %s", path,
			       strerror(errno));
		goto out_free;
	}
	setvbuf(w->f, w->iobuf, _IOFBF, WRITE_BUFFER);
	*out = w;
	return 0;
out_free:
	if (w->zinit)
		deflateEnd(&w->zs);
	dtf_free(w->zout);
	dtf_free(w->iobuf);
	dtf_free(w->path);
	dtf_free(w);
	return rc;
}

int dtf_tfrecord_writer_open(const char *path,
			     struct dtf_tfrecord_writer **out)
{
	return dtf_tfrecord_writer_open_c(path, DTF_COMPRESSION_NONE, out);
}

/* Append n bytes to the file, through deflate when compressing; `flush`
 * is Z_NO_FLUSH or Z_FINISH.  0 or -1 (w->failed set). */
static int put(struct dtf_tfrecord_writer *w, const void *data, size_t n,
	       int flush)
{
	if (!w->zinit) {
		if (n && fwrite(data, 1, n, w->f) != n) {
			w->failed = errno ? errno : EIO;
			return -1;
		}
		return 0;
	}
	const uint8_t *p = data;
	do {
		uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
		w->zs.next_in = (Bytef *)p;
		w->zs.avail_in = chunk;
		int last = flush == Z_FINISH && chunk == n;
		int ret;
		do {
			w->zs.next_out = w->zout;
			w->zs.avail_out = IO_BUFFER;
			ret = deflate(&w->zs, last ? Z_FINISH : Z_NO_FLUSH);
			size_t k = IO_BUFFER - w->zs.avail_out;
			if (k && fwrite(w->zout, 1, k, w->f) != k) {
				w->failed = errno ? errno : EIO;
				return -1;
			}
		} while (w->zs.avail_out == 0 || (last && ret != Z_STREAM_END));
		p += chunk;
		n -= chunk;
	} while (n);
	return 0;
}

int dtf_tfrecord_writer_write(struct dtf_tfrecord_writer *w, const void *data,
			      size_t len)
{
	uint8_t h[DTF_TFRECORD_HEADER], c[4];
	if (w->failed)
		return dtf_error(DTF_ERR_IO, "%s: write error: %s", w->path,
				 strerror(w->failed));
	store_le64(h, (uint64_t)len);
	store_le32(h + 8, dtf_crc32c_mask(dtf_crc32c(0, h, 8)));
	store_le32(c, dtf_crc32c_mask(dtf_crc32c(0, data, len)));
	if (put(w, h, sizeof(h), Z_NO_FLUSH) || put(w, data, len, Z_NO_FLUSH) ||
	    put(w, c, 4, Z_NO_FLUSH))
		return dtf_error(DTF_ERR_IO, "%s: write error: %s", w->path,
				 strerror(w->failed));
	return 0;
}

int dtf_tfrecord_writer_flush(struct dtf_tfrecord_writer *w)
{
	if (!w->failed && fflush(w->f) != 0)
		w->failed = errno ? errno : EIO;
	if (w->failed)
		return dtf_error(DTF_ERR_IO, "%s: write error: %s", w->path,
				 strerror(w->failed));
	return 0;
}

int dtf_tfrecord_writer_close(struct dtf_tfrecord_writer *w)
{
	if (!w)
		return 0;
	int rc = 0;
	if (w->zinit) {
		if (!w->failed)
			put(w, "", 0, Z_FINISH);
		deflateEnd(&w->zs);
	}
	if (fflush(w->f) != 0 && !w->failed)
		w->failed = errno ? errno : EIO;
	if (ferror(w->f) && !w->failed)
		w->failed = EIO;
	if (fclose(w->f) != 0 && !w->failed)
		w->failed = errno ? errno : EIO;
	if (w->failed)
		rc = dtf_error(DTF_ERR_IO, "%s: write error: %s", w->path,
			       strerror(w->failed));
	dtf_free(w->zout);
	dtf_free(w->iobuf);
	dtf_free(w->path);
	dtf_free(w);
	return rc;
}
