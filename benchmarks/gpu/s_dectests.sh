el dectests
# dectests (issues 21, 17): the registered defaults that changed without a GPU, checked: every attention decode GPU
# test (the split program's epilogues one reciprocal a row since the forty-seventh session) and every conv GPU test
# (the varlen conv's 64-token chunk registered from its sweep), at -n 16 (DECTESTS_S bounds them, default 330 s);
# then the decode rows of attention_bench.py (B=1..64 at 4k-32k, % of the copy ceiling measured in the same run;
# DECTESTS_BENCH_S, default 150 s). About 8 minutes.
timeout -s INT ${DECTESTS_S:-330} python3 -m pytest -rA -n 16 -p no:cacheprovider --durations=6 \
    backends/cuda/tests/test_attention_gpu.py backends/cuda/tests/test_attention_decode_small_batch_gpu.py \
    backends/cuda/tests/test_conv_gpu.py > "$out/dectests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/dectests.log" | tail -15
timeout -s INT ${DECTESTS_BENCH_S:-150} python3 -u backends/cuda/bench/attention_bench.py --no-prefill --reps 50 \
    --json "$out/dectests_bench.json" > "$out/dectests_bench.log" 2>&1
grep -vE "TileLang|DEBUG" "$out/dectests_bench.log" | tail -30
