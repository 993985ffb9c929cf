#!/bin/sh
# Run the job-language fuzzer for a bounded time: FUZZER SECONDS SEEDS...
# New inputs go to a scratch corpus in the build tree; the seed directories
# (graphs/, tests/fuzz/seeds) are only read.  Exit 0 when nothing crashed,
# leaked or hung.
set -eu
fuzzer=$1
seconds=$2
shift 2
corpus=$(dirname "$fuzzer")/fuzz-corpus
mkdir -p "$corpus"
here=$(cd "$(dirname "$0")" && pwd)
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
	-max_len=8192 -print_final_stats=1 -dict="$here/job.dict" \
	"$corpus" "$@"
