el rgdrstruct
# rgdrstruct (issue 16): RGDR's decode traffic with no recurrence (rgdr_structure.py): each layout's loads and in-place
# stores alone, then with 4/8/16 FMAs an element, beside the copy and in-place ceilings and the registered RGDR on the
# same rows (bf16 and fp32, B = 128/256, T_b = 1). Builds ~40 kernels concurrently, then times; about 4 minutes.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${RGDRSTRUCT_S:-330} python3 rgdr_structure.py ${RGDRSTRUCT_ARGS:-} --json "$OUT/rgdr_structure.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/rgdr_structure.log"; echo "rc=$?"
grep -v '^{' "$OUT/rgdr_structure.log" | tail -60; grep -c '"ok": true' "$OUT/rgdr_structure.log"
cd ../../..
