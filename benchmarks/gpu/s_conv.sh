el conv
# conv (issue 17): the causal conv1d kernels: the GPU tests (every block shape against float64, poisoned outputs,
# pools bit for bit), then the conv sweep (the registered shapes beside the candidates, same-size copy in the
# same run; CONV_ONLY narrows it, e.g. CausalConv1dUpdate). About 4 minutes.
# CONV_TESTS=0 skips the GPU tests (a call that only sweeps, on a card where they passed before; -k nothing still
# started 16 workers).
if [ "${CONV_TESTS:-1}" != 0 ]; then
    timeout -s INT ${CONV_TEST_S:-330} python3 -m pytest -rA -n 16 -p no:cacheprovider \
        ${CONV_TEST_K:+-k "$CONV_TEST_K"} backends/cuda/tests/test_conv_gpu.py > "$out/conv_tests.log" 2>&1
    grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/conv_tests.log" | tail -15
fi
timeout -s INT ${CONV_SWEEP_S:-290} python3 -u backends/cuda/bench/layer_ops_sweep.py --only ${CONV_ONLY:-CausalConv1d} --budget ${CONV_BUDGET:-240} --reps 40 \
    ${SWEEP_WARMUP_MS:+--warmup-ms $SWEEP_WARMUP_MS} \
    --json "$out/conv_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/conv_sweep.log"
grep -E "^CausalConv|fastest|^  Causal|Error|error" "$out/conv_sweep.log" | tail -45
