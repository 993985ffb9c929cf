#!/bin/sh
# slurm_requeue.sh - the Slurm recipe of the README and dtf-train(1) against
# a private Slurm (run as `cluster.sh run 2 slurm.sh run 2 slurm_requeue.sh`;
# meson does): submit a batch job of 2 nodes x 1 task whose script runs
# `srun --mpi=pmix --kill-on-bad-exit=1 dtf-train --resume` and requeues the
# job when it exits 75; once the first checkpoint is written,
# `scancel --signal=TERM` reaches every rank, which checkpoint and exit 75;
# the requeued job resumes from that checkpoint and completes.  Checks:
#  - srun --mpi=pmix starts one MPI world over both nodes (the per-rank
#    place lines name h1 and h2);
#  - the first run ends 75 after a checkpoint, the second resumes from it
#    (Slurm's restart count 1) and trains to max_steps, exit 0;
#  - srun --mpi=none ends non-zero within seconds, saying it lacks a PMI
#    (Debian's Open MPI refuses that launch in MPI_Init; dtf-train's own
#    check of a world of 1 under several Slurm tasks is in test_dist).
# Prints the times of each phase.  Exit 0 pass, 1 fail, 77 skip.
set -u
B=${DTF_BUILD_ROOT:?}
here=$(cd "$(dirname "$0")" && pwd)
[ -n "${SLURM_CONF:-}" ] || { echo "SKIP: no private Slurm (run under slurm.sh run)"; exit 77; }
C=$here/cluster.sh
on_h1() { "$C" exec h1 env SLURM_CONF="$SLURM_CONF" "$@"; }
fail() {
	echo "FAIL: $*"
	for f in "$work"/out.log "$DTF_SLURM_DIR"/slurmctld.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
	done
	exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

work=$(mktemp -d "${TMPDIR:-/tmp}/dtf-slurm-test.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$B/dtf-records" synth --out "$work/train" --count 960 --shards 2 \
	--shape 8,8,1 --classes 4 --seed 1 >/dev/null || fail "dtf-records synth"
cat >"$work/job.yaml" <<EOF
name: tiny-cnn
seed: 7
data:
  train: {files: "$work/train-*.tfrecord", shuffle_buffer: 0}
  features:
    image: {type: bytes, decode: uint8, shape: [8, 8, 1], scale: 0.00392156862745098}
    label: {type: int64, shape: []}
model:
  input: image
  layers:
    - {conv2d: {filters: 4, kernel: 3, padding: same, activation: relu}}
    - flatten
    - {dense: {units: 4, name: logits}}
  loss: {sparse_softmax_cross_entropy: {logits: logits, labels: label}}
train:
  batch_size: 24
  max_steps: 3000
  epochs: 1000
  optimizer: {adam: {learning_rate: 0.01}}
strategy: {type: multi_worker_mirrored}
checkpoint: {dir: $work/ck, every_steps: 200}
logging: {every_steps: 1000}
fault: {timeout_seconds: 60}
EOF
# the README's recipe, with this build's binary
cat >"$work/job.sbatch" <<EOF
#!/bin/sh
#SBATCH --nodes=2 --ntasks-per-node=1 --signal=TERM@60 --requeue
#SBATCH --open-mode=append --output=$work/out.log
srun --mpi=pmix --kill-on-bad-exit=1 $B/dtf-train --threads 1 --resume $work/job.yaml
st=\$?
echo "srun exit \$st (restart \${SLURM_RESTART_COUNT:-0})"
[ \$st -eq 75 ] && scontrol requeue "\$SLURM_JOB_ID"
exit \$st
EOF
export OMPI_MCA_btl_tcp_if_include=10.99.0.0/24 OMPI_MCA_oob_tcp_if_include=10.99.0.0/24

t0=$(now)
job=$(on_h1 sbatch --parsable "$work/job.sbatch") || fail "sbatch"
echo "submitted job $job"
i=0
while [ ! -e "$work/ck/checkpoint" ]; do
	i=$((i + 1))
	[ "$i" -lt 600 ] || fail "no checkpoint within 60 s"
	sleep 0.1
done
echo "first checkpoint after $(since "$t0") s; scancel --signal=TERM"
t1=$(now)
on_h1 scancel --signal=TERM "$job" || fail "scancel"
i=0
state=
while :; do
	state=$(on_h1 scontrol show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
	restarts=$(on_h1 scontrol show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Restarts=//p')
	[ "$state" = COMPLETED ] && break
	# Slurm holds a requeued batch job for 120 s before it may start
	# again; the operator (this test) lets it start as soon as both nodes
	# are idle and the last step's PMIx sockets gone (the step ids repeat)
	if [ "$state" = PENDING ] && [ "$restarts" = 1 ] && [ -z "${released:-}" ] &&
		[ "$(on_h1 sinfo -h -t idle -o %D)" = 2 ] &&
		! ls "$DTF_SLURM_DIR"/h*/spool/stepd.slurm.pmix."$job".* >/dev/null 2>&1; then
		echo "requeued, nodes idle $(since "$t1") s after the signal; releasing it now"
		on_h1 scontrol update JobId="$job" StartTime=now || fail "scontrol update"
		released=1
	fi
	case $state in FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) fail "job $job: $state" ;; esac
	i=$((i + 1))
	[ "$i" -lt 1200 ] || fail "job $job not completed within 120 s (state $state)"
	sleep 0.1
done
echo "job $job completed $(since "$t1") s after the signal (restarts $restarts)"
[ "$restarts" = 1 ] || fail "restarts $restarts, expected 1"
out=$work/out.log
grep -q "rank 1 of 2: host h2, interface eth0, address 10.99.0.2" "$out" || fail "no place line of rank 1 on h2"
grep -q "srun exit 75 (restart 0)" "$out" || fail "the first run did not exit 75"
grep -q "resuming from .*: step [1-9]" "$out" || fail "the second run did not resume"
grep -q "srun exit 0 (restart 1)" "$out" || fail "the second run did not complete"
grep -q "done: " "$out" || fail "no summary"
[ -f "$work/ck/ckpt-3000.dtf" ] || fail "no checkpoint of step 3000"

# srun without PMIx: no PMI to join the others by.  Open MPI's MPI_Init
# would abort such a direct launch with its own words, or none when srun
# kills the task first; dtf-train refuses before MPI_Init: exit 2, each task
# saying so, within seconds (--kill-on-bad-exit=0 over the cluster's
# KillOnBadExit=1: the first task to refuse would otherwise get the other
# killed before it says so, on a loaded machine)
t2=$(now)
st=0
on_h1 timeout 60 srun -N 2 -n 2 --mpi=none --kill-on-bad-exit=0 "$B/dtf-train" --threads 1 "$work/job.yaml" \
	>"$work/none.log" 2>&1 || st=$?
[ "$st" = 2 ] || { cat "$work/none.log"; fail "srun --mpi=none: exit $st, expected 2"; }
said=$(grep -c "Slurm started 2 tasks (SLURM_STEP_NUM_TASKS=2) but gave this one no PMI.*srun --mpi=pmix" "$work/none.log")
[ "$said" = 2 ] || { cat "$work/none.log"; fail "srun --mpi=none: $said of 2 tasks said why"; }
! grep -q "OPAL ERROR" "$work/none.log" || { cat "$work/none.log"; fail "srun --mpi=none: MPI_Init ran"; }
echo "srun --mpi=none: exit $st after $(since "$t2") s, both tasks named the cause"
echo "PASS"
