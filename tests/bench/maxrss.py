#!/usr/bin/env python3
"""maxrss.py CMD [ARG]... - run CMD, then print its peak resident memory.

Prints "MAXRSS host=H pid=P peak_mb=M" to standard error after CMD exits
(ru_maxrss of the child, which the kernel keeps as the peak of the process
and of any children it waited for), and exits with CMD's status.  Under
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
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
print("MAXRSS host=%s pid=%d peak_mb=%.1f" % (socket.gethostname(), os.getpid(), peak),
      file=sys.stderr, flush=True)
sys.exit(rc if rc >= 0 else 128 - rc)
