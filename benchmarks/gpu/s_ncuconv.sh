el ncuconv
# ncuconv (issue 17): Nsight Compute counters of the conv rows that stay at 78-82% of the same-size copy, one
# launch each through its op after an unprofiled one (backends/cuda/bench/row_profile.py conv). About 2 minutes.
# The compute section is there for the varlen rows: per SM they issue about 18 instructions and two MUFU
# operations (the SiLU's exp and reciprocal, 16 a clock an SM) per element, roughly 16-20 us of a 46 us
# kernel by count, so the issue slots or the XU pipe may bind rather than memory.
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cd backends/cuda/bench
timeout 150 python3 row_profile.py conv --build-only 2>&1 | tail -2
include=()
for r in qwen3.5-prefill-4k-8seq qwen3.5-prefill-4k-1seq qwen3.5-b256-t1 qwen3.5-b256-t2-mtp; do include+=(--nvtx-include "$r/"); done
STALLS=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,dram__bytes_read.sum,dram__bytes_write.sum
timeout 240 "$NCU" --clock-control none --nvtx "${include[@]}" -k regex:conv \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section WarpStateStats --metrics "$STALLS" python3 row_profile.py conv > "$out/ncu_conv.txt" 2>&1
echo "ncu rc=$? ($NCU)"
grep -E "^row |conv.*kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc|XU|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Waves Per SM|Warp Cycles Per Issued|stalled_(long|barrier|short|wait|lg|mio|drain)|dram__bytes|==ERROR|==WARNING" \
    "$out/ncu_conv.txt" | sed -E 's/ +/ /g' | head -120
cd ../../..
