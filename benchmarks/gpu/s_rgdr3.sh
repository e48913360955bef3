el rgdr3
# rgdr3 (issue 16, branch wip-rgdr3): speculative RGDR decode programs. <= 4 minutes.
# From the repository root, the project installed (the lead's prefix); results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
# 0. Prebuild the timing's 14 kernels (default + speculative schedules, fp32 and bf16) beside the tests.
timeout 200 python3 rgdr_speculate.py --build-only > "$OUT/rgdr3_prebuild.log" 2>&1 &
pre=$!
cd ../../..
# 1. Correctness of the new path (the default programs' SASS is byte-identical to main's, checked with
#    nvcc 13.0 for sm_90a on the four default tilings): speculative vs general twin bit-equality on decode
#    and ragged batches, every key corner on decode steps, garbage metadata (hypothesis), graph capture.
timeout 150 python3 -m pytest -q -rf -n 8 -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py \
    backends/cuda/tests/test_rgdr_fuzz_gpu.py -k "speculative or captures" 2>&1 | tail -30 | tee "$OUT/rgdr3_tests.log"
wait "$pre"; tail -3 "$OUT/rgdr3_prebuild.log"
# 2. Timing: B=1/32/256 (T_b=1) and B=32 T_b=2, default vs speculative, 3 rounds interleaved, same-size copy.
cd backends/cuda/bench
timeout 85 python3 rgdr_speculate.py --rounds 3 --json "$OUT/rgdr3_timing.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" | tee "$OUT/rgdr3_timing.log" | tail -14
