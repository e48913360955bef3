el declanes
# declanes (issue 21): the attention decode's lanes split program (DecodeSchedule(program="lanes"): CUDA cores, every
# row a thread loads issued at once into registers, 32-position tiles, two programs an SM; rows read one by one, so
# any block size), a candidate for B <= 8 (backends/cuda/NOTES.md "Forty-fifth session"). First its GPU tests
# (`-k lanes`: float64 on the spec rows, ragged lengths at up to 256 splits, paged 16- and 64-token blocks, one long
# sequence, padding-only and empty batches, unchecked lengths and block entries), then the sweep on the rows of
# B <= 8: the rule's light programs (par-bh16, gather-bh16) beside the lanes program at its plan and pinned split
# counts, with the same-size copy (DECLANES_CANDIDATES overrides). Worst case about 6 minutes; alone in its call.
timeout -s INT ${DECLANES_TEST_S:-200} python3 -m pytest -rA -p no:cacheprovider -k lanes \
    backends/cuda/tests/test_attention_decode_small_batch_gpu.py > "$out/declanes_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/declanes_tests.log" | tail -16
sed -n '/= FAILURES =/,/short test summary/p' "$out/declanes_tests.log" | grep -E "^E " | head -12
el declanes-sweep
timeout -s INT ${DECLANES_SWEEP_S:-150} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 \
    --budget-s 110 --max-batch 8 --json "$out/declanes_sweep.json" \
    --candidates ${DECLANES_CANDIDATES:-contiguous/par-bh16,contiguous/par-lanes,paged/gather-bh16,paged/lanes} \
    > "$out/declanes_sweep.log" 2>&1
grep -v TileLang "$out/declanes_sweep.log" | tail -40
