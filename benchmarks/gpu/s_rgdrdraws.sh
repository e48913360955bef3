el rgdrdraws
# rgdrdraws (issue 16): backends/cuda/bench/rgdr_draws.py: RGDR's large rows (T_b >= 2) over RGDRDRAWS_N new draws
# of their inputs (pool moved by a spacer, new slots), the default tiling, its transposed grid
# (RGDRTiling.sequences_fastest) and the fan copy at each draw's addresses: how often a draw is slow, and which grid
# is faster at the median. About 3 minutes, most of it four builds.
(cd backends/cuda/bench && timeout -s INT ${RGDRDRAWS_S:-300} python3 -u rgdr_draws.py --draws ${RGDRDRAWS_N:-8} \
    --json "$out/rgdr_draws.json" 2>&1 | grep -v "TileLang:") > "$out/rgdr_draws.log"
cat "$out/rgdr_draws.log" | tail -60
