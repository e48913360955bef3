el splitshare
# splitshare (issue 21): backends/cuda/bench/decode_split_share.py: the decode rows of B <= 8 through the rule's
# schedule in CUDA graphs, whole and with the split launch alone, beside a same-size copy (the whole step checked
# against float32 first). What removing the combine launch could win before a cluster merge is built. About a minute.
timeout -s INT ${SPLITSHARE_S:-150} python3 -u backends/cuda/bench/decode_split_share.py --json "$out/splitshare.json" \
    > "$out/splitshare.log" 2>&1
grep -vE "TileLang|DEBUG" "$out/splitshare.log" | tail -14
