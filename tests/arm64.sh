#!/bin/sh
# Cross-build dtf-train for 64-bit ARM Linux (aarch64) with Debian's cross
# compiler and run the kernel, graph, pipeline and training tests under
# qemu-user (meson test, cross/aarch64-linux-gnu.ini's exe_wrapper); the
# last line is tests/run-all.sh's "N passed, N failed, N skipped" for
# these suites.  Exit status 0 only if everything built and passed; 77
# (skip) when the cross tools or the arm64 libraries are not installed.
#
# Usage: tests/arm64.sh [BUILD_DIR]        (default build-arm64)
#
# From scratch about 3 minutes of CPU time (compiler and qemu); qemu is
# there for correctness, not speed.
#
# Needs (Debian 12, as root, once):
#   dpkg --add-architecture arm64 && apt-get update && apt-get install \
#     gcc-aarch64-linux-gnu qemu-user libyaml-dev:arm64 libjansson-dev:arm64 \
#     libopenblas-dev:arm64 check:arm64 zlib1g-dev:arm64
# and the build machine's own Open MPI (mpirun starts the test ranks, each
# under qemu-aarch64).  libopenmpi-dev:arm64 and libopenmpi3:arm64 cannot
# be installed beside the amd64 Open MPI (Debian's packages conflict), so
# unless libopenmpi-dev:arm64 is installed this script fetches the arm64
# Open MPI packages with `apt-get download` (no root needed) into
# BUILD_DIR/arm64-sysroot and unpacks them there; BUILD_DIR/arm64-local.ini,
# a second cross file, points pkg-config and the linker at them and runs
# qemu with -L there.  The x86 kernels (isa.h: AVX2, AVX-512) are not
# compiled for aarch64; the fast kernels' portable C path is, and
# test_fast checks it against the reference kernels.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
build=${1:-build-arm64}
case $build in /*) ;; *) build=$here/$build ;; esac
triplet=aarch64-linux-gnu
mdir=/usr/lib/$triplet
# the suites that start the build's programs through tu_exe_wrapper (or
# start none); of the others, some run dtf-train or dtf-records directly
# (data_errors, use, ...) and some take far too long under qemu (plan:
# 5 minutes, schedule: over 10)
suites="ops fast graph train config data pipeline lang"

missing=""
for p in $triplet-gcc qemu-aarch64 mpirun pkg-config meson ninja; do
	command -v "$p" >/dev/null 2>&1 || missing="$missing $p"
done
for pc in yaml-0.1 jansson openblas check zlib; do
	[ -f "$mdir/pkgconfig/$pc.pc" ] || missing="$missing $pc(arm64)"
done
if [ -n "$missing" ]; then
	echo "arm64.sh: not installed:$missing (see the top of $0): skipped" >&2
	exit 77
fi

mkdir -p "$build" || exit 1
local_ini=$build/arm64-local.ini
if [ ! -f "$mdir/pkgconfig/ompi-c.pc" ] && [ ! -f "$local_ini" ]; then
	root=$build/arm64-sysroot
	debs=$build/arm64-debs
	rm -rf "$root" "$debs" && mkdir -p "$root" "$debs" "$build/arm64-pc" || exit 1
	# libopenmpi3:arm64 and the arm64 libraries it needs that are not
	# installed (what apt would install), and the headers' package
	pkgs=$(apt-get install -s --no-install-recommends libopenmpi3:arm64 2>/dev/null |
		awk '$1 == "Inst" && $2 ~ /:arm64$/ { print $2 }')
	if [ -z "$pkgs" ]; then
		echo "arm64.sh: apt knows no libopenmpi3:arm64 (dpkg --add-architecture arm64; apt-get update)" >&2
		exit 77
	fi
	echo "arm64.sh: unpacking Open MPI for arm64 into $root"
	(cd "$debs" && apt-get download -q $pkgs libopenmpi-dev:arm64) >"$debs/download.log" 2>&1 || {
		cat "$debs/download.log" >&2
		exit 1
	}
	for d in "$debs"/*.deb; do
		dpkg-deb -x "$d" "$root" || exit 1
	done
	# absolute links inside the tree point into it
	find "$root" -type l | while read -r l; do
		t=$(readlink "$l")
		case $t in /*) ln -sfn "$root$t" "$l" ;; esac
	done
	sed "s|^prefix=/usr|prefix=$root/usr|" "$root$mdir/pkgconfig/ompi-c.pc" \
		>"$build/arm64-pc/ompi-c.pc" || exit 1
	cat >"$local_ini" <<EOF
# written by tests/arm64.sh: Open MPI's arm64 packages unpacked in $root
[binaries]
exe_wrapper = ['qemu-aarch64', '-L', '$root']

[properties]
pkg_config_libdir = ['$mdir/pkgconfig', '/usr/share/pkgconfig', '$build/arm64-pc']

[built-in options]
c_link_args = ['-Wl,-rpath-link,$root$mdir', '-Wl,-rpath-link,$root/lib/$triplet', '-Wl,-rpath-link,$root$mdir/openmpi/lib']
EOF
fi
[ -f "$local_ini" ] || : >"$local_ini"
wrapper="qemu-aarch64"
[ -d "$build/arm64-sysroot" ] && wrapper="qemu-aarch64 -L $build/arm64-sysroot"

start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
	nice meson setup "$build" --cross-file cross/$triplet.ini \
		--cross-file "$local_ini" -Dcuda=disabled -Dfuzz=disabled || exit 1
fi
targets="dtf-train dtf-records"
for s in $suites; do
	targets="$targets tests/test_$s"
done
nice ninja -C "$build" $targets || exit 1
built=$(date +%s)
echo "arm64.sh: built in $((built - start)) s"

# the programs a test starts (dtf-records, mpirun's dtf-train ranks) run
# under qemu too (testutil.h: tu_exe_wrapper); qemu is slow, so the
# tests' time limits (meson's and Check's) are 10 times the native ones
CK_TIMEOUT_MULTIPLIER=10 DTF_TEST_EXE_WRAPPER=$wrapper nice meson test -C "$build" --print-errorlogs \
	--num-processes 1 --timeout-multiplier 10 $suites
rc=$?
echo "arm64.sh: tests ran in $(($(date +%s) - built)) s under qemu"
python3 "$here/tests/testlog_summary.py" "$build/meson-logs/testlog.json"
exit $rc
