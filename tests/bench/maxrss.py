#!/usr/bin/env python3
"""maxrss.py CMD [ARG]... - run CMD, then print its peak memory and CPU time.

Prints "MAXRSS host=H pid=P peak_mb=M user_s=U sys_s=S" to standard error
after CMD exits (getrusage(RUSAGE_CHILDREN): ru_maxrss, which the kernel
keeps as the peak of the process and of any children it waited for, and
ru_utime / ru_stime, the user and system CPU seconds of all its threads and
waited-for children), and exits with CMD's status.  Under
mpirun each rank gets its own wrapper: mpirun -np 2 maxrss.py dtf-train ...
"""
import os
import resource
import socket
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit("usage: maxrss.py CMD [ARG]...")
rc = subprocess.call(sys.argv[1:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("MAXRSS host=%s pid=%d peak_mb=%.1f user_s=%.2f sys_s=%.2f"
      % (socket.gethostname(), os.getpid(), ru.ru_maxrss / 1024.0, ru.ru_utime, ru.ru_stime),
      file=sys.stderr, flush=True)
sys.exit(rc if rc >= 0 else 128 - rc)
