#!/bin/sh
# cluster_scaling.sh - samples/s of the Fashion-MNIST CNN
# (graphs/fashion_mnist_cnn.yaml, global batch 128, --threads 1) on 2 ranks:
# one host (shared-memory window; MPI) against two network-namespace hosts
# (tests/cluster/cluster.sh), plain, with h2's link shaped to RATE (tbf)
# and, where nfq_delay was built and iptables is installed, with 1 ms more
# each way (cluster.sh delay on both hosts), overlap on and off, in
# alternating rounds.  Needs root and iproute2 (the delay rows: iptables
# and libnetfilter-queue-dev before meson setup).
#
#   tests/bench/cluster_scaling.sh [BUILD_DIR] [STEPS] [ROUNDS] [RATE]
#                                  (defaults: build, 100, 2, 1gbit)
#
# Prints one line per run: samples/s over the last half of the steps (the
# trainer's progress line) and its ms/step breakdown; the exposed
# communication share is comm / (data + fwd + bwd + comm + opt).  The hosts
# exist only while it runs (cluster.sh run removes them, also on ^C).
set -eu
build=${1:-build}
steps=${2:-100}
rounds=${3:-2}
rate=${4:-1gbit}
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
if [ "${DTF_CLUSTER_ID:-}" = "" ] || [ "${1:-}" != --inside ]; then
	datasets/prepare.sh "$build" >/dev/null
	exec tests/cluster/cluster.sh run 2 "$0" --inside "$build" "$steps" "$rounds" "$rate"
fi
shift
build=$1 steps=$2 rounds=$3 rate=$4
half=$((steps / 2))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DTF_BUILD_ROOT=$here/$build
export DTF_BUILD_ROOT
delay_us=1000
cl=tests/cluster/cluster.sh
run() { # LABEL HOSTS [DTF-TRAIN OPTION]...
	label=$1 hosts=$2
	shift 2
	line=$($cl mpirun "$hosts" -np 2 "$here/$build/dtf-train" --threads 1 \
		--set train.batch_size=128 --set train.max_steps="$steps" \
		--set logging.every_steps="$half" "$@" \
		"$here/graphs/fashion_mnist_cnn.yaml" 2>&1 | grep "step $steps/$steps")
	echo "$line" | sed -n 's/.*  \([0-9]*\) samples\/s .*(ms\/step: data \([0-9.]*\) fwd \([0-9.]*\) bwd \([0-9.]*\) comm \([0-9.]*\) opt \([0-9.]*\)).*/\1 \2 \3 \4 \5 \6/p' |
	while read -r s d f b c o; do
		awk -v l="$label" -v s="$s" -v d="$d" -v f="$f" -v b="$b" -v c="$c" -v o="$o" 'BEGIN {
			t = d + f + b + c + o
			printf "%-34s %6d samples/s  data %5.1f fwd %5.1f bwd %5.1f comm %6.1f opt %4.1f  step %6.1f ms  comm share %4.1f%%\n", l, s, d, f, b, c, o, t, 100 * c / t }'
	done
}
echo "# Fashion-MNIST CNN, global batch 128, 2 ranks x 1 thread, steps $((half + 1))-$steps"
r=1
while [ "$r" -le "$rounds" ]; do
	echo "# round $r"
	run "1 host, shared memory" h1:2
	run "1 host, MPI" h1:2 --set strategy.communication.implementation=mpi
	run "2 hosts" h1,h2
	run "2 hosts, overlap off" h1,h2 --set strategy.communication.overlap=false
	$cl shape h2 "$rate"
	run "2 hosts, tbf $rate" h1,h2
	run "2 hosts, tbf $rate, overlap off" h1,h2 --set strategy.communication.overlap=false
	if [ -x "$DTF_BUILD_ROOT/tests/nfq_delay" ] && command -v iptables >/dev/null; then
		$cl delay h1 "$delay_us"
		$cl delay h2 "$delay_us"
		run "2 hosts, tbf $rate + $delay_us us" h1,h2
		run "2 hosts, tbf $rate + $delay_us us, ovl off" h1,h2 --set strategy.communication.overlap=false
		$cl delay h1 off
		$cl delay h2 off
	fi
	$cl shape h2 off
	r=$((r + 1))
done
