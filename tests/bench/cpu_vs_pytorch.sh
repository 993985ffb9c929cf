#!/bin/sh
# cpu_vs_pytorch.sh - dtf-train beside PyTorch and TensorFlow on the
# Fashion-MNIST CNN, CPU.
#
#   tests/bench/cpu_vs_pytorch.sh [BUILD_DIR]        (default: build)
#
# The peers, each the same model as graphs/fashion_mnist_cnn.yaml:
#   PyTorch      the current torch from PyPI (TORCH_SPEC, default
#                torch==2.15.*) and numpy, which torch does not pull in
#                and pytorch_cnn.py reads the shards with;
#                tests/bench/pytorch_cnn.py, DDP over gloo
#   TensorFlow   tensorflow-cpu from PyPI (TF_SPEC), tests/bench/tf_cnn.py:
#                Keras model.fit over a tf.data.TFRecordDataset of the same
#                TFRecord shards dtf-train reads, parsed with
#                tf.io.parse_single_example; 2 ranks =
#                MultiWorkerMirroredStrategy, 2 worker processes on
#                loopback, each writing its TF_CONFIG
#   PyTorch-deb  Debian's python3-torch (apt), pytorch_cnn.py, where the
#                system python3 (or PYTHON) imports torch; skipped if not
# The script makes the two virtual environments itself, with
# `VENV_PYTHON -m venv` and pip, under PEER_VENVS (default
# BUILD_DIR/peer-venvs; about 8 GB with torch's CUDA libraries), and reuses
# them when they import their package.  PIP_OPTS go to every pip install
# (e.g. another --index-url for a CPU-only torch).
#
# In one run, on the same machine, model, data, global batch, optimizer
# (Adam 1e-3) and number of steps, CONFIGS (default "2x1-b128 1x2-b64";
# RANKSxTHREADS-bBATCH, any of them, e.g. 2x1-b64):
#   2x1-b128  2 ranks x 1 thread (mpirun -np 2), global batch 128
#   1x2-b64   1 process x 2 threads, batch 64
# For each, ROUNDS rounds; each round runs every tool once, the first tool
# rotating from round to round, so that a slow spell of a shared machine
# falls on all of them.  Per tool, the median over the rounds of:
#   - steady-state samples/s (wall clock; the first WARMUP steps not timed)
#   - CPU seconds per sample: user + system time of all processes of the
#     run (their rusage, by tests/bench/maxrss.py around each rank) over
#     the run's STEPS x batch samples; the whole run, start-up included.
#     On a machine shared with other work this is the steadier figure:
#     other load stretches the wall clock but hardly the CPU time a run
#     itself spends.
#   - peak resident memory of every process (ru_maxrss)
# and the ratios dtf-train / peer of both (samples/s: above 1, dtf-train is
# faster; CPU s/sample: below 1, dtf-train spends less), and dtf-train's
# achieved GFLOP/s (direct-convolution FLOPs, computed below from the layer
# shapes: effective where the Winograd kernels do fewer multiplications)
# against the sgemm ceiling measured in the same run (bench_kernels
# sgemm, 2048^3; 2 ranks x 1 thread: twice the 1-thread rate) and against
# the FMA peak of the cores used (bench_kernels fma: register-only FMA
# chains at the fast kernels' ISA, times ranks x threads).
# The header names the CPU, its avx2/avx512f/fma flags, and the kernels
# dtf-train ran (its start line: fast or reference, the instruction set;
# Winograd for conv2d_2, 5x5 32->64 stride 1, wherever that set is avx512
# or avx2, the rule of dtf-train(1)).
#
# Time to accuracy (TTA=1, the default): wall time of `mpirun -np 2` from
# launch until the test accuracy first reaches TARGET (0.90), evaluating
# every half epoch (469 steps at global batch 64), every tool on that same
# schedule, with the CPU seconds of the run; seconds and epochs to TARGET.
#
# Environment: STEPS (default 300) and WARMUP (60) steps per throughput
# run; ROUNDS (3); CONFIGS; THROUGHPUT=0 skips the throughput runs, TTA=0
# the time to accuracy; TARGET (0.90); MAX_EPOCHS (10); PEERS (default
# "torch tf deb": which peers run, of those that are there) and TTA_PEERS
# (default: PEERS); DTF_CPU_ISA (avx512, avx2, generic) is given to every
# dtf-train rank (mpirun -x); with it set below the CPU's widest set,
# PEER_ISA=match (the default) caps the peers alike (ONEDNN_MAX_CPU_ISA,
# ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS; OPENBLAS_CORETYPE=Haswell
# for avx2 unless set) so that all run what a CPU with only that set
# runs, PEER_ISA=native leaves the peers at the CPU's own; MPIRUN_OPTS,
# given to every mpirun (default "--bind-to none": with Open MPI's default
# core binding, any other process on one core stalls that rank and,
# through the allreduce, the other; set MPIRUN_OPTS= for Open MPI's
# defaults); PEER_VENVS, VENV_PYTHON (python3), TORCH_SPEC, TF_SPEC,
# PIP_OPTS; PYTHON, the interpreter of Debian's torch (default: the first
# of python3, /usr/bin/python3 that imports torch outside a virtual
# environment); KEEP_LOGS=1 keeps every run's log (the path is printed).
# Output lines are meant to be pasted as they are.
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
CONFIGS=${CONFIGS:-2x1-b128 1x2-b64}
PEERS=${PEERS:-torch tf deb}
TTA_PEERS=${TTA_PEERS:-$PEERS}
PEER_ISA=${PEER_ISA:-match}
MPIRUN_OPTS=${MPIRUN_OPTS---bind-to none}
PEER_VENVS=${PEER_VENVS:-$build/peer-venvs}
VENV_PYTHON=${VENV_PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.15.*}
TF_SPEC=${TF_SPEC:-tensorflow-cpu==2.21.* tf-keras==2.21.*}
PIP_OPTS=${PIP_OPTS:-}

