el rgdr5
# rgdr5 (issue 16): the default schedule's decode steps at a batch of every role (small, large, short), each
# tiling and speculative twin it runs against float64 (fp32 large now speculates too), and the four pinned
# speculative twins once more. About 2 minutes. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
timeout ${RGDR5_TEST_S:-200} python3 -m pytest -v -rf -n 10 -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py \
    -k "default_schedule_on_decode_steps or equals_its_general_twin" 2>&1 | grep -v -E "PytestBenchmark|warner" > "$OUT/rgdr5_tests.log"
grep -E "PASSED|FAILED|ERROR|[0-9]+ (passed|failed)" "$OUT/rgdr5_tests.log" | sed -E 's/.*::/  /' | tail -14
sed -n '/= FAILURES =/,/short test summary/p' "$OUT/rgdr5_tests.log" | grep -E "^E |assert|Error" | head -20
