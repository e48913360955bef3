el ring
# ring (issue 16): the streamed RGDR program's state ring (`RGDRTiling.ring`, opt-in): the GPU test (every pinned
# ring tiling against float64 and bit for bit against its plain twin on decode, MTP and ragged batches, at splits
# 1, 3 and one chunk a program), then backends/cuda/bench/rgdr_ring.py: each candidate checked once more, then
# timed beside its plain twin, the default schedule and the same-size copy at B = 32..256 (T_b = 1) and
# B = 128 T_b = 2. About 7 minutes, alone in its call. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
timeout ${RING_TEST_S:-180} python3 -m pytest -v -rf -n 8 -p no:cacheprovider backends/cuda/tests/test_rgdr_gpu.py \
    -k "ring_program" 2>&1 | grep -v -E "PytestBenchmark|warner" > "$OUT/ring_tests.log"
echo "ring tests rc=${PIPESTATUS[0]}"
grep -E "PASSED|FAILED|ERROR|[0-9]+ (passed|failed)" "$OUT/ring_tests.log" | sed -E 's/.*::/  /' | tail -10
sed -n '/= FAILURES =/,/short test summary/p' "$OUT/ring_tests.log" | grep -E "^E |assert|Error" | head -20
cd backends/cuda/bench
timeout ${RING_BENCH_S:-360} python3 rgdr_ring.py --json "$OUT/rgdr_ring.json" 2>&1 | grep -v "tilelang.jit" > "$OUT/rgdr_ring.log"
echo "ring bench rc=${PIPESTATUS[0]}"
grep -E '"check"|Error|error' "$OUT/rgdr_ring.log" | cut -c1-220 | head -20; sed -n '/^\(float32\|bfloat16\): /,$p' "$OUT/rgdr_ring.log"
cd ../../..
