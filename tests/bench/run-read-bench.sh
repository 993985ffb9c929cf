#!/bin/sh
# run-read-bench.sh - build a ~1 GB synthetic TFRecord set in a temporary
# directory, run bench_read on it (raw read() vs read+verify+decode, same
# files, same run, page cache warm), delete it.  Not part of the test run.
#
#   tests/bench/run-read-bench.sh [BUILD_DIR] [COUNT]
#
# COUNT records of 32x32x3 uint8 (about 3.1 KB each; default 340000, about
# 1.06 GB) in 8 shards.  Needs about 1.1 GB in $TMPDIR (default /tmp).
set -eu
build=${1:-build}
count=${2:-340000}
dir=$(mktemp -d "${TMPDIR:-/tmp}/dtf-read-bench-XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
echo "synthesizing $count records in $dir ..."
"$build/dtf-records" synth --out "$dir/bench" --count "$count" --shards 8 \
	--shape 32,32,3 --classes 10 >/dev/null
"$build/tests/bench/bench_read" 32,32,3 "$dir"/bench-*.tfrecord