die() { echo "cpu_vs_pytorch.sh: $*" >&2; exit 1; }

[ -x "$build/dtf-train" ] || die "$build/dtf-train not found; build first (meson setup build && ninja -C build)"
[ -x "$build/tests/bench/bench_kernels" ] || die "$build/tests/bench/bench_kernels not found; build with -Dtests=true"
command -v mpirun >/dev/null || die "mpirun not found (Open MPI)"
if [ "$(id -u)" = 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# No tool may be told a thread count by the environment.
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS MKL_NUM_THREADS DTF_CPU_KERNELS

cd "$root"
"$root/datasets/prepare.sh" "$build" >/dev/null || die "datasets/prepare.sh failed"

# ---- the peers' interpreters ------------------------------------------------

# venv NAME MODULE SPEC...: PEER_VENVS/NAME/bin/python, made (or finished)
# unless it imports MODULE already
venv() {
	name=$1 mod=$2; shift 2
	vpy=$PEER_VENVS/$name/bin/python
	if [ -x "$vpy" ] && "$vpy" -c "import $mod" >/dev/null 2>&1; then return 0; fi
	echo "== installing $* into $PEER_VENVS/$name (once; reused after)" >&2
	mkdir -p "$PEER_VENVS"
	[ -x "$vpy" ] || "$VENV_PYTHON" -m venv "$PEER_VENVS/$name" >&2 || die "$VENV_PYTHON -m venv failed"
	# shellcheck disable=SC2086
	"$vpy" -m pip install --no-input -q $PIP_OPTS "$@" >&2 || die "pip install $* failed"
	"$vpy" -c "import $mod" >/dev/null 2>&1 || die "$PEER_VENVS/$name does not import $mod"
}
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }

torch_py='' tf_py='' deb_py=''
# shellcheck disable=SC2086
if has "$PEERS $TTA_PEERS" torch; then venv torch "torch, numpy" $TORCH_SPEC numpy; torch_py=$PEER_VENVS/torch/bin/python; fi
# shellcheck disable=SC2086
if has "$PEERS $TTA_PEERS" tf; then venv tensorflow tf_keras $TF_SPEC; tf_py=$PEER_VENVS/tensorflow/bin/python; fi
if has "$PEERS $TTA_PEERS" deb; then
	for p in ${PYTHON:-python3 /usr/bin/python3}; do
		# a virtual environment's torch is not Debian's
		if "$p" -c 'import sys, torch; sys.exit(sys.prefix != sys.base_prefix)' 2>/dev/null; then deb_py=$p; break; fi
	done
	[ -n "$deb_py" ] || echo "note: no python3 imports Debian's torch (apt-get install python3-torch); PyTorch-deb skipped"
fi
avail() {
	out=
	for t in $1; do
		case $t in
		torch) [ -n "$torch_py" ] && out="$out torch" ;;
		tf) [ -n "$tf_py" ] && out="$out tf" ;;
		deb) [ -n "$deb_py" ] && out="$out deb" ;;
		*) die "unknown peer $t (known: torch tf deb)" ;;
		esac
	done
	echo "dtf$out"
}
tools=$(avail "$PEERS")
tta_tools=$(avail "$TTA_PEERS")
label() {
	case $1 in
	dtf) echo dtf-train ;; torch) echo PyTorch ;; tf) echo TensorFlow ;; deb) echo PyTorch-deb ;;
	esac
}

tmp=$(mktemp -d)
if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "note: logs of every run kept in $tmp"
else trap 'rm -rf "$tmp"' EXIT INT TERM; fi

# ---- instruction sets -------------------------------------------------------

# OpenBLAS 0.3.21 (Debian) falls back to its SSE3 "Prescott" kernels on CPUs
# it does not know (e.g. Sapphire Rapids); dtf-train corrects that itself
# (dtf-train(1), OPENBLAS_CORETYPE).  Debian's PyTorch uses the same
# OpenBLAS, so give both the corrected kernels.
core=$("$build/tests/bench/bench_kernels" sgemm -s 64 -r 1 | sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\)).*/\1/p')
# An OPENBLAS_CORETYPE that was set before the script is kept, for every
# tool; say so, with the set OpenBLAS would choose itself, since it moves the
# sgemm ceiling and the dense layers of all tools (a Haswell set on an
# AVX-512 CPU halves them).
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
	own=$(env -u OPENBLAS_CORETYPE "$build/tests/bench/bench_kernels" sgemm -s 64 -r 1 | sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\)).*/\1/p')
	echo "note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment, for every tool (OpenBLAS's own choice here: $own)"
fi
isa=${DTF_CPU_ISA:-}
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$isa" = avx2 ]; then
	export OPENBLAS_CORETYPE=Haswell
	echo "note: DTF_CPU_ISA=avx2: OPENBLAS_CORETYPE=Haswell for dtf-train and Debian's PyTorch"
elif [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$core" = Prescott ]; then
	if grep -qw avx512f /proc/cpuinfo; then OPENBLAS_CORETYPE=SkylakeX
	elif grep -qw avx2 /proc/cpuinfo; then OPENBLAS_CORETYPE=Haswell; fi
	if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
		export OPENBLAS_CORETYPE
		echo "note: OpenBLAS chose Prescott kernels on this CPU; OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE for dtf-train and Debian's PyTorch"
	fi
fi
# every rank of every tool gets these (mpirun -x; one host inherits them
# anyway, more hosts would not)
xs=
for v in DTF_CPU_ISA OPENBLAS_CORETYPE; do
	eval "[ -n \"\${$v:-}\" ]" && xs="$xs -x $v"
done
peer_env=
if [ "$PEER_ISA" = match ]; then
	case $isa in
	avx2) peer_env="ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2" ;;
	generic) peer_env="ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2" ;;
	esac
fi
peer_xs=
for kv in $peer_env; do peer_xs="$peer_xs -x $kv"; done

# ---- the header ---------------------------------------------------------------

# The job without evaluation, data paths absolute, its logs in tmp without
# a trace (another dtf-train may be writing runs/fashion_mnist_cnn, which
# it locks); the job of the time to accuracy keeps its evaluation.
logs="--set logging.dir=$tmp/runs --set logging.trace="
sed -e '/^  eval:/d' -e "s#\"datasets/#\"$root/datasets/#" \
	graphs/fashion_mnist_cnn.yaml >"$tmp/job.yaml"

