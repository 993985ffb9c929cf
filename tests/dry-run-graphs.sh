#!/bin/sh
# dtf-train --dry-run on every job under a directory: each must exit 0
# (the jobs' data files need not exist).  Usage: DTF_TRAIN DIR
set -u
dtf_train=$1
dir=$2
n=0 bad=0
for job in "$dir"/*.yaml; do
	n=$((n + 1))
	if out=$("$dtf_train" --dry-run "$job" 2>&1); then
		echo "ok   $job: $(echo "$out" | grep '^Activation memory')"
	else
		echo "FAIL $job (exit $?):"
		echo "$out"
		bad=$((bad + 1))
	fi
done
echo "$n jobs, $bad failed"
[ "$n" -gt 0 ] && [ "$bad" -eq 0 ]
