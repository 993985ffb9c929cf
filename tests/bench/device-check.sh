#!/bin/sh
# device-check.sh - the GPU acceptance check in one prepared script.
#
#   tests/bench/device-check.sh [BUILD_DIR]     (default build-cuda)
#
# 1. builds with -Dcuda=enabled (release) in BUILD_DIR;
# 2. runs the CUDA and device test programs (every CUDA op against the CPU
#    kernels, 20 training steps GPU vs CPU, 2 ranks sharing the GPU);
# 3. trains the Fashion-MNIST CNN (graphs/fashion_mnist_cnn.yaml) on one
#    GPU at batch 512 for STEPS steps (default 400), in fp32 and in tf32,
#    and prints samples/s: the steady state (the last logging window of
#    100 steps, after cuDNN's first-call set-up) and the whole run;
# 4. prints the CPU/GPU agreement: AGREE_STEPS (default 20) steps at batch
#    512 from the same start on the CPU and on the GPU (fp32), then the
#    largest parameter difference, relative to max(|cpu|, 1e-2).
# Data: datasets/prepare.sh (Debian's dataset-fashion-mnist); when that
# package is missing, synthetic 28x28x1 records with 10 classes of the same
# size (the speed is the same; the accuracy means nothing) -- said in the
# output.  Every phase has a time limit; the whole script stays under
# 8 minutes on a 16-core machine with one H100/H200.
#
# Exit status: 0 everything passed; 1 a build, test or training failure;
# 77 no usable GPU (the build and the tests' skip path ran, and the script
# says why), so a CPU-only machine reports SKIP rather than success.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here" || exit 1
build=${1:-build-cuda}
steps=${STEPS:-400}
agree_steps=${AGREE_STEPS:-20}
t0=$(date +%s)
say() { printf 'device-check: %s\n' "$*"; }
elapsed() { echo $(( $(date +%s) - t0 )); }
fail() { say "FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# ---- 1. build ------------------------------------------------------------
if [ ! -f "$build/build.ninja" ]; then
	setup_log=${TMPDIR:-/tmp}/device-check-setup.$$.log
	timeout 240 meson setup "$build" -Dcuda=enabled -Dbuildtype=release \
		>"$setup_log" 2>&1 || { cat "$setup_log"; rm -f "$setup_log"; fail "meson setup -Dcuda=enabled"; }
	rm -f "$setup_log"
fi
timeout 300 ninja -C "$build" >/dev/null || fail "ninja -C $build"
grep -q 'DTF_HAVE_CUDA 1' "$build/dtf_config.h" || fail "$build is not a CUDA build"
say "built $build with CUDA ($(elapsed) s)"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
		sed 's/^/device-check: gpu: /'
fi

# ---- 2. tests ------------------------------------------------------------
timeout 300 meson test -C "$build" --print-errorlogs cuda device >"$build/device-check-tests.log" 2>&1
trc=$?
grep -E '^ *[0-9]+/[0-9]+ ' "$build/device-check-tests.log" | sed 's/^/device-check: test /'
if grep -q 'SKIP: no CUDA device' "$build/meson-logs/testlog.txt"; then
	say "$(grep -o 'SKIP: no CUDA device.*' "$build/meson-logs/testlog.txt" | head -1 | sed 's/\\n.*//; s/".*//')"
	[ $trc -eq 0 ] || fail "tests (see $build/device-check-tests.log)"
	say "no GPU on this machine: the CUDA build and the skip path work; nothing was run on a GPU (exit 77)"
	exit 77
fi
[ $trc -eq 0 ] || { cat "$build/device-check-tests.log"; fail "CUDA tests"; }
grep -h -E 'GPU|after 20 steps|device auto' "$build/meson-logs/testlog.txt" | grep -v '^command' | sed 's/\\n/\n/g' | grep -E 'after 20 steps|accuracy|device auto|NVIDIA' | sed 's/^ */device-check: /' | head -8
say "CUDA tests passed ($(elapsed) s)"

# ---- 3. data -------------------------------------------------------------
data=datasets/fashion-mnist
if timeout 120 datasets/prepare.sh "$build" >/dev/null 2>&1; then
	say "data: Fashion-MNIST TFRecords ($data)"
else
	data=$build/synth-fmnist
	mkdir -p "$data"
	[ -f "$data/train-00000-of-00004.tfrecord" ] ||
		timeout 120 "$build/dtf-records" synth --out "$data/train" --count 60000 --shards 4 \
			--shape 28,28,1 --classes 10 --seed 1 >/dev/null || fail "synthetic data"
	say "data: dataset-fashion-mnist is not installed; SYNTHETIC 28x28x1 records, 60000 examples (speed only)"
fi
job=$build/device-check.yaml
sed -e "s#datasets/fashion-mnist/train-\*.tfrecord#$data/train-*.tfrecord#" \
    -e '/^  eval:/d' graphs/fashion_mnist_cnn.yaml >"$job"

# ---- 4. speed ------------------------------------------------------------
for prec in fp32 tf32; do
	log=$build/device-check-$prec.log
	timeout 240 "$build/dtf-train" --set device=cuda --set precision=$prec \
		--set train.batch_size=512 --set train.epochs=100 \
		--set train.max_steps="$steps" --set logging.every_steps=100 \
		"$job" >"$log" 2>&1 || { tail -20 "$log"; fail "training on the GPU ($prec)"; }
	steady=$(grep -E '^step [0-9]+/' "$log" | tail -1 | sed -E 's/.*  ([0-9]+) samples\/s.*/\1/')
	whole=$(grep -E '^done:' "$log" | sed -E 's/.*, ([0-9]+) samples\/s.*/\1/')
	loss=$(grep -E '^step [0-9]+/' "$log" | tail -1 | sed -E 's/.*loss ([0-9.]+).*/\1/')
	say "$prec: $steps steps at batch 512: $steady samples/s steady state (last 100 steps), $whole samples/s whole run, loss $loss"
	grep -E '^device:' "$log" | sed 's/^/device-check:   /'
done
say "target: >= 100000 samples/s on one H200 at batch 512"

# ---- 5. CPU/GPU agreement ------------------------------------------------
for dev in cpu cuda; do
	timeout 300 "$build/dtf-train" -q --set device=$dev --set train.batch_size=512 \
		--set train.max_steps="$agree_steps" --set train.epochs=100 \
		--set data.train.shuffle_buffer=0 \
		--export-variables "$build/device-check-$dev.bin" "$job" \
		>"$build/device-check-agree-$dev.log" 2>&1 ||
		{ tail -5 "$build/device-check-agree-$dev.log"; fail "agreement run on $dev"; }
done
python3 - "$build/device-check-cpu.bin" "$build/device-check-cuda.bin" "$agree_steps" <<'PY' || fail "CPU/GPU agreement"
import array, sys
def load(p):
    b = open(p, "rb").read()
    assert b[:8] == b"DTFVARS1"
    a = array.array("f"); a.frombytes(b[16:]); return a
c, g = load(sys.argv[1]), load(sys.argv[2])
worst = max(abs(x - y) / max(abs(x), 1e-2) for x, y in zip(c, g))
l2 = (sum((x - y) ** 2 for x, y in zip(c, g)) / max(sum(x * x for x in c), 1e-30)) ** 0.5
print(f"device-check: CPU/GPU agreement after {sys.argv[3]} steps at batch 512 (fp32, Adam, dropout): "
      f"{len(c)} parameters, max relative difference {worst:.3g}, relative L2 difference {l2:.3g}")
sys.exit(0 if l2 < 1e-2 else 1)
PY
say "done in $(elapsed) s"
