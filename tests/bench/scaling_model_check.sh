#!/bin/sh
# The scaling model's own check (tests/bench/scaling_model.py
# --self-check): alpha and beta fitted to synthetic ring-allreduce times
# come back, the 3-rank prediction holds, the bucket schedule agrees with
# its closed forms, the GPT parameter count with its formula.  The
# interpreter is $DTF_PYTHON, else tests/setup-venv.sh's (.venv in the
# source tree), else python3; exit 77 (skip) when it cannot import numpy.
set -eu
src=${DTF_SOURCE_ROOT:-.}
venv_py=$src/.venv/bin/python
[ -x "$venv_py" ] || venv_py=python3
py=${DTF_PYTHON:-$venv_py}
"$py" -c "import numpy" 2>/dev/null || { echo "numpy not installed (tests/setup-venv.sh): skip"; exit 77; }
exec "$py" "$src/tests/bench/scaling_model.py" --self-check
