el prefetch
# prefetch (issue 21): the decode split program asking L2 for its split's first tiles before it reads its length
# (DecodeSchedule.prefetch, fifty-second session). First its GPU tests (the small-batch candidate gather-bh16-pf4 on
# the spec rows and ragged lengths, the unchecked-metadata runs with prefetch, test_attention_gpu.py's prefetching
# schedule cases), then the sweep on the contiguous rows of B <= 8 (PREFETCH_MAX_BATCH): the gathered light
# program (the rule's at B=1 and B=3-8) beside it prefetching 2, 4 and 8 tiles, the bulk light program (B=2's rule)
# beside it prefetching 4, the sliced combine (B=1 past 16k) beside it prefetching 8. About 7 minutes.
timeout -s INT ${PREFETCH_TEST_S:-200} python3 -m pytest -rA -n 16 -p no:cacheprovider \
    backends/cuda/tests/test_attention_decode_small_batch_gpu.py backends/cuda/tests/test_attention_gpu.py \
    -k "pf4 or prefetch or pf2" > "$out/prefetch_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/prefetch_tests.log" | tail -16
prefetch_default=contiguous/gather-bh16,contiguous/gather-bh16-pf2,contiguous/gather-bh16-pf4
prefetch_default+=,contiguous/gather-bh16-pf8,contiguous/par-bh16,contiguous/par-bh16-pf4,contiguous/gather-bh16-sl
prefetch_default+=,contiguous/gather-bh16-sl-pf8
timeout -s INT ${PREFETCH_SWEEP_S:-330} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 \
    --budget-s $(( ${PREFETCH_SWEEP_S:-330} - 60 )) --max-batch ${PREFETCH_MAX_BATCH:-8} \
    --json "$out/prefetch_sweep.json" --candidates ${PREFETCH_CANDIDATES:-$prefetch_default} \
    > "$out/prefetch_sweep.log" 2>&1
grep -v TileLang "$out/prefetch_sweep.log" | grep -E "^==|^candidate|best by|\*|FAILED" | tail -60
