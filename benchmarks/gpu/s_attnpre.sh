el attnpre
# attnpre (issue 21): the attention prefill settings (PrefillBuildKey.program:grid:tile_counts:cache_write[:upto])
# timed beside SDPA's cuDNN, flash and efficient backends on the same prompts at 4k and 16k (B=1 contiguous, B=4 paged
# 16), with a summary table of the speed vs SDPA's best (target >= 0.9). By default: the op's registered key
# ('overlap:heads:kernel:launch:4096': the overlap program on the 'heads' grid, tile counts made by one 'kernel', the
# caches written by the attention where the mean prompt is at most 4096 tokens, by their own launch past it), and the
# same always launching the cache write and always writing from the attention. ATTNPRE_SETTINGS overrides. Then the
# prefill GPU tests of the settings PREFILL_TEST_SETTINGS names (default: the default setting), their kernels compiled
# concurrently first (the carried kernel archive holds the Qwen3-Next ones). The bench goes first so its numbers come
# back even if the tests run long.
# ATTNPRE_TEST_S (default 240) bounds the tests; ATTNPRE_TESTS=0 skips them (a bench-only call), ATTNPRE_BENCH=0
# the bench (a tests-only call). About 2.5 minutes with the carried archive.
if [ "${ATTNPRE_BENCH:-1}" != 0 ]; then
    attnpre_default=overlap:heads:kernel:launch:4096,overlap:heads:kernel:launch,overlap:heads:kernel:attention
    timeout -s INT -k 10 ${ATTNPRE_BENCH_S:-180} python3 -u backends/cuda/bench/attention_bench.py --no-decode \
        --reps 50 --settings "${ATTNPRE_SETTINGS:-$attnpre_default}" \
        --json "$out/attnpre_bench.json" > "$out/attnpre_bench.log" 2>&1
    grep -E "FAILED|Error" "$out/attnpre_bench.log" | head -6
    # The summary, or (a setting that hung or crashed ends the bench early) what was measured before.
    if grep -q "prefill summary" "$out/attnpre_bench.log"; then sed -n '/prefill summary/,$p' "$out/attnpre_bench.log"
    else grep -E "TFLOP/s|sdpa " "$out/attnpre_bench.log" | tail -24; fi
fi
if [ "${ATTNPRE_TESTS:-1}" != 0 ]; then
    el attnpre-tests
    # --durations: the first test's setup is the concurrent prebuild; faulthandler: a test past 120 s (a hung kernel,
    # not a compile: every kernel is built before the first test) prints its stack.
    PREFILL_TEST_SETTINGS=${PREFILL_TEST_SETTINGS:-default} timeout -s INT -k 10 ${ATTNPRE_TEST_S:-240} \
        python3 -m pytest -v -p no:cacheprovider --durations=12 -o faulthandler_timeout=120 \
        backends/cuda/tests/test_attention_prefill_gpu.py > "$out/attnpre_tests.log" 2>&1
    grep -c PASSED "$out/attnpre_tests.log" | sed 's/^/  passed: /'
    grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$out/attnpre_tests.log" | sed -E 's/.*:://' | tail -14
    sed -n '/slowest .*durations/,/^$/p' "$out/attnpre_tests.log" | head -8
    sed -n '/= FAILURES =/,/short test summary/p' "$out/attnpre_tests.log" | grep -E "^E |assert|Error" | head -12
fi
