#!/bin/sh
# scaling_model.sh - the measurements behind tests/bench/scaling_model.py:
# seconds per gradient allreduce (comm_bench -t, the strategies' flat
# path: multi_worker_mirrored over MPI_Allreduce) on 2 and on 3
# network-namespace hosts (tests/cluster/cluster.sh), one rank each, as
# Open MPI chooses its algorithm ("flat") and with its ring algorithm
# forced ("ring": coll_tuned_allreduce_algorithm 4), with every host's link
# shaped to each RATE (tbf) and delayed by each DELAY (nfq_delay, where it
# was built and iptables is installed; otherwise those rows are left out),
# the two-rank reduction inside one host (hier1: the hierarchical path's
# reduce + broadcast in a node, and shm: the shared-memory window), and
# the Fashion-MNIST CNN's compute time per step on one rank (1 thread,
# batch 64); then the model's fit, predictions and plot.  Conditions
# alternate within each round, so a load that comes and goes on the
# machine spreads over all of them; the model reports the spread.
#
#   tests/bench/scaling_model.sh [BUILD_DIR] [ROUNDS] [OUT_DIR]
#                                (defaults: build, 2, tests/bench/results)
#
# Needs root and iproute2 (the delay rows: iptables and
# libnetfilter-queue-dev before meson setup), and tests/setup-venv.sh's
# numpy and matplotlib (DTF_VENV, default .venv).  Writes OUT_DIR/
# allreduce.csv (round,hosts,rate,delay_us,path,bytes,seconds),
# OUT_DIR/compute.csv (round,batch,data_ms,fwd_ms,bwd_ms,opt_ms) and
# what scaling_model.py writes (scaling_model.txt, scaling_efficiency.png).
# About 4 minutes with 2 rounds.  The hosts exist only while it runs.
set -eu
build=${1:-build}
rounds=${2:-2}
out=${3:-tests/bench/results}
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
if [ "${1:-}" != --inside ]; then
	[ -x "$build/tests/bench/comm_bench" ] || {
		echo "scaling_model.sh: $build/tests/bench/comm_bench is missing (ninja -C $build)" >&2
		exit 1
	}
	venv=${DTF_VENV:-$here/.venv}
	"$venv/bin/python" -c "import numpy, matplotlib" 2>/dev/null || {
		echo "scaling_model.sh: $venv has no numpy and matplotlib (run tests/setup-venv.sh)" >&2
		exit 1
	}
	datasets/prepare.sh "$build" >/dev/null
	mkdir -p "$out"
	tests/cluster/cluster.sh run 3 "$0" --inside "$build" "$rounds" "$out"
	exec "$venv/bin/python" tests/bench/scaling_model.py "$out"
fi
shift
build=$1 rounds=$2 out=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DTF_BUILD_ROOT=$here/$build
export DTF_BUILD_ROOT
cl=tests/cluster/cluster.sh
bench=$here/$build/tests/bench/comm_bench
# latency (4 B .. 64 KiB) and bandwidth (512 KiB .. 8 MiB, well past
# tbf's 256 KB burst) sizes
sizes=4,4096,65536,524288,2097152,8388608
rates="off 1gbit 300mbit"
delays=0
if [ -x "$DTF_BUILD_ROOT/tests/nfq_delay" ] && command -v iptables >/dev/null; then
	delays="0 1000"
else
	echo "# no nfq_delay or iptables: no delay rows" >&2
fi
csv=$out/allreduce.csv
ccsv=$out/compute.csv
echo "round,hosts,rate,delay_us,path,bytes,seconds" >"$csv"
echo "round,batch,data_ms,fwd_ms,bwd_ms,opt_ms" >"$ccsv"
# ranks wait in poll() rather than spin: 3 ranks share 2 cores here
yield="--mca mpi_yield_when_idle 1"
ring="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4"
bench_rows() { # ROUND HOSTS RATE DELAY HOSTSPEC NP PATHS [LABEL MCA...]
	b_round=$1 b_hosts=$2 b_rate=$3 b_delay=$4 b_spec=$5 b_np=$6 b_paths=$7
	b_label=${8:-}
	shift 7
	[ $# -gt 0 ] && shift
	# shellcheck disable=SC2086
	$cl mpirun "$b_spec" -np "$b_np" $yield "$@" "$bench" -t -p "$b_paths" -s "$sizes" 2>&1 |
		awk -v r="$b_round" -v h="$b_hosts" -v rate="$b_rate" -v d="$b_delay" -v label="$b_label" '
		/^ *bytes/ { for (i = 2; i <= NF; i++) path[i] = label != "" ? label : $i; next }
		/^ *[0-9]/ { for (i = 2; i <= NF; i++)
				printf "%s,%s,%s,%s,%s,%s,%s\n", r, h, rate, d, path[i], $1, $i }' >>"$csv"
}
r=1
while [ "$r" -le "$rounds" ]; do
	echo "# round $r of $rounds" >&2
	bench_rows "$r" 1 off 0 h1:2 2 hier1,shm
	for rate in $rates; do
		for h in h1 h2 h3; do $cl shape "$h" "$rate"; done
		for d in $delays; do
			if [ "$d" -ne 0 ]; then
				for h in h1 h2 h3; do $cl delay "$h" "$d"; done
			fi
			echo "#   tbf $rate, delay $d us" >&2
			for np in 2 3; do
				spec=h1,h2
				[ "$np" -eq 3 ] && spec=h1,h2,h3
				bench_rows "$r" "$np" "$rate" "$d" "$spec" "$np" flat
				# shellcheck disable=SC2086
				bench_rows "$r" "$np" "$rate" "$d" "$spec" "$np" flat ring $ring
			done
			if [ "$d" -ne 0 ]; then
				for h in h1 h2 h3; do $cl delay "$h" off; done
			fi
		done
	done
	for h in h1 h2 h3; do $cl shape "$h" off; done
	# compute per step: one rank, one thread, batch 64, steps 21-40
	"$here/$build/dtf-train" --threads 1 --set train.batch_size=64 \
		--set train.max_steps=40 --set logging.every_steps=20 \
		graphs/fashion_mnist_cnn.yaml 2>&1 | grep "step 40/40" |
		sed -n 's/.*(ms\/step: data \([0-9.]*\) fwd \([0-9.]*\) bwd \([0-9.]*\) comm [0-9.]* opt \([0-9.]*\)).*/\1,\2,\3,\4/p' |
		sed "s/^/$r,64,/" >>"$ccsv"
	r=$((r + 1))
done
n=$(($(wc -l <"$csv") - 1))
[ "$n" -gt 0 ] || { echo "scaling_model.sh: no allreduce rows measured" >&2; exit 1; }
[ "$(wc -l <"$ccsv")" -gt 1 ] || { echo "scaling_model.sh: no compute time measured" >&2; exit 1; }
echo "# $n allreduce rows in $csv" >&2
