el route
# route (issue 21): MoE top-k routing. The GPU tests of the candidates and logits programs (1, 4 and 8 tokens a program,
# bit for bit against the registered rounds program and within tolerance of float64: spec rows, long runs of
# equal logits, probabilities underflowed to zero, the outsider check, non-finite logits, partial programs;
# its 64 kernels compiled concurrently first), then the sweep of the routing rows (rounds against candidates
# at 1/2/4/8 tokens a program, the logits program plain and as the registered key's shape, checked against float64, timed alone and in CUDA graphs beside the same-size
# copy; medians). One process for the tests: xdist workers would compile the same kernels each. ~3.5 minutes.
timeout -s INT ${ROUTE_TEST_S:-130} python3 -m pytest -rA -p no:cacheprovider backends/cuda/tests/test_moe_topk_routing_gpu.py \
    backends/cuda/tests/test_moe_topk_routing_programs.py > "$out/route_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/route_tests.log" | tail -15
timeout -s INT ${ROUTE_SWEEP_S:-95} python3 -u backends/cuda/bench/layer_ops_sweep.py --only MoETopK --budget ${ROUTE_BUDGET:-75} \
    --reps 40 --json "$out/route_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/route_sweep.log"
grep -E "^copy peak|^MoETopK|fastest|^  MoETopK|Error|error" "$out/route_sweep.log" | grep -v '^{' | tail -30
