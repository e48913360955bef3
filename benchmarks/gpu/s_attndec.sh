el attndec
timeout -s INT 210 python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 --budget-s 140 --json "$out/attndec_sweep.json" > "$out/attndec_sweep.log" 2>&1; grep -v TileLang "$out/attndec_sweep.log" | tail -70
