#!/bin/sh
# export_models.sh - `dtf-train export` against independent readers: every
# job of graphs/ (but the GPT jobs) and the two of tests/fixtures/export-every-op*.yaml (every
# forward op of the layers and graph forms) is trained for 3 steps on synthetic 28x28x1 records,
# exported as ONNX and safetensors, and tests/export_check.py then checks
# that onnx.checker accepts each model, that onnxruntime's logits on 1,000
# test records equal dtf-train's own forward on them (tests/export_forward,
# the CPU backend's reference kernels, and `dtf-train predict --outputs
# logits` on the same records) within 1e-5, and that the
# safetensors file holds the checkpoint's variables bit for bit.  Then: a
# checkpoint made on 2 ranks with the sharded update exports the same
# bytes as one made on 1 rank holding the same variables (resumed from it
# for one step at learning rate 0); --checkpoint takes a file or a
# directory (its newest), and defaults to checkpoint.dir; a checkpoint of
# another model is exit 4; a kill half way through writing leaves no file
# under the output name and an earlier file there whole.
#
# The interpreter is $DTF_PYTHON, else the checkers' virtual environment
# that tests/setup-venv.sh makes (.venv in the source tree, as the README's
# first command does), else python3; exit 77 (skip) when it cannot import
# onnx, onnxruntime, safetensors and numpy.
set -u
src=${DTF_SOURCE_ROOT:?}
build=${DTF_BUILD_ROOT:?}
venv_py=$src/.venv/bin/python
[ -x "$venv_py" ] || venv_py=python3
py=${DTF_PYTHON:-$venv_py}
"$py" -c "import onnx, onnxruntime, safetensors, numpy" 2>/dev/null ||
	{ echo "onnx, onnxruntime, safetensors or numpy not installed (tests/setup-venv.sh): skip"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-export-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1 # the jobs' logging.dir is relative
fail() { echo "export_models.sh: $*" >&2; exit 1; }

"$build/dtf-records" synth --out "$tmp/train" --count 640 --shards 1 \
	--shape 28,28,1 --classes 10 --seed 5 >/dev/null || exit 1
"$build/dtf-records" synth --out "$tmp/test" --count 1000 --shards 1 \
	--shape 28,28,1 --classes 10 --seed 6 >/dev/null || exit 1
data="data.train.files=$tmp/train-*.tfrecord"
eval_data="data.eval.files=$tmp/test-*.tfrecord"

# the job file of JOB
yaml() {
	case $1 in
	export-every-op*) echo "$src/tests/fixtures/$1.yaml" ;;
	*) echo "$src/graphs/$1.yaml" ;;
	esac
}
# train NP JOB CKPT_DIR [ARGS...]: 3 steps
train() {
	np=$1 job=$2 dir=$3
	shift 3
	timeout 300 mpirun -np "$np" "$build/dtf-train" --threads 1 -q \
		--set "$data" --set "$eval_data" --set train.max_steps=3 \
		--set "checkpoint.dir=$dir" "$@" "$(yaml "$job")" \
		>"$tmp/train.log" 2>&1 || { cat "$tmp/train.log" >&2; fail "training $job on $np rank(s) failed"; }
}
# export JOB OUT [ARGS...]
export_() {
	job=$1 out=$2
	shift 2
	"$build/dtf-train" export -q "$(yaml "$job")" --output "$out" "$@" ||
		fail "export of $job to $out failed"
}

