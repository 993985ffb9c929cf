#!/bin/sh
# gpt_vs_pytorch.sh - dtf-train beside PyTorch on the character-level GPT, CPU.
#
#   tests/bench/gpt_vs_pytorch.sh [BUILD_DIR]        (default: build)
#
# In one run, on the same machine, model (graphs/shakespeare_char_gpt.yaml:
# 4 layers, 4 heads, C 128, block 64; tests/bench/pytorch_gpt.py is the same
# model, initialisation, AdamW, schedule and clipping in PyTorch), data (the
# same TFRecord windows, datasets/shakespeare/block64/), global batch (12)
# and number of steps:
#   A. 1 process x 2 threads
#   B. 2 ranks x 1 thread (mpirun -np 2; PyTorch DistributedDataParallel
#      over gloo), the same global batch
# For each: steady-state tokens/s of both (samples/s x block size; the
# first WARMUP steps are not timed) over ROUNDS alternating runs (dtf-train,
# PyTorch, dtf-train, ..., so that a slow spell of a shared machine falls
# on both), the median and best of each and the ratio of medians (the RESULT
# line's ratio) and of bests, the peak resident memory of every process
# (ru_maxrss) and the CPU seconds per trained token: user + sys of all
# processes of a run (getrusage, by tests/bench/maxrss.py), less those of
# a run of WARMUP steps alone (start-up, data loading, warm-up; one per
# tool and configuration), over the tokens of the other STEPS - WARMUP
# steps; PyTorch's own count over its timed steps is printed beside it as
# a check, and the whole run's CPU seconds over all its tokens too.  On a
# shared machine the wall rates move with the other load while CPU
# seconds per token move much less: compare those when it is not quiet
# (spinning threads waiting at a barrier still count, so they are not
# immune to oversubscription).  Beside them, the compute rate of both
# (tokens/s x the training FLOPs per token of dtf-train --dry-run) as a
# fraction of two bounds measured in the same run: the machine's FMA peak
# (bench_kernels fma: register-only FMA chains at the fast kernels' ISA,
# times the cores used) and the sgemm ceiling (bench_kernels sgemm,
# 1024-cube products, on as many threads).
#   C. with VAL=1: both tools train the job's full schedule (train.max_steps
#      of the job, 2000) on 2 ranks x 1 thread and print the validation
#      loss after the last step: the mean token cross-entropy over the
#      whole validation split (dtf-train's eval loss).
#
# Environment: CONFIG (4l, default, or 6l: graphs/shakespeare_char_gpt_6l.yaml,
# 6 layers, 6 heads, C 384, block 256, datasets/shakespeare/); BATCH (the
# global batch; default the job's train.batch_size); STEPS (default 200)
# and WARMUP (default 40) steps per throughput run; ROUNDS (default 3) runs
# of each tool per configuration; THROUGHPUT=0 skips A-B; VAL=1 runs C;
# MPIRUN_OPTS, given to every mpirun of both tools (default "--bind-to none",
# as tests/bench/cpu_vs_pytorch.sh); PYTHON, an interpreter that imports
# torch and numpy; without it the virtual environment VENV (default
# BUILD_DIR/venv-torch) is used, and made (python3 -m venv; pip install
# torch numpy, with pip's own configuration: set PIP_INDEX_URL for PyTorch's
# CPU-only wheels) when it does not import torch.  Output lines are meant to
# be pasted as they are.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
CONFIG=${CONFIG:-4l}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-40}
ROUNDS=${ROUNDS:-3}
THROUGHPUT=${THROUGHPUT:-1}
VAL=${VAL:-0}
MPIRUN_OPTS=${MPIRUN_OPTS---bind-to none}

die() { echo "gpt_vs_pytorch.sh: $*" >&2; exit 1; }

case $CONFIG in
4l) job=graphs/shakespeare_char_gpt.yaml block=64 data=datasets/shakespeare/block64 ;;
6l) job=graphs/shakespeare_char_gpt_6l.yaml block=256 data=datasets/shakespeare ;;
*) die "CONFIG=$CONFIG: not 4l or 6l" ;;
esac
for v in STEPS WARMUP ROUNDS; do
	n=; eval "n=\$$v"
	case $n in '' | *[!0-9]*) die "$v=$n: not a whole number" ;; esac
