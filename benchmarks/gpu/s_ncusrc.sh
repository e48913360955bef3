el ncusrc
# ncusrc (issue 21): where the latency-bound kernels' warps wait, instruction by instruction. Nsight Compute's
# warp-stall samples (SourceCounters, a sample every 2**(5 + SASS_INTERVAL) cycles) for one launch of each row's
# kernels through its op (row_profile.py), exported per SASS instruction (`--page source --print-source sass
# --csv`) and summarised by backends/cuda/bench/ncu_sass_hotspots.py: the attention decode at B=1 4k (a split
# program's ~7 k-cycle chain, then the combine), the paged prefill 4k B=4 (~27 k cycles fixed a program) and
# Qwen3-Next's routing at 4k. NCUSRC_ROWS picks rows as SET:LABEL (e.g. rgdr:qwen3.5-b128-t2-bf16state, issue 16).
# About 3 minutes.
ncu=$(ncu_bin)
for item in ${NCUSRC_ROWS:-decode:qwen3-next-b1-4k prefill:qwen3-next-paged-4k-b4 routing:qwen3-next-80b-prefill-4k}; do
    set_=${item%%:*}; row=${item#*:}; name=src_$row
    el "ncusrc $row"
    (cd backends/cuda/bench && timeout ${NCU_BUILD_S:-150} python3 row_profile.py "$set_" --rows "$row" --build-only \
        2>&1 | tail -2)
    (cd backends/cuda/bench && timeout ${NCU_S:-200} "$ncu" --clock-control none --nvtx --nvtx-include "$row/" \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight \
        --warp-sampling-interval ${SASS_INTERVAL:-1} -f -o "$out/$name" \
        python3 row_profile.py "$set_" --rows "$row" > "$out/${name}_ncu.log" 2>&1)
    echo "ncu rc=$? ($ncu)"; grep -E "==ERROR|==WARNING|Duration" "$out/${name}_ncu.log" | head -8
    "$ncu" --import "$out/$name.ncu-rep" --page source --print-source sass --csv > "$out/${name}_sass.csv" \
        2> "$out/${name}_sass.err"
    echo "source page rc=$? ($(wc -l < "$out/${name}_sass.csv") lines)"; head -c 400 "$out/${name}_sass.err"
    python3 backends/cuda/bench/ncu_sass_hotspots.py "$out/${name}_sass.csv" --top ${SASS_TOP:-25} \
        > "$out/${name}_hot.txt" 2>&1
    head -c 3500 "$out/${name}_hot.txt"
    # The report itself comes back only while small (the call returns a few files, the logs archived in one).
    [ "$(stat -c %s "$out/$name.ncu-rep" 2>/dev/null || echo 0)" -le 20000000 ] || rm -f "$out/$name.ncu-rep"
done
