#!/usr/bin/env bash
# Before the device calls (no device time): TensorFlow 2.21 GPU's bundle and its pieces.
#
#   bash bench/gpu/prepare.sh          # from the repository root (or anywhere in it)
#
# Builds /tmp/gpustage/bundle.tar.zst with ../shared/gpu/make_bundle.sh if it is not there (~3 min,
# ~980 MB), git-ignores /.cNN/ (.git/info/exclude: the pieces must travel only when carried), and
# cuts the bundle into .c01 ... .cNN at the repository root, 56 MiB each (what travels with a call,
# the working tree and the carried paths together, is at most 64 MiB): the last, small piece also
# holds the zstandard wheel that unpacks the bundle and bundle.size (its byte count, which
# bench/gpu/check.sh compares with the pieces it has). Then it prints the device calls to make.
#
# Environment: SHARED (folder of make_bundle.sh; default ../shared/gpu beside the checkout, or
# /work/shared/gpu), BUNDLE (default /tmp/gpustage/bundle.tar.zst), WHEELS (default /tmp/gpuwh),
# DEST (where the .cNN folders go; default the repository root).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SHARED=${SHARED:-}
if [ -z "$SHARED" ]; then
    for d in "$ROOT/../shared/gpu" /work/shared/gpu; do [ -f "$d/make_bundle.sh" ] && SHARED=$d && break; done
fi
BUNDLE=${BUNDLE:-/tmp/gpustage/bundle.tar.zst}
WHEELS=${WHEELS:-/tmp/gpuwh}
DEST=${DEST:-$ROOT}
if [ ! -f "$BUNDLE" ]; then
    [ -n "$SHARED" ] || { echo "no make_bundle.sh found: set SHARED"; exit 1; }
    bash "$SHARED/make_bundle.sh"
fi
whl=$(ls "$WHEELS"/zstandard-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || { echo "no zstandard wheel in $WHEELS (make_bundle.sh downloads it)"; exit 1; }
if [ "$DEST" = "$ROOT" ]; then  # git-ignore the pieces (a plain file edit; nothing in the index changes)
    ex=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$ex")" && touch "$ex"
    grep -qxF '/.c[0-9][0-9]/' "$ex" || echo '/.c[0-9][0-9]/' >> "$ex"
fi
rm -rf "$DEST"/.c[0-9][0-9]
S=$((56 * 1024 * 1024))
size=$(stat -c %s "$BUNDLE")
n=$(( (size + S - 1) / S ))
for N in $(seq 1 $n); do
    d="$DEST/.c$(printf %02d "$N")"
    mkdir -p "$d"
    dd if="$BUNDLE" of="$d/p$(printf %02d "$N")" bs=1M skip=$(( (N - 1) * 56 )) count=56 status=none
done
last=$(printf %02d "$n")
cp "$whl" "$DEST/.c$last/"
echo "$size" > "$DEST/.c$last/bundle.size"
echo "bundle: $size bytes in $n pieces, $DEST/.c01 ... .c$last"
# what travels with each call: the working tree (tracked and untracked-not-ignored files) and one piece
tree=$(git ls-files -z -c -o --exclude-standard | xargs -0 du -cb 2>/dev/null | awk 'END {print $1}')
big=$(du -sb "$DEST"/.c[0-9][0-9] | sort -n | tail -1 | cut -f1)
echo "a call sends the working tree ($(( tree / 1024 )) KiB) and one piece (at most $(( big / 1024 )) KiB):" \
     "$(( (tree + big) / 1048576 )) MiB of 64"
[ $(( tree + big )) -lt $(( 63 * 1048576 )) ] || echo "WARNING: over 63 MiB: make the pieces smaller (S above)"
if [ "$DEST" = "$ROOT" ] && ! git check-ignore -q .c01; then
    echo "WARNING: git does not ignore the pieces: each device call would send them all"
fi
echo
echo "Device calls, back to back (bench/gpu/README.md):"
for N in $(seq 1 $(( n - 1 ))); do
    c=.c$(printf %02d "$N")
    echo "  run(carry=[\"$c\"], timeout_s=60, command=\"mkdir -p /tmp/parts && mv $c/* /tmp/parts/ && ls /tmp/parts | wc -l\")"
done
echo "  run(carry=[\".c$last\"], timeout_s=480, command=\"bash bench/gpu/check.sh\")"
echo "  give_back()"
