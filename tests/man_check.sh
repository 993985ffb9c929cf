#!/bin/sh
# Man pages: every option that `dtf-train --help`, `dtf-records --help`
# and `dtf-launch --help` print appears in the page of that command (for
# dtf-launch: dtf-train.1, section RESTARTS), and every page in man/
# formats without a warning (groff -ww; also mandoc -T lint when it is
# installed).  Exit 77 (skip) without groff.
set -u
src=${DTF_SOURCE_ROOT:?}
build=${DTF_BUILD_ROOT:?}
command -v groff >/dev/null 2>&1 || { echo "groff not installed: skip"; exit 77; }
fail=0
for tool in dtf-train dtf-records dtf-launch; do
	page="$src/man/$tool.1"
	[ "$tool" = dtf-launch ] && page="$src/man/dtf-train.1"
	# the page's text with roff's \- as plain -
	text=$(sed 's/\\-/-/g' "$page")
	opts=$("$build/$tool" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	[ -n "$opts" ] || { echo "$tool --help printed no options"; fail=1; }
	for o in $opts; do
		if ! printf '%s\n' "$text" | grep -q -- "$o"; then
			echo "$page: option $o of '$tool --help' is missing"
			fail=1
		fi
	done
	echo "$tool: $(echo "$opts" | wc -l) options of --help checked against ${page##*/}"
done
# the subcommands of dtf-train (`dtf-train NAME --help`), in dtf-train.1
text=$(sed 's/\\-/-/g' "$src/man/dtf-train.1")
for sub in evaluate predict export generate; do
	opts=$("$build/dtf-train" "$sub" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	[ -n "$opts" ] || { echo "dtf-train $sub --help printed no options"; fail=1; }
	printf '%s\n' "$text" | grep -q -- "dtf-train $sub" ||
		{ echo "dtf-train.1: no section on dtf-train $sub"; fail=1; }
	for o in $opts; do
		if ! printf '%s\n' "$text" | grep -q -- "$o"; then
			echo "dtf-train.1: option $o of 'dtf-train $sub --help' is missing"
			fail=1
		fi
	done
	echo "dtf-train $sub: $(echo "$opts" | wc -l) options of --help checked against dtf-train.1"
done
# what --threads counts is said alike in --help and the page: the kernels'
# compute threads (each calls OpenBLAS single-threaded), not BLAS threads
help_t=$("$build/dtf-train" --help | sed -n '/--threads/,/^  -/p')
page_t=$(sed 's/\\-/-/g' "$src/man/dtf-train.1" | sed -n '/^\.BR -t ", " --threads/,/^\.TP/p')
for what in help page; do
	eval "t=\$${what}_t"
	if ! printf '%s\n' "$t" | grep -qi "compute threads per rank" ||
	   printf '%s\n' "$t" | grep -qi "^[^(]*BLAS threads"; then
		echo "dtf-train $what: -t/--threads is not described as compute threads per rank:"
		printf '%s\n' "$t"
		fail=1
	fi
done
for page in "$src"/man/*.[1-9]; do
	w=$(groff -ww -man -Tutf8 "$page" 2>&1 >/dev/null)
	if [ -n "$w" ]; then
		echo "$page: groff warnings:"
		echo "$w"
		fail=1
	fi
	if command -v mandoc >/dev/null 2>&1; then
		w=$(mandoc -T lint -W warning "$page" 2>&1)
		if [ -n "$w" ]; then
			echo "$page: mandoc lint:"
			echo "$w"
			fail=1
		fi
	fi
done
[ $fail = 0 ] && echo "man pages: no warnings"
exit $fail
