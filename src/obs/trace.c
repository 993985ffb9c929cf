/*
 * trace.c - Chrome trace event files, one per rank, valid after every flush.
 *
 * Layout of a file at any moment:
 *
 *     [\n{metadata},\n{metadata}...,\n{event}\n]\n
 *
 * `end` is the offset just past the last event.  A flush writes
 * ",\n{event},\n{event}...\n]\n" at `end` with one pwrite and moves `end`
 * to before the new "\n]\n"; the file only grows, so it never holds stale
 * bytes past the bracket.  A flush that fails part way (a full disk) puts
 * the old tail back and cuts the file after it, so the file stays the
 * array of the last good flush.  Events are formatted into a buffer
 * reserved at open: no allocation per event.
 */
#include "obs/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

#define BUF_SIZE (64 * 1024)
#define EVENT_MAX 256 /* longest formatted event, bytes */
#define TAIL "\n]\n"
#define TAIL_LEN 3

struct dtf_trace {
	int fd;
	int rank;
	int failed; /* errno of the first failed write, or 0 */
	double origin;
	off_t end;
	size_t len; /* bytes in buf */
	char *path;
	char *buf; /* BUF_SIZE */
};

static int write_all(int fd, const char *p, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static void append(struct dtf_trace *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void append(struct dtf_trace *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, BUF_SIZE - TAIL_LEN - t->len, fmt,
			  ap);
	va_end(ap);
	if (n > 0 && t->len + (size_t)n < BUF_SIZE - TAIL_LEN)
		t->len += (size_t)n;
}

int dtf_trace_flush(struct dtf_trace *t)
{
	if (t->len > 0 && !t->failed) {
		memcpy(t->buf + t->len, TAIL, TAIL_LEN);
		if (write_all(t->fd, t->buf, t->len + TAIL_LEN, t->end) < 0) {
			t->failed = errno ? errno : EIO;
			/* a partial write (a full disk) overwrote the old
			 * tail: put it back and cut what followed, so the
			 * file is the valid array of the last good flush
			 * (the tail's bytes were written before, so this
			 * needs no new space) */
			if (t->end > 0 &&
			    write_all(t->fd, TAIL, TAIL_LEN, t->end) == 0) {
				int e = ftruncate(t->fd, t->end + TAIL_LEN);
				(void)e;
			}
		} else
			t->end += (off_t)t->len;
	}
	t->len = 0;
	if (t->failed)
		return dtf_error(DTF_ERR_IO, "%s: write error: %s", t->path,
				 strerror(t->failed));
	return 0;
}

int dtf_trace_open(const char *path, int rank, const char *host,
		   double origin, struct dtf_trace **out)
{
	*out = NULL;
	struct dtf_trace *t = dtf_calloc(1, sizeof(*t));
	if (!t)
		return dtf_error(DTF_ERR_NOMEM, "%s: out of memory", path);
	t->fd = -1;
	t->rank = rank;
	t->origin = origin;
	t->path = dtf_strdup(path);
	t->buf = dtf_malloc(BUF_SIZE);
	int rc;
	if (!t->path || !t->buf) {
		rc = dtf_error(DTF_ERR_NOMEM, "%s: out of memory", path);
		goto out_free;
	}
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (t->fd < 0) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot create: %s", path,
			       strerror(errno));
		goto out_free;
	}
	/* "[" then metadata: the first event carries no leading comma */
	append(t, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
		  "\"args\":{\"name\":\"rank %d (%s)\"}}",
	       rank, rank, host);
	append(t, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
		  "\"tid\":0,\"args\":{\"sort_index\":%d}}",
	       rank, rank);
	append(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
		  "\"args\":{\"name\":\"compute\"}}",
	       rank);
	append(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
		  "\"args\":{\"name\":\"communication\"}}",
	       rank);
	append(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,"
		  "\"args\":{\"name\":\"gradient buckets\"}}",
	       rank);
	if ((rc = dtf_trace_flush(t)) < 0)
		goto out_free;
	*out = t;
	return 0;
out_free:
	if (t->fd >= 0)
		close(t->fd);
	dtf_free(t->buf);
	dtf_free(t->path);
	dtf_free(t);
	return rc;
}

