el convlayouts
# convlayouts (issue 17): the registered varlen conv on 4k tokens cut into 1..64 sequences, each metadata style, with and
# without initial states, starts on and off the chunk boundaries (conv_varlen_layouts.py; each row checked against the CPU
# reference, then timed in CUDA graphs beside the same-size copy). About 2 minutes.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${CONVLAYOUTS_S:-200} python3 conv_varlen_layouts.py --json "$OUT/conv_layouts.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/conv_layouts.log"; echo "rc=$?"; tail -14 "$OUT/conv_layouts.log"
cd ../../..
