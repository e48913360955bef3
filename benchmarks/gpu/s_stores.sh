el stores
# stores (issue 16): whether nvcc's split 16-byte state stores cost RGDR time. The default decode schedule's programs
# compiled plain and with TileLang's tl.enable_lower_ldgstg (explicit 128-bit global accesses): bit equality, then
# both timed beside the same-size copy (backends/cuda/bench/store_width.py). About 3 minutes. (The conv kernels'
# wide_stores candidates run in the conv section's sweep.)
cd backends/cuda/bench
timeout ${STORES_S:-300} python3 store_width.py --json "$out/store_width.json" 2>&1 | grep -v "tilelang.jit" > "$out/store_width.log"
echo "stores rc=${PIPESTATUS[0]}"; grep -E "Error|error" "$out/store_width.log" | head -5; sed -n '/^row /,$p' "$out/store_width.log"
cd ../../..
