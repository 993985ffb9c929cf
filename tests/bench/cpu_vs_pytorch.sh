#!/bin/sh
# cpu_vs_pytorch.sh - dtf-train beside PyTorch on the Fashion-MNIST CNN, CPU.
#
#   tests/bench/cpu_vs_pytorch.sh [BUILD_DIR]        (default: build)
#
# In one run, on the same machine, model (graphs/fashion_mnist_cnn.yaml;
# tests/bench/pytorch_cnn.py is the same model in PyTorch), data, global
# batch, optimizer (Adam 1e-3) and number of steps:
#   A. 1 process x 2 threads, batch 64
#   B. 2 ranks x 1 thread (mpirun -np 2; PyTorch DDP over gloo), global batch 64
#   C. the same at global batch 128
# For each: steady-state samples/s of both (the first WARMUP steps are not
# timed) over ROUNDS alternating runs (dtf-train, PyTorch, dtf-train, ...,
# so that a slow spell of a shared machine falls on both), the median and
# the best of each and the ratios of medians (the RESULT line's ratio) and
# of bests, the peak resident memory of every process (ru_maxrss,
# by tests/bench/maxrss.py), and dtf-train's achieved GFLOP/s (82.05 MFLOP
# per example per training step, computed below from the layer shapes) as a
# fraction of the sgemm ceiling measured in the same run (build/tests/bench/
# bench_kernels sgemm: OpenBLAS sgemm 2048^3 on 1 and 2 threads; the ceiling
# of 2 ranks x 1 thread is twice the 1-thread rate).  The FLOP count is that
# of direct convolution; where dtf-train's Winograd kernels run (conv2, on
# AVX-512 CPUs) they do fewer multiplications, so this is an effective
# rate, and can approach or pass the sgemm ceiling.
#   D. time to accuracy: wall time of `mpirun -np 2` from launch until the
#      test accuracy first reaches TARGET (0.90), evaluating every half epoch
#      (469 steps at global batch 64), both tools on that same schedule.
#
# Environment: STEPS (default 300) and WARMUP (default 60) steps per
# throughput run; ROUNDS (default 3) runs of each tool per configuration; TTA=0 skips D, THROUGHPUT=0 skips A-C; TARGET (0.90); MAX_EPOCHS for D (10);
# MPIRUN_OPTS, given to every mpirun of both tools (default "--bind-to
# none": with Open MPI's default core binding, any other process on one
# core stalls that rank and, through the allreduce, the other; unbound, the
# kernel moves it; set MPIRUN_OPTS= for Open MPI's defaults);
# PYTHON, an interpreter that imports torch (default: the first of python3,
# /usr/bin/python3 that does).  Needs a quiet machine: other load distorts
# both tools.  Output lines are meant to be pasted as they are.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-60}
ROUNDS=${ROUNDS:-3}
TTA=${TTA:-1}
THROUGHPUT=${THROUGHPUT:-1}
TARGET=${TARGET:-0.90}
MAX_EPOCHS=${MAX_EPOCHS:-10}
MPIRUN_OPTS=${MPIRUN_OPTS---bind-to none}

die() { echo "cpu_vs_pytorch.sh: $*" >&2; exit 1; }

[ -x "$build/dtf-train" ] || die "$build/dtf-train not found; build first (meson setup build && ninja -C build)"
[ -x "$build/tests/bench/bench_kernels" ] || die "$build/tests/bench/bench_kernels not found; build with -Dtests=true"
py=${PYTHON:-}
if [ -z "$py" ]; then
	for p in python3 /usr/bin/python3; do
		if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
	done
fi
[ -n "$py" ] || die "no python3 that imports torch; install python3-torch or set PYTHON"
command -v mpirun >/dev/null || die "mpirun not found (Open MPI)"
if [ "$(id -u)" = 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Neither tool may be told a thread count by the environment.
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS MKL_NUM_THREADS DTF_CPU_KERNELS

cd "$root"
"$root/datasets/prepare.sh" "$build" >/dev/null || die "datasets/prepare.sh failed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# OpenBLAS 0.3.21 (Debian) falls back to its SSE3 "Prescott" kernels on CPUs
# it does not know (e.g. Sapphire Rapids); dtf-train corrects that itself
# (dtf-train(1), OPENBLAS_CORETYPE).  PyTorch's dense layers use the same
# OpenBLAS, so give both tools the corrected kernels.
core=$("$build/tests/bench/bench_kernels" sgemm -s 64 -r 1 | sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\)).*/\1/p')
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$core" = Prescott ]; then
	if grep -qw avx512f /proc/cpuinfo; then OPENBLAS_CORETYPE=SkylakeX
	elif grep -qw avx2 /proc/cpuinfo; then OPENBLAS_CORETYPE=Haswell; fi
	if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
		export OPENBLAS_CORETYPE
		echo "note: OpenBLAS chose Prescott kernels on this CPU; OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE for both tools"
	fi
