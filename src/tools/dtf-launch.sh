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
#
# Hosts: with --min-np and a host list (-H/--host or --hostfile, given to
# dtf-launch or inside --mpirun), a failed attempt is followed by one
# probe per host ("mpirun -n 1 --host H dtf-train --version", all at
# once, each bounded by --probe-timeout); the hosts that do not answer
# are left out of the restarts, and the ranks shrink with them.
#
# Binding: Open MPI binds each rank to one core when a job has at most 2
# ranks and to a socket otherwise.  When the threads each rank will use
# (dtf-train's --threads, else OPENBLAS_NUM_THREADS, else the CPUs of a
# node over its ranks) would share that core or socket, dtf-launch adds
# --bind-to none, unless the user chose a binding or mapping.
set -u

prog=dtf-launch
usage() {
	cat <<EOF
Usage: $prog [OPTION]... [-- DTF-TRAIN OPTION...] JOB.yaml
Run dtf-train under mpirun with --resume; when a run fails or exits 75,
run it again from the newest checkpoint.  With --overwrite-checkpoints
among the dtf-train options, the first attempt starts over instead and
the restarts resume that new run.

Options:
  -n, --np N            ranks (mpirun -n N; default: let mpirun decide)
      --min-np M        after a failed attempt, use one rank fewer, down to M,
                        and leave out the hosts that no longer answer
  -H, --host LIST       hosts for mpirun ("h1,h2:2", as mpirun --host)
      --hostfile FILE   hosts for mpirun, one a line (as mpirun --hostfile)
      --probe-timeout SEC  seconds a host has to answer the probe after a
                        failed attempt (--min-np with hosts; default 10)
      --max-restarts K  restarts after the first attempt (default 3)
      --mpirun CMD      launcher command and its options (default: \$DTF_MPIRUN
                        or "mpirun"), e.g. "mpirun --hostfile hosts"
      --dtf-train PATH  the dtf-train binary (default: next to $prog, else PATH)
      --delay SEC       seconds to wait before a restart (default 1)
      --allow-run-as-root  pass --allow-run-as-root to mpirun (Open MPI
                        refuses root without it or OMPI_ALLOW_RUN_AS_ROOT=1
                        and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  -h, --help            show this help and exit

Options go before the job file; dtf-train's options after "--" (an
option $prog does not know is an error, exit 2).

Signals: SIGINT (Ctrl-C), SIGTERM, SIGHUP or SIGUSR1 to $prog reach the
ranks as SIGUSR1 (through mpirun, which runs in a session of its own); they
write a checkpoint and exit 75, and $prog exits 75 without restarting.
A second SIGINT, SIGTERM or SIGHUP ends the job at once.

To Open MPI's mpirun, $prog adds TCP keepalive options (so that a host
whose link goes down ends the job in seconds) and, when each rank's
threads would share the core or socket mpirun binds it to, --bind-to
none; each unless the command or an OMPI_MCA_ variable sets it.

Exit status: 0 done; 2 on a usage error or when mpirun refused to run as
root; otherwise the status of the last attempt (2 job file, 3 data, 4
checkpoint error, 75 stopped by a signal after writing a checkpoint).  Plain mpirun exits 1, not
75, when it is sent SIGINT or SIGTERM itself; $prog and srun give 75.
EOF
}

np=
min_np=
max_restarts=3
mpirun=${DTF_MPIRUN:-mpirun}
delay=1
allow_root=0
hosts=
hostfile=
probe_timeout=10
here=$(dirname "$0")
if [ -x "$here/dtf-train" ]; then
	train="$here/dtf-train"
else
	train=dtf-train
fi

usage_error() { # message
	echo "$prog: $1" >&2
	echo "Try '$prog --help'." >&2
	exit 2
}

need_int() { # option value [min]
	case $2 in
	'' | *[!0-9]*)
		if [ -n "${3:-}" ]; then
			usage_error "$1: expected a positive integer, got '$2'"
		fi
		usage_error "$1: expected a non-negative integer, got '$2'"
		;;
	esac
	if [ -n "${3:-}" ] && [ "$2" -lt "$3" ]; then
		usage_error "$1: expected a positive integer, got '$2'"
	fi
}

