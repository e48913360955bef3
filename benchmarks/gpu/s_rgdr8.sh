el rgdr8
# rgdr8 (issue 16): round 8, the roles at B >= 32 with their state written through cache-streaming stores
# (RGDRTiling.streaming_stores). Their GPU tests first (test_rgdr_gpu.py -k streaming-stores: float64 on a poisoned
# output, untouched slots, the plain tiling's bits, and six dependent steps chained on one pool), then
# backends/cuda/bench/rgdr_lean.py --round streaming_stores: each candidate on its role's rows beside the default
# schedule and the same-size copy. About 4 minutes (RGDR8_TEST_S, RGDR8_S bound them: 150 s, 200 s).
OUT=${OUT:-$out}; mkdir -p "$OUT"
rgdr_gpu_tests rgdr8 "${RGDR8_TEST_S:-150}" 8 "streaming-stores"
el rgdr8-bench
cd backends/cuda/bench
timeout ${RGDR8_S:-200} python3 rgdr_lean.py --round streaming_stores --states bfloat16,float32 \
    --rounds ${RGDR8_ROUNDS:-3} --json "$OUT/rgdr_streaming_stores.json" 2>&1 | grep -v "tilelang.jit" \
    > "$OUT/rgdr_streaming_stores.log"
echo "rgdr_lean rc=$?"
grep -E '"build_failed"|"ok": false|"bits_equal_plain": false|Error' "$OUT/rgdr_streaming_stores.log" | cut -c1-240 \
    | head -12
sed -n '/^state /,$p' "$OUT/rgdr_streaming_stores.log"
cd ../../..
