#!/bin/sh
# builds_ab.sh - two builds of dtf-train side by side on the Fashion-MNIST
# CNN, to show that a change kept (or changed) the speed.
#
#   tests/bench/builds_ab.sh BUILD_A BUILD_B
#
# For each configuration (1 process x 2 threads at batch 64; 2 ranks x 1
# thread at global batch 128) runs graphs/fashion_mnist_cnn.yaml for STEPS
# steps (default 300) with each build, ROUNDS times (default 3), A and B
# alternating and the order swapped every round, so that a slow spell of a
# shared machine falls on both.  Prints per run the samples/s of the
# steady state (dtf-train's "last epoch (steps only)" figure, or the whole
# run's where the run is shorter than an epoch) and the CPU seconds per
# sample (user + system time of mpirun and all ranks, from their rusage),
# then one RESULT line per configuration: the medians and the ratios B/A.
# Names the CPU and the kernels that ran.  Needs datasets/prepare.sh run
# first.  Set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# as root.
set -eu
a=${1:?usage: builds_ab.sh BUILD_A BUILD_B}
b=${2:?usage: builds_ab.sh BUILD_A BUILD_B}
here=$(cd "$(dirname "$0")/../.." && pwd)
steps=${STEPS:-300}
rounds=${ROUNDS:-3}
job=$here/graphs/fashion_mnist_cnn.yaml
[ -f "$here/datasets/fashion-mnist/test-00000-of-00001.tfrecord" ] ||
	{ echo "builds_ab.sh: run datasets/prepare.sh first" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-ab-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; avx512f: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no), avx2: $(grep -qw avx2 /proc/cpuinfo && echo yes || echo no)"

# one NAME BUILD NP THREADS BATCH: prints "sps cpu_s_per_sample"
one() {
	log=$tmp/$1.log
	cd "$here"
	/usr/bin/env time -f "%U %S" -o "$tmp/$1.time" \
		mpirun --bind-to none -np "$3" "$2/dtf-train" --threads "$4" \
		--set train.batch_size="$5" --set train.max_steps="$steps" \
		--set train.epochs=1 --set logging.every_steps=100000 \
		"$job" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
	sps=$(sed -n 's/.*last epoch \([0-9.]*\) (steps only).*/\1/p' "$log")
	[ -n "$sps" ] || sps=$(sed -n 's/.*samples\/s *mean \([0-9.]*\).*/\1/p' "$log")
	cpu=$(awk -v n="$steps" -v bs="$5" '{ printf "%.6f", ($1 + $2) / (n * bs) }' "$tmp/$1.time")
	echo "$sps $cpu"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for cfg in "1 2 64" "2 1 128"; do
	set -- $cfg
	np=$1 th=$2 bs=$3
	name=${np}x${th}-b$bs
	: >"$tmp/A.$name"
	: >"$tmp/B.$name"
	r=1
	while [ "$r" -le "$rounds" ]; do
		if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
		for w in $order; do
			if [ "$w" = A ]; then dir=$a; else dir=$b; fi
			res=$(one "$w-$name-$r" "$dir" "$np" "$th" "$bs")
			echo "$res" >>"$tmp/$w.$name"
			echo "run $name round $r build $w ($dir): samples/s $(echo "$res" | cut -d' ' -f1), CPU s/sample $(echo "$res" | cut -d' ' -f2)"
		done
		r=$((r + 1))
	done
	grep -m1 "thread(s) per rank" "$tmp/A-$name-1.log" | sed 's/^/kernels A: /'
	grep -m1 "thread(s) per rank" "$tmp/B-$name-1.log" | sed 's/^/kernels B: /'
	sa=$(cut -d' ' -f1 "$tmp/A.$name" | median)
	sb=$(cut -d' ' -f1 "$tmp/B.$name" | median)
	ca=$(cut -d' ' -f2 "$tmp/A.$name" | median)
	cb=$(cut -d' ' -f2 "$tmp/B.$name" | median)
	echo "RESULT $name A_sps=$sa B_sps=$sb sps_ratio=$(awk -v x="$sb" -v y="$sa" 'BEGIN { printf "%.3f", x / y }') A_cpu_s_per_sample=$ca B_cpu_s_per_sample=$cb cpu_ratio=$(awk -v x="$cb" -v y="$ca" 'BEGIN { printf "%.3f", x / y }')"
done