while [ $# -gt 0 ]; do
	# --option=VALUE is --option VALUE
	case $1 in
	--np=* | --min-np=* | --max-restarts=* | --mpirun=* | --dtf-train=* | \
		--delay=* | --host=* | --hostfile=* | --probe-timeout=*)
		o=${1%%=*}
		v=${1#*=}
		shift
		set -- "$o" "$v" "$@"
		;;
	esac
	case $1 in
	-n | --np | --min-np | --max-restarts | --mpirun | --dtf-train | --delay | \
		-H | --host | --hostfile | --probe-timeout)
		[ $# -ge 2 ] || usage_error "option '$1' needs a value"
		;;
	esac
	case $1 in
	-n | --np) need_int "$1" "$2" 1; np=$2; shift 2 ;;
	--min-np) need_int "$1" "$2" 1; min_np=$2; shift 2 ;;
	--max-restarts) need_int "$1" "$2"; max_restarts=$2; shift 2 ;;
	--mpirun) mpirun=$2; shift 2 ;;
	--dtf-train) train=$2; shift 2 ;;
	--delay) need_int "$1" "$2"; delay=$2; shift 2 ;;
	-H | --host) hosts=$2; shift 2 ;;
	--hostfile) hostfile=$2; shift 2 ;;
	--probe-timeout) need_int "$1" "$2" 1; probe_timeout=$2; shift 2 ;;
	--allow-run-as-root) allow_root=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	-np) usage_error "unknown option '-np' (dtf-launch's is -n N or --np N)" ;;
	-*) usage_error "unknown option '$1' (dtf-train's options go after --, mpirun's inside --mpirun)" ;;
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

# ---- hosts ------------------------------------------------------------------

# 0 when launcher command $1 runs Open MPI's mpirun: a word mpirun,
# mpiexec or orterun, with or without a directory
is_mpirun() {
	case " $1 " in
	*[/\ ]mpirun\ * | *[/\ ]mpiexec\ * | *[/\ ]orterun\ *) return 0 ;;
	esac
	return 1
}

# A host option inside --mpirun (-H, --host, -host, --hostfile, -hostfile,
# --machinefile, -machinefile) is taken out of it and kept as if given to
# dtf-launch, so that the restarts can leave hosts out.  The command is a
# word list (no quoting), as it is run.
set -f
rest=
take=
found=
words=
is_mpirun "$mpirun" && words=$mpirun
for w in $words; do
	case $take in
	host) found="$found $w"; hosts=$w; take=; continue ;;
	hostfile) found="$found $w"; hostfile=$w; take=; continue ;;
	esac
	case $w in
	-H | --host | -host) found="$found $w"; take=host ;;
	--hostfile | -hostfile | --machinefile | -machinefile) found="$found $w"; take=hostfile ;;
	--host=*) found="$found $w"; hosts=${w#*=} ;;
	--hostfile=* | --machinefile=*) found="$found $w"; hostfile=${w#*=} ;;
	*) rest="$rest${rest:+ }$w" ;;
	esac
done
set +f
if [ -n "$found" ]; then
	if [ -n "$hosts" ] && [ -n "$hostfile" ]; then
		usage_error "both a host list and a hostfile given (--mpirun '$mpirun' and --host/--hostfile): give one"
	fi
	mpirun=$rest
fi
if [ -n "$hosts" ] && [ -n "$hostfile" ]; then
	usage_error "give --host or --hostfile, not both"
fi
if [ -n "$hosts$hostfile" ] && ! is_mpirun "$mpirun"; then
	usage_error "--host and --hostfile are Open MPI mpirun's, but the launcher is '$mpirun' (give the hosts in its own terms inside --mpirun)"
fi
if [ -n "$hostfile" ] && ! [ -r "$hostfile" ]; then
	usage_error "--hostfile $hostfile: cannot read it"
fi

# The hosts, one a line: "NAME[:SLOTS]" from a host list, the line itself
# (comments and blank lines dropped) from a hostfile.
if [ -n "$hosts" ]; then
	hostlines=$(printf '%s\n' "$hosts" | tr ',' '\n' | sed '/^$/d')
elif [ -n "$hostfile" ]; then
	hostlines=$(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$hostfile")
else
	hostlines=
fi
[ -n "$hostlines" ] || [ -z "$hosts$hostfile" ] || usage_error "no hosts in '${hosts:-$hostfile}'"

host_names() { # the names of $hostlines, one a line
	printf '%s\n' "$hostlines" | sed -e 's/[[:space:]].*//' -e 's/:.*//' | sed '/^$/d'
}
host_count() { host_names | wc -l | tr -d ' '; }

# The slots of the hosts, or nothing when a host has no count ("h1:2";
# "h1 slots=2"; a name alone counts 1 in a host list, as for mpirun).
host_slots() {
	if [ -n "$hosts" ]; then
		printf '%s\n' "$hostlines" | awk -F: '{ s += (NF > 1 ? $2 : 1) } END { print s }'
	else
		printf '%s\n' "$hostlines" | awk '
			{ n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) n = substr($i, 7) + 0
			  if (n == 0) unknown = 1; s += n }
			END { if (!unknown) print s }'
	fi
}

