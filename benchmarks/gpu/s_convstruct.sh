el convstruct
# convstruct (issue 17): the varlen conv's memory structure alone (conv_structure.py): x streamed to out in the
# registered program's layout and in variants with more bytes in flight a thread (groups ahead, rows a group) or more
# threads (shorter chunks, other thread counts), each checked bit for bit, then timed in CUDA graphs beside the
# same-size copy and the registered conv's 1- and 8-prompt rows. About 2 minutes (its 16 programs compile at once).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${CONVSTRUCT_S:-240} python3 conv_structure.py ${CONVSTRUCT_ONLY:+--only="$CONVSTRUCT_ONLY"} \
    ${CONVSTRUCT_TWINS:+--conv-twins="$CONVSTRUCT_TWINS"} \
    --json "$OUT/conv_structure.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/conv_structure.log"
echo "rc=$?"; tail -24 "$OUT/conv_structure.log"
cd ../../..
