/*
 * lock.h - one run per directory: the lock that logging.dir (on
 * metrics.jsonl) and checkpoint.dir (on checkpoint.lock) are held with for
 * the life of a run.
 *
 * An exclusive advisory lock, flock(2) with LOCK_EX | LOCK_NB, on an open
 * file: taken without waiting, held until that file is closed, and
 * released by the kernel when the process dies, so a killed run leaves no
 * stale lock and a restart (dtf-launch, a scheduler's requeue) takes it
 * again at once.  The lock file itself is never deleted: deleting it
 * would let a second run lock a new file of the same name while a third
 * still holds the old one.  Advisory: it keeps out other runs of this
 * program, which all take it, not a person or another tool.  Readers that
 * only read (the evaluator task reads checkpoint.dir) take no lock and
 * are never blocked.
 */
#ifndef DTF_CORE_LOCK_H
#define DTF_CORE_LOCK_H

#include "core/error.h"

/*
 * Lock the open file `fd` (named `path` in messages) exclusively, without
 * waiting.  Returns 0 (held until fd is closed) or -code: when another
 * open file (another run) holds it, with the message `busy` as given;
 * else "<path>: cannot lock: <strerror>".  With `unsupported_ok`, a
 * filesystem that has no such locks (ENOSYS, EOPNOTSUPP, ENOLCK: e.g.
 * Lustre mounted without flock) is a warning naming `path`, and 0: the
 * run goes on unprotected rather than not at all.
 */
int dtf_lock_exclusive(int fd, const char *path, enum dtf_err code,
		       const char *busy, int unsupported_ok);

#endif
