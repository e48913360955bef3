el staged
# staged (issue 17): the varlen conv's staged_starts twin (each start's slot and initial-state flag read by the
# search): every conv GPU test, which runs the twin on every varlen case bit for bit against the registered
# program (garbage metadata included), then convlayouts, which times both on each 4k row. About 5 minutes.
timeout -s INT ${CONV_TEST_S:-240} python3 -m pytest -rA -n 16 -p no:cacheprovider ${CONV_TEST_K:+-k "$CONV_TEST_K"} \
    backends/cuda/tests/test_conv_gpu.py > "$out/conv_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/conv_tests.log" | tail -15
source benchmarks/gpu/s_convlayouts.sh
