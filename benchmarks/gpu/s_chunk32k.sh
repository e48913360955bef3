el chunk32k
# chunk32k (issue 17): the chunked prefill against FLA 0.6.0 on the spec's 32k rows (1, 8 and 64 sequences),
# op, launcher and FLA on the same fresh inputs, each checked against float64
# (backends/cuda/bench/chunk_gdr_baseline.py --rows qwen3.5-32k). About 3 minutes.
timeout ${CHUNK32K_S:-300} python3 backends/cuda/bench/chunk_gdr_baseline.py --rows ${CHUNK_ROWS:-qwen3.5-32k} \
    --json "$out/chunk_gdr_32k.json" 2>&1 | grep -v "tilelang.jit" > "$out/chunk_gdr_32k.log"
echo "chunk32k rc=${PIPESTATUS[0]}"; grep -E "Error|error" "$out/chunk_gdr_32k.log" | head -5; tail -5 "$out/chunk_gdr_32k.log"
