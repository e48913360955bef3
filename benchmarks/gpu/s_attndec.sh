el attndec
# attndec (issue 21): the attention decode's candidate schedules on every row (attention_decode_sweep.py).
# ATTNDEC_ARGS narrows it, e.g. ATTNDEC_ARGS="--candidates contiguous/par,contiguous/par-bh16,paged/gather,paged/gather-bh16"
# for the light program (its two-an-SM plan on long splits) against the rule's schedules at B = 16 and 64 too.
timeout -s INT ${ATTNDEC_S:-210} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 --budget-s 140 \
    ${ATTNDEC_ARGS:-} --json "$out/attndec_sweep.json" > "$out/attndec_sweep.log" 2>&1
grep -v TileLang "$out/attndec_sweep.log" | tail -70
