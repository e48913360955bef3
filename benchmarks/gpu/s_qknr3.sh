# qknr3 (issue 21): QKNormRope's lanes candidates (table pairs/warp, 2π-reduced sincos, vector partners, 16-bit rotation)
# against the registered lanes program at 40 registers (branch qknr3). under 5 min wall (timeouts 180 + 115 s).
# Assumes the project is installed (the lead's prefix); results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc-qknr3}
# 1. In parallel (~170 s on 16 cores): the sweep's 10 block shapes compiled at the GPU's own arch into
#    TileLang's disk cache (registers, spills), and the GPU tests: every QKNormRope spec row on the
#    registered program and on 4 candidate shapes (kernel on NaN outputs vs float64: pairs and warp tables
#    with the reduced sincos, vector partners and 16-bit rotation, at the plan's block and at 32 threads x 3
#    rows), strided q read in place and MRoPE with equal rows == NeoX on both; the CPU-side tests.
timeout 180 python3 -u backends/cuda/bench/layer_ops_sweep.py --compile-only --only QKNorm --arch sm_90 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/qknr3_compile.log" &
timeout 180 python3 -m pytest -q -n 12 \
    -k "QKNormRope and (kernel_writes or op_on_cuda or pairs or warp or vectors) or test_qk_norm_rope_reads or test_mrope or programs" \
    backends/cuda/tests/test_spec_rows_gpu.py backends/cuda/tests/test_model_ops_gpu.py \
    backends/cuda/tests/test_qk_norm_rope_programs.py 2>&1 | tail -40 > "$OUT/qknr3_tests.log" &
wait
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/qknr3_tests.log" | tail -12
grep -A10 "qwen3-next-prefill-16k: checked" "$OUT/qknr3_compile.log"  # one row's 10 builds: registers, spills
# 2. The comparison (~100 s, cached builds; 10 shapes x 3 rows): each block shape checked against float64 on
#    the rows that build it, then timed alone and in a CUDA graph beside the same-size copy. No candidate starts after --budget s.
timeout 115 python3 -u backends/cuda/bench/layer_ops_sweep.py --only QKNorm --reps 30 --budget 85 \
    --json "$OUT/qknr3_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" | tee "$OUT/qknr3_sweep.log"
