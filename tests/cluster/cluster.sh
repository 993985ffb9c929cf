#!/bin/sh
# cluster.sh - hosts on one machine for the multi-host tests: network
# namespaces joined by a bridge, Open MPI launched across them, faults
# injected per host.
#
#   cluster.sh check              exit 77 (with the reason) unless this can run:
#                                 root, ip, unshare, nsenter, mpirun, and a
#                                 namespace with a bridge can be made
#   cluster.sh run N CMD [ARG]... bring N hosts up, run CMD with DTF_CLUSTER_ID
#                                 exported, take everything down again, exit
#                                 with CMD's status
#   cluster.sh up N               hosts h1..hN of cluster $DTF_CLUSTER_ID, owned by
#                                 $DTF_CLUSTER_OWNER (a pid; default: the caller)
#   cluster.sh down               remove them (and everything running in them)
#   cluster.sh sweep              remove clusters whose owner process is gone
#   cluster.sh exec HOST CMD...   run CMD on HOST (its network, /etc/hosts and
#                                 host name)
#   cluster.sh mpirun HOSTS [MPIRUN ARG]...
#                                 mpirun on h1 over HOSTS ("h1:2,h2:2": host
#                                 and slots), with the rsh agent, the subnet's
#                                 interfaces and --bind-to none; HOSTS "-":
#                                 no hostfile, the arguments name the hosts
#                                 (--host, as dtf-launch passes them)
#   cluster.sh signal HOST SIG [NAME]
#                                 send SIG to HOST's processes named NAME
#                                 (default dtf-train)
#   cluster.sh loopback HOST on|off
#                                 HOST's own name resolves, on HOST, to
#                                 127.0.1.1 (a misconfigured host) or not
#   cluster.sh link HOST up|down  the host's link to the bridge
#   cluster.sh shape HOST RATE    tbf at RATE (e.g. 1gbit) on the host's link,
#                                 both ways; RATE "off" removes it
#   cluster.sh delay HOST USEC    HOST's outgoing packets USEC microseconds
#                                 later (iptables NFQUEUE to nfq_delay, from
#                                 $DTF_NFQ_DELAY or $DTF_BUILD_ROOT/tests:
#                                 this kernel has no netem); "off" removes it
#   cluster.sh pids               what still runs in the cluster's namespaces
#
# Layout: cluster ID has namespaces IDbr (the bridge "br0") and IDh1..IDhN;
# host hK's eth0 is 10.99.0.K/24, paired with port hK on the bridge.  The
# addresses exist only inside these namespaces, so several clusters (of
# concurrent test runs) can use the same subnet.  Names resolve through
# /etc/netns/IDhK/hosts, which `ip netns exec` mounts over /etc/hosts (the
# machine's /etc/hosts is never touched); `exec` also gives the command its
# own UTS namespace with the host name hK, which is what Open MPI and
# dtf-train see.  Each host's TCP gives up on an unreachable peer after 5
# retransmissions (net.ipv4.tcp_retries2=5, about 13 s, longer than the
# tests' 10 s watchdog; Linux's default 15 takes about 15 minutes), as
# clusters that want dead hosts found quickly lower it: Open MPI's
# keepalive options end idle connections to a host whose link is down,
# but a daemon cut off with data still unsent waits for its
# retransmissions to fail.
#
# Guarantees: `down` kills every process left in the cluster's namespaces,
# removes the namespaces and their /etc/netns directories; `run` calls it on
# exit and on HUP, INT and TERM (the test runner's timeout), in a process of
# its own session so that a SIGKILL sent to the test's process group right
# after the TERM does not stop it half-way.  A cluster records its owner's
# pid in /run/dtf-cluster/ID; `up` first sweeps clusters whose owner is gone
# (a run killed outright).
set -u

here=$(cd "$(dirname "$0")" && pwd)
prog=cluster.sh
state=/run/dtf-cluster
subnet=10.99.0
mask=24