# FLOP per example per training step, from the layer shapes: forward convs
# and dense layers, backward twice that except conv1's input gradient.
flop=$(awk 'BEGIN {
	c1 = 2*28*28*5*5*1*32; c2 = 2*14*14*5*5*32*64; d1 = 2*3136*1024; d2 = 2*1024*10
	printf "%d", (c1 + c2 + d1 + d2) + (c1 + 2*c2 + 2*d1 + 2*d2) }')

flags=
for f in avx2 fma avx512f; do
	if grep -qw "$f" /proc/cpuinfo; then flags="$flags $f"; else flags="$flags no-$f"; fi
done
# the model name of a virtual machine's CPU is often just the vendor's
# line ("AMD EPYC"): family and model tell the generation (AMD family 25
# model 0-1: Zen 3, model 17: Zen 4)
cpu_id() {
	printf '%s' "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
	f=$(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //') m=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //')
	[ -z "$f" ] || printf ' (family %s, model %s)' "$f" "$m"
}
echo "== machine: $(nproc) cores; $(cpu_id);$flags; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== mpirun options: ${MPIRUN_OPTS:-(Open MPI defaults)}"
vers="dtf-train $("$build/dtf-train" --version | sed 's/dtf-train //')"
[ -z "$torch_py" ] || vers="$vers, PyTorch $("$torch_py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
[ -z "$tf_py" ] || vers="$vers, TensorFlow $(TF_CPP_MIN_LOG_LEVEL=3 "$tf_py" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null | tail -1)"
[ -z "$deb_py" ] || vers="$vers, PyTorch-deb $("$deb_py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
if [ "$THROUGHPUT" != 0 ]; then vers="$vers; $STEPS steps, first $WARMUP not timed"; fi
echo "== $vers"
if [ -n "$isa" ]; then echo "== DTF_CPU_ISA=$isa; peers: ${peer_env:-not capped (PEER_ISA=$PEER_ISA)}"
else echo "== DTF_CPU_ISA unset (the widest set of the CPU); peers not capped"; fi

# dtf-train's kernels, from its start line (a 1-step run)
# shellcheck disable=SC2086
"$build/dtf-train" --set train.max_steps=1 --set logging.every_steps=1 $logs "$tmp/job.yaml" >"$tmp/k.log" 2>&1 ||
	{ cat "$tmp/k.log"; die "dtf-train failed"; }
kern=$(sed -n 's/.*thread(s) per rank (\(.*\))$/\1/p' "$tmp/k.log" | head -1)
case $kern in
"fast kernels avx512"* | "fast kernels avx2"*) wino="Winograd for conv2d_2 (5x5, 32->64, stride 1), direct register tiles for conv2d_1" ;;
"fast kernels"*) wino="no Winograd (generic direct kernels)" ;;
*) wino="no Winograd (reference: im2col + OpenBLAS)" ;;
esac
echo "== dtf-train kernels: $kern; $wino"


# ---- helpers --------------------------------------------------------------------

# dtf-train's steady rate: its log prints samples/s per window of WARMUP
# steps; drop the first window, average the rest (equal windows: total
# samples over total time = harmonic mean of the rates).
dtf_rate() {
	awk '/samples\/s.*\(ms\/step/ {
		for (i = 1; i <= NF; i++) if ($(i + 1) == "samples/s") r = $i
		n++; if (n > 1) { inv += 1 / r; m++ } }
		END { if (m) printf "%.1f", m / inv; else print "nan" }' "$1"
}
# peak RSS of every process of a run, MB: one a line; rss_list on one line
rss_lines() { sed -n '/^MAXRSS/s/.*peak_mb=\([0-9.]*\).*/\1/p' "$1"; }
rss_list() { rss_lines "$1" | tr '\n' ' ' | sed 's/ $//'; }
# CPU seconds (user + system) of all ranks of a run
cpu_sum() { awk '/^MAXRSS/ { for (i = 1; i <= NF; i++) if ($i ~ /^(user|sys)_s=/) { split($i, kv, "="); s += kv[2] } } END { printf "%.2f", s }' "$1"; }

