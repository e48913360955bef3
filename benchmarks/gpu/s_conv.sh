el conv
# conv (issue 17): the causal conv1d GPU tests (the streamed varlen program, now the only one, at the
# registered shape and others, W up to 8), then the layer-op sweep restricted to the conv ops (7 update + 14
# varlen candidates, checked against float64 with NaN outputs, timed alone and in a CUDA graph beside a
# same-size copy). About 4 minutes. A varlen winner's dict goes into block_shapes.py (TileLangCausalConv1dVarlen).
timeout -s INT 200 python3 -m pytest -rA -n 16 -p no:cacheprovider backends/cuda/tests/test_conv_gpu.py \
    > "$out/conv_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/conv_tests.log" | tail -12
timeout -s INT 200 python3 -u backends/cuda/bench/layer_ops_sweep.py --only CausalConv1d --budget 150 --reps 40 \
    --json "$out/conv_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/conv_sweep.log"
grep -E "^CausalConv|fastest|^  Causal" "$out/conv_sweep.log" | tail -40
