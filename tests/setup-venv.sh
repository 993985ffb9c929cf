#!/bin/sh
# setup-venv.sh - the Python virtual environment of the test-time checkers
# (TensorBoard's own event reader; onnx's checker, onnxruntime,
# safetensors and numpy for the exported models) and of
# tests/bench/scaling_model.py (numpy; matplotlib for its plot), at
# $DTF_VENV (default .venv in the
# source tree).  Left alone when it already imports every checker; else
# made with `python3 -m venv` and filled with pip.  The tests find it
# there (tests/tensorboard_reader.sh); nothing of the tool needs
# Python.
#
#   tests/setup-venv.sh
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${DTF_VENV:-$here/.venv}
pkgs="tensorboard onnx onnxruntime safetensors numpy matplotlib"
imports="import tensorboard, onnx, onnxruntime, safetensors, numpy, matplotlib"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$imports" 2>/dev/null; then
	exit 0
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pkgs
"$venv/bin/python" -c "$imports"