die() {
	echo "$prog: $*" >&2
	exit 1
}

need_id() {
	[ -n "${DTF_CLUSTER_ID:-}" ] || die "DTF_CLUSTER_ID is not set"
	id=$DTF_CLUSTER_ID
}

check() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "SKIP: the cluster tests make network namespaces: run them as root"
		exit 77
	fi
	for c in ip unshare nsenter mpirun timeout; do
		command -v "$c" >/dev/null 2>&1 || {
			echo "SKIP: $c is missing (Debian: iproute2, util-linux, coreutils, openmpi-bin)"
			exit 77
		}
	done
	# a container without CAP_SYS_ADMIN / CAP_NET_ADMIN cannot make hosts
	probe="dtfprobe$$"
	if ! ip netns add "$probe" 2>/dev/null; then
		echo "SKIP: cannot create a network namespace here (ip netns add)"
		exit 77
	fi
	ok=1
	ip -n "$probe" link add br0 type bridge 2>/dev/null || ok=0
	ip netns del "$probe" 2>/dev/null
	if [ "$ok" -eq 0 ]; then
		echo "SKIP: cannot create a bridge in a network namespace here"
		exit 77
	fi
}

ns_of() { # HOST -> namespace name
	echo "$id$1"
}

# ---- up / down -------------------------------------------------------------

up() { # N
	need_id
	n=$1
	case $n in '' | *[!0-9]*) die "up: expected a host count, got '$n'" ;; esac
	sweep
	mkdir -p "$state" || die "cannot create $state"
	echo "${DTF_CLUSTER_OWNER:-$PPID}" >"$state/$id" || die "cannot write $state/$id"
	br="${id}br"
	ip netns add "$br" || die "cannot add namespace $br"
	ip -n "$br" link set lo up
	ip -n "$br" link add br0 type bridge || die "cannot add a bridge"
	ip -n "$br" link set br0 up
	k=1
	while [ "$k" -le "$n" ]; do
		ns=$(ns_of "h$k")
		ip netns add "$ns" || die "cannot add namespace $ns"
		ip -n "$ns" link set lo up
		# a host cut off with unsent data gives up after a few seconds
		# of retransmissions instead of ~15 min (tcp_retries2 15)
		ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=5 >/dev/null 2>&1
		ip -n "$br" link add "h$k" type veth peer name eth0 netns "$ns" ||
			die "cannot add the link of h$k"
		ip -n "$br" link set "h$k" master br0
		ip -n "$br" link set "h$k" up
		ip -n "$ns" addr add "$subnet.$k/$mask" dev eth0
		ip -n "$ns" link set eth0 up
		k=$((k + 1))
	done
	k=1
	while [ "$k" -le "$n" ]; do
		mkdir -p "/etc/netns/$(ns_of "h$k")"
		write_hosts "h$k" "$n" off
		k=$((k + 1))
	done
	# the bridge forwards as soon as its ports are up (no STP delay)
	if command -v ping >/dev/null 2>&1; then
		k=2
		while [ "$k" -le "$n" ]; do
			ip netns exec "$(ns_of h1)" ping -c 1 -W 2 "$subnet.$k" >/dev/null 2>&1 ||
				die "h1 cannot reach h$k"
			k=$((k + 1))
		done
	fi
}

write_hosts() { # HOST N on|off: HOST's /etc/hosts for hosts h1..hN
	# every host knows every name; with "on", HOST's own name is on the
	# loopback (127.0.1.1, as Debian's installer writes it without a
	# fixed address)
	f="/etc/netns/$(ns_of "$1")/hosts"
	{
		printf '127.0.0.1\tlocalhost\n'
		[ "$3" = on ] && printf '127.0.1.1\t%s\n' "$1"
		j=1
		while [ "$j" -le "$2" ]; do
			[ "$3" = on ] && [ "h$j" = "$1" ] || printf '%s\t%s\n' "$subnet.$j" "h$j"
			j=$((j + 1))
		done
	} >"$f.tmp" && mv "$f.tmp" "$f"
}

