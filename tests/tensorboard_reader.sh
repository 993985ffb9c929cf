#!/bin/sh
# TensorBoard reads what dtf-train writes: train 1 rank on synthetic data
# with logging.dir set, then load train/ and eval/ with TensorBoard's own
# EventAccumulator and check tags, steps and the loss against
# metrics.jsonl; then a run resumed at step 20 after another was killed
# past it: each step shows the right run's point.  The interpreter is $DTF_PYTHON, else the one of the
# checkers' virtual environment that tests/setup-venv.sh makes (.venv in
# the source tree), else python3; exit 77 (skip) when it cannot import
# tensorboard (run tests/setup-venv.sh, as the README's first command and
# CI do).
set -eu
venv_py=${DTF_SOURCE_ROOT:-.}/.venv/bin/python
[ -x "$venv_py" ] || venv_py=python3
py=${DTF_PYTHON:-$venv_py}
"$py" -c "import tensorboard" 2>/dev/null || { echo "tensorboard not installed (tests/setup-venv.sh): skip"; exit 77; }
build=${DTF_BUILD_ROOT:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtf-tb-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$build/dtf-records" synth --out "$tmp/train" --count 320 --shards 1 --shape 8,8,1 --classes 4 --seed 1 >/dev/null
"$build/dtf-records" synth --out "$tmp/test" --count 100 --shards 1 --shape 8,8,1 --classes 4 --seed 2 >/dev/null
cat >"$tmp/job.yaml" <<JOB
name: tb-reader
data:
  train: {files: "$tmp/train-*.tfrecord"}
  eval: {files: "$tmp/test-*.tfrecord"}
  features:
    image: {type: bytes, decode: uint8, shape: [8, 8, 1], scale: 0.00392156862745098}
    label: {type: int64, shape: []}
model:
  input: image
  layers:
    - flatten
    - {dense: {units: 4, name: logits}}
  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}
  metrics: [accuracy]
train: {batch_size: 16, epochs: 2, optimizer: {sgd: {learning_rate: 0.1}}}
logging: {every_steps: 5, dir: "$tmp/run"}
JOB
mpirun -np 1 "$build/dtf-train" -q --threads 1 "$tmp/job.yaml"
# A run to step 20 (its checkpoint), one resumed from it and killed at
# step 27, one resumed from it again to step 40: TensorBoard keeps the
# first run's points up to step 20 (its eval at the end of epoch 1 too),
# drops the killed run's and shows the last run's from step 21 on.
run() {
	mpirun -np 1 "$build/dtf-train" -q --threads 1 \
		--set logging.dir="$tmp/res" --set checkpoint.dir="$tmp/ck" \
		--set checkpoint.every_steps=20 "$@" "$tmp/job.yaml"
}
run --set train.max_steps=20
DTF_FAULT=kill:step=27 run --resume >/dev/null 2>&1 && { echo "the fault did not kill"; exit 1; }
run --resume
"$py" - "$tmp/run" "$tmp/res" <<'PY'
import json, math, sys
from tensorboard.backend.event_processing import event_accumulator as ea
def load(run, sub):
    acc = ea.EventAccumulator(f"{run}/{sub}", size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc
run = sys.argv[1]
train, ev = load(run, "train"), load(run, "eval")
want = {"loss", "accuracy", "learning_rate", "samples_per_second",
        "step_time_ms/data_wait", "step_time_ms/forward",
        "step_time_ms/backward", "step_time_ms/comm", "step_time_ms/optimizer"}
tags = set(train.Tags()["scalars"])
assert tags == want, tags
# 320 / 16 = 20 steps per epoch, 2 epochs, logged every 5 steps
for t in want:
    steps = [e.step for e in train.Scalars(t)]
    assert steps == list(range(5, 41, 5)), (t, steps)
assert set(ev.Tags()["scalars"]) == {"loss", "accuracy"}, ev.Tags()
assert [e.step for e in ev.Scalars("loss")] == [20, 40]
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
by_step = {l["step"]: l for l in lines if l["kind"] == "train"}
for e in train.Scalars("loss"):
    assert math.isclose(e.value, by_step[e.step]["loss"], rel_tol=1e-5), e
for e in train.Scalars("learning_rate"):
    assert math.isclose(e.value, 0.1, rel_tol=1e-6), e
print("tensorboard", __import__("tensorboard").__version__, "read",
      len(want), "train tags x 8 steps and 2 eval tags x 2 steps")
# the resumed runs
run = sys.argv[2]
train, ev = load(run, "train"), load(run, "eval")
steps = [e.step for e in train.Scalars("loss")]
assert steps == list(range(5, 41, 5)), steps
assert [e.step for e in ev.Scalars("loss")] == [20, 40], ev.Scalars("loss")
# metrics.jsonl holds the three runs one after the other
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
starts = [i for i, l in enumerate(lines) if l["kind"] == "start"] + [len(lines)]
assert len(starts) == 4, starts
runs = [{l["step"]: l for l in lines[a:b] if l["kind"] == "train"}
        for a, b in zip(starts, starts[1:])]
assert sorted(runs[0]) == [5, 10, 15, 20] and 25 in runs[1], runs
for e in train.Scalars("loss"):
    want = runs[0 if e.step <= 20 else 2][e.step]["loss"]
    assert math.isclose(e.value, want, rel_tol=1e-5), (e, want)
first_eval = [l for l in lines[:starts[1]] if l["kind"] == "eval"][0]
assert math.isclose(ev.Scalars("loss")[0].value, first_eval["loss"], rel_tol=1e-5)
print("tensorboard after a resume at step 20: steps", steps,
      "(the first run's to 20, the last run's after; the killed run's dropped)")
PY
