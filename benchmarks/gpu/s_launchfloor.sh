el launchfloor
# launchfloor (issue 15): the raw RGDR launch (10.0 us on the host against RMSNorm's 4.9) taken apart on the same
# B=1 inputs: TVM-FFI's testing.nop with 0/3/9 CUDA tensors, the compiled RGDR function as a programmatic dependent
# and launched plainly, the launcher's run, RMSNorm's compiled function (backends/cuda/bench/launch_floor.py). About
# a minute (two RGDR builds and one RMSNorm build when the TileLang cache is cold).
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
(cd backends/cuda/bench && timeout ${LAUNCHFLOOR_S:-150} python3 launch_floor.py > "$out/launch_floor.log" 2>&1; echo "rc=$?")
grep -v TileLang "$out/launch_floor.log" | tail -12
