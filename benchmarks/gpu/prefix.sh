# Sourced by run.sh: unpack the device bundle (.device/bundle.tar.xz), install the project offline, and define el (elapsed-time marks).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/site
if [ ! -f /tmp/site/.done ]; then tar -C /tmp/site -xJf .device/bundle.tar.xz && touch /tmp/site/.done; fi
export PYTHONPATH=/tmp/site TILELANG_CACHE_DIR=/tmp/tlc PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda > "$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 ))s] $*"; }
# rgdr_gpu_tests NAME LIMIT_S WORKERS SELECTION: test_rgdr_gpu.py's tests matching SELECTION (-k), -v so that a
# run the limit cuts still names each test that ended; the log is $OUT/NAME_tests.log; prints each test's
# outcome and the assertion lines of any failure.
rgdr_gpu_tests() {
    local log="${OUT:-$out}/$1_tests.log"
    timeout "$2" python3 -m pytest -v -rf -n "$3" -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py -k "$4" 2>&1 \
        | grep -v -E "PytestBenchmark|warner" > "$log"
    grep -E "PASSED|FAILED|ERROR|[0-9]+ (passed|failed)" "$log" | sed -E 's/.*::/  /' | tail -24
    sed -n '/= FAILURES =/,/short test summary/p' "$log" | grep -E "^E |assert|Error" | head -20
}
