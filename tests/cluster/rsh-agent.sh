#!/bin/sh
# rsh-agent.sh - Open MPI's remote shell for the namespace hosts of
# cluster.sh (mpirun --mca plm_rsh_agent rsh-agent.sh): mpirun calls it as
# "rsh-agent.sh HOST COMMAND..." to start its daemon (orted) on HOST, and
# it runs the command there as ssh would, through sh -c, inside HOST's
# namespace with HOST's host name.  The cluster is $DTF_CLUSTER_ID, which
# mpirun's environment passes down.
set -u
[ $# -ge 2 ] || { echo "usage: rsh-agent.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift
exec "$(dirname "$0")/cluster.sh" exec "$host" sh -c "$*"
