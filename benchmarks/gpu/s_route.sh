el route
# route (issue 21): MoE top-k routing. The GPU tests of the candidates and logits programs (1, 4 and 8 tokens a program,
# ids bit for bit against the rounds program, the candidates program's weights too, the logits program's within
# tolerance of them, and within tolerance of float64: spec rows, long runs of
# equal logits, probabilities underflowed to zero, the outsider check, a k-th tied with tau across lanes,
# non-finite logits, partial programs, the logits program's fast path on random float32 tokens; its kernels
# compiled concurrently first), then the sweep of the four routing rows (the registered logits program, its fields
# one at a time, 2-8 tokens a program, the candidates program; checked against float64, timed alone and in CUDA
# graphs beside the same-size copy; medians). One process for the tests: xdist workers would compile the same
# kernels each. ~6 minutes (the tests took 178 s on an H100 in the thirtieth session, 146 s in the forty-third with
# three shapes fewer than now: the 16-token long form, `heads` 4 and 2 came after, and the test of a lane holding
# most of the selection). ROUTE_TEST_K narrows the tests (`-k`).
timeout -s INT ${ROUTE_TEST_S:-300} python3 -m pytest -rA -p no:cacheprovider ${ROUTE_TEST_K:+-k "$ROUTE_TEST_K"} \
    backends/cuda/tests/test_moe_topk_routing_gpu.py backends/cuda/tests/test_moe_topk_routing_programs.py \
    > "$out/route_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/route_tests.log" | tail -15
source benchmarks/gpu/s_routesweep.sh
