#!/bin/sh
# same_bits.sh - the trained variables of every shipped job, as hashes, so
# that a change meant to keep behaviour (a refactoring) shows that it
# did, bit for bit.
#
#   tests/same_bits.sh BUILD_DIR [check|record|print] [HASH_FILE]
#
# Trains every job of graphs/ for 20 steps on 1 and 2 ranks, and the
# Fashion-MNIST CNN on every strategy and update path (multi_worker_mirrored
# over MPI and through the shared-memory window with the sharded update,
# hierarchical on 2 simulated nodes, central_storage, parameter_server,
# fp16 compression, gradient accumulation, a learning-rate schedule with
# linear scaling), and the CNN on the GPU path on the mock device (1 and 2
# ranks, fp16, accumulation: checked against the CPU's recorded lines),
# all on the same synthetic 28x28x1 records (the character-level GPT job
# shakespeare_char_gpt on windows of 65 ids cut from a repeated line of
# text; its 6-layer sibling, 10.8 M parameters at batch 64 x 256, is left
# out: 20 steps take too long for the suite), and hashes
# (SHA-256) the variables each run exports.  `check` (the default)
# compares them with HASH_FILE (default tests/fixtures/same-bits.txt),
# `record` writes that file, `print` prints the lines.
#
# The runs use the reference CPU kernels and OpenBLAS's Haswell sgemm with
# one thread, which give the same bits on every x86-64 CPU with AVX2, so
# the recorded hashes hold across the fleet's machines; elsewhere (no
# AVX2, another architecture) the check exits 77.  The fast kernels are
# tested against the reference op by op (test_fast); to compare their
# bits across a change on one machine, run `print` with
# DTF_SAME_BITS_KERNELS=fast on both builds and diff the outputs.
set -u
build=${1:?usage: same_bits.sh BUILD_DIR [check|record|print] [HASH_FILE]}
build=$(cd "$build" && pwd) || exit 1
mode=${2:-check}
here=$(cd "$(dirname "$0")/.." && pwd)
file=${3:-$here/tests/fixtures/same-bits.txt}
case $mode in check|record|print) ;; *) echo "same_bits.sh: unknown mode '$mode'" >&2; exit 2;; esac

kernels=${DTF_SAME_BITS_KERNELS:-reference}
if [ "$kernels" = reference ]; then
	if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo; then
		echo "same_bits.sh: the recorded hashes are of x86-64 with AVX2: skip"
		exit 77
	fi
	export DTF_CPU_KERNELS=reference OPENBLAS_CORETYPE=Haswell
fi
export OPENBLAS_NUM_THREADS=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-same-bits-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
"$build/dtf-records" synth --out "$tmp/train" --count 2560 --shards 4 \
	--shape 28,28,1 --classes 10 --seed 5 >/dev/null || exit 1
"$build/dtf-records" synth --out "$tmp/test" --count 200 --shards 1 \
	--shape 28,28,1 --classes 10 --seed 6 >/dev/null || exit 1
# the GPT's records: windows of 65 ids of a repeated line
mkdir -p "$tmp/text"
yes "To be, or not to be, that is the question:" | head -c 40000 >"$tmp/text/text.txt"
"$build/dtf-records" convert-text --text "$tmp/text/text.txt" --out "$tmp/text" \
	--block-size 64 --shards 4 >/dev/null || exit 1

bad=0
bin=$build/dtf-train # the binary run() runs
# run NAME NP JOB [ARGS...]: one line "NAME sha256" into $tmp/hashes
run() {
	name=$1 np=$2 job=$3
	shift 3
	case $job in
	shakespeare_char_gpt*) trainf="$tmp/text/train" evalf="$tmp/text/validation" ;;
	*) trainf="$tmp/train" evalf="$tmp/test" ;;
	esac
	# each run in a directory of its own: a job's relative logging,
	# trace and checkpoint paths (runs/...) land there, not in the
	# checkout, and no run finds another's checkpoints
	mkdir -p "$tmp/$name.cwd"
	if ! (cd "$tmp/$name.cwd" && exec timeout 300 mpirun -np "$np" "$bin" --threads 1 -q \
		--set "data.train.files=$trainf-*.tfrecord" \
		--set "data.eval.files=$evalf-*.tfrecord" \
		--set train.max_steps=20 --export-variables "$tmp/$name.bin" \
		"$@" "$here/graphs/$job.yaml") >"$tmp/$name.log" 2>&1; then
		echo "same_bits.sh: $name failed:" >&2
		cat "$tmp/$name.log" >&2
		bad=$((bad + 1))
		return
	fi
	echo "$name $(sha256sum "$tmp/$name.bin" | cut -d' ' -f1)" >>"$tmp/hashes"
}

