#!/usr/bin/env python3
"""Print "N passed, N failed, N skipped" for meson test logs (testlog.json,
one JSON object per test): Check test cases are counted from a suite's
"Checks: N, Failures: N, Errors: N" line; a test program that is not a
Check suite counts as one.  Used by tests/run-all.sh and tests/arm64.sh.

Usage: testlog_summary.py TESTLOG.json...
"""
import json
import re
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    for line in open(path):
        t = json.loads(line)
        m = re.search(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)",
                      t.get("stdout", ""))
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
