el persist
# persist (issue 16): the persistent streamed RGDR program (RGDRTiling.persistent; backends/cuda/bench/rgdr_persistent.py).
# Lowering test first (every RGDR layout for sm_90, the persistent ones included), then per state: the float64
# check and bit equality with the plain streamed program on decode/MTP steps at B = 1..128 and a ragged batch
# with padding, then B = 32..256 (T_b = 1) and B = 128 T_b = 2 timed beside the plain program and the same-size
# copy. About 3 minutes. PERSIST_GPU_TESTS=1 adds test_rgdr_gpu.py's persistent tests (-k persistent, about
# 3 minutes more). PERSIST_ARGS passes options to the bench (e.g. "--per-sm 2,8"). Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
timeout ${PERSIST_LOWER_S:-150} python3 -m pytest -q -p no:cacheprovider backends/cuda/tests/test_rgdr_lowering.py > "$OUT/persist_lowering.log" 2>&1
echo "lowering rc=$?"; tail -2 "$OUT/persist_lowering.log"
cd backends/cuda/bench
timeout ${PERSIST_S:-300} python3 rgdr_persistent.py ${PERSIST_ARGS:-} --json "$OUT/rgdr_persistent.json" 2>&1 | grep -v "tilelang.jit" > "$OUT/rgdr_persistent.log"
echo "persist rc=${PIPESTATUS[0]}"; grep -E '"check"|Error|error' "$OUT/rgdr_persistent.log" | cut -c1-200 | head -24
sed -n '/^state /,$p' "$OUT/rgdr_persistent.log"
cd ../../..
if [ "${PERSIST_GPU_TESTS:-0}" = 1 ]; then
  timeout ${PERSIST_TEST_S:-240} python3 -m pytest -v -rf -n 10 -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py -k persistent 2>&1 \
      | grep -v -E "PytestBenchmark|warner" > "$OUT/persist_tests.log"
  grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$OUT/persist_tests.log" | tail -12
  sed -n '/= FAILURES =/,/short test summary/p' "$OUT/persist_tests.log" | grep -E "^E |assert|Error" | head -20
fi
