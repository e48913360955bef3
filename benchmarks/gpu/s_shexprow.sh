el shexprow
# shexprow (issue 21): MoESharedExpert's spec-row GPU tests alone, the real-size decode rows included, after the
# float64 reference began rounding the gate logit as the spec does (the shexp run of 2026-12-03 failed
# qwen3-next-80b-decode-b1 at 0.11 against an unrounded logit). About a minute with the builds.
OUT=${OUT:-$out}; mkdir -p "$OUT"
timeout ${SHEXPROW_S:-110} python3 -m pytest -v -n 8 -p no:cacheprovider backends/cuda/tests/test_spec_rows_gpu.py \
    -k "MoESharedExpert" > "$OUT/shexprow_tests.log" 2>&1
echo "shexprow rc=$?"; grep -E "FAILED|Error" "$OUT/shexprow_tests.log" | head -8; tail -1 "$OUT/shexprow_tests.log"