done
[ "$WARMUP" -lt "$STEPS" ] || die "WARMUP ($WARMUP) must be below STEPS ($STEPS)"
[ -x "$build/dtf-train" ] || die "$build/dtf-train not found; build first (meson setup build && ninja -C build)"
[ -f "$root/$job" ] || die "$root/$job not found"
command -v mpirun >/dev/null || die "mpirun not found (Open MPI)"

py=${PYTHON:-}
if [ -z "$py" ]; then
	venv=${VENV:-$build/venv-torch}
	py=$venv/bin/python3
	if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
		echo "note: making $venv (pip install torch numpy)"
		python3 -m venv "$venv" || die "python3 -m venv $venv failed (apt-get install python3-venv)"
		"$venv/bin/pip" install --quiet torch numpy || die "pip install torch numpy into $venv failed"
	fi
fi
"$py" -c 'import torch, numpy' 2>/dev/null || die "$py does not import torch and numpy"
if [ "$(id -u)" = 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Neither tool may be told a thread count by the environment.
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS MKL_NUM_THREADS DTF_CPU_KERNELS

cd "$root"
"$root/datasets/prepare.sh" "$build" shakespeare >/dev/null || die "datasets/prepare.sh failed"
[ -f "$data/vocab.txt" ] || die "$data/vocab.txt not found after datasets/prepare.sh"
BATCH=${BATCH:-$(sed -n 's/^  batch_size: *\([0-9][0-9]*\).*/\1/p' "$job" | head -1)}
[ -n "$BATCH" ] || die "no train.batch_size in $job; set BATCH"
full=$(sed -n 's/^  max_steps: *\([0-9][0-9]*\).*/\1/p' "$job" | head -1)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The job without evaluation, data paths absolute (dtf-train reads them
# from the current directory).
# The job's logging and checkpoint directories go under $tmp: the timed
# runs keep none (each round would find the last one's checkpoints), the
# validation run its own.
sed -e '/^  eval:/d' -e "s#\"datasets/#\"$root/datasets/#" \
	-e '/^  dir: runs\//d' -e '/^checkpoint:/d' "$job" >"$tmp/job.yaml"
sed -e "s#\"datasets/#\"$root/datasets/#" -e "s#dir: runs/#dir: $tmp/runs/#" "$job" >"$tmp/job_eval.yaml"

cpu="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') (family $(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //'), model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //'))"
isa=$(for f in avx512f avx512_bf16 avx512_fp16 amx_tile avx2 fma asimd sve; do
	if grep -qw "$f" /proc/cpuinfo; then printf '%s ' "$f"; fi; done)
echo "== machine: $(nproc) cores; $cpu; ISA: ${isa% }"
echo "== mpirun options: ${MPIRUN_OPTS:-(Open MPI defaults)}"
echo "== dtf-train $("$build/dtf-train" --version | sed 's/dtf-train //'), PyTorch $("$py" -c 'import torch; print(torch.__version__)'), $job ($CONFIG, block $block, global batch $BATCH)"
echo "== PyTorch's CPU capability: $("$py" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())' 2>/dev/null || echo '?')"
echo "== $STEPS steps per run, first $WARMUP not timed; $ROUNDS rounds"
# training FLOPs per token, and the two bounds of one core and of two
flop=$("$build/dtf-train" --dry-run "$job" 2>/dev/null | sed -n 's/^FLOPs per token.*training step \([0-9.]*\) MFLOPs.*/\1/p')
[ -n "$flop" ] || die "dtf-train --dry-run $job printed no FLOPs per token"
bk=$build/tests/bench/bench_kernels
[ -x "$bk" ] || die "$bk not found; build first (ninja -C $build)"
fmaline=$("$bk" fma)
fma1=$(echo "$fmaline" | sed -n 's/.*: \([0-9.]*\) GFLOP\/s.*/\1/p')
sg1=$("$bk" sgemm -t 1 | sed -n 's/.*: \([0-9.]*\) GFLOP\/s.*/\1/p')
sg2=$("$bk" sgemm -t 2 | sed -n 's/.*: \([0-9.]*\) GFLOP\/s.*/\1/p')
echo "== $flop MFLOP per token per training step; FMA peak $fma1 GFLOP/s per core ($(echo "$fmaline" | sed 's/.*(\([a-z0-9]*\)).*/\1/')); sgemm ceiling $sg1 GFLOP/s on 1 thread, $sg2 on 2"
# an OPENBLAS_CORETYPE from the environment moves the sgemm ceiling and
# dtf-train's dense layers (a Haswell set on an AVX-512 CPU halves them)
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
	own=$(env -u OPENBLAS_CORETYPE "$bk" sgemm -s 64 -r 1 | sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\)).*/\1/p')
	echo "note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment (OpenBLAS's own choice here: $own)"
fi

# dtf-train's steady rate: its log prints samples/s per window of WARMUP
# steps; drop the first window, average the rest (equal windows: total
# samples over total time = harmonic mean of the rates); times block.
dtf_rate() {
	awk -v t="$block" '/samples\/s.*\(ms\/step/ {
		for (i = 1; i <= NF; i++) if ($(i + 1) == "samples/s") r = $i
		n++; if (n > 1) { inv += 1 / r; m++ } }
		END { if (m) printf "%.1f", t * m / inv; else print "nan" }' "$1"
}
rss_list() { sed -n '/^MAXRSS/s/.*peak_mb=\([0-9.]*\).*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
rss_max() { sed -n '/^MAXRSS/s/.*peak_mb=\([0-9.]*\).*/\1/p' "$1" | sort -n | tail -1; }
# user + sys seconds of all processes of one run (its MAXRSS lines)
cpu_sum() {
	awk '/^MAXRSS/ { for (i = 1; i <= NF; i++) if ($i ~ /^(user|sys)_s=/) { split($i, kv, "="); s += kv[2] } }
		END { printf "%.2f", s }' "$1"
}
# PyTorch's own CPU seconds over the timed steps, all ranks
cpu_timed() {
	awk '/^CPU rank=/ { for (i = 1; i <= NF; i++) if ($i ~ /^timed_s=/) { split($i, kv, "="); s += kv[2] } }
		END { printf "%.2f", s }' "$1"
}

# median and best of a list of numbers
med() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | tail -1; }
low() { echo "$1" | tr ' ' '\n' | sed '/^$/d' | sort -g | head -1; }

