el splits
# splits (issue 16): the streamed RGDR program's last wave, by experiment (backends/cuda/bench/rgdr_splits.py):
# B = 32..256 decode rows and B = 128 T_b = 2 with the program's runtime `splits` forced to 1, 2, 4, 8, each
# checked (float64, bit equality with splits = 1) and timed beside the same-size copy. About 2 minutes.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${SPLITS_S:-170} python3 rgdr_splits.py --json "$OUT/rgdr_splits.json" 2>&1 | grep -v "tilelang.jit" > "$OUT/rgdr_splits.log"
echo "splits rc=$?"; grep -E '"check"|Error|error' "$OUT/rgdr_splits.log" | cut -c1-200 | head -12; sed -n '/^state /,$p' "$OUT/rgdr_splits.log"
cd ../../..
