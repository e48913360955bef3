#!/usr/bin/env bash
# Rewrites .device/bundle.tar.xz (made by ../shared/tools/device-bundle.sh) without what no GPU command uses, so more
# of the 64 MiB that a device call carries is left for the kernel cache (.device/tlcache.tar.xz, prebuild_here.py):
# z3-solver's command-line executable (z3_solver-*.data/, 6.9 MB of the 47 MB packed; TileLang links libz3 and the
# z3 Python module loads libz3, neither runs the executable), and libz3.so, a byte-identical copy of libz3.so.4.15
# that becomes a link to it (xz already shared their bytes; the link keeps the unpacked tree 22 MB smaller).
# Run from the repository root after device-bundle.sh (about a minute on two cores); running it twice changes nothing.
set -euo pipefail
bundle=.device/bundle.tar.xz
[ -f "$bundle" ] || { echo "slim_bundle.sh: no $bundle; run ../shared/tools/device-bundle.sh first" >&2; exit 2; }
work=$(mktemp -d)
# A run that fails leaves the bundle as it was: the new archive is written beside it and moved over it last.
trap 'rm -rf "$work" "$bundle.new"' EXIT
tar -C "$work" -xJf "$bundle"
rm -rf "$work"/z3_solver-*.data
lib="$work/z3/lib"
if [ -f "$lib/libz3.so" ] && [ ! -L "$lib/libz3.so" ] && cmp -s "$lib/libz3.so" "$lib/libz3.so.4.15"; then
    ln -sf libz3.so.4.15 "$lib/libz3.so"
fi
tar -C "$work" -cf - . | xz -T0 -8 > "$bundle.new"
mv "$bundle.new" "$bundle"
ls -l "$bundle"
