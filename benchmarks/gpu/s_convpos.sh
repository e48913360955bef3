el convpos
# convpos (issue 17): where one extra sequence's cost in the varlen conv comes from (conv_varlen_layouts.py --rows
# positions): a second start early, in the middle or late in the grid, on and off a chunk boundary, with and without
# an initial state, with padding slots. Each row checked, then timed in CUDA graphs beside the same-size copy. ~2 min.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${CONVPOS_S:-200} python3 conv_varlen_layouts.py --rows positions --json "$OUT/conv_positions.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/conv_positions.log"; echo "rc=$?"; tail -13 "$OUT/conv_positions.log"
cd ../../..
