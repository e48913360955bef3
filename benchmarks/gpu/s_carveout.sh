el carveout
# carveout (issues 21, 15): does switching the SMs' shared-memory carveout between kernels cost the small rows?
# Nsight Compute ran the decode split at B=1 4k in a 233 KB configuration and its combine in 32.8 KB (s45c), the
# split's SMs active 10.1 k of 20.9 k cycles. backends/cuda/bench/carveout_probe.py times rows through their ops in
# CUDA graphs beside the same-size copy, the context's cache preference none / shared / none / shared
# (cuCtxSetCacheConfig); then, with CARVEOUT_STEP=1, the real-size Qwen3.5-MoE decode step (B=1, registered keys)
# without and with the preference (dependent_step.py [--prefer-shared]). About 2 minutes, 6 with the step.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
timeout -s INT ${CARVEOUT_S:-240} python3 -u backends/cuda/bench/carveout_probe.py ${CARVEOUT_ROWS:+--rows $CARVEOUT_ROWS} \
    --json "$out/carveout.json" 2>&1 | grep --line-buffered -v "TileLang" > "$out/carveout.log"
grep -v '^{' "$out/carveout.log" | tail -14
if [ "${CARVEOUT_STEP:-0}" = 1 ]; then
    for mode in none shared; do
        flag=""; [ "$mode" = shared ] && flag="--prefer-shared"
        timeout -s INT ${DEPSTEP_S:-200} python3 backends/cuda/bench/dependent_step.py $flag -- --variants qwen3_5_moe \
            --batches 1 --setups tileops --no-prefill --reps 20 --out "$out/carveout_step_$mode" \
            > "$out/carveout_step_$mode.log" 2>&1
        echo "== step, preference $mode"; grep -v TileLang "$out/carveout_step_$mode.log" \
            | grep -E "registered keys|us a step|cuda_graph|logits" | head -12
    done
fi
