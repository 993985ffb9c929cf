#!/bin/sh
# obs_overhead.sh - what logging and tracing cost: the same training with
# every output on and with every output off, side by side in one run.
#
#   tests/bench/obs_overhead.sh [BUILD_DIR] [STEPS] [RANKS] [PAIRS]
#   (defaults: build 300 2 6)
#
# The job is graphs/fashion_mnist_cnn.yaml without evaluation, stopped after
# STEPS steps, on RANKS ranks of 1 BLAS thread.
#   off: no logging.dir, no trace; the console prints nothing until the
#        summary (logging.every_steps larger than the run);
#   on:  metrics.jsonl + TensorBoard events every 10 steps, console lines
#        every 10 steps, and a trace of every step on every rank (merged at
#        the end).
# PAIRS pairs of runs, back to back, alternating off-on and on-off so a
# drift in machine load hits both alike.  Throughput is the summary's
# whole-run mean samples/s, which counts everything between the first step
# and the last (outputs included).  Prints each pair and its ratio on/off,
# then the median of the pair ratios (robust to one disturbed run) and the
# ratio of the summed run times; the target is a cost of at most 2% (ratio
# >= 0.98).  Run it on a quiet machine: under other load, separate runs
# differ by more than the cost itself.  The script also prints the share of
# wall time spent between steps in the "on" runs (see the end), a measure
# taken inside each run that load skews far less.
# Needs datasets/prepare.sh first (run if missing).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
steps=${2:-300}
ranks=${3:-2}
pairs=${4:-6}
cd "$here"
[ -f datasets/fashion-mnist/train-00000-of-00004.tfrecord ] ||
	datasets/prepare.sh "$build" >/dev/null
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-obs-bench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
grep -v '^  eval:' graphs/fashion_mnist_cnn.yaml >"$tmp/on.yaml"
grep -v '^  dir:\|^  trace' "$tmp/on.yaml" >"$tmp/off.yaml"

one() { # $1 = on|off, $2 = run index; prints samples/s
	if [ "$1" = on ]; then
		set -- "$1" "$2" --set logging.every_steps=10 \
			--set "logging.dir=$tmp/on$2" \
			--set "logging.trace=$tmp/on$2/trace.json" \
			--set "logging.trace_steps=[1, $steps]"
	else
		set -- "$1" "$2" --set "logging.every_steps=$((steps + 1))"
	fi
	job=$tmp/$1.yaml
	shift 2
	mpirun -np "$ranks" "$build/dtf-train" --threads 1 \
		--set "train.max_steps=$steps" "$@" "$job" \
		>/dev/null 2>"$tmp/log" || true
	sed -n 's/^ *samples\/s *mean \([0-9.]*\).*/\1/p' "$tmp/log"
}

echo "obs overhead: fashion_mnist_cnn, $steps steps, $ranks ranks, global batch 64"
sum_on=0 sum_off=0 i=0 n=0 ratios=
while [ $i -lt "$pairs" ]; do
	if [ $((i % 2)) = 0 ]; then order="off on"; else order="on off"; fi
	for mode in $order; do
		n=$((n + 1))
		r=$(one $mode "$n")
		[ -n "$r" ] || { echo "obs_overhead.sh: run $n ($mode) failed:" >&2; cat "$tmp/log" >&2; exit 1; }
		eval "r_$mode=$r"
		# summed seconds per sample, so the ratio is of total times
		if [ $mode = on ]; then
			sum_on=$(echo "$sum_on + 1 / $r" | bc -l)
		else
			sum_off=$(echo "$sum_off + 1 / $r" | bc -l)
		fi
	done
	pr=$(echo "$r_on / $r_off" | bc -l)
	ratios="$ratios $pr"
	printf '  pair %d (%s): off %s, on %s samples/s, on/off %.4f\n' \
		$((i + 1)) "$(echo $order | tr ' ' -)" "$r_off" "$r_on" "$pr"
	i=$((i + 1))
done
median=$(printf '%s\n' $ratios | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
ratio=$(echo "$sum_off / $sum_on" | bc -l)
printf 'throughput on/off: median of pairs %.4f (cost %.2f%%), summed times %.4f (cost %.2f%%); target: cost <= 2%%\n' \
	"$median" "$(echo "(1 - $median) * 100" | bc -l)" \
	"$ratio" "$(echo "(1 - $ratio) * 100" | bc -l)"
# The same cost measured inside the "on" runs, which a busy machine skews
# far less than the ratio of separate runs: between two metrics lines the
# chief's clock advances by the steps' own durations (step_time_ms total,
# t_end - t_begin of each step) plus whatever runs between steps, which is
# the outputs' work (console line, metrics, events, trace flush) and the
# loop's bookkeeping.
python3 - "$tmp"/on*/metrics.jsonl <<'PY'
import json, sys
wall = inside = 0.0
for path in sys.argv[1:]:
    lines = [json.loads(l) for l in open(path) if '"kind":"train"' in l]
    for a, b in zip(lines, lines[1:]):
        wall += b["elapsed_s"] - a["elapsed_s"]
        inside += b["steps"] * b["step_time_ms"]["total"] / 1e3
print(f"time between steps in the 'on' runs: {100 * (wall - inside) / wall:.3f}% "
      f"of {wall:.1f} s (the outputs' cost, measured in-run)")
PY
