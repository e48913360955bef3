el sweepwarm
# sweepwarm (issues 17, 21): the registered block shapes of the conv rows (SWEEPWARM_ONLY: any layer_ops_sweep.py
# --only text) timed with no warm-up and with 200 ms of untimed graph replays first (kernels and same-size copies
# alike), alternating 0 / 200 / 0 / 200 in four processes. A large RGDR row read 10% slow for its first 40-50 ms
# of replays after its check (rgdr_history.py, session 33); the conv varlen row has read 71-78% of the copy on the
# H200 from run to run. Whether a warm-up moves these rows says whether the sweeps share that phase. ~3 minutes.
for w in 0 200 0 200; do
    timeout -s INT ${SWEEPWARM_S:-150} python3 -u backends/cuda/bench/layer_ops_sweep.py --only "${SWEEPWARM_ONLY:-CausalConv1d}" \
        --candidates 0 --warmup-ms $w --reps 40 --json "$out/sweepwarm_$w.json" 2>&1 \
        | grep --line-buffered -v "TileLang:tilelang.jit" >> "$out/sweepwarm_$w.log"
    echo "== warm-up $w ms"; grep -E "^copy peak|registered" "$out/sweepwarm_$w.log" | tail -6
done
