el rgdr4
# rgdr4 (issue 16, 21): the default RGDR schedule with speculating roles (fp32 small+short, bf16 small)
# and QKNormRope's registered lanes program. <= 9 minutes. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
# 0. Prebuild the timing's kernels (plain, default, every role speculating; fp32 and bf16) beside the tests.
(cd backends/cuda/bench && timeout 300 python3 rgdr_speculate.py --build-only > "$OUT/rgdr4_prebuild.log" 2>&1) &
pre=$!
# 1. Every RGDR GPU test (the default schedule now builds and runs speculative twins on decode steps; graph
#    capture included) and QKNormRope's spec rows on the registered lanes program, against float64.
timeout ${RGDR4_TEST_S:-320} python3 -m pytest -q -rf -n 14 ${RGDR4_PYTEST:-} -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py \
    backends/cuda/tests/test_rgdr_fuzz_gpu.py "backends/cuda/tests/test_spec_rows_gpu.py" -k "not test_spec_rows_gpu or QKNormRope or qk_norm" 2>&1 \
    | grep -v -E "PytestBenchmark|warner" | tail -${RGDR4_TAIL:-25} > "$OUT/rgdr4_tests.log"
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/rgdr4_tests.log" | tail -15
wait "$pre"; tail -2 "$OUT/rgdr4_prebuild.log"
# 2. Timing: B=1/8/32/128/256 (T_b=1) and B=32 T_b=2, plain vs default vs every role, 3 rounds interleaved.
cd backends/cuda/bench
timeout 170 python3 rgdr_speculate.py --rounds 3 --json "$OUT/rgdr4_timing.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/rgdr4_timing.log"; tail -14 "$OUT/rgdr4_timing.log"
cd ../../..
