el tail
# tail (issue 21): the decode's tail merge (DecodeSchedule(combine="tail"): the gathered light program's last
# programs of a group merge its splits in the split launch, no combine launch; fifty-second session). First its GPU
# tests (-k tail of the small-batch and decode modules: float64 on the spec rows and ragged lengths at any split
# count, padding-only and empty batches, unchecked metadata, chained steps in a CUDA graph, two streams at once),
# each process killed past its limit (a merger that waited for ever would hang it); then the sweep on the
# contiguous rows of B <= 8 (TAIL_MAX_BATCH): the bulk light program (B=2's rule) at its plan, the gathered one
# (B=1 and 3-8) with its split counts, the same merging in its launch, and with the sliced combine. About 5 minutes.
timeout -s INT -k 15 ${TAIL_TEST_S:-240} python3 -m pytest -rA -n 16 -p no:cacheprovider -o faulthandler_timeout=150 \
    backends/cuda/tests/test_attention_decode_small_batch_gpu.py backends/cuda/tests/test_attention_gpu.py \
    -k "tail" > "$out/tail_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]|Timeout" "$out/tail_tests.log" | tail -16
tail_default=contiguous/par-bh16,contiguous/gather-bh16,contiguous/gather-bh16-tail,contiguous/gather-bh16-sl
timeout -s INT -k 15 ${TAIL_SWEEP_S:-240} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 \
    --budget-s $(( ${TAIL_SWEEP_S:-240} - 50 )) --max-batch ${TAIL_MAX_BATCH:-8} --json "$out/tail_sweep.json" \
    --candidates ${TAIL_CANDIDATES:-$tail_default} > "$out/tail_sweep.log" 2>&1
grep -v TileLang "$out/tail_sweep.log" | grep -E "^==|FAILED|WRONG|best by|\*" | tail -60
