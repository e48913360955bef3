el rgdr4
# rgdr4 (issue 16, 21): the GPU tests of the default RGDR schedule with speculating roles (fp32 small and short,
# bf16 small) and of QKNormRope's registered lanes program. About 8 minutes (396 s at -n 15 alone for 120 tests; 124 now); the
# timing is its own section, rgdrtime. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
# Every RGDR GPU test (the default schedule now builds and runs speculative twins on decode steps; graph
#  capture included) and QKNormRope's spec rows on the registered lanes program, against float64.
#    -v names each test as it ends, so a run the timeout cuts still says which one failed (a -q run
#    cut at 320 s once showed an F and no name).
#    RGDR4_K replaces the selection (RGDR4_K=fuzz: the fuzz tests alone); RGDR4_PYTEST adds options.
timeout ${RGDR4_TEST_S:-480} python3 -m pytest -v -rf -n 15 ${RGDR4_PYTEST:-} -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py \
    backends/cuda/tests/test_rgdr_fuzz_gpu.py "backends/cuda/tests/test_spec_rows_gpu.py" \
    -k "${RGDR4_K:-not test_spec_rows_gpu or QKNormRope or qk_norm}" 2>&1 \
    | grep -v -E "PytestBenchmark|warner" > "$OUT/rgdr4_tests.log"
grep -c PASSED "$OUT/rgdr4_tests.log"; grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$OUT/rgdr4_tests.log" | tail -15
sed -n '/= FAILURES =/,/short test summary/p' "$OUT/rgdr4_tests.log" | head -60
