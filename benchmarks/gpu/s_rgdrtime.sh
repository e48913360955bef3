el rgdrtime
# rgdrtime (issue 16): the speculative RGDR decode programs timed. About 4 minutes (builds, then timing).
# B=1/8/32/128/256 (T_b=1) and B=32 T_b=2; no role, the default roles and every role speculating; CUDA
# graphs, 3 rounds interleaved, beside the same-size copy. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout 300 python3 rgdr_speculate.py --build-only > "$OUT/rgdrtime_prebuild.log" 2>&1; tail -2 "$OUT/rgdrtime_prebuild.log"
timeout 170 python3 rgdr_speculate.py --rounds 3 --json "$OUT/rgdrtime.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/rgdrtime.log"; tail -14 "$OUT/rgdrtime.log"
cd ../../..
