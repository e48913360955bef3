el rgdr6
# rgdr6 (issue 16): the RGDR tilings of rgdr_sweep.LEAN_CANDIDATES (the current round, 5: bf16 decode steps on one-
# and four-row programs, NOTES.md seventeenth session; round 4 launched every registered role as a programmatic
# dependent; rounds 1-3 were instruction cuts and tile shapes). Their GPU tests (float64 on a poisoned output, untouched slots, the plain
# tiling's bits, unchecked metadata, six steps chained on one pool on a stream and in a graph), then backends/cuda/bench/rgdr_lean.py: each candidate on its role's rows (LEAN_ROWS) beside
# the default schedule and the same-size copy. Under 10 minutes, alone in its call. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
rgdr_gpu_tests rgdr6 "${RGDR6_TEST_S:-270}" 12 "lean_candidate"
el rgdr6-bench
cd backends/cuda/bench
timeout ${RGDR6_BENCH_S:-270} python3 rgdr_lean.py --states bfloat16,float32 --rounds ${RGDR6_ROUNDS:-3} \
    --json "$OUT/rgdr_lean.json" 2>&1 | grep -v "tilelang.jit" > "$OUT/rgdr_lean.log"
echo "rgdr_lean rc=$?"; grep -E '"build_failed"|"ok": false|"bits_equal_plain": false|Error' "$OUT/rgdr_lean.log" | cut -c1-240 | head -12
sed -n '/^state /,$p' "$OUT/rgdr_lean.log"
cd ../../..
