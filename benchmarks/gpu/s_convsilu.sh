el convsilu
# convsilu (issue 17): the varlen conv's SiLU (conv_silu_probe.py): the registered program, the same key with
# tanh_silu (one tanh.approx an element for SiLU's exp and reciprocal) and without SiLU, on the 1- and 8-prompt 4k
# rows, each checked against the CPU reference of its activation, then timed in CUDA graphs beside the same-size
# copy, twice each, interleaved. About a minute.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout ${CONVSILU_S:-150} python3 conv_silu_probe.py 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" \
    > "$OUT/conv_silu_probe.log"; echo "rc=$?"; tail -13 "$OUT/conv_silu_probe.log"
cd ../../..
