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
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, re, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    m = re.search(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)", t.get("stdout", ""))
    if m and t["result"] != "SKIP":
        n, f, e = map(int, m.groups())
        passed += n - f - e
        failed += f + e
        if t["result"] != "OK" and f + e == 0:
            failed += 1  # crashed or timed out after its summary
    elif t["result"] == "SKIP":
        skipped += 1
    elif t["result"] == "OK":
        passed += 1
    else:
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
