el shskinny
# shskinny (issue 21's model at decode): the shared expert's skinny programs (kernels/moe_shared_skinny.py, a key with
# skinny_rows=4; not the default until measured): their GPU tests (float64 on NaN-poisoned outputs at 1-5 rows,
# bf16/fp16, gated or not), then shared_skinny_bench.py (skinny, the decode tiling and torch at 1/2/3/4/8 rows in
# CUDA graphs, the weights' same-size copy beside them). About 3 minutes. If skinny wins, set the key's default
# (registered_model's TileLangMoESharedExpert.key) and run hfstatic.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
timeout -s INT ${SHSKINNY_TEST_S:-150} python3 -m pytest -rA -n 8 -p no:cacheprovider \
    backends/cuda/tests/test_moe_shared_expert_gpu.py -k skinny > "$out/shskinny_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/shskinny_tests.log" | tail -15
timeout -s INT ${SHSKINNY_BENCH_S:-150} python3 -u backends/cuda/bench/shared_skinny_bench.py \
    --json "$out/shskinny.json" > "$out/shskinny.log" 2>&1
grep -v TileLang "$out/shskinny.log" | tail -10
