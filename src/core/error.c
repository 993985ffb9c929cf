/*
 * error.c - the error table and the per-thread message buffer.
 */
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char msg_buf[1024];

static const struct {
	const char *name;
	int status;
	const char *desc;
} table[] = {
#define DTF_X_ROW(name, status, desc) {#name, status, desc},
	DTF_ERRORS(DTF_X_ROW)
#undef DTF_X_ROW
};
_Static_assert(sizeof(table) / sizeof(table[0]) == DTF_ERR_COUNT_,
	       "error table out of step with enum dtf_err");

int dtf_verror(enum dtf_err code, const char *fmt, va_list ap)
{
	vsnprintf(msg_buf, sizeof(msg_buf), fmt, ap);
	return -(int)code;
}

int dtf_error(enum dtf_err code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = dtf_verror(code, fmt, ap);
	va_end(ap);
	return rc;
}

const char *dtf_error_msg(void) { return msg_buf; }

void dtf_error_clear(void) { msg_buf[0] = '\0'; }

static int index_of(int rc)
{
	int i = rc < 0 ? -rc : rc;
	return i < DTF_ERR_COUNT_ ? i : DTF_ERR_RUNTIME;
}

const char *dtf_error_name(int rc) { return table[index_of(rc)].name; }
const char *dtf_error_desc(int rc) { return table[index_of(rc)].desc; }

int dtf_error_exit_status(int rc)
{
	return rc >= 0 ? 0 : table[index_of(rc)].status;
}

_Noreturn void dtf_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "dtf: internal error: assertion '%s' failed at %s:%d\n",
		expr, file, line);
	abort();
}
