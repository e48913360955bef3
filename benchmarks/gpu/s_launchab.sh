el launchab
# launchab (issues 17, 21): every layer_ops_sweep.py row (norms, gating, conv, QKNormRope, routing) through its
# registered key and that key launched the other way (plainly where it is a programmatic dependent, and the
# reverse), graph time beside the same-size copy in one run (--candidates 0). The launch policy was measured on
# the decode step; the varlen conv's prefill row lost 4.2 us by it on the H200 (eighteenth session) and now opts
# out (launches_as_dependent). Which other prefill rows lose? About 5 minutes (LAUNCHAB_ONLY narrows it).
timeout -s INT ${LAUNCHAB_S:-330} python3 -u backends/cuda/bench/layer_ops_sweep.py --only "${LAUNCHAB_ONLY:-}" \
    --candidates 0 --budget ${LAUNCHAB_BUDGET:-280} --reps 40 --json "$out/launchab.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/launchab.log"
grep -E "^copy peak|registered" "$out/launchab.log" | tail -34
