/*
 * lock.c - the one-run-per-directory lock (contract in lock.h).
 */
#include "core/lock.h"

#include <errno.h>
#include <string.h>
#include <sys/file.h>

#include "core/log.h"

int dtf_lock_exclusive(int fd, const char *path, enum dtf_err code,
		       const char *busy, int unsupported_ok)
{
	int r;
	do
		r = flock(fd, LOCK_EX | LOCK_NB);
	while (r != 0 && errno == EINTR);
	if (r == 0)
		return 0;
	if (errno == EWOULDBLOCK)
		return dtf_error(code, "%s", busy);
	if (unsupported_ok &&
	    (errno == ENOSYS || errno == EOPNOTSUPP || errno == ENOLCK)) {
		dtf_warn("%s: cannot lock: %s; a second run using the same directory would not be stopped",
			 path, strerror(errno));
		return 0;
	}
	return dtf_error(code, "%s: cannot lock: %s", path, strerror(errno));
}
