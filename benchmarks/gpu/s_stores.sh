el stores
# stores (issues 16, 17): whether nvcc's split 16-byte stores cost time. The registered varlen conv, the decode conv
# and RGDR's decode schedule, each compiled plain and with TileLang's tl.enable_lower_ldgstg (explicit 128-bit
# global accesses): bit equality, then both timed beside the same-size copy (backends/cuda/bench/store_width.py).
# About 4 minutes (compiles first).
cd backends/cuda/bench
timeout ${STORES_S:-300} python3 store_width.py --json "$out/store_width.json" 2>&1 | grep -v "tilelang.jit" > "$out/store_width.log"
echo "stores rc=${PIPESTATUS[0]}"; grep -E "Error|error" "$out/store_width.log" | head -5; sed -n '/^row /,$p' "$out/store_width.log"
cd ../../..
