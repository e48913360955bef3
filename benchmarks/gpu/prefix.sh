# Sourced by run.sh: unpack the device bundle (.device/bundle.tar.xz), install the project offline, and define el (elapsed-time marks).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/site
if [ ! -f /tmp/site/.done ]; then tar -C /tmp/site -xJf .device/bundle.tar.xz && touch /tmp/site/.done; fi
export PYTHONPATH=/tmp/site TILELANG_CACHE_DIR=/tmp/tlc PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda > "$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