void dtf_trace_span(struct dtf_trace *t, const char *name, int tid,
		    double t0, double t1, int64_t step, int index)
{
	if (t->len + EVENT_MAX >= BUF_SIZE - TAIL_LEN)
		dtf_trace_flush(t);
	double ts = (t0 - t->origin) * 1e6, dur = (t1 - t0) * 1e6;
	if (dur < 0)
		dur = 0;
	if (index >= 0)
		append(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
			  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld,"
			  "\"index\":%d}}",
		       name, t->rank, tid, ts, dur, (long long)step, index);
	else
		append(t, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
			  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld}}",
		       name, t->rank, tid, ts, dur, (long long)step);
}

int dtf_trace_close(struct dtf_trace *t)
{
	if (!t)
		return 0;
	int rc = dtf_trace_flush(t);
	if (close(t->fd) != 0 && rc == 0)
		rc = dtf_error(DTF_ERR_IO, "%s: close: %s", t->path,
			       strerror(errno));
	dtf_free(t->buf);
	dtf_free(t->path);
	dtf_free(t);
	return rc;
}

void dtf_trace_rank_path(const char *path, int rank, char *buf, size_t size)
{
	size_t n = strlen(path);
	int stem = (int)n;
	if (n >= 5 && strcmp(path + n - 5, ".json") == 0)
		stem = (int)n - 5;
	snprintf(buf, size, "%.*s.rank%d.json", stem, path, rank);
}

/* Read a whole file into a dtf_malloc'd, NUL-terminated buffer. */
static int slurp(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return errno == ENOENT ? 1
				       : dtf_error(DTF_ERR_IO, "%s: %s", path,
						   strerror(errno));
	int rc = 0;
	char *p = NULL;
	long size = -1;
	if (fseek(f, 0, SEEK_END) == 0)
		size = ftell(f);
	if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot read", path);
		goto out;
	}
	p = dtf_malloc((size_t)size + 1);
	if (!p) {
		rc = dtf_error(DTF_ERR_NOMEM, "%s: out of memory", path);
		goto out;
	}
	if (fread(p, 1, (size_t)size, f) != (size_t)size) {
		rc = dtf_error(DTF_ERR_IO, "%s: read error", path);
		dtf_free(p);
		p = NULL;
		goto out;
	}
	p[size] = 0;
	*out = p;
	*len = (size_t)size;
out:
	fclose(f);
	return rc;
}

int dtf_trace_merge(const char *out, const char *const *in, int n,
		    int *missing)
{
	char *tmp = dtf_malloc(strlen(out) + 8);
	if (!tmp)
		return dtf_error(DTF_ERR_NOMEM, "out of memory");
	sprintf(tmp, "%s.tmp", out);
	int rc = 0, first = 1, lost = 0;
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		rc = dtf_error(DTF_ERR_IO, "%s: cannot create: %s", tmp,
			       strerror(errno));
		goto out_free;
	}
	fputs("[", f);
	for (int i = 0; i < n && rc == 0; i++) {
		char *p = NULL;
		size_t len = 0;
		rc = slurp(in[i], &p, &len);
		if (rc == 1) { /* missing */
			lost++;
			rc = 0;
			continue;
		}
		if (rc < 0)
			break;
		/* the events lie between the first '[' and the last ']' */
		char *a = p, *b = p + len;
		while (a < b && (*a == ' ' || *a == '\n' || *a == '\t' || *a == '\r'))
			a++;
		while (b > a && (b[-1] == ' ' || b[-1] == '\n' || b[-1] == '\t' || b[-1] == '\r'))
			b--;
		if (a == b || *a != '[' || b[-1] != ']') {
			rc = dtf_error(DTF_ERR_DATA,
				       "%s: not a trace event array ('[' ... ']')",
				       in[i]);
		} else {
			a++;
			b--;
			while (a < b && (*a == '\n' || *a == ' '))
				a++;
			while (b > a && (b[-1] == '\n' || b[-1] == ' '))
				b--;
			if (b > a) {
				fputs(first ? "\n" : ",\n", f);
				fwrite(a, 1, (size_t)(b - a), f);
				first = 0;
			}
		}
		dtf_free(p);
	}
	fputs("\n]\n", f);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		if (rc == 0)
			rc = dtf_error(DTF_ERR_IO, "%s: write error", tmp);
	}
	if (rc == 0 && rename(tmp, out) != 0)
		rc = dtf_error(DTF_ERR_IO, "%s: cannot rename to %s: %s", tmp,
			       out, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	if (missing)
		*missing = lost;
out_free:
	dtf_free(tmp);
	return rc;
}