# median of a list of numbers
med() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
maxof() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | tail -1; }

# TCP ports of the peers' rendezvous (PyTorch: MASTER_PORT; TensorFlow:
# port and port + 1), new for every run, from the script's process id so
# that two runs of the script do not meet
port=$((20000 + $$ % 10000 * 2))
# launch TOOL RANKS LOG CMD...: the command under maxrss.py, by mpirun for
# more than 1 rank, with the tool's environment
launch() {
	tool=$1 ranks=$2 log=$3; shift 3
	env=
	[ "$tool" = dtf ] || env="$peer_env MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
	if [ "$ranks" = 1 ]; then
		# shellcheck disable=SC2086
		env $env python3 "$here/maxrss.py" "$@" >"$log" 2>&1
	else
		px="$peer_xs -x MASTER_ADDR -x MASTER_PORT"
		[ "$tool" != dtf ] || px=
		# shellcheck disable=SC2086
		env $env mpirun $MPIRUN_OPTS $xs $px -np "$ranks" \
			python3 "$here/maxrss.py" "$@" >"$log" 2>&1
	fi
}

# tool_cmd TOOL THREADS BATCH: the throughput command line of TOOL
# (TensorFlow's workers listen on port and port + 1)
tool_cmd() {
	case $1 in
	dtf) echo "$build/dtf-train --threads $2 $logs --set train.batch_size=$3 --set train.max_steps=$STEPS --set train.epochs=100 --set logging.every_steps=$WARMUP $tmp/job.yaml" ;;
	torch) echo "$torch_py $here/pytorch_cnn.py --threads $2 --batch $3 --steps $STEPS --warmup $WARMUP" ;;
	deb) echo "$deb_py $here/pytorch_cnn.py --threads $2 --batch $3 --steps $STEPS --warmup $WARMUP" ;;
	tf) echo "$tf_py $here/tf_cnn.py --threads $2 --batch $3 --steps $STEPS --warmup $WARMUP --port $port" ;;
	esac
}

# ---- throughput -------------------------------------------------------------------

