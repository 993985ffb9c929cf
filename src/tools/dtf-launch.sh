#!/bin/sh
# dtf-launch - run "mpirun -n N dtf-train --resume ..." and run it again
# from the newest checkpoint when it fails or is stopped by a signal, up to
# --max-restarts times, optionally with fewer ranks (--min-np).  See
# dtf-train(1), sections RESTARTS and EXIT STATUS.
#
# Exit statuses of an attempt (dtf-train's, passed through by mpirun):
#   0        done: stop, exit 0
#   2, 3, 4  job file, input data or checkpoint error: a restart would fail
#            the same way: stop, exit with it
#   75       stopped by a signal after writing a checkpoint: restart, unless
#            dtf-launch itself was signalled (then exit 75 so that a
#            scheduler can requeue)
#   other    a rank failed, died or hung: restart; but when Open MPI's
#            mpirun refused to run as root (no --allow-run-as-root, no
#            OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1),
#            say so and exit 2: every restart would be refused too
#
# Signals: a SIGTERM, SIGINT, SIGHUP or SIGUSR1 sent to dtf-launch is passed
# to mpirun as SIGUSR1, which Open MPI forwards to every rank: they
# checkpoint and stop with 75.  mpirun runs in a session of its own
# (setsid), because Open MPI's mpirun answers a SIGINT or SIGTERM of its own
# by SIGTERMing the ranks and exiting 1 whatever they exit with: a Ctrl-C
# (SIGINT to the terminal's whole foreground process group), a hangup, or a
# signal to dtf-launch's process group must reach dtf-launch alone.  A
# second SIGTERM, SIGINT or SIGHUP passes SIGTERM on: the job ends at once.
# With dtf-train's --overwrite-checkpoints among the options, the first
# attempt starts over (it replaces --resume there) and the restarts
# continue that new run with --resume.
set -u

prog=dtf-launch
usage() {
	cat <<EOF
Usage: $prog [OPTION]... [--] [DTF-TRAIN OPTION]... JOB.yaml
Run dtf-train under mpirun with --resume; when a run fails or exits 75,
run it again from the newest checkpoint.  With --overwrite-checkpoints
among the dtf-train options, the first attempt starts over instead and
the restarts resume that new run.

Options:
  -n, --np N            ranks (mpirun -n N; default: let mpirun decide)
      --min-np M        after a failed attempt, use one rank fewer, down to M
      --max-restarts K  restarts after the first attempt (default 3)
      --mpirun CMD      launcher command and its options (default: \$DTF_MPIRUN
                        or "mpirun"), e.g. "mpirun --hostfile hosts"
      --dtf-train PATH  the dtf-train binary (default: next to $prog, else PATH)
      --delay SEC       seconds to wait before a restart (default 1)
      --allow-run-as-root  pass --allow-run-as-root to mpirun (Open MPI
                        refuses root without it or OMPI_ALLOW_RUN_AS_ROOT=1
                        and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  -h, --help            show this help and exit

Signals: SIGINT (Ctrl-C), SIGTERM, SIGHUP or SIGUSR1 to $prog reach the
ranks as SIGUSR1 (through mpirun, which runs in a session of its own); they
write a checkpoint and exit 75, and $prog exits 75 without restarting.
A second SIGINT, SIGTERM or SIGHUP ends the job at once.

Exit status: 0 done; 2 when mpirun refused to run as root; otherwise the
status of the last attempt (2 job file, 3 data, 4 checkpoint error, 75
stopped by a signal after writing a checkpoint).  Plain mpirun exits 1, not
75, when it is sent SIGINT or SIGTERM itself; $prog and srun give 75.
EOF
}

np=
min_np=
max_restarts=3
mpirun=${DTF_MPIRUN:-mpirun}
delay=1
allow_root=0
here=$(dirname "$0")
if [ -x "$here/dtf-train" ]; then
	train="$here/dtf-train"
else
	train=dtf-train
fi

need_int() { # option value
	case $2 in
	'' | *[!0-9]*)
		echo "$prog: $1: expected a non-negative integer, got '$2'" >&2
		exit 2
		;;
	esac
}

