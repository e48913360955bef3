# routetokens (issue 21): the registered routing program at 1k-16k tokens a call, both models' prefill rows, each
# beside its same-size copy in CUDA graphs (layer_ops_sweep.py --tokens; about 2 minutes). Whether a row's time over
# its copy grows in proportion to the tokens (issue time after the loads) or stays about constant (the last rows'
# dependent chain): NOTES, fifty-sixth session. ROUTETOKENS="..." picks the token counts.
el routetokens
for row in qwen3-next-80b-prefill qwen3.5-35b-prefill; do
    timeout -s INT ${ROUTETOKENS_S:-100} python3 -u backends/cuda/bench/layer_ops_sweep.py --only "MoETopKRoutingFwdOp/$row" \
        --candidates 0 --tokens ${ROUTETOKENS:-512,1024,2048,4096,8192,16384} --reps 40 --budget 90 \
        --json "$out/route_tokens_$row.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$out/route_tokens_$row.log"
    grep -E "^copy peak|same-size copy|^MoETopK|Error|error" "$out/route_tokens_$row.log" | grep -v '^{' | tail -30
done
