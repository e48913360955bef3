el hfdecode
timeout -s INT 560 python3 benchmarks/hf_gpu_decode.py --variants dense moe --out "$out/hf_dense" > "$out/hf_gpu_decode.log" 2>&1; grep -v TileLang "$out/hf_gpu_decode.log" | tail -40
