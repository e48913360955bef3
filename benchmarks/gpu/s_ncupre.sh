el ncupre
# ncupre (issue 21): Nsight Compute counters of the attention prefill's kernels (the default key: the overlap
# program on the heads grid, the tile-count kernel, the cache write) on the paged 4k B=4 row, which stays at 0.65x
# of cuDNN, beside the contiguous 4k B=1 row (0.97x) with the same programs and 3.7x the key-tile steps: one profiled
# call each through its op after an unprofiled one (backends/cuda/bench/row_profile.py prefill). Per kernel: time,
# DRAM and SM throughput, occupancy, waves, registers and the stall reasons. About 3 minutes.
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cd backends/cuda/bench
timeout 150 python3 row_profile.py prefill --build-only 2>&1 | tail -2
include=()
for r in qwen3-next-paged-4k-b4 qwen3-next-4k-b1; do include+=(--nvtx-include "$r/"); done
STALLS=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,dram__bytes_read.sum,dram__bytes_write.sum
timeout 240 "$NCU" --clock-control none --nvtx "${include[@]}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --metrics "$STALLS" python3 row_profile.py prefill > "$out/ncu_prefill.txt" 2>&1
echo "ncu rc=$? ($NCU)"
grep -E "^row |_kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Grid Size|Waves Per SM|Warp Cycles Per Issued|stalled_(long|barrier|wait|math|membar|sleeping)|dram__bytes|==ERROR|==WARNING" \
    "$out/ncu_prefill.txt" | sed -E 's/ +/ /g' | head -80
cd ../../..