# run_dtf STEPS LOG, run_py STEPS LOG: one run of each tool ($launch, $threads)
run_dtf() {
	$launch "$py" "$here/maxrss.py" "$build/dtf-train" --threads "$threads" --set train.batch_size="$BATCH" \
		--set train.max_steps="$1" --set train.epochs=100 --set logging.every_steps="$WARMUP" \
		"$tmp/job.yaml" >"$2" 2>&1 || { cat "$2"; die "dtf-train failed"; }
}
run_py() {
	$launch "$py" "$here/maxrss.py" "$py" "$here/pytorch_gpt.py" --config "$CONFIG" \
		--data-dir "$root/$data" --threads "$threads" --batch "$BATCH" \
		--steps "$1" --warmup "$WARMUP" >"$2" 2>&1 || { cat "$2"; die "pytorch_gpt.py failed"; }
}
# per_token SECONDS TOKENS
per_token() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.3g", c / n }'; }

# run NAME RANKS THREADS
run() {
	name=$1 ranks=$2 threads=$3
	echo
	echo "== $name: $ranks process(es) x $threads thread(s), global batch $BATCH, $ROUNDS rounds"
	launch=
	[ "$ranks" = 1 ] || launch="mpirun $MPIRUN_OPTS -np $ranks"
	tokens=$((STEPS * BATCH * block)) steady_tokens=$(((STEPS - WARMUP) * BATCH * block))
	# the CPU seconds of start-up, data loading and WARMUP steps: one run
	# of each tool of WARMUP steps; the steady CPU s/token of a round is
	# (its CPU seconds - those) / the tokens of its last STEPS - WARMUP steps
	run_dtf "$WARMUP" "$tmp/d0.log"
	run_py "$WARMUP" "$tmp/p0.log"
	d0=$(cpu_sum "$tmp/d0.log") p0=$(cpu_sum "$tmp/p0.log")
	echo "  start-up + $WARMUP steps: dtf-train $d0 CPU s, PyTorch $p0 CPU s"
	ds='' ps='' dc='' pc='' dw='' pw='' pt=''
	: >"$tmp/d.all"; : >"$tmp/p.all"
	r=0
	while [ "$r" -lt "$ROUNDS" ]; do
		r=$((r + 1))
		run_dtf "$STEPS" "$tmp/d.log"
		run_py "$STEPS" "$tmp/p.log"
		d=$(dtf_rate "$tmp/d.log")
		p=$(sed -n 's/^RESULT tokens_per_s=\([0-9.]*\).*/\1/p' "$tmp/p.log")
		dcs=$(per_token "$(awk -v a="$(cpu_sum "$tmp/d.log")" -v b="$d0" 'BEGIN { print a - b }')" "$steady_tokens")
		pcs=$(per_token "$(awk -v a="$(cpu_sum "$tmp/p.log")" -v b="$p0" 'BEGIN { print a - b }')" "$steady_tokens")
		dws=$(per_token "$(cpu_sum "$tmp/d.log")" "$tokens")
		pws=$(per_token "$(cpu_sum "$tmp/p.log")" "$tokens")
		pts=$(per_token "$(cpu_timed "$tmp/p.log")" "$steady_tokens")
		printf "  round %d: dtf-train %.0f, PyTorch %.0f tokens/s; steady CPU s/token dtf-train %s, PyTorch %s (its own timer: %s); whole run %s, %s\n" \
			"$r" "$d" "$p" "$dcs" "$pcs" "$pts" "$dws" "$pws"
		ds="$ds $d" ps="$ps $p" dc="$dc $dcs" pc="$pc $pcs" dw="$dw $dws" pw="$pw $pws" pt="$pt $pts"
		cat "$tmp/d.log" >>"$tmp/d.all"; cat "$tmp/p.log" >>"$tmp/p.all"
	done
	grep -m1 'thread(s) per rank' "$tmp/d.all" | sed 's/^/  dtf-train: /'
	grep -m1 '^pytorch ' "$tmp/p.all" | sed 's/^/  PyTorch: /'
	d=$(med "$ds") p=$(med "$ps") db=$(best "$ds") pb=$(best "$ps")
	dcm=$(med "$dc") pcm=$(med "$pc") dwm=$(med "$dw") pwm=$(med "$pw") ptm=$(med "$pt")
	dm=$(rss_max "$tmp/d.all") pm=$(rss_max "$tmp/p.all")
	# bounds of this configuration: ranks x threads cores; sgemm on 2
	# threads, or one thread per rank
	cores=$((ranks * threads))
	if [ "$threads" = 1 ]; then sg=$(awk -v g="$sg1" -v n="$ranks" 'BEGIN { print n * g }'); else sg=$sg2; fi
	awk -v d="$d" -v p="$p" -v f="$flop" -v pk="$(awk -v g="$fma1" -v n="$cores" 'BEGIN { print n * g }')" -v sg="$sg" 'BEGIN {
		printf "  compute rate, median: dtf-train %.1f, PyTorch %.1f GFLOP/s = %.0f%%, %.0f%% of the FMA peak (%.1f) and %.0f%%, %.0f%% of the sgemm ceiling (%.1f); 2x PyTorch would be %.0f%% and %.0f%%\n",
			d * f / 1e3, p * f / 1e3, 100 * d * f / 1e3 / pk, 100 * p * f / 1e3 / pk, pk,
			100 * d * f / 1e3 / sg, 100 * p * f / 1e3 / sg, sg, 200 * p * f / 1e3 / pk, 200 * p * f / 1e3 / sg }'
	pim=$(sed -n 's/^RSS .*import_mb=\([0-9.]*\).*/\1/p' "$tmp/p.all" | sort -n | tail -1)
	awk -v n="$name" -v d="$d" -v p="$p" -v db="$db" -v pb="$pb" -v dm="$dm" -v pm="$pm" -v pim="$pim" \
		-v dc="$dcm" -v pc="$pcm" -v dw="$dwm" -v pw="$pwm" -v pt="$ptm" \
		-v dl="$(rss_list "$tmp/d.log")" -v pl="$(rss_list "$tmp/p.log")" 'BEGIN {
		printf "  tokens/s, median: dtf-train %.0f, PyTorch %.0f, ratio %.2fx; best: %.0f, %.0f, ratio %.2fx\n", d, p, d / p, db, pb, db / pb
		printf "  CPU s/token (user+sys, all processes), median: steady dtf-train %.3g, PyTorch %.3g (its own timer %.3g), PyTorch / dtf-train %.2fx; whole run %.3g, %.3g\n", dc, pc, pt, pc / dc, dw, pw
		printf "  peak RSS per process (MB, last round): dtf-train %s, PyTorch %s (of which %.0f after import torch); largest of all rounds dtf-train / PyTorch = %.2f\n", dl, pl, pim, dm / pm
		printf "RESULT %s dtf_tps=%.1f pytorch_tps=%.1f ratio=%.2f best_ratio=%.2f dtf_cpu_s_per_token=%.3g pytorch_cpu_s_per_token=%.3g cpu_ratio=%.2f dtf_rss_mb=%.1f pytorch_rss_mb=%.1f rss_ratio=%.2f\n", n, d, p, d / p, db / pb, dc, pc, pc / dc, dm, pm, dm / pm }'
}

