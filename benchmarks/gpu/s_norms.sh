el norms
timeout -s INT 170 python3 -u backends/cuda/bench/layer_ops_sweep.py --budget 125 --reps 40 --json "$out/norms_sweep.json" > "$out/norms_sweep.log" 2>&1; grep -v "TileLang:tilelang.jit\|^{" "$out/norms_sweep.log" | tail -60
