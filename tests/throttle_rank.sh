#!/bin/sh
# throttle_rank.sh MARK RANK STOP_MS RUN_MS - a CPU throttle on one rank of
# a local mpirun, for the straggler tests: waits (up to 60 s) for the
# dtf-train process whose environment has DTF_THROTTLE_MARK=MARK (set by
# the test for its own mpirun: other runs on the machine are left alone)
# and OMPI_COMM_WORLD_RANK=RANK, then
# stops it for STOP_MS and lets it run for RUN_MS (SIGSTOP / SIGCONT), over
# and over, until it exits.  The rank gets RUN_MS / (STOP_MS + RUN_MS) of
# the wall clock, as a rank on an oversubscribed or power-capped core does.
set -u
[ $# -eq 4 ] || { echo "usage: throttle_rank.sh MARK RANK STOP_MS RUN_MS" >&2; exit 2; }
mark=$1
rank=$2
stop=$(awk "BEGIN {print $3 / 1000}")
run=$(awk "BEGIN {print $4 / 1000}")
pid=
tries=0
while [ -z "$pid" ]; do
	for d in /proc/[0-9]*; do
		c=
		read -r c 2>/dev/null <"$d/comm"
		[ "$c" = dtf-train ] || continue
		p=${d#/proc/}
		env=$(tr '\0' '\n' 2>/dev/null <"$d/environ")
		if printf '%s\n' "$env" | grep -qxF "DTF_THROTTLE_MARK=$mark" &&
			printf '%s\n' "$env" | grep -qxF "OMPI_COMM_WORLD_RANK=$rank"; then
			pid=$p
			break
		fi
	done
	[ -n "$pid" ] && break
	tries=$((tries + 1))
	[ "$tries" -lt 1200 ] || { echo "throttle_rank.sh: no rank $rank" >&2; exit 1; }
	sleep 0.05
done
# a rank left stopped would hang the job: continue it on any exit
trap 'kill -CONT "$pid" 2>/dev/null' EXIT INT TERM
while kill -STOP "$pid" 2>/dev/null; do
	sleep "$stop"
	kill -CONT "$pid" 2>/dev/null || break
	sleep "$run"
done
exit 0
