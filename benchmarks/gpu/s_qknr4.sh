# qknr4 (issue 21): the two checks the twelfth session's first calls left, in one call (about 5 minutes).
# 1. In parallel: the prefill GPU tests with the new default setting only (overlap:heads:kernel:launch; every
#    spec row, the ragged, uncovered-token, empty, head-group and graph tests against float64: the 8 kernels
#    it needs compile first), and QKNormRope's three prefill rows compiled for the registered lanes entry and
#    the sweep's 2 leading candidates (the Qwen3.5 MRoPE row was not reached by qknr3's budget).
# 2. The QKNormRope sweep on those rows (graph time beside the same-size copy), each candidate checked first.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
el qknr4
PREFILL_TEST_SETTINGS=default timeout -s INT -k 10 ${QKNR4_TEST_S:-270} python3 -m pytest -v -p no:cacheprovider \
    --durations=6 -o faulthandler_timeout=200 backends/cuda/tests/test_attention_prefill_gpu.py > "$OUT/prefill_tests.log" 2>&1 &
timeout 240 python3 -u backends/cuda/bench/layer_ops_sweep.py --compile-only --only QKNorm --candidates 2 --arch sm_90 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/qknr4_compile.log" &
# The routed experts' kernels into TileLang's disk cache too, for an `experts` section after this one.
timeout 240 python3 -u backends/cuda/bench/prebuild_spec_rows.py MoEGroupedExpertsFwdOp > "$OUT/experts_prebuild0.log" 2>&1 &
wait
el qknr4-tests-done
grep -c PASSED "$OUT/prefill_tests.log" | sed 's/^/  prefill passed: /'
grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$OUT/prefill_tests.log" | sed -E 's/.*:://' | tail -14
sed -n '/= FAILURES =/,/short test summary/p' "$OUT/prefill_tests.log" | grep -E "^E |assert|Error" | head -12
timeout 130 python3 -u backends/cuda/bench/layer_ops_sweep.py --only QKNorm --candidates 2 --reps 30 --budget 100 \
    --json "$OUT/qknr4_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/qknr4_sweep.log"
sed -n '/^op  /,$p' "$OUT/qknr4_sweep.log"
