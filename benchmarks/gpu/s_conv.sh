el conv
# conv (issue 17, helper conv): the causal conv1d GPU tests (both varlen programs: tiled and streamed), then
# the layer-op sweep restricted to the conv ops (8 update + 18 varlen candidates, checked against float64 with
# NaN outputs, timed alone and in a CUDA graph beside a same-size copy). About 5 minutes. A streamed winner's
# dict goes into block_shapes.py under TileLangCausalConv1dVarlen (then delete the tiled program).
timeout -s INT 200 python3 -m pytest -rA -n 16 -p no:cacheprovider backends/cuda/tests/test_conv_gpu.py \
    > "$out/conv_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/conv_tests.log" | tail -12
timeout -s INT 200 python3 -u backends/cuda/bench/layer_ops_sweep.py --only CausalConv1d --budget 170 --reps 40 \
    --json "$out/conv_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/conv_sweep.log"
grep -E "^CausalConv|fastest|^  Causal" "$out/conv_sweep.log" | tail -40
