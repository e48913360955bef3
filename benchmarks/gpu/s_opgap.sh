el opgap
# opgap (issue 17): the chunked prefill's metadata kernel against torch's table (GPU tests, with the mixed-length
# and op cases against float64), then the op against its launcher at 32k, interleaved, with host times and the
# kernels and ATen ops one call runs (backends/cuda/bench/chunk_gdr_op_gap.py). About 4 minutes.
timeout ${OPGAP_TEST_S:-200} python3 -m pytest -q -n 8 -p no:cacheprovider backends/cuda/tests/test_chunk_gdr_gpu.py \
    -k "${OPGAP_PYTEST:-metadata or many_short or op_on_cuda or around_the_chunk or 4k}" 2>&1 \
    | grep -v -E "warner|PytestBenchmark" > "$out/chunk_gdr_tests.log"
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$out/chunk_gdr_tests.log" | tail -12
timeout ${OPGAP_S:-240} python3 backends/cuda/bench/chunk_gdr_op_gap.py ${OPGAP_ARGS:-} 2>&1 | grep -v "tilelang.jit" \
    | tee "$out/chunk_gdr_op_gap.log" | tail -40
