/*
 * log.h - messages to stderr, prefixed by rank and host once they are known.
 *
 * Rank 0 (the chief) prints progress; warnings and errors from any rank
 * carry "[rank N host]" so a batch log shows who said what.  The identity is
 * set once by distribute/ after MPI starts (before that, messages carry no prefix).
 */
#ifndef DTF_CORE_LOG_H
#define DTF_CORE_LOG_H

#include <stddef.h>

enum dtf_log_level {
	DTF_LOG_ERROR = 0,
	DTF_LOG_WARN = 1,
	DTF_LOG_INFO = 2,
	DTF_LOG_DEBUG = 3,
};

/* Set this process's identity (rank, world size, host name; copied). */
void dtf_log_set_identity(int rank, int world, const char *host);

/* Messages above `level` are dropped (default DTF_LOG_INFO). */
void dtf_log_set_level(enum dtf_log_level level);
enum dtf_log_level dtf_log_get_level(void);

/* printf-style message at `level`; a newline is added.  INFO and DEBUG
 * print on rank 0 only unless `all_ranks`. */
void dtf_log(enum dtf_log_level level, int all_ranks, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "notice: " and the message, printed by the rank that calls it (callers
 * pick one), also under DTF_LOG_WARN (--quiet): for what the user asked
 * for and must see, such as a stop on a signal, which is not an error. */
void dtf_log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define dtf_info(...) dtf_log(DTF_LOG_INFO, 0, __VA_ARGS__)
#define dtf_warn(...) dtf_log(DTF_LOG_WARN, 1, __VA_ARGS__)
#define dtf_errlog(...) dtf_log(DTF_LOG_ERROR, 1, __VA_ARGS__)

/* This process's rank as last set (0 before). */
int dtf_log_rank(void);

/* Write into buf (size bytes, at least 128) the prefix dtf_log() puts
 * before a message of this level ("[rank N host] error: "; the rank part
 * once the identity is set, for warnings and errors) and return its length.
 * For callers that must format a line ahead, e.g. for a signal handler. */
int dtf_log_prefix(enum dtf_log_level level, char *buf, size_t size);

/*
 * The progress line of a terminal (rank 0 only; a no-op on other ranks and
 * below DTF_LOG_INFO).  dtf_log_progress() draws `line` in place: "\r",
 * the line, then "ESC [ K" (erase to the end of the line), no newline.  Any
 * other message first erases the open progress line, so messages never mix
 * with it; dtf_log_progress_end() keeps the line on screen and ends it with
 * a newline.  Callers use it only when stderr is a terminal.
 */
void dtf_log_progress(const char *line);
void dtf_log_progress_end(void);

/* Appends printf-formatted text to buf[size] at offset *at and advances
 * *at by what snprintf would have written, so a long text is cut at the
 * buffer's end, still NUL-terminated, and later calls add nothing (for
 * building one-line descriptions piece by piece). */
void dtf_log_append(char *buf, size_t size, size_t *at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