if [ "$THROUGHPUT" != 0 ]; then
	run "$CONFIG-1x2" 1 2
	run "$CONFIG-2x1" 2 1
fi

[ "$VAL" = 1 ] || exit 0

# C. validation loss after the job's whole schedule, 2 ranks x 1 thread
[ -n "$full" ] || die "no train.max_steps in $job"
echo
echo "== validation loss after $full steps, mpirun -np 2 x 1 thread, global batch $BATCH"
t0=$(date +%s)
mpirun $MPIRUN_OPTS -np 2 "$build/dtf-train" --threads 1 --set train.batch_size="$BATCH" \
	"$tmp/job_eval.yaml" >"$tmp/dv.log" 2>&1 || { cat "$tmp/dv.log"; die "dtf-train failed"; }
t1=$(date +%s)
mpirun $MPIRUN_OPTS -np 2 "$py" "$here/pytorch_gpt.py" --config "$CONFIG" --data-dir "$root/$data" \
	--threads 1 --batch "$BATCH" --steps "$full" --warmup 0 --eval --log-every 500 \
	>"$tmp/pv.log" 2>&1 || { cat "$tmp/pv.log"; die "pytorch_gpt.py failed"; }
t2=$(date +%s)
# dtf-train's last evaluation line: "... eval loss L ..."
dl=$(grep -o 'eval loss [0-9.]*' "$tmp/dv.log" | tail -1 | sed 's/.* //')
pl=$(sed -n 's/^EVAL .*loss=\([0-9.]*\).*/\1/p' "$tmp/pv.log")
grep 'eval loss' "$tmp/dv.log" | tail -1 | sed 's/^/  dtf-train: /'
grep '^EVAL' "$tmp/pv.log" | sed 's/^/  PyTorch:   /'
printf "  dtf-train: validation loss %s (%d s); PyTorch: %s (%d s)\n" "${dl:-?}" $((t1 - t0)) "${pl:-?}" $((t2 - t1))
echo "RESULT val steps=$full dtf_loss=${dl:-nan} pytorch_loss=${pl:-nan} dtf_s=$((t1 - t0)) pytorch_s=$((t2 - t1))"