tmp=
cleanup() { [ -n "$tmp" ] && rm -rf "$tmp"; }
trap cleanup EXIT
if [ -n "$hostlines" ]; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-launch.XXXXXX") ||
		{ echo "$prog: cannot create a temporary directory" >&2; exit 1; }
fi

# mpirun's host option for the hosts of now: a list, or a hostfile of the
# lines left
host_option() {
	if [ -n "$hosts" ]; then
		printf ' --host %s' "$(printf '%s\n' "$hostlines" | paste -sd, -)"
	elif [ -n "$hostfile" ]; then
		printf '%s\n' "$hostlines" >"$tmp/hostfile"
		printf ' --hostfile %s' "$tmp/hostfile"
	fi
}

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
		# 128 + a signal's number: killed by it (mpirun's statuses
		# above 128 + the last signal are its own)
		name=
		[ "$1" -gt 128 ] && name=$(kill -l $(($1 - 128)) 2>/dev/null)
		case $name in '' | *[!A-Za-z0-9+-]* | [0-9]*) name= ;; esac
		if [ -n "$name" ]; then
			echo "a process was killed by SIG${name#SIG}"
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
	is_mpirun "$1" || return 0
	for kv in time=5 intvl=2 probes=3; do
		k=oob_tcp_keepalive_${kv%%=*}
		case $1 in *"$k"*) continue ;; esac
		[ -n "$(printenv "OMPI_MCA_$k")" ] && continue
		printf ' --mca %s %s' "$k" "${kv#*=}"
	done
}
ka=$(keepalive "$mpirun")

# The threads each rank will use, as dtf-train chooses them
# (train/threads.c): --threads N (-t N) among dtf-train's options $2...,
# else OPENBLAS_NUM_THREADS, else this machine's CPUs over the ranks per
# node $1 (the CPU affinity mpirun gives the rank bounds the last).
rank_threads() {
	rpn=$1
	shift
	t=
	while [ $# -gt 0 ]; do
		case $1 in
		-t | --threads) t=${2:-}; [ $# -ge 2 ] && shift ;;
		--threads=*) t=${1#*=} ;;
		-t?*) t=${1#-t} ;;
		--set) [ $# -ge 2 ] && shift ;;
		esac
		shift
	done
	case $t in '' | *[!0-9]* | 0) t= ;; esac
	if [ -z "$t" ]; then
		t=${OPENBLAS_NUM_THREADS:-}
		case $t in '' | *[!0-9]* | 0) t= ;; esac
	fi
	if [ -z "$t" ]; then
		cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
		t=$((cpus / rpn))
	fi
	[ "$t" -ge 1 ] 2>/dev/null || t=1
	echo "$t"
}

# This machine's CPU topology, as a stand-in for every node: logical CPUs,
# CPUs of one core (its hardware threads), sockets (packages).
topology() {
	cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
	sib=/sys/devices/system/cpu/cpu0/topology/thread_siblings_list
	per_core=1
	[ -r "$sib" ] && per_core=$(tr ',' '\n' <"$sib" |
		awk -F- '{ n += (NF > 1 ? $2 - $1 + 1 : 1) } END { print (n > 0 ? n : 1) }')
	sockets=$(cat /sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id 2>/dev/null |
		sort -u | wc -l | tr -d ' ')
	[ "${sockets:-0}" -ge 1 ] || sockets=1
}