jobs=
for j in "$src"/graphs/*.yaml "$src"/tests/fixtures/export-every-op*.yaml; do
	job=$(basename "$j" .yaml)
	# the GPT jobs read token windows, not these images (their ops are
	# in tests/fixtures/export-every-op-attention.yaml)
	case $job in shakespeare_char_gpt*) continue ;; esac
	mkdir -p "$tmp/$job"
	train 1 "$job" "$tmp/$job/ckpt" --set strategy.type=one_device
	cp "$tmp/$job/ckpt/ckpt-3.dtf" "$tmp/$job/ckpt.dtf"
	export_ "$job" "$tmp/$job/model.onnx" --checkpoint "$tmp/$job/ckpt"
	export_ "$job" "$tmp/$job/model.safetensors" --format safetensors \
		--checkpoint "$tmp/$job/ckpt/ckpt-3.dtf"
	"$build/tests/export_forward" "$(yaml "$job")" "$tmp/$job/ckpt" \
		1000 "$tmp/$job" "$eval_data" >/dev/null || fail "export_forward $job failed"
	# the same logits through the user's path: predict --outputs logits
	DTF_CPU_KERNELS=reference "$build/dtf-train" predict -q -t 1 "$(yaml "$job")" \
		--checkpoint "$tmp/$job/ckpt" --data "$tmp/test-*.tfrecord" \
		--outputs logits --output "$tmp/$job/predict.csv" ||
		fail "predict --outputs logits of $job failed"
	jobs="$jobs $job"
done
# shellcheck disable=SC2086
"$py" "$src/tests/export_check.py" models "$tmp" $jobs || fail "the exported models differ (above)"

# 2 ranks, sharded update, against 1 rank with the same variables
cnn=fashion_mnist_cnn
train 2 $cnn "$tmp/two" --set strategy.communication.implementation=shared_memory --verbose
grep -q "update sharded" "$tmp/train.log" || fail "the 2-rank run did not shard the update"
cp -r "$tmp/two" "$tmp/one"
rm -f "$tmp/one/checkpoint.lock"
train 1 $cnn "$tmp/one" --resume --set train.max_steps=4 \
	--set 'train.schedule={piecewise_constant: {boundaries: [2], values: [0.001, 0.0]}}'
[ "$("$py" "$src/tests/export_check.py" header "$tmp/two/ckpt-3.dtf")" = "2 3" ] || fail "two/ckpt-3.dtf is not of 2 ranks at step 3"
[ "$("$py" "$src/tests/export_check.py" header "$tmp/one/ckpt-4.dtf")" = "1 4" ] || fail "one/ckpt-4.dtf is not of 1 rank at step 4"
cmp -s "$tmp/two/ckpt-3.dtf" "$tmp/one/ckpt-4.dtf" && fail "the two checkpoints are the same file"
for f in onnx safetensors; do
	export_ $cnn "$tmp/two.$f" --format $f --checkpoint "$tmp/two/ckpt-3.dtf"
	export_ $cnn "$tmp/one.$f" --format $f --checkpoint "$tmp/one/ckpt-4.dtf"
	cmp "$tmp/two.$f" "$tmp/one.$f" || fail "$f: 2 ranks (sharded) and 1 rank export other bytes"
	cmp -s "$tmp/two.$f" "$tmp/$cnn/model.$f" && fail "$f: the 2-rank export equals the 1-rank one of other variables"
done
echo "2 ranks (sharded update) and 1 rank: the same ONNX and safetensors bytes"

# --checkpoint: a directory is its newest file; none given: checkpoint.dir
mlp=mlp
train 1 $mlp "$tmp/steps" --set checkpoint.every_steps=2 --set checkpoint.keep=5
[ -f "$tmp/steps/ckpt-2.dtf" ] && [ -f "$tmp/steps/ckpt-3.dtf" ] || fail "expected ckpt-2 and ckpt-3"
export_ $mlp "$tmp/dir.onnx" --checkpoint "$tmp/steps"
export_ $mlp "$tmp/s3.onnx" --checkpoint "$tmp/steps/ckpt-3.dtf"
export_ $mlp "$tmp/s2.onnx" --checkpoint "$tmp/steps/ckpt-2.dtf"
export_ $mlp "$tmp/default.onnx" --set "checkpoint.dir=$tmp/steps"
cmp "$tmp/dir.onnx" "$tmp/s3.onnx" || fail "--checkpoint DIR is not its newest checkpoint"
cmp "$tmp/default.onnx" "$tmp/s3.onnx" || fail "without --checkpoint: not checkpoint.dir's newest"
cmp -s "$tmp/s2.onnx" "$tmp/s3.onnx" && fail "steps 2 and 3 export the same bytes"
# a directory's newest that verifies, as evaluate reads it: without the
# index file, and past a corrupt newest (a warning naming it)
cp -r "$tmp/steps" "$tmp/noindex"
rm -f "$tmp/noindex/checkpoint" "$tmp/noindex/checkpoint.lock"
export_ $mlp "$tmp/noindex.onnx" --checkpoint "$tmp/noindex"
cmp "$tmp/noindex.onnx" "$tmp/s3.onnx" || fail "a directory without its index: not its newest checkpoint"
printf 'XXXX' | dd of="$tmp/noindex/ckpt-3.dtf" bs=1 seek=200 conv=notrunc 2>/dev/null
"$build/dtf-train" export "$(yaml $mlp)" --output "$tmp/fallback.onnx" \
	--checkpoint "$tmp/noindex" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "export past a corrupt newest failed"; }
grep -q "ckpt-3.dtf.*trying the previous checkpoint" "$tmp/err" || { cat "$tmp/err" >&2; fail "the corrupt newest was not named"; }
cmp "$tmp/fallback.onnx" "$tmp/s2.onnx" || fail "past a corrupt newest: not the previous checkpoint"

# errors: a checkpoint of another model (4), usage (2)
"$build/dtf-train" export -q "$src/graphs/$mlp.yaml" --checkpoint "$tmp/$cnn/ckpt" \
	--output "$tmp/bad.onnx" 2>"$tmp/err"
rc=$?
[ $rc -eq 4 ] && grep -q "variable 'dense_1/kernel'" "$tmp/err" && [ ! -e "$tmp/bad.onnx" ] ||
	{ cat "$tmp/err" >&2; fail "another model's checkpoint: exit $rc (expected 4)"; }
"$build/dtf-train" export "$src/graphs/$mlp.yaml" --format tflite --output "$tmp/x" 2>/dev/null
[ $? -eq 2 ] || fail "--format tflite: expected exit 2"
"$build/dtf-train" export "$src/graphs/$mlp.yaml" 2>/dev/null
[ $? -eq 2 ] || fail "no --output: expected exit 2"

# a kill half way through the write
DTF_FAULT=kill-in-export-write "$build/dtf-train" export -q "$src/graphs/$cnn.yaml" \
	--checkpoint "$tmp/$cnn/ckpt" --output "$tmp/killed.onnx" 2>/dev/null
rc=$?
[ $rc -eq 137 ] || fail "kill-in-export-write: exit $rc (expected 137, SIGKILL)"
[ ! -e "$tmp/killed.onnx" ] || fail "a killed export left $tmp/killed.onnx"
[ -s "$tmp/killed.onnx.tmp" ] || fail "the killed export wrote no temporary file"
cp "$tmp/two.onnx" "$tmp/kept.onnx"
DTF_FAULT=kill-in-export-write "$build/dtf-train" export -q "$src/graphs/$cnn.yaml" \
	--checkpoint "$tmp/$cnn/ckpt" --output "$tmp/kept.onnx" 2>/dev/null
cmp "$tmp/kept.onnx" "$tmp/two.onnx" || fail "a killed export changed the earlier file"
echo "a kill during the write: no file under the output name, an earlier one kept whole"
