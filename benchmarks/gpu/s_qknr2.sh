el qknr2
# qknr2 (issue 21): QKNormRope's lanes program against the registered first one (branch wip-qknr2). ~4 min wall.
# Assumes the project is installed (the lead's prefix); results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc-qknr2}
# 1. In parallel (~150 s on 16 cores): the sweep's 7 block shapes compiled at the GPU's own arch into
#    TileLang's disk cache (registers, spills, 16-byte loads), and the GPU tests: every QKNormRope spec row
#    on the registered program (kernel on NaN outputs and the op, vs float64) and on the lanes program at
#    3 block shapes (plan; 128 threads; 32 threads x 3 rows, whose programs straddle tokens), strided q
#    read in place and MRoPE with equal rows == NeoX on both programs; the CPU-side program tests.
timeout 170 python3 -u backends/cuda/bench/layer_ops_sweep.py --compile-only --only QKNorm --arch sm_90 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/qknr2_compile.log" &
timeout 170 python3 -m pytest -q -n 12 -k "QKNormRope or qk_norm or mrope" backends/cuda/tests/test_spec_rows_gpu.py \
    backends/cuda/tests/test_model_ops_gpu.py backends/cuda/tests/test_qk_norm_rope_programs.py 2>&1 \
    | tail -40 > "$OUT/qknr2_tests.log" &
wait
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/qknr2_tests.log" | tail -12
# 2. The comparison (~80 s, cached builds): each block shape checked against float64 on the 6 rows that build
#    it, then timed alone and in a CUDA graph beside the same-size copy. No candidate starts after --budget s.
timeout 140 python3 -u backends/cuda/bench/layer_ops_sweep.py --only QKNorm --reps 30 --budget 80 \
    --json "$OUT/qknr2_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" | tee "$OUT/qknr2_sweep.log"
