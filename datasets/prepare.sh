#!/bin/sh
# prepare.sh - convert Fashion-MNIST (Debian package dataset-fashion-mnist)
# into sharded TFRecord files for the example jobs.
#
#   datasets/prepare.sh [BUILD_DIR]      (BUILD_DIR defaults to "build")
#
# Writes datasets/fashion-mnist/train-0000{0..3}-of-00004.tfrecord (60000
# examples) and datasets/fashion-mnist/test-00000-of-00001.tfrecord (10000)
# with BUILD_DIR/dtf-records convert-idx.  Each example holds `image`
# (bytes_list: 784 uint8 pixels, 28x28x1) and `label` (int64_list: 0-9).
# A set whose files exist and pass `dtf-records verify` is left alone.
set -eu

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
src=/usr/share/datasets/fashion-mnist
out=$here/fashion-mnist
tool=$build/dtf-records

die() {
	echo "prepare.sh: $*" >&2
	exit 1
}

[ -x "$tool" ] || die "$tool not found or not executable; build first (meson setup $build && ninja -C $build)"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
	t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
	[ -r "$src/$f" ] || die "$src/$f is missing; install the Debian package: apt-get install dataset-fashion-mnist"
done
mkdir -p "$out"

# convert NAME IDX_PREFIX SHARDS
convert() {
	name=$1 idx=$2 shards=$3
	files=
	i=0
	while [ "$i" -lt "$shards" ]; do
		files="$files $(printf '%s/%s-%05d-of-%05d.tfrecord' "$out" "$name" "$i" "$shards")"
		i=$((i + 1))
	done
	all=1
	for f in $files; do
		[ -f "$f" ] || all=0
	done
	# shellcheck disable=SC2086 # $files is a list of paths without spaces
	if [ "$all" = 1 ] && "$tool" verify $files >/dev/null 2>&1; then
		echo "prepare.sh: $name set already present and verified, skipping"
		return 0
	fi
	echo "prepare.sh: converting $src/$idx-* into $shards $name shard(s)"
	start=$(date +%s)
	"$tool" convert-idx --images "$src/$idx-images-idx3-ubyte.gz" \
		--labels "$src/$idx-labels-idx1-ubyte.gz" \
		--out "$out/$name" --shards "$shards"
	# shellcheck disable=SC2086
	"$tool" verify $files
	echo "prepare.sh: $name done in $(($(date +%s) - start)) s"
}

convert train train 4
convert test t10k 1
