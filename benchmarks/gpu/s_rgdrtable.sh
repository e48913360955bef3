el rgdrtable
# rgdrtable (issue 16): the RGDR rows as the issue wants them reported, from the one place they are timed
# (backends/cuda/bench/bench_cuda.py: every row's % of the copy ceiling and of the fan copy ceiling of its T_b (read
# once, written T_b times), both measured in the same run, and its
# ratio to flash-linear-attention 0.6.0), with the default schedule as it now is (speculating roles).
# No tiling sweep, no other kernels, no torch.compile baselines. Up to 8 minutes; run it alone. RGDRTABLE_ARGS adds
# bench_cuda.py options: `--heads 16/32 --batches 1,32,128,256 --tbs 1,2,4` is issue 16's rows alone (24 of the 80).
# RGDRTABLE_S bounds it (480 s).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${RGDRTABLE_S:-480} python3 bench_cuda.py --no-sweep --no-others --no-compile ${RGDRTABLE_ARGS:-} \
    --json "$OUT/rgdr_table.json" 2>&1 \
    | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/rgdr_table.log"; echo "rc=$?"
grep -E "^copy ceiling|^fan copy ceiling|^in-place copy" "$OUT/rgdr_table.log"; tail -70 "$OUT/rgdr_table.log"
cd ../../..
