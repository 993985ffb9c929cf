/*
 * log.c - rank-prefixed messages.  The identity is written once, before any
 * thread starts, and only read afterwards.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static struct {
	int rank, world;
	char host[64];
	enum dtf_log_level level;
	int progress_open; /* a progress line is on screen, not ended */
} ident = {0, 0, "", DTF_LOG_INFO, 0};

void dtf_log_set_identity(int rank, int world, const char *host)
{
	ident.rank = rank;
	ident.world = world;
	snprintf(ident.host, sizeof(ident.host), "%s", host ? host : "");
}

void dtf_log_set_level(enum dtf_log_level level) { ident.level = level; }
enum dtf_log_level dtf_log_get_level(void) { return ident.level; }
int dtf_log_rank(void) { return ident.rank; }

int dtf_log_prefix(enum dtf_log_level level, char *buf, size_t size)
{
	int off = 0;
	buf[0] = 0;
	if (level <= DTF_LOG_WARN && ident.world > 0)
		off = snprintf(buf, size, "[rank %d %s] ", ident.rank,
			       ident.host);
	if (level == DTF_LOG_ERROR)
		off += snprintf(buf + off, size - (size_t)off, "error: ");
	else if (level == DTF_LOG_WARN)
		off += snprintf(buf + off, size - (size_t)off, "warning: ");
	return off;
}

/* Print one prefixed line: one write, so ranks' lines do not interleave
 * mid-line, after erasing an open progress line. */
static void vlog(const char *prefix, const char *fmt, va_list ap)
{
	char line[2048];
	int off = snprintf(line, sizeof(line), "%s", prefix);
	vsnprintf(line + off, sizeof(line) - (size_t)off, fmt, ap);
	if (ident.progress_open) {
		fprintf(stderr, "\r\033[K%s\n", line);
		ident.progress_open = 0;
	} else {
		fprintf(stderr, "%s\n", line);
	}
	fflush(stderr);
}

void dtf_log(enum dtf_log_level level, int all_ranks, const char *fmt, ...)
{
	if (level > ident.level)
		return;
	if (level >= DTF_LOG_INFO && !all_ranks && ident.rank != 0)
		return;
	char prefix[160];
	dtf_log_prefix(level, prefix, sizeof(prefix));
	va_list ap;
	va_start(ap, fmt);
	vlog(prefix, fmt, ap);
	va_end(ap);
}

void dtf_log_notice(const char *fmt, ...)
{
	if (ident.level < DTF_LOG_WARN)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog("notice: ", fmt, ap);
	va_end(ap);
}

void dtf_log_progress(const char *line)
{
	if (ident.rank != 0 || ident.level < DTF_LOG_INFO)
		return;
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	ident.progress_open = 1;
}

void dtf_log_progress_end(void)
{
	if (!ident.progress_open)
		return;
	fputc('\n', stderr);
	fflush(stderr);
	ident.progress_open = 0;
}

void dtf_log_append(char *buf, size_t size, size_t *at, const char *fmt, ...)
{
	if (*at >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *at, size - *at, fmt, ap);
	va_end(ap);
	if (n > 0)
		*at += (size_t)n;
}
