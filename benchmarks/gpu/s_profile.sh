el profile
timeout -s INT 45 python3 benchmarks/call_path_profile.py --device cuda --way eager --way compile_fullgraph --way compile_reduce_overhead --steps 300 --top 22 > "$out/call_path_profile.log" 2>&1; grep -v TileLang "$out/call_path_profile.log" | head -80
