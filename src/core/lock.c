/*
 * lock.c - the one-run-per-directory lock (contract in lock.h).
 */
#include "core/lock.h"

#include <errno.h>
#include <string.h>
#include <sys/file.h>

int dtf_lock_exclusive(int fd, const char *path, enum dtf_err code,
		       const char *busy)
{
	int r;
	do
		r = flock(fd, LOCK_EX | LOCK_NB);
	while (r != 0 && errno == EINTR);
	if (r == 0)
		return 0;
	if (errno == EWOULDBLOCK)
		return dtf_error(code, "%s", busy);
	return dtf_error(code, "%s: cannot lock: %s", path, strerror(errno));
}
