el tests
# The attention decode and prefill, layer-op and conv GPU tests (the schedule rule and block shapes of issues 21
# and 17), alone: beside the RGDR tests, at -n 8 each, neither run finished in 320 s (2026-12-02);
# alone at -n 16 the conv file took 61 s. About 4 minutes.
mkdir -p "$out"
timeout -s INT 300 python3 -m pytest -rA -n 16 -p no:cacheprovider --durations=8 backends/cuda/tests/test_attention_gpu.py \
    backends/cuda/tests/test_attention_prefill_gpu.py backends/cuda/tests/test_gated_delta_net_gpu.py backends/cuda/tests/test_conv_gpu.py > "$out/tests_layers.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/tests_layers.log" | tail -12
