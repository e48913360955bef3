el unchk
# unchk (issues 17, 21): the memory-bound kernels without TileLang's bounds checks (the build-key / schedule field
# unchecked_index; backends/cuda/NOTES.md "Unchecked accesses in the memory-bound kernels"). First their GPU tests,
# each unchecked program bit for bit against the checked one on the existing cases (garbage metadata included) and
# within tolerance of float64: the conv tests (every case runs both programs), the routing tests of the unchecked
# shape. Then the timings, each unchecked candidate beside the registered one and the same-size copy: the conv rows
# and the routing rows (layer_ops_sweep.py --candidates 1: the unchecked candidate is each row's first). (The
# attention decode's unchecked schedule tied the checked one within 0.8% and was deleted, with its steps here.)
# Every step bounded (worst case 320 s); alone in its call.
timeout -s INT ${UNCHK_CONV_TEST_S:-120} python3 -m pytest -rA -n 16 -p no:cacheprovider backends/cuda/tests/test_conv_gpu.py \
    > "$out/unchk_conv_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/unchk_conv_tests.log" | tail -12
el unchk-route-tests
timeout -s INT ${UNCHK_ROUTE_TEST_S:-75} python3 -m pytest -rA -p no:cacheprovider -k unchecked \
    backends/cuda/tests/test_moe_topk_routing_gpu.py > "$out/unchk_route_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/unchk_route_tests.log" | tail -12
el unchk-conv-sweep
timeout -s INT ${UNCHK_CONV_SWEEP_S:-75} python3 -u backends/cuda/bench/layer_ops_sweep.py --only CausalConv1d \
    --candidates 1 --budget 60 --reps 40 --json "$out/unchk_conv_sweep.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/unchk_conv_sweep.log"
grep -E "^CausalConv|fastest|^  Causal|Error|error" "$out/unchk_conv_sweep.log" | grep -v '^{' | tail -16
el unchk-route-sweep
timeout -s INT ${UNCHK_ROUTE_SWEEP_S:-50} python3 -u backends/cuda/bench/layer_ops_sweep.py --only MoETopK \
    --candidates 1 --budget 35 --reps 40 --json "$out/unchk_route_sweep.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/unchk_route_sweep.log"
grep -E "^copy peak|^MoETopK|fastest|^  MoETopK|Error|error" "$out/unchk_route_sweep.log" | grep -v '^{' | tail -12
