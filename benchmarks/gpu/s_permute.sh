el permute
# permute (issue 21's model at decode): the MoE permute's GPU tests (the reference's bits over many chunks, a partial
# last chunk and decode sizes, strided rows), then model_ops_bench.py on MoEPermuteFwdOp's rows (L2 flushed, against
# the copy ceiling). The ranking kernel loops over a chunk's copies only since the nineteenth session (45.5 µs a
# Qwen3.5-MoE decode step before, for 8 ids a layer). Then moe_permute_bench.py: the one-launch candidate
# (MoEPermuteBuildKey.one_launch_copies, its GPU test among the tests) against the three kernels at decode sizes in
# CUDA graphs; where it wins with no "!", set one_launch_copies in registered_model's TileLangMoEPermute.key.
# About 3 minutes.
timeout -s INT ${PERMUTE_TEST_S:-150} python3 -m pytest -rA -n 4 -p no:cacheprovider backends/cuda/tests/test_model_ops_gpu.py \
    -k permute > "$out/permute_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/permute_tests.log" | tail -15
timeout -s INT ${PERMUTE_BENCH_S:-150} python3 -u backends/cuda/bench/model_ops_bench.py --ops MoEPermuteFwdOp \
    > "$out/permute_bench.log" 2>&1
grep -v TileLang "$out/permute_bench.log" | tail -15
timeout -s INT ${PERMUTE_ONE_S:-120} python3 -u backends/cuda/bench/moe_permute_bench.py --json "$out/permute_one.json" \
    > "$out/permute_one.log" 2>&1
grep -v TileLang "$out/permute_one.log" | tail -14
