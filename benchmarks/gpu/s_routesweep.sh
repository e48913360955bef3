# routesweep (issue 21): the sweep of the four MoE routing rows alone (s_route.sh runs it after the routing GPU
# tests): the registered logits program, its fields one at a time, 2-8 tokens a program, plain and dependent, the
# candidates program; checked against float64, timed alone and in CUDA graphs beside the same-size copy. ~2 minutes.
# ROUTE_CANDIDATES=N times the first N candidates beside the registered key (2: the late_refill forms).
el routesweep
timeout -s INT ${ROUTE_SWEEP_S:-120} python3 -u backends/cuda/bench/layer_ops_sweep.py --only MoETopK --budget ${ROUTE_BUDGET:-100} \
    --reps 40 ${ROUTE_CANDIDATES:+--candidates $ROUTE_CANDIDATES} --json "$out/route_sweep.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/route_sweep.log"
grep -E "^copy peak|^MoETopK|fastest|^  MoETopK|Error|error" "$out/route_sweep.log" | grep -v '^{' | tail -60