# " --bind-to none" when the ranks' threads would share what Open MPI's
# default binding gives them (mpirun(1): each rank bound to a core when
# the job has at most 2 ranks, to a socket otherwise, where the socket's
# CPUs go to the ranks mapped on it), for np ranks ($1) over the hosts
# and dtf-train's options $2...; nothing when the launcher is not
# Open MPI's mpirun, np is unknown, or the user chose a binding or a
# mapping (the command's --bind-to, --map-by, --rankfile, --cpus-per-proc,
# --cpu-set, or OMPI_MCA_hwloc_base_binding_policy /
# OMPI_MCA_rmaps_base_mapping_policy).
bind_option() {
	n=$1
	shift
	[ -n "$n" ] || return 0
	is_mpirun "$mpirun" || return 0
	case " $mpirun " in
	*" --bind-to"* | *" -bind-to"* | *" --map-by"* | *" -map-by"* | \
		*" --rankfile"* | *" -rf "* | *" --cpus-per-"* | *" -cpus-per-"* | \
		*" --cpu-set"* | *" -cpu-set"* | *" --npersocket"* | *" --npernode"* | \
		*" -npernode"* | *" --ppr"* | *hwloc_base_binding_policy* | \
		*rmaps_base_mapping_policy*) return 0 ;;
	esac
	[ -n "${OMPI_MCA_hwloc_base_binding_policy:-}" ] && return 0
	[ -n "${OMPI_MCA_rmaps_base_mapping_policy:-}" ] && return 0
	nh=1
	[ -n "$hostlines" ] && nh=$(host_count)
	rpn=$(((n + nh - 1) / nh))
	t=$(rank_threads "$rpn" "$@")
	topology
	if [ "$n" -le 2 ]; then
		[ "$t" -gt "$per_core" ] && printf ' --bind-to none'
	else
		per_socket=$((cpus / sockets))
		ranks_per_socket=$(((rpn + sockets - 1) / sockets))
		[ $((t * ranks_per_socket)) -gt "$per_socket" ] && printf ' --bind-to none'
	fi
	return 0
}

# After a failed attempt: ask every host at once whether mpirun can still
# start a process there (dtf-train --version, within --probe-timeout s);
# leave out those that do not answer.  $room: the ranks the hosts left
# have room for when some were left out (their slots, a host without a
# count being one; when np was more than all the slots, np's share of
# them), else empty.  1 when no host answers.
room=
drop_lost_hosts() {
	room=
	i=0
	for h in $(host_names); do
		i=$((i + 1))
		rm -f "$tmp/answer.$i"
		# shellcheck disable=SC2086 # $launcher and $ka are word lists
		(timeout -k 2 "$probe_timeout" $launcher -n 1 --host "$h" $ka "$train" --version \
			</dev/null >/dev/null 2>&1 && : >"$tmp/answer.$i") &
	done
	wait
	# a signal cut the wait short: no verdict (the loop stops anyway)
	[ "$stop" -ge 1 ] && return 0
	before=$(host_slots)
	[ -n "$before" ] || before=$(host_count)
	kept=
	lost=
	i=0
	for h in $(host_names); do
		i=$((i + 1))
		if [ -e "$tmp/answer.$i" ]; then
			kept="$kept $h"
		else
			lost="$lost${lost:+,}$h"
		fi
	done
	[ -n "$lost" ] || return 0
	if [ -z "$kept" ]; then
		echo "$prog: attempt $attempt ended with status $st ($why), and no host answers (mpirun -n 1 --host HOST $train --version within $probe_timeout s: $lost); not restarting" >&2
		return 1
	fi
	hostlines=$(printf '%s\n' "$hostlines" | awk -v keep="$kept " '
		{ h = $1; sub(/:.*/, "", h); if (index(" " keep, " " h " ")) print }')
	room=$(host_slots)
	[ -n "$room" ] || room=$(host_count)
	# oversubscribed: the same share of the ranks
	[ "$np" -gt "$before" ] && room=$((np * room / before))
	[ "$room" -ge 1 ] || room=1
	echo "$prog: host(s) $lost did not answer (mpirun -n 1 --host HOST $train --version within $probe_timeout s): leaving them out" >&2
	return 0
}

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
	[ -n "$np" ] && npopt=" -n $np"
	hostopt=$(host_option)
	bind=$(bind_option "$np" "$@")
	echo "$prog: attempt $attempt of $attempts: $launcher$hostopt$npopt$ka$bind $train $start $*" >&2
	# shellcheck disable=SC2086 # $detach, $launcher, $hostopt, $npopt, $ka and $bind are word lists
	DTF_LAUNCH_ATTEMPT=$attempt $detach $launcher $hostopt $npopt $ka $bind "$train" "$start" "$@" &
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
	if [ -n "$min_np" ] && [ "$st" -ne 75 ] && [ "$(host_count)" -ge 2 ]; then
		drop_lost_hosts || exit "$st"
	fi
	if [ -n "$min_np" ] && [ "$st" -ne 75 ] && [ "$np" -gt "$min_np" ]; then
		np=$((np - 1))
		# the ranks the hosts left have room for
		[ -n "$room" ] && [ "$np" -gt "$room" ] && np=$room
		[ "$np" -lt "$min_np" ] && np=$min_np
		echo "$prog: attempt $attempt ended with status $st ($why); restarting from the newest checkpoint with $np rank(s)${hostopt:+ on $(host_names | paste -sd, -)} in $delay s" >&2
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