fi

# The job without evaluation, data paths absolute.
sed -e '/^  eval:/d' -e "s#\"datasets/#\"$root/datasets/#" \
	graphs/fashion_mnist_cnn.yaml >"$tmp/job.yaml"

# FLOP per example per training step, from the layer shapes: forward convs
# and dense layers, backward twice that except conv1's input gradient.
flop=$(awk 'BEGIN {
	c1 = 2*28*28*5*5*1*32; c2 = 2*14*14*5*5*32*64; d1 = 2*3136*1024; d2 = 2*1024*10
	printf "%d", (c1 + c2 + d1 + d2) + (c1 + 2*c2 + 2*d1 + 2*d2) }')

echo "== machine: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
echo "== mpirun options: ${MPIRUN_OPTS:-(Open MPI defaults)}"
echo "== dtf-train $("$build/dtf-train" --version | sed 's/dtf-train //'), PyTorch $("$py" -c 'import torch; print(torch.__version__)'), $STEPS steps, first $WARMUP not timed"
"$build/tests/bench/bench_kernels" sgemm -t 1 -s 2048 -r 5 | tee "$tmp/sgemm1"
"$build/tests/bench/bench_kernels" sgemm -t 2 -s 2048 -r 5 | tee "$tmp/sgemm2"
g1=$(sed -n 's/.*: \([0-9.]*\) GFLOP.*/\1/p' "$tmp/sgemm1")
g2=$(sed -n 's/.*: \([0-9.]*\) GFLOP.*/\1/p' "$tmp/sgemm2")
echo "model: $(awk -v f="$flop" 'BEGIN { printf "%.2f", f / 1e6 }') MFLOP per example per training step"

# dtf-train's steady rate: its log prints samples/s per window of WARMUP
# steps; drop the first window, average the rest (equal windows: total
# samples over total time = harmonic mean of the rates).
dtf_rate() {
	awk '/samples\/s.*\(ms\/step/ {
		for (i = 1; i <= NF; i++) if ($(i + 1) == "samples/s") r = $i
		n++; if (n > 1) { inv += 1 / r; m++ } }
		END { if (m) printf "%.1f", m / inv; else print "nan" }' "$1"
}
rss_list() { sed -n '/^MAXRSS/s/.*peak_mb=\([0-9.]*\).*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
rss_max() { sed -n '/^MAXRSS/s/.*peak_mb=\([0-9.]*\).*/\1/p' "$1" | sort -n | tail -1; }

# median and best of a list of numbers
med() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | tail -1; }

# run NAME RANKS THREADS BATCH CEILING
run() {
	name=$1 ranks=$2 threads=$3 batch=$4 ceil=$5
	echo
	echo "== $name: $ranks process(es) x $threads thread(s), global batch $batch, $ROUNDS rounds"
	sets="--set train.batch_size=$batch --set train.max_steps=$STEPS --set train.epochs=100 --set logging.every_steps=$WARMUP"
	launch=
	[ "$ranks" = 1 ] || launch="mpirun $MPIRUN_OPTS -np $ranks"
	ds= ps= : >"$tmp/d.all"; : >"$tmp/p.all"
	r=0
	while [ "$r" -lt "$ROUNDS" ]; do
		r=$((r + 1))
		$launch "$py" "$here/maxrss.py" "$build/dtf-train" --threads "$threads" $sets "$tmp/job.yaml" \
			>"$tmp/d.log" 2>&1 || { cat "$tmp/d.log"; die "dtf-train failed"; }
		$launch "$py" "$here/maxrss.py" "$py" "$here/pytorch_cnn.py" --threads "$threads" --batch "$batch" \
			--steps "$STEPS" --warmup "$WARMUP" >"$tmp/p.log" 2>&1 || { cat "$tmp/p.log"; die "pytorch_cnn.py failed"; }
		d=$(dtf_rate "$tmp/d.log")
		p=$(sed -n 's/^RESULT samples_per_s=\([0-9.]*\).*/\1/p' "$tmp/p.log")
		printf "  round %d: dtf-train %.0f, PyTorch %.0f samples/s\n" "$r" "$d" "$p"
		ds="$ds $d" ps="$ps $p"
		cat "$tmp/d.log" >>"$tmp/d.all"; cat "$tmp/p.log" >>"$tmp/p.all"
	done
	grep -m1 'thread(s) per rank' "$tmp/d.all" | sed 's/^/  dtf-train: /'
	d=$(med "$ds") p=$(med "$ps") db=$(best "$ds") pb=$(best "$ps")
	dm=$(rss_max "$tmp/d.all") pm=$(rss_max "$tmp/p.all")
	awk -v n="$name" -v d="$d" -v p="$p" -v db="$db" -v pb="$pb" -v f="$flop" -v c="$ceil" -v dm="$dm" -v pm="$pm" \
		-v dl="$(rss_list "$tmp/d.log")" -v pl="$(rss_list "$tmp/p.log")" 'BEGIN {
		printf "  samples/s, median: dtf-train %.0f, PyTorch %.0f, ratio %.2fx; best: %.0f, %.0f, ratio %.2fx\n", d, p, d / p, db, pb, db / pb
		printf "  peak RSS per process (MB, last round): dtf-train %s, PyTorch %s; largest of all rounds dtf-train / PyTorch = %.2f\n", dl, pl, dm / pm
		printf "  dtf-train: %.1f GFLOP/s achieved (median; effective: direct-convolution FLOPs) = %.0f%% of the %.1f GFLOP/s sgemm ceiling\n", d * f / 1e9, 100 * d * f / 1e9 / c, c
		printf "RESULT %s dtf_sps=%.1f pytorch_sps=%.1f ratio=%.2f best_ratio=%.2f dtf_rss_mb=%.1f pytorch_rss_mb=%.1f rss_ratio=%.2f gflops=%.1f ceiling=%.1f\n", n, d, p, d / p, db / pb, dm, pm, dm / pm, d * f / 1e9, c }'
}