loopback() { # HOST on|off
	need_id
	n=$(namespaces | grep -c "^${id}h")
	[ -d "/etc/netns/$(ns_of "$1")" ] || die "no host $1"
	write_hosts "$1" "$n" "$2"
}

namespaces() { # the cluster's namespaces, hosts first
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${id}(h[0-9]+|br)\$" | sort -r
}

down() {
	need_id
	nss=$(namespaces)
	# everything still running in them, twice: a dying orted may fork
	for pass in 1 2; do
		for ns in $nss; do
			pids=$(ip netns pids "$ns" 2>/dev/null)
			[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
		done
		[ "$pass" -eq 1 ] && sleep 0.2
	done
	for ns in $nss; do
		ip netns del "$ns" 2>/dev/null
		rm -rf "/etc/netns/$ns"
	done
	rm -f "$state/$id" "$state/delay/$id"h* "$state/hosts/$id".*
	rmdir /etc/netns 2>/dev/null
	return 0
}

sweep() { # clusters whose owner is gone
	[ -d "$state" ] || return 0
	for f in "$state"/*; do
		[ -f "$f" ] || continue
		owner=$(cat "$f" 2>/dev/null)
		if [ -z "$owner" ] || ! kill -0 "$owner" 2>/dev/null; then
			(id=$(basename "$f"); DTF_CLUSTER_ID=$id; down)
		fi
	done
}

# ---- running on hosts ------------------------------------------------------

host_exec() { # HOST CMD...
	need_id
	h=$1
	shift
	exec ip netns exec "$(ns_of "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

cluster_mpirun() { # HOSTS [MPIRUN ARG]...
	need_id
	spec=$1
	shift
	# under the cluster's state, so that `down` removes it should this
	# shell be killed before it does
	hf=
	first=h1
	if [ "$spec" != - ]; then
		mkdir -p "$state/hosts"
		hf=$(mktemp "$state/hosts/$id.XXXXXX") || die "cannot write a hostfile"
		echo "$spec" | tr ',' '\n' | awk -F: '{print $1 " slots=" ($2 == "" ? 1 : $2)}' >"$hf"
		first=$(head -n 1 "$hf" | cut -d' ' -f1)
	fi
	ip netns exec "$(ns_of "$first")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$first" \
		mpirun ${hf:+--hostfile "$hf"} \
		--mca plm_rsh_agent "$here/rsh-agent.sh" \
		--mca oob_tcp_if_include "$subnet.0/$mask" \
		--mca btl_tcp_if_include "$subnet.0/$mask" \
		--mca btl self,vader,tcp \
		--bind-to none "$@"
	st=$?
	[ -n "$hf" ] && rm -f "$hf"
	return $st
}

signal_host() { # HOST SIG [NAME]
	need_id
	pids=$(ip netns pids "$(ns_of "$1")" 2>/dev/null)
	name=${3:-dtf-train}
	hit=
	for p in $pids; do
		comm=$(cat "/proc/$p/comm" 2>/dev/null)
		[ "$comm" = "$name" ] && hit="$hit $p"
	done
	[ -n "$hit" ] || die "no $name on $1"
	kill -"$2" $hit
}

link() { # HOST up|down
	need_id
	ip -n "${id}br" link set "$1" "$2" || die "no link $1"
	[ "$2" = up ] || return 0
	# addresses that failed to resolve while the link was down stay
	# unreachable (EHOSTUNREACH) until the entry expires: forget them
	for ns in $(namespaces); do
		ip -n "$ns" neigh flush all 2>/dev/null
	done
	return 0
}

shape() { # HOST RATE|off: both directions of the host's link
	need_id
	shape_dev "${id}br" "$1" "$2" && shape_dev "$(ns_of "$1")" eth0 "$2"
}

shape_dev() { # NAMESPACE DEV RATE|off
	if [ "$3" = off ]; then
		tc -n "$1" qdisc del dev "$2" root 2>/dev/null
		return 0
	fi
	tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst 256kb latency 50ms ||
		die "tc tbf failed (Debian: iproute2; the kernel's sch_tbf)"
}

delay() { # HOST USEC|off: the host's outgoing packets USEC later
	need_id
	ns=$(ns_of "$1")
	mkdir -p "$state/delay"
	pidf="$state/delay/$ns"
	if [ -f "$pidf" ]; then
		kill "$(cat "$pidf")" 2>/dev/null
		rm -f "$pidf"
		ip netns exec "$ns" iptables -D OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass 2>/dev/null
	fi
	[ "$2" = off ] && return 0
	prog=${DTF_NFQ_DELAY:-${DTF_BUILD_ROOT:-build}/tests/nfq_delay}
	[ -x "$prog" ] || die "delay: $prog is missing (build it with libnetfilter-queue-dev)"
	command -v iptables >/dev/null 2>&1 || die "delay: iptables is missing (Debian: iptables)"
	ip netns exec "$ns" "$prog" 0 "$2" </dev/null >/dev/null 2>&1 &
	echo $! >"$pidf"
	sleep 0.2
	kill -0 "$(cat "$pidf")" 2>/dev/null || die "delay: $prog did not start"
	# --queue-bypass: should the program die, packets pass undelayed
	ip netns exec "$ns" iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass ||
		die "delay: iptables NFQUEUE failed"
}

run() { # N CMD...
	n=$1
	shift
	check
	if [ -z "${DTF_CLUSTER_ID:-}" ]; then
		DTF_CLUSTER_ID="dtf$$"
	fi
	export DTF_CLUSTER_ID
	DTF_CLUSTER_OWNER=$$
	export DTF_CLUSTER_OWNER
	cleanup() {
		trap - EXIT HUP INT TERM
		# a session of its own: survives the runner's SIGKILL of our group
		setsid "$here/$prog" down </dev/null >/dev/null 2>&1 &
		wait $! 2>/dev/null
	}
	trap cleanup EXIT
	trap 'cleanup; exit 143' TERM
	trap 'cleanup; exit 130' INT
	trap 'cleanup; exit 129' HUP
	(up "$n") || exit 1
	"$@" &
	child=$!
	wait $child
	st=$?
	exit $st
}

[ $# -ge 1 ] || die "usage: $prog check|run|up|down|sweep|exec|mpirun|signal|loopback|link|shape|delay|pids ..."
cmd=$1
shift
case $cmd in
check) check ;;
run) [ $# -ge 2 ] || die "usage: $prog run N CMD..."; run "$@" ;;
up) [ $# -eq 1 ] || die "usage: $prog up N"; up "$1" ;;
down) down ;;
sweep) id=; sweep ;;
exec) [ $# -ge 2 ] || die "usage: $prog exec HOST CMD..."; host_exec "$@" ;;
mpirun) [ $# -ge 1 ] || die "usage: $prog mpirun HOSTS [ARG]..."; cluster_mpirun "$@" ;;
signal) [ $# -ge 2 ] || die "usage: $prog signal HOST SIG [NAME]"; signal_host "$@" ;;
loopback) [ $# -eq 2 ] || die "usage: $prog loopback HOST on|off"; loopback "$@" ;;
link) [ $# -eq 2 ] || die "usage: $prog link HOST up|down"; link "$@" ;;
shape) [ $# -eq 2 ] || die "usage: $prog shape HOST RATE|off"; shape "$@" ;;
delay) [ $# -eq 2 ] || die "usage: $prog delay HOST USEC|off"; delay "$@" ;;
pids)
	need_id
	for ns in $(namespaces); do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			echo "$ns $p $(cat "/proc/$p/comm" 2>/dev/null)"
		done
	done
	;;
*) die "unknown command '$cmd'" ;;
esac
