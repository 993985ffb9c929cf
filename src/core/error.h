/*
 * error.h - one table of error codes, their exit statuses and messages.
 *
 * Two tiers of failure (as in ggml): DTF_ASSERT for bugs, which aborts with
 * file:line; and a returned status for everything a user or the machine can
 * cause.  Fallible functions return 0 or a negative DTF_ERR_* code and put
 * their result in out-parameters.  The human-readable detail of the most
 * recent error on this thread is kept by dtf_error() and read back with
 * dtf_error_msg(); it travels up to main, which prints it once.
 *
 * Exit statuses follow DESIGN.md section 5: 0 done, 1 runtime failure,
 * 2 usage or job-file error, 3 input data error, 4 checkpoint error,
 * 75 (EX_TEMPFAIL) stopped by a signal (after writing a checkpoint when
 * checkpoint.dir is set; without it nothing is saved).
 */
#ifndef DTF_CORE_ERROR_H
#define DTF_CORE_ERROR_H

#include <stdarg.h>

/* X(name, exit status, description) */
#define DTF_ERRORS(X)                                   \
	X(OK, 0, "success")                             \
	X(NOMEM, 1, "out of memory")                    \
	X(IO, 1, "I/O error")                           \
	X(RUNTIME, 1, "runtime failure")                \
	X(MPI, 1, "communication failure")              \
	X(REMOTE, 1, "another rank failed")             \
	X(USAGE, 2, "usage error")                      \
	X(CONFIG, 2, "job file error")                  \
	X(GRAPH, 2, "model graph error")                \
	X(DATA, 3, "input data error")                  \
	X(CHECKPOINT, 4, "checkpoint error")            \
	X(SIGNAL, 75, "stopped by a signal")

enum dtf_err {
#define DTF_X_ENUM(name, status, desc) DTF_ERR_##name,
	DTF_ERRORS(DTF_X_ENUM)
#undef DTF_X_ENUM
	DTF_ERR_COUNT_
};

/*
 * Record a formatted message for the current thread and return -code, so a
 * caller can write `return dtf_error(DTF_ERR_DATA, "%s: ...", path);`.
 * The message is truncated to 1023 bytes.
 */
int dtf_error(enum dtf_err code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int dtf_verror(enum dtf_err code, const char *fmt, va_list ap);

/* The last message recorded on this thread ("" if none).  Valid until the
 * next dtf_error() call on the same thread. */
const char *dtf_error_msg(void);

/* Clear the message of this thread. */
void dtf_error_clear(void);

/* Name ("DATA") and description of a code; rc may be negative or positive. */
const char *dtf_error_name(int rc);
const char *dtf_error_desc(int rc);

/* Process exit status for a return code (0 for rc >= 0). */
int dtf_error_exit_status(int rc);

/* Abort with file:line on a broken invariant (a bug, never a user error). */
#define DTF_ASSERT(cond)                                                   \
	do {                                                               \
		if (!(cond))                                               \
			dtf_assert_fail(#cond, __FILE__, __LINE__);        \
	} while (0)
_Noreturn void dtf_assert_fail(const char *expr, const char *file, int line);

#endif