# run NAME RANKS THREADS BATCH CEILING
run() {
	name=$1 ranks=$2 threads=$3 batch=$4 ceil=$5 peak=$6
	echo
	echo "== $name: $ranks process(es) x $threads thread(s), global batch $batch, $ROUNDS rounds"
	for t in $tools; do : >"$tmp/$t.sps"; : >"$tmp/$t.cpu"; : >"$tmp/$t.rss"; done
	ntools=$(echo "$tools" | wc -w)
	r=0
	while [ "$r" -lt "$ROUNDS" ]; do
		# this round's order: the list rotated by r
		order=$(echo "$tools" | tr ' ' '\n' | awk -v k="$r" -v n="$ntools" '{ t[NR - 1] = $0 } END { for (i = 0; i < n; i++) printf "%s ", t[(i + k) % n] }')
		r=$((r + 1))
		line="  round $r:"
		for t in $order; do
			port=$((port + 2))
			# shellcheck disable=SC2046
			launch "$t" "$ranks" "$tmp/$t.log" $(tool_cmd "$t" "$threads" "$batch") ||
				{ cat "$tmp/$t.log"; die "$(label "$t") failed"; }
			if [ "$t" = dtf ]; then
				s=$(dtf_rate "$tmp/$t.log")
				if [ "$r" = 1 ]; then grep -m1 'thread(s) per rank' "$tmp/$t.log" | sed 's/^[^:]*: /  dtf-train: /' || :; fi
			else
				s=$(sed -n 's/^RESULT samples_per_s=\([0-9.]*\).*/\1/p' "$tmp/$t.log")
			fi
			c=$(cpu_sum "$tmp/$t.log")
			cps=$(awk -v c="$c" -v n="$((STEPS * batch))" 'BEGIN { printf "%.2f", c / n * 1000 }')
			echo "$s" >>"$tmp/$t.sps"; echo "$cps" >>"$tmp/$t.cpu"
			rss_list "$tmp/$t.log" >"$tmp/$t.rsslast"; rss_lines "$tmp/$t.log" >>"$tmp/$t.rss"
			line="$line $(label "$t") $(printf %.0f "$s")/s ${cps}ms,"
		done
		echo "${line%,}  (samples/s, CPU ms/sample)"
	done
	ds=$(med "$(cat "$tmp/dtf.sps")") dc=$(med "$(cat "$tmp/dtf.cpu")") dm=$(maxof "$(cat "$tmp/dtf.rss")")
	printf "  %-12s %9s %15s %17s   %s\n" tool samples/s "CPU ms/sample" "ratio sps / CPU" "peak RSS MB per process (last round; largest)"
	for t in $tools; do
		s=$(med "$(cat "$tmp/$t.sps")") c=$(med "$(cat "$tmp/$t.cpu")") m=$(maxof "$(cat "$tmp/$t.rss")")
		awk -v l="$(label "$t")" -v s="$s" -v c="$c" -v ds="$ds" -v dc="$dc" -v rl="$(cat "$tmp/$t.rsslast")" -v m="$m" 'BEGIN {
			printf "  %-12s %9.0f %15.2f %8.2fx / %.2fx   %s; %.0f\n", l, s, c, ds / s, dc / c, rl, m }'
		[ "$t" = dtf ] || printf "RESULT %s peer=%s dtf_sps=%s peer_sps=%s sps_ratio=%s dtf_cpu_ms=%s peer_cpu_ms=%s cpu_ratio=%s dtf_rss_mb=%s peer_rss_mb=%s\n" \
			"$name" "$t" "$ds" "$s" "$(awk -v a="$ds" -v b="$s" 'BEGIN { printf "%.2f", a / b }')" \
			"$dc" "$c" "$(awk -v a="$dc" -v b="$c" 'BEGIN { printf "%.2f", a / b }')" "$dm" "$m"
	done
	echo "  (ratio = dtf-train / tool, medians: samples/s above 1 and CPU s/sample below 1 favour dtf-train;"
	echo "   CPU s/sample: all processes, the whole run with its start-up, over STEPS x batch samples)"
	awk -v d="$ds" -v f="$flop" -v c="$ceil" -v pk="$peak" 'BEGIN {
		printf "  dtf-train: %.1f GFLOP/s achieved (median; effective: direct-convolution FLOPs) = %.0f%% of the %.1f GFLOP/s sgemm ceiling, %.0f%% of the %.1f GFLOP/s FMA peak of its cores\n", d * f / 1e9, 100 * d * f / 1e9 / c, c, 100 * d * f / 1e9 / pk, pk }'
}

