#!/bin/sh
# Build (if needed) and run every test, then print one line
# "N passed, N failed, N skipped" counting Check test cases (a test program
# that is not a Check suite counts as one).  Exit status 0 only if nothing
# failed.  Usage: tests/run-all.sh [BUILD_DIR] [meson setup options...]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
cd "$here" || exit 1
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$@" || exit 1
fi
ninja -C "$build" || exit 1
meson test -C "$build" --print-errorlogs --num-processes 1
rc=$?
python3 "$here/tests/testlog_summary.py" "$build/meson-logs/testlog.json"
exit $rc