if [ "$THROUGHPUT" != 0 ]; then
	run "1x2-b64" 1 2 64 "$g2"
	run "2x1-b64" 2 1 64 "$(awk -v g="$g1" 'BEGIN { print 2 * g }')"
	run "2x1-b128" 2 1 128 "$(awk -v g="$g1" 'BEGIN { print 2 * g }')"
fi

[ "$TTA" = 0 ] && exit 0

# D. time to accuracy: launch to exit, both stopping at the first evaluation
# (every 469 steps = half an epoch at global batch 64) with accuracy >= TARGET.
echo
echo "== time to $TARGET test accuracy, mpirun -np 2, global batch 64, evaluation every 469 steps (half epoch)"
t0=$(date +%s.%N)
mpirun $MPIRUN_OPTS -np 2 "$build/dtf-train" graphs/fashion_mnist_cnn.yaml --set train.epochs="$MAX_EPOCHS" \
	--set logging.every_steps=469 --set train.eval_every_steps=469 --set train.stop_at_accuracy="$TARGET" >"$tmp/dt.log" 2>&1 ||
	{ cat "$tmp/dt.log"; die "dtf-train failed"; }
t1=$(date +%s.%N)
mpirun $MPIRUN_OPTS -np 2 "$py" "$here/pytorch_cnn.py" --threads 1 --batch 64 --epochs "$MAX_EPOCHS" \
	--eval-every 469 --stop-at "$TARGET" >"$tmp/pt.log" 2>&1 || { cat "$tmp/pt.log"; die "pytorch_cnn.py failed"; }
t2=$(date +%s.%N)
grep 'since the start' "$tmp/dt.log" | sed 's/^/  dtf-train: /'
grep '^EVAL' "$tmp/pt.log" | sed 's/^/  PyTorch:   /'
da=$(grep 'since the start' "$tmp/dt.log" | tail -1 | sed 's/.*accuracy \([0-9.]*\).*/\1/')
ds=$(grep 'since the start' "$tmp/dt.log" | tail -1 | sed 's/.*step \([0-9]*\):.*/\1/')
pa=$(grep '^EVAL' "$tmp/pt.log" | tail -1 | sed 's/.*accuracy=\([0-9.]*\).*/\1/')
ps=$(grep '^EVAL' "$tmp/pt.log" | tail -1 | sed 's/.*step=\([0-9]*\).*/\1/')
awk -v a="$t0" -v b="$t1" -v c="$t2" -v da="$da" -v pa="$pa" -v ds="$ds" -v ps="$ps" -v tg="$TARGET" 'BEGIN {
	dt = b - a; pt = c - b
	dn = (da + 0 >= tg + 0) ? "" : ", target NOT reached"
	pn = (pa + 0 >= tg + 0) ? "" : ", target NOT reached"
	printf "  dtf-train: %.1f s (step %d, accuracy %s%s)\n", dt, ds, da, dn
	printf "  PyTorch:   %.1f s (step %d, accuracy %s%s)\n", pt, ps, pa, pn
	printf "RESULT tta dtf_s=%.1f pytorch_s=%.1f ratio=%.2f dtf_acc=%s pytorch_acc=%s\n", dt, pt, dt / pt, da, pa }'
