el hfstatic
# (--log-level=WARNING: torch's structured-trace DEBUG records were 4,500 of the 4,700 lines of s32b's log.)
# The tiny models' kernels first, in one process (prebuild_models.py): six workers compiling the same kernels at
# once took the whole 230 s of the twenty-first session's run.
timeout -s INT 240 python3 -u backends/cuda/bench/prebuild_models.py > "$out/hfstatic_prebuild.log" 2>&1; tail -3 "$out/hfstatic_prebuild.log"
timeout -s INT ${HFSTATIC_TEST_S:-200} python3 -m pytest -rA -n 6 -p no:cacheprovider --log-level=WARNING tests/test_transformers_static_decode_gpu.py > "$out/static_decode_gpu_pytest.log" 2>&1; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$out/static_decode_gpu_pytest.log" | tail -30
timeout -s INT 200 python3 benchmarks/hf_gpu_decode.py --variants qwen3_5_moe --batches 1 --setups tileops hf_torch --no-prefill --reps 10 --out "$out/qwen3_5_moe" > "$out/qwen3_5_moe_check.log" 2>&1; grep -v TileLang "$out/qwen3_5_moe_check.log" | tail -45
