el attnpre
# attnpre (issue 21): the attention prefill programs (PrefillBuildKey.program: the default 'pipelined' and the
# 'overlap' candidate, the pipeline written out so the softmax of one key tile overlaps the P·V product of the
# previous one) against float64 on every prefill GPU test, then both timed beside SDPA's cuDNN, flash and efficient
# backends on the same prompts at 4k and 16k (B=1 contiguous, B=4 paged 16): a summary table with each program's
# speed as a multiple of SDPA's best (target >= 0.9). One pytest process: its fixture compiles every key
# concurrently and fills TileLang's cache, so the bench compiles nothing. About 5 minutes.
timeout -s INT -k 10 230 python3 -m pytest -v -p no:cacheprovider backends/cuda/tests/test_attention_prefill_gpu.py \
    > "$out/attnpre_tests.log" 2>&1
grep -E "PASSED|FAILED|ERROR|[0-9]+ (passed|failed)" "$out/attnpre_tests.log" | grep -v PASSED | sed -E 's/.*:://' | tail -14
grep -c PASSED "$out/attnpre_tests.log" | sed 's/^/  passed: /'
sed -n '/= FAILURES =/,/short test summary/p' "$out/attnpre_tests.log" | grep -E "^E |assert|Error" | head -12
timeout -s INT -k 10 110 python3 -u backends/cuda/bench/attention_bench.py --no-decode --reps 50 \
    --json "$out/attnpre_bench.json" > "$out/attnpre_bench.log" 2>&1
grep -v TileLang "$out/attnpre_bench.log" | sed -n '/prefill summary/,$p'
grep -E "FAILED|Error" "$out/attnpre_bench.log" | head -6
