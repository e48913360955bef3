el rgdr7
# rgdr7 (issue 16): round 7 of backends/cuda/bench/rgdr_lean.py (`--round two_tokens`): the short role's neighbours
# (rgdr_sweep.TWO_TOKEN_CANDIDATES: occupancy, threads, lanes a row, rows a lane, round 2's fields) on bf16's rows of
# two tokens a sequence and the one-token rows beside them, each candidate checked against float64 (poisoned output,
# untouched slots) and for its plain tiling's bits first, then timed beside the default schedule and the same-size
# copy. About 3 minutes (RGDR7_S bounds it, 240 s). Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
cd backends/cuda/bench
timeout ${RGDR7_S:-240} python3 rgdr_lean.py --round two_tokens --states bfloat16 --rounds ${RGDR7_ROUNDS:-3} \
    --json "$OUT/rgdr_two_tokens.json" 2>&1 | grep -v "tilelang.jit" > "$OUT/rgdr_two_tokens.log"
echo "rgdr_lean rc=$?"
grep -E '"build_failed"|"ok": false|"bits_equal_plain": false|Error' "$OUT/rgdr_two_tokens.log" | cut -c1-240 | head -12
sed -n '/^state /,$p' "$OUT/rgdr_two_tokens.log"
cd ../../..
