#!/bin/sh
# slurm.sh - a private Slurm cluster over the namespace hosts of cluster.sh:
# one munged (its own key and socket), slurmctld on h1 and one slurmd per
# host, each in its host's network namespace with the host's name and
# /etc/hosts, every file under one directory.
#
#   slurm.sh run N CMD [ARG]...   (inside `cluster.sh run`) bring Slurm up on
#                                 h1..hN, run CMD with SLURM_CONF and
#                                 DTF_SLURM_DIR exported, take Slurm down,
#                                 exit with CMD's status
#   slurm.sh up N | down          the same in two steps; DTF_SLURM_DIR names
#                                 the directory (default
#                                 ${TMPDIR:-/tmp}/dtf-slurm-$DTF_CLUSTER_ID)
#   slurm.sh check                exit 77 unless slurmctld, slurmd, srun,
#                                 sbatch, munged and Slurm's PMIx plugin exist
#
# Commands that talk to it (srun, sbatch, squeue, scancel) run on a host:
# `cluster.sh exec h1 env SLURM_CONF=$SLURM_CONF srun ...`.
#
# Settings as measured on Debian 12's Slurm 22.05: proctrack/linuxproc and
# task/none (no cgroups inside a namespace), select/cons_tres, MpiDefault
# pmix (Debian's Open MPI has no PMI-2), KillOnBadExit=1, spool, TmpFS and
# logs per node.  slurmd starts through nsenter --net plus its own UTS and
# mount namespaces (not `ip netns exec`, which remounts /sys, where
# slurmd's set-up then fails).
#
# Guarantees: `down` stops every daemon it started (slurmd and slurmctld
# also go with `cluster.sh down`, which kills what runs in the namespaces;
# munged, which runs outside them, by its pid file) and removes the
# directory; `run` does it on exit, HUP, INT and TERM.
set -u

here=$(cd "$(dirname "$0")" && pwd)
prog=slurm.sh
subnet=10.99.0

die() {
	echo "$prog: $*" >&2
	exit 1
}

setdir() {
	[ -n "${DTF_CLUSTER_ID:-}" ] || die "DTF_CLUSTER_ID is not set (run inside cluster.sh run)"
	dir=${DTF_SLURM_DIR:-${TMPDIR:-/tmp}/dtf-slurm-$DTF_CLUSTER_ID}
	conf=$dir/slurm.conf
}

check() {
	for c in slurmctld slurmd srun sbatch scancel squeue munged; do
		command -v "$c" >/dev/null 2>&1 || {
			echo "SKIP: $c is missing (Debian: slurm-wlm, munge)"
			exit 77
		}
	done
	ls /usr/lib/*/slurm-wlm/mpi_pmix.so >/dev/null 2>&1 || {
		echo "SKIP: Slurm's PMIx plugin (mpi_pmix.so) is missing"
		exit 77
	}
}

on_host() { # HOST CMD...: the host's network, name and /etc/hosts, not /sys
	h=$1
	shift
	nsenter --net="/run/netns/$DTF_CLUSTER_ID$h" unshare --uts --mount sh -c \
		'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"' \
		"$h" "/etc/netns/$DTF_CLUSTER_ID$h/hosts" "$@"
}

wait_for() { # SECONDS CMD...: until CMD succeeds
	t=$(($1 * 10))
	shift
	while ! "$@" >/dev/null 2>&1; do
		t=$((t - 1))
		[ "$t" -gt 0 ] || return 1
		sleep 0.1
	done
}

up() { # N
	setdir
	n=$1
	rm -rf "$dir"
	mkdir -p "$dir/ctld" || die "cannot create $dir"
	chmod 700 "$dir"
	dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 2>/dev/null
	chmod 400 "$dir/munge.key"
	munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
		--pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
		--seed-file="$dir/munged.seed" || die "munged did not start (see $dir/munged.log)"
	nodes=
	k=1
	while [ "$k" -le "$n" ]; do
		mkdir -p "$dir/h$k/spool" "$dir/h$k/tmp"
		nodes="${nodes:+$nodes,}h$k"
		k=$((k + 1))
	done
	cpus=$(nproc)
	{
		cat <<EOF
# private test cluster (tests/cluster/slurm.sh)
ClusterName=dtf
SlurmctldHost=h1($subnet.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/%n/spool
TmpFS=$dir/%n/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/%n/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
KillOnBadExit=1
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=10
EOF
		k=1
		while [ "$k" -le "$n" ]; do
			echo "NodeName=h$k NodeAddr=$subnet.$k CPUs=$cpus State=UNKNOWN"
			k=$((k + 1))
		done
		echo "PartitionName=all Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
	} >"$conf"
	# configless slurmds would need DNS SRV records: every daemon reads the file
	on_host h1 slurmctld -f "$conf" || die "slurmctld did not start (see $dir/slurmctld.log)"
	k=1
	while [ "$k" -le "$n" ]; do
		on_host "h$k" slurmd -f "$conf" -N "h$k" || die "slurmd on h$k did not start (see $dir/h$k/slurmd.log)"
		k=$((k + 1))
	done
	export SLURM_CONF="$conf"
	wait_for 30 sh -c "\"$here/cluster.sh\" exec h1 env SLURM_CONF=\"$conf\" sinfo -h -t idle -o %D | grep -qx $n" ||
		die "the $n node(s) did not come up idle (see $dir/*.log)"
}

down() {
	setdir
	for f in "$dir"/h*/slurmd.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
		[ -f "$f" ] || continue
		p=$(cat "$f" 2>/dev/null)
		[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	done
	rm -rf "$dir"
	return 0
}

run() { # N CMD...
	n=$1
	shift
	check
	setdir
	cleanup() {
		trap - EXIT HUP INT TERM
		setsid "$here/$prog" down </dev/null >/dev/null 2>&1 &
		wait $! 2>/dev/null
	}
	trap cleanup EXIT
	trap 'cleanup; exit 143' TERM
	trap 'cleanup; exit 130' INT
	trap 'cleanup; exit 129' HUP
	(up "$n") || exit 1
	SLURM_CONF=$conf DTF_SLURM_DIR=$dir
	export SLURM_CONF DTF_SLURM_DIR
	"$@" &
	wait $!
	exit $?
}

[ $# -ge 1 ] || die "usage: $prog run|up|down|check ..."
cmd=$1
shift
case $cmd in
check) check ;;
run) [ $# -ge 2 ] || die "usage: $prog run N CMD..."; run "$@" ;;
up) [ $# -eq 1 ] || die "usage: $prog up N"; up "$1" ;;
down) down ;;
*) die "unknown command '$cmd'" ;;
esac