if [ "$THROUGHPUT" != 0 ]; then
	"$build/tests/bench/bench_kernels" sgemm -t 1 -s 2048 -r 5 | tee "$tmp/sgemm1"
	"$build/tests/bench/bench_kernels" sgemm -t 2 -s 2048 -r 5 | tee "$tmp/sgemm2"
	"$build/tests/bench/bench_kernels" fma | tee "$tmp/fma"
	pk1=$(sed -n 's/.*: \([0-9.]*\) GFLOP.*/\1/p' "$tmp/fma")
	g1=$(sed -n 's/.*: \([0-9.]*\) GFLOP.*/\1/p' "$tmp/sgemm1")
	g2=$(sed -n 's/.*: \([0-9.]*\) GFLOP.*/\1/p' "$tmp/sgemm2")
	echo "model: $(awk -v f="$flop" 'BEGIN { printf "%.2f", f / 1e6 }') MFLOP per example per training step"
	for cfg in $CONFIGS; do
		ranks=${cfg%%x*} rest=${cfg#*x}
		threads=${rest%%-b*} batch=${cfg##*-b}
		case "$ranks$threads$batch" in *[!0-9]* | "") die "CONFIGS: $cfg is not RANKSxTHREADS-bBATCH" ;; esac
		if [ "$ranks" = 1 ]; then
			ceil=$(awk -v g="$g1" -v g2="$g2" -v t="$threads" 'BEGIN { print (t == 1) ? g : g2 }')
		else
			ceil=$(awk -v g="$g1" -v n="$ranks" 'BEGIN { print n * g }')
		fi
		run "$cfg" "$ranks" "$threads" "$batch" "$ceil" "$(awk -v g="$pk1" -v n="$((ranks * threads))" 'BEGIN { print n * g }')"
	done
fi

[ "$TTA" = 0 ] && exit 0

# ---- time to accuracy ---------------------------------------------------------------
# launch to exit, every tool stopping at the first evaluation (every 469
# steps = half an epoch at global batch 64) with accuracy >= TARGET.
echo
echo "== time to $TARGET test accuracy, mpirun -np 2 x 1 thread, global batch 64, evaluation every 469 steps (half epoch), at most $MAX_EPOCHS epochs"
for t in $tta_tools; do
	port=$((port + 2))
	case $t in
	dtf) cmd="$build/dtf-train --threads 1 $logs --set train.epochs=$MAX_EPOCHS --set logging.every_steps=469 --set train.eval_every_steps=469 --set train.stop_at_accuracy=$TARGET graphs/fashion_mnist_cnn.yaml" ;;
	torch) cmd="$torch_py $here/pytorch_cnn.py --threads 1 --batch 64 --epochs $MAX_EPOCHS --eval-every 469 --stop-at $TARGET" ;;
	deb) cmd="$deb_py $here/pytorch_cnn.py --threads 1 --batch 64 --epochs $MAX_EPOCHS --eval-every 469 --stop-at $TARGET" ;;
	tf) cmd="$tf_py $here/tf_cnn.py --threads 1 --batch 64 --epochs $MAX_EPOCHS --eval-every 469 --stop-at $TARGET --port $port" ;;
	esac
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	launch "$t" 2 "$tmp/tta.$t.log" $cmd || { cat "$tmp/tta.$t.log"; die "$(label "$t") failed"; }
	t1=$(date +%s.%N)
	if [ "$t" = dtf ]; then
		grep 'eval loss' "$tmp/tta.$t.log" | sed 's/^.*: epoch/  dtf-train: epoch/'
		ev=$(grep 'eval loss' "$tmp/tta.$t.log" | tail -1)
		acc=$(echo "$ev" | sed -n 's/.*  accuracy \([0-9.]*\).*/\1/p')
		step=$(echo "$ev" | sed -n 's/.*step \([0-9]*\):.*/\1/p')
	else
		grep '^EVAL' "$tmp/tta.$t.log" | sed "s/^/  $(label "$t"): /"
		ev=$(grep '^EVAL' "$tmp/tta.$t.log" | tail -1)
		acc=$(echo "$ev" | sed -n 's/.*accuracy=\([0-9.]*\).*/\1/p')
		step=$(echo "$ev" | sed -n 's/.*step=\([0-9]*\).*/\1/p')
	fi
	echo "$t ${acc:-0} ${step:-0} $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') $(cpu_sum "$tmp/tta.$t.log")" >>"$tmp/tta"
done
dline=$(grep '^dtf ' "$tmp/tta")
while read -r t acc step sec cpu; do
	awk -v l="$(label "$t")" -v acc="$acc" -v step="$step" -v s="$sec" -v c="$cpu" -v tg="$TARGET" -v d="$dline" -v t="$t" 'BEGIN {
		split(d, dv, " ")
		n = (acc + 0 >= tg + 0) ? "" : ", target NOT reached"
		printf "  %-12s %7.1f s, %5.2f epochs (step %d, accuracy %s%s), %.0f CPU s", l, s, step * 64 / 60000, step, acc, n, c
		if (t != "dtf") printf "; dtf-train / %s: time %.2fx, CPU %.2fx", l, dv[4] / s, dv[5] / c
		printf "\n"
		printf "RESULT tta tool=%s seconds=%.1f epochs=%.2f step=%d accuracy=%s cpu_s=%.0f\n", t, s, step * 64 / 60000, step, acc, c }'
done <"$tmp/tta"