: >"$tmp/hashes"
for j in "$here"/graphs/*.yaml; do
	job=$(basename "$j" .yaml)
	[ "$job" = shakespeare_char_gpt_6l ] && continue
	run "$job-1" 1 "$job" --set strategy.type=one_device
	run "$job-2" 2 "$job"
done
cnn=fashion_mnist_cnn
run cnn-mpi-2 2 $cnn --set strategy.communication.implementation=mpi
run cnn-shm-sharded-2 2 $cnn --set strategy.communication.implementation=shared_memory
run cnn-hierarchical-2x1 2 $cnn --set strategy.communication.hierarchical=true
DTF_TEST_RANKS_PER_NODE=1 run cnn-multinode-2 2 $cnn
run cnn-central-2 2 $cnn --set strategy.type=central_storage
run cnn-ps-3 3 $cnn --set strategy.type=parameter_server
run cnn-fp16-2 2 $cnn --set strategy.communication.compression=fp16
run cnn-accumulate-2 2 $cnn --set train.accumulate_steps=2
run cnn-schedule-scaling-2 2 $cnn \
	--set 'train.schedule={cosine_decay: {warmup_steps: 5}}' \
	--set 'train.learning_rate_scaling={linear: {warmup_steps: 4}}'
# The GPU path on the mock device (tests/mock_cuda.c: the CUDA backend's
# interface on the reference kernels): its variables must be the CPU's
# recorded bits, so these are checked against their CPU twin's line
# (mock/NAME against NAME) and never recorded.
if [ "$kernels" = reference ] && [ -x "$build/tests/dtf-train-mock" ]; then
	bin=$build/tests/dtf-train-mock
	mkdir -p "$tmp/mock"
	for c in "fashion_mnist_cnn-1 1 --set strategy.type=one_device" \
		"fashion_mnist_cnn-2 2" \
		"cnn-fp16-2 2 --set strategy.communication.compression=fp16" \
		"cnn-accumulate-2 2 --set train.accumulate_steps=2"; do
		# shellcheck disable=SC2086
		set -- $c
		twin=$1 np=$2
		shift 2
		run "mock/$twin" "$np" $cnn --set device=cuda \
			--set allow_gpu_sharing=true "$@"
	done
	bin=$build/dtf-train
fi
[ "$bad" -eq 0 ] || exit 1

case $mode in
print) cat "$tmp/hashes" ;;
record)
	{
		echo "# tests/same_bits.sh record: SHA-256 of the variables after 20 steps"
		echo "# (reference kernels, OpenBLAS Haswell, 1 thread; synthetic data)"
		grep -v '^mock/' "$tmp/hashes"
	} >"$file"
	echo "recorded $(grep -vc '^mock/' "$tmp/hashes") hashes in $file"
	;;
check)
	[ -f "$file" ] || { echo "same_bits.sh: $file is missing (run record)" >&2; exit 1; }
	n=0 diff=0
	while read -r name hash; do
		n=$((n + 1))
		want=$(grep "^${name#mock/} " "$file" | cut -d' ' -f2)
		if [ "$want" = "$hash" ]; then
			echo "same  $name"
		else
			echo "DIFF  $name: ${hash} (recorded: ${want:-none})"
			diff=$((diff + 1))
		fi
	done <"$tmp/hashes"
	echo "$n runs, $diff with other variables than recorded"
	[ "$diff" -eq 0 ]
	;;
esac
