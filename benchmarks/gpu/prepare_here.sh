#!/usr/bin/env bash
# Everything a device call needs, made on this CPU machine in one command: a new checkout has no .device (git ignores
# it), and the fifty-eighth session rebuilt it by hand over its first half hour. Each step runs only where its output is
# missing, so a second run changes nothing:
#   1. .device/bundle.tar.xz: ../shared/tools/device-bundle.sh, then slim_bundle.sh (about 4 minutes);
#   2. .venv (scripts/setup.sh), and a Python 3.11 with tilelang 0.1.15 and the CUDA disassemblers to compile kernels
#      here, at $TLVENV (default /work/tlvenv: outside the checkout, since what git does not ignore travels);
#   3. .device/tlcache.tar.xz: the kernels of the queued calls' sections (prebuild_here.py; about 20 minutes on two
#      cores): the RGDR table's, the conv and routing sweeps' (the routing token sweep's first five candidates and
#      the lean_rounds ones), the small-batch decode tests', then the prefill tests' under
#      PREFILL_TEST_SETTINGS=registered.
# Run from anywhere in the checkout; nvcc 13 at /usr/local/bin.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ ! -f .device/bundle.tar.xz ]; then
    bash ../shared/tools/device-bundle.sh
    bash benchmarks/gpu/slim_bundle.sh
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
tlvenv=${TLVENV:-/work/tlvenv}
if ! "$tlvenv/bin/python" -c "import tilelang" 2>/dev/null; then
    python3.11 -m venv "$tlvenv"
    "$tlvenv/bin/pip" install -q torch==2.13.0  # the CPU build on this machine's disk, as scripts/setup.sh takes it
    "$tlvenv/bin/pip" install -q tilelang==0.1.15 pyflakes vulture nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
fi
site=$("$tlvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
prebuild() { PATH=/usr/local/bin:$PATH PYTHONPATH=$site .venv/bin/python benchmarks/gpu/prebuild_here.py "$@"; }
if [ ! -f .device/tlcache.tar.xz ]; then
    # Into a file beside it first: a run cut short leaves no cache that step 3 would then skip.
    partial=.device/tlcache.preparing.tar.xz
    prebuild --out "$partial" rgdr_table sweep:CausalConv1d sweep:MoETopK:5:lean_rounds decode_small
    PREFILL_TEST_SETTINGS=registered prebuild --out "$partial" --keep prefill
    mv "$partial" .device/tlcache.tar.xz
fi
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
travels=$(( (tree + $(du -cb .device | tail -1 | cut -f1)) / 1024 ))
sizes="bundle $(du -h .device/bundle.tar.xz | cut -f1), cache $(du -h .device/tlcache.tar.xz | cut -f1)"
echo "prepare_here.sh: $sizes; the tree and .device: $travels KiB of the 64 MiB that travels (keep it under 62.8)"
