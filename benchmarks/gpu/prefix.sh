# Sourced by run.sh: unpack the device bundle (.device/bundle.tar.xz), install the project offline, and define el (elapsed-time marks).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/site
if [ ! -f /tmp/site/.done ] && [ ! -f .device/bundle.tar.xz ]; then
    # A fresh checkout has no bundle: every section would fail at its first import, after the machine's start.
    echo "prefix.sh: no .device/bundle.tar.xz; run ../shared/tools/device-bundle.sh in this checkout and carry .device" >&2
    exit 2
fi
if [ ! -f /tmp/site/.done ]; then tar -C /tmp/site -xJf .device/bundle.tar.xz && touch /tmp/site/.done; fi
export PYTHONPATH=/tmp/site TILELANG_CACHE_DIR=/tmp/tlc PYTHONUNBUFFERED=1
# kernel_cache_count: the kernels in the cache now; run.sh prints it at the end, so a call shows whether its sections
# compiled anything the seed lacked (more than seeded) or only loaded (as many). (Not "TileLang" in these lines:
# device calls filter TileLang's own log lines out, and the fiftieth session's filter took the seed line with them.)
kernel_cache_count() { find /tmp/tlc -name executable.so 2>/dev/null | wc -l; }
# A TileLang cache compiled on the CPU machine (benchmarks/gpu/prebuild_here.py), where carried: the kernels it
# holds are loaded instead of compiled; a key it lacks compiles here as before.
if [ -f .device/tlcache.tar.xz ] && [ ! -f /tmp/tlc/.seeded ]; then
    mkdir -p /tmp/tlc && tar -C /tmp/tlc -xJf .device/tlcache.tar.xz && touch /tmp/tlc/.seeded \
        && echo "prefix.sh: kernel cache seeded with $(kernel_cache_count) kernels"
fi
# install_tree DIR LOG: the project and both backends of the tree at DIR, installed editable and offline over
# whatever was installed (pip's output in LOG, its tail printed on failure). The A/B sections install an older
# tree's copy with it and this one's again.
install_tree() {
    (cd "$1" && python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda \
        > "$2" 2>&1 || tail -5 "$2")
}
# unpack_old_tree TARBALL: an older tree of this repository (.device/tree_REV.tar.xz, made as s_sweepab.sh says)
# into a fresh /tmp/abold.
unpack_old_tree() { rm -rf /tmp/abold && mkdir -p /tmp/abold && tar -C /tmp/abold -xJf "$1"; }
install_tree . "$out/pip.log"
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
# ncu_bin: the Nsight Compute command line on this machine (on the PATH or in a CUDA or Nsight Compute install).
ncu_bin() { command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1; }
# ncu_row_set SET LOG [NCU_ARGS...]: Nsight Compute counters of row_profile.py SET's rows (each launched once
# through its op after an unprofiled build-and-launch; only those NVTX ranges are profiled), into $out/LOG, and
# the lines that matter printed: per kernel its time, DRAM and SM throughput, issue slots, occupancy, waves,
# registers and the stall reasons (cycles per issued instruction). NCU_ARGS adds filters (-k regex:...).
ncu_row_set() {
    local set=$1 log="$out/$2"; shift 2
    local ncu include=() stalls="" s
    ncu=$(ncu_bin)
    (cd backends/cuda/bench && timeout ${NCU_BUILD_S:-150} python3 row_profile.py "$set" --build-only 2>&1 | tail -2)
    for r in $(cd backends/cuda/bench && python3 row_profile.py "$set" --labels); do include+=(--nvtx-include "$r/"); done
    for s in long_scoreboard barrier short_scoreboard wait lg_throttle mio_throttle math_pipe_throttle membar sleeping drain \
            not_selected selected branch_resolving no_instruction dispatch_stall; do
        stalls+="smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio,"
    done
    (cd backends/cuda/bench && timeout ${NCU_S:-240} "$ncu" --clock-control none --nvtx "${include[@]}" "$@" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section WarpStateStats --metrics "${stalls}dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,sm__warps_launched.sum" \
        python3 row_profile.py "$set" > "$log" 2>&1)
    echo "ncu rc=$? ($ncu)"
    grep -E "^row |_kernel|kernel\b|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Grid Size|Waves Per SM|Warp Cycles Per Issued|highest-utilized pipeline|stalled_|dram__bytes|inst_executed|warps_launched|==ERROR|==WARNING" \
        "$log" | sed -E 's/ +/ /g' | head -160
}
