el linear
# linear (issue 21's model at decode): the skinny linear program (kernels/skinny_linear.py) against float64 with
# the GEMM past its rows (test_kernels_gpu.py), then linear_decode_bench.py (skinny, GEMM, F.linear and the
# same-size copy at 1/4/8/16 rows over the decode step's weight shapes, L2 flushed), then the Qwen3.5-MoE decode
# step with its kernels by GPU time (hf_gpu_decode.py). About 5 minutes.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
timeout -s INT ${LINEAR_TEST_S:-200} python3 -m pytest -rA -n 8 -p no:cacheprovider backends/cuda/tests/test_kernels_gpu.py \
    -k "${LINEAR_K:-linear_matches or gemm}" > "$out/linear_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/linear_tests.log" | tail -15
timeout -s INT ${LINEAR_BENCH_S:-200} python3 -u backends/cuda/bench/linear_decode_bench.py --rows ${LINEAR_ROWS:-1,2,4,8} ${LINEAR_GEMM_ROWS:+--gemm-tilings $LINEAR_GEMM_ROWS} ${LINEAR_GRAPH_ROWS:+--graph $LINEAR_GRAPH_ROWS} --json "$out/linear_decode.json" \
    > "$out/linear_decode.log" 2>&1
grep -v TileLang "$out/linear_decode.log" | tail -110
timeout -s INT ${LINEAR_MODEL_S:-200} python3 benchmarks/hf_gpu_decode.py --variants qwen3_5_moe --batches 1 --setups tileops \
    --no-prefill --reps 10 --out "$out/qwen3_5_moe" > "$out/qwen3_5_moe_linear.log" 2>&1
grep -v TileLang "$out/qwen3_5_moe_linear.log" | grep -E "us a step|tileops|logits" | head -30
