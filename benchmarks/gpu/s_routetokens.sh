# routetokens (issue 21): the registered routing program at 1k-16k tokens a call, both models' prefill rows, each
# beside its same-size copy in CUDA graphs (layer_ops_sweep.py --tokens; about 2 minutes). Whether a row's time over
# its copy grows in proportion to the tokens (issue time after the loads) or stays about constant (the last rows'
# dependent chain): NOTES, fifty-sixth session. ROUTETOKENS="..." picks the token counts,
# ROUTETOKENS_CANDIDATES=N adds the sweep's first N routing candidates (5: the long programs from 1024 and E=256's
# from 4096 among them; 6: the short program too). From 2048 tokens every row runs the key's long program
# (long_from); the rows below run its short one.
el routetokens
for row in qwen3-next-80b-prefill qwen3.5-35b-prefill; do
    timeout -s INT ${ROUTETOKENS_S:-100} python3 -u backends/cuda/bench/layer_ops_sweep.py \
        --only "MoETopKRoutingFwdOp/$row" --candidates ${ROUTETOKENS_CANDIDATES:-0} \
        ${ROUTETOKENS_WITH:+--with-field $ROUTETOKENS_WITH} \
        --tokens ${ROUTETOKENS:-512,1024,2048,4096,8192,16384} --reps 40 --budget 90 \
        --json "$out/route_tokens_$row.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" \
        > "$out/route_tokens_$row.log"
    grep -E "^copy peak|same-size copy|^MoETopK|Error|error" "$out/route_tokens_$row.log" | grep -v '^{' | tail -30
done
# The reading: the registered program's graph time over its same-size copy's, a row per token count. Issue time
# after the loads grows that excess with the tokens (the model: about 0.4 us more a 1k tokens at E=512, 415
# instructions a token over an SM's 4 schedulers at 1.97 GHz); the last rows' dependent chain keeps it about constant.
python3 - "$out"/route_tokens_*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    rows = [r for r in json.load(open(path))["results"] if r["candidate"] == "registered" and "graph_us" in r]
    for r in rows:
        print(f"{r['row']:44} kernel {r['graph_us']:7.2f} us  copy {r['same_graph_us']:7.2f} us  "
              f"excess {r['graph_us'] - r['same_graph_us']:6.2f} us  {r['graph_pct_same']:5.1f}%")
PY
