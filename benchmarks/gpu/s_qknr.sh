el qknr
# qknr (issue 21, helper qknr): QKNormRope's rows program (not yet run on a GPU) against the first one. About
# 4 minutes. The sweep checks every block shape against float64 on the 6 rows that build it, with NaN outputs,
# and times it alone and in a CUDA graph beside the same-size copy; a rows winner goes into block_shapes.py
# (then run the QKNormRope GPU tests below again: they test the registered program).
timeout -s INT 150 python3 -u backends/cuda/bench/prebuild_spec_rows.py QKNormRopeFwdOp 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/qknr_prebuild.log" &
timeout -s INT 150 python3 -u backends/cuda/bench/layer_ops_sweep.py --compile-only --only QKNorm --arch sm_90 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/qknr_compile.log" &
wait
timeout -s INT 120 python3 -m pytest -rA -n 8 -p no:cacheprovider -k "QKNormRope or qk_norm or mrope" \
    backends/cuda/tests/test_spec_rows_gpu.py backends/cuda/tests/test_model_ops_gpu.py \
    backends/cuda/tests/test_qk_norm_rope_programs.py > "$out/qknr_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$out/qknr_tests.log" | tail -8
timeout -s INT 110 python3 -u backends/cuda/bench/layer_ops_sweep.py --only QKNorm --reps 30 --budget 60 \
    --json "$out/qknr_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/qknr_sweep.log"
grep -E "^QKNorm|fastest|^  QKNorm" "$out/qknr_sweep.log" | tail -30
