#!/bin/sh
# overlap.sh - exposed communication per step, overlap on and off, for the
# Fashion-MNIST CNN (graphs/fashion_mnist_cnn.yaml) at global batch 128 on
# 2 ranks, side by side in one run.
#
#   tests/bench/overlap.sh [BUILD_DIR] [STEPS]     (defaults: build, 40)
#
# Each configuration trains STEPS steps; the breakdown printed is the
# trainer's own (ms/step over the second half of the steps, after warm-up):
# data wait, forward, backward (with overlap: including the MPI_Test calls
# that progress the buckets), exposed communication (status agreement, the
# wait for the buckets not hidden behind backward, the statistics/verdict
# allreduce, unpacking and the NaN check) and optimizer.  Prints the share
# of exposed communication in the step time.
set -eu
build=${1:-build}
steps=${2:-40}
half=$((steps / 2))
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
datasets/prepare.sh "$build" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
	label=$1
	shift
	line=$(mpirun -np 2 "$build/dtf-train" --set train.batch_size=128 \
		--set train.max_steps="$steps" --set logging.every_steps="$half" \
		"$@" graphs/fashion_mnist_cnn.yaml 2>&1 |
		grep "step $steps/$steps")
	echo "$line" | sed -n 's/.*(ms\/step: data \([0-9.]*\) fwd \([0-9.]*\) bwd \([0-9.]*\) comm \([0-9.]*\) opt \([0-9.]*\)).*/\1 \2 \3 \4 \5/p' |
	while read -r d f b c o; do
		awk -v l="$label" -v d="$d" -v f="$f" -v b="$b" -v c="$c" -v o="$o" 'BEGIN {
			t = d + f + b + c + o
			printf "%-28s data %6.1f  fwd %6.1f  bwd %6.1f  exposed comm %6.1f  opt %5.1f  step %6.1f ms  comm share %4.1f%%\n", l, d, f, b, c, o, t, 100 * c / t }'
	done
}
echo "# Fashion-MNIST CNN, global batch 128, 2 ranks, ms per step (steps $((half + 1))-$steps)"
# bucket_mb 25 is the default; with overlap on the cap in force is a quarter
# of the gradients (3.27 MB here), so those two rows should agree
run "overlap off, bucket 25 MB" --set strategy.communication.overlap=false
run "overlap on,  default" --set strategy.communication.overlap=true
run "overlap off, bucket 4 MB" --set strategy.communication.overlap=false --set strategy.communication.bucket_mb=4
run "overlap on,  bucket 4 MB" --set strategy.communication.overlap=true --set strategy.communication.bucket_mb=4
