el attnpre
# attnpre (issue 21): the attention prefill settings (PrefillBuildKey.program x .grid x .tile_counts: the default
# 'pipelined:tiles:torch', the 'overlap' program that runs the softmax of one key tile while the P·V product of the
# previous one runs, the 'heads' grid that launches a query tile's heads together, the tile prefix sums made by one
# 'kernel' instead of about eight torch ops) timed beside SDPA's cuDNN, flash and efficient
# backends on the same prompts at 4k and 16k (B=1 contiguous, B=4 paged 16), with a summary table of the speed
# vs SDPA's best (target >= 0.9); then every prefill GPU test (each setting against float64). The bench
# goes first so its numbers come back even if the tests' compiles run long; its builds (concurrent) fill TileLang's
# cache for the tests' Qwen3-Next keys. About 5.5 minutes.
timeout -s INT -k 10 180 python3 -u backends/cuda/bench/attention_bench.py --no-decode --reps 50 \
    --json "$out/attnpre_bench.json" > "$out/attnpre_bench.log" 2>&1
grep -E "FAILED|Error" "$out/attnpre_bench.log" | head -6
# The summary, or (a setting that hung or crashed ends the bench early) what was measured before.
if grep -q "prefill summary" "$out/attnpre_bench.log"; then sed -n '/prefill summary/,$p' "$out/attnpre_bench.log"
else grep -E "TFLOP/s|sdpa " "$out/attnpre_bench.log" | tail -24; fi
el attnpre-tests
timeout -s INT -k 10 160 python3 -m pytest -v -p no:cacheprovider backends/cuda/tests/test_attention_prefill_gpu.py \
    > "$out/attnpre_tests.log" 2>&1
grep -c PASSED "$out/attnpre_tests.log" | sed 's/^/  passed: /'
grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$out/attnpre_tests.log" | sed -E 's/.*:://' | tail -14
sed -n '/= FAILURES =/,/short test summary/p' "$out/attnpre_tests.log" | grep -E "^E |assert|Error" | head -12