while [ $# -gt 0 ]; do
	case $1 in
	-n | --np) [ $# -ge 2 ] || { usage >&2; exit 2; }; need_int "$1" "$2"; np=$2; shift 2 ;;
	--min-np) [ $# -ge 2 ] || { usage >&2; exit 2; }; need_int "$1" "$2"; min_np=$2; shift 2 ;;
	--max-restarts) [ $# -ge 2 ] || { usage >&2; exit 2; }; need_int "$1" "$2"; max_restarts=$2; shift 2 ;;
	--mpirun) [ $# -ge 2 ] || { usage >&2; exit 2; }; mpirun=$2; shift 2 ;;
	--dtf-train) [ $# -ge 2 ] || { usage >&2; exit 2; }; train=$2; shift 2 ;;
	--delay) [ $# -ge 2 ] || { usage >&2; exit 2; }; need_int "$1" "$2"; delay=$2; shift 2 ;;
	--allow-run-as-root) allow_root=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
if [ $# -eq 0 ]; then
	echo "$prog: missing the job file" >&2
	usage >&2
	exit 2
fi
# the binary, found before the first attempt: a missing one would fail
# every attempt the same way (mpirun reports it as a killed process)
case $train in
*/*) [ -f "$train" ] && [ -x "$train" ] ;;
*) command -v "$train" >/dev/null 2>&1 ;;
esac || {
	echo "$prog: cannot run dtf-train: '$train' is not an executable file (give its path with --dtf-train PATH)" >&2
	exit 2
}
if [ -n "$min_np" ] && [ -z "$np" ]; then
	echo "$prog: --min-np needs --np" >&2
	exit 2
fi
if [ -n "$min_np" ] && [ "$min_np" -gt "$np" ]; then
	echo "$prog: --min-np $min_np is more than --np $np" >&2
	exit 2
fi

reason() { # status -> words
	case $1 in
	0) echo "done" ;;
	1) echo "a runtime failure, or another rank failed" ;;
	2) echo "a usage or job-file error" ;;
	3) echo "an input data error" ;;
	4) echo "a checkpoint error" ;;
	75) echo "stopped by a signal after writing a checkpoint" ;;
	124) echo "timed out" ;;
	*)
		if [ "$1" -gt 128 ]; then
			sig=$(($1 - 128))
			name=$(kill -l "$sig" 2>/dev/null || echo "$sig")
			echo "a process was killed by SIG$name"
		else
			echo "a failure (status $1)"
		fi
		;;
	esac
}

# 1 when the last attempt failed because Open MPI's mpirun refuses to run
# as root: we are root, nothing allowed it (this option, the option in
# --mpirun, both environment variables) and the launcher is Open MPI's.
refused_root() {
	[ "$(id -u)" -eq 0 ] || return 1
	[ "$allow_root" -eq 0 ] || return 1
	case " $mpirun " in *" --allow-run-as-root "*) return 1 ;; esac
	[ "${OMPI_ALLOW_RUN_AS_ROOT:-}" = 1 ] &&
		[ "${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-}" = 1 ] && return 1
	# shellcheck disable=SC2086 # $mpirun is a word list
	$mpirun --version 2>/dev/null </dev/null | grep -q -e 'Open MPI' -e OpenRTE
}

launcher=$mpirun
[ "$allow_root" -eq 1 ] && launcher="$mpirun --allow-run-as-root"
# mpirun in a session of its own (see the top); setsid execs in place, as
# a background job of a shell without job control leads no process group,
# so $! is mpirun.  Without setsid, mpirun shares our process group.
detach=
command -v setsid >/dev/null 2>&1 && detach=setsid

# Open MPI's TCP keepalive between mpirun and its daemons, so that a host
# whose link goes down ends the job within seconds (by default mpirun
# waits for the unreachable daemon forever): the options for launcher
# command $1, unless it runs no mpirun (a word mpirun, mpiexec or orterun,
# with or without a directory) or the command or the environment
# (OMPI_MCA_...) already sets them.
keepalive() {
	case " $1 " in
	*[/\ ]mpirun\ * | *[/\ ]mpiexec\ * | *[/\ ]orterun\ *) ;;
	*) return 0 ;;
	esac
	for kv in time=5 intvl=2 probes=3; do
		k=oob_tcp_keepalive_${kv%%=*}
		case $1 in *"$k"*) continue ;; esac
		[ -n "$(printenv "OMPI_MCA_$k")" ] && continue
		printf ' --mca %s %s' "$k" "${kv#*=}"
	done
}
ka=$(keepalive "$mpirun")

stop=0
child=
forward() { # signal name
	stop=$((stop + 1))
	[ -n "$child" ] || return 0
	if [ "$stop" -eq 1 ] || [ "$1" = USR1 ]; then
		kill -USR1 "$child" 2>/dev/null
	else
		echo "$prog: SIG$1 again: ending mpirun now (SIGTERM)" >&2
		kill -TERM "$child" 2>/dev/null
	fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP
trap 'forward USR1' USR1

# --overwrite-checkpoints: the first attempt's start, taken out of the
# options the restarts get
start=--resume
n=$#
while [ "$n" -gt 0 ]; do
	a=$1
	shift
	if [ "$a" = --overwrite-checkpoints ]; then
		start=$a
	else
		set -- "$@" "$a"
	fi
	n=$((n - 1))
done

attempts=$((max_restarts + 1))
attempt=1
st=0
while :; do
	npopt=
	[ -n "$np" ] && npopt="-n $np"
	echo "$prog: attempt $attempt of $attempts: $launcher $npopt$ka $train $start $*" >&2
	# shellcheck disable=SC2086 # $detach, $launcher, $npopt and $ka are word lists
	DTF_LAUNCH_ATTEMPT=$attempt $detach $launcher $npopt $ka "$train" "$start" "$@" &
	child=$!
	while :; do
		wait "$child"
		st=$?
		# a trapped signal interrupts wait; wait again for mpirun itself
		if [ "$st" -gt 128 ] && kill -0 "$child" 2>/dev/null; then
			continue
		fi
		break
	done
	child=
	why=$(reason "$st")
	case $st in
	0)
		echo "$prog: attempt $attempt ended: $why" >&2
		exit 0
		;;
	2 | 3 | 4)
		echo "$prog: attempt $attempt ended with status $st ($why); a restart would fail the same way" >&2
		exit "$st"
		;;
	esac
	if refused_root; then
		echo "$prog: attempt $attempt ended with status $st: mpirun refuses to run as root; pass --allow-run-as-root to $prog, or set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; not restarting" >&2
		exit 2
	fi
	if [ "$stop" -ge 1 ]; then
		echo "$prog: attempt $attempt ended with status $st ($why) after $prog was signalled; not restarting" >&2
		[ "$st" -eq 75 ] && exit 75
		exit "$st"
	fi
	if [ "$attempt" -ge "$attempts" ]; then
		echo "$prog: giving up after $attempt attempt(s): the last ended with status $st ($why)" >&2
		exit "$st"
	fi
	if [ -n "$min_np" ] && [ "$st" -ne 75 ] && [ "$np" -gt "$min_np" ]; then
		np=$((np - 1))
		echo "$prog: attempt $attempt ended with status $st ($why); restarting from the newest checkpoint with $np rank(s) in $delay s" >&2
	else
		echo "$prog: attempt $attempt ended with status $st ($why); restarting from the newest checkpoint in $delay s" >&2
	fi
	sleep "$delay"
	if [ "$stop" -ge 1 ]; then
		echo "$prog: signalled while waiting to restart; not restarting" >&2
		exit "$st"
	fi
	attempt=$((attempt + 1))
	start=--resume
done
