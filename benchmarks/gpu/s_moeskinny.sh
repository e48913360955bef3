el moeskinny
# moeskinny (issue 21's model at decode): the MoE experts' warp-per-feature programs (kernels/moe_skinny.py; keys with
# MoESharedExpertBuildKey.skinny_rows=4 / MoEGroupedExpertsBuildKey.skinny_max_rows; registered since 2026-12-04d,
# the tilings SHARED_SKINNY_TILING / ROUTED_SKINNY_TILING since 2026-12-04e / 2026-12-04f):
# their GPU tests (the shared expert at 1-5 rows on NaN-poisoned outputs against float64, bf16/fp16, gated or not;
# the routed experts against torch._grouped_mm at decode sizes, the default key's tests beside them), then
# moe_skinny_bench.py (shared: skinny, decode tiling and torch at 1/2/3/4/8 rows; routed: decode tiling and skinny
# at B = 1/4/16/32/64 on both models; CUDA graphs, same-size copies). About 4 minutes. Where the skinny column
# stops winning should match the printed bound (moe_grouped_experts.skinny_max_rows). The candidate columns
# (moe_skinny_bench.CANDIDATES: weights_first, down_features 2 / 4) beside the registered skinny programs: where one
# wins on every row with no "!", set it as the keys' skinny_tiling in registered_model; then hfstatic.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
timeout -s INT ${MOESKINNY_TEST_S:-200} python3 -m pytest -rA -n 8 -p no:cacheprovider \
    backends/cuda/tests/test_moe_shared_expert_gpu.py backends/cuda/tests/test_model_ops_gpu.py \
    -k "${MOESKINNY_K:-skinny or grouped_experts}" > "$out/moeskinny_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/moeskinny_tests.log" | tail -15
timeout -s INT ${MOESKINNY_BENCH_S:-300} python3 -u backends/cuda/bench/moe_skinny_bench.py ${MOESKINNY_BENCH_ARGS:-} \
    --json "$out/moeskinny.json" > "$out/moeskinny.log" 2>&1
grep -v TileLang "$out/moeskinny.log" | tail -18
