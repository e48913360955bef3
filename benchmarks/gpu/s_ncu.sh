el ncu
# ncu (issue 16): Nsight Compute counters of the RGDR rows issue 16 still loses (its first build step:
# profile first), one launch each after an unprofiled one (backends/cuda/bench/rgdr_profile.py). About 3
# minutes. The H200 machines run on Firecracker, where ncu reads counters with --clock-control none.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
NCU=$(ncu_bin)
ROWS=${NCU_ROWS:-$(cd backends/cuda/bench && python3 -c "import rgdr_profile as r; print(r.DEFAULT_ROWS)")}
cd backends/cuda/bench
timeout 200 python3 rgdr_profile.py --rows "$ROWS" --build-only 2>&1 | tail -2
include=()
for r in ${ROWS//,/ }; do IFS=: read -r s b t <<< "$r"; include+=(--nvtx-include "$s-B$b-Tb$t/"); done
STALLS=smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,dram__bytes_read.sum,dram__bytes_write.sum
timeout 300 "$NCU" --clock-control none --nvtx "${include[@]}" -k regex:rgdr \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --metrics "$STALLS" \
    python3 rgdr_profile.py --rows "$ROWS" > "$OUT/ncu_rgdr.txt" 2>&1
echo "ncu rc=$? ($NCU)"
grep -E "^row |rgdr.*kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Limit Registers|Waves Per SM|Warp Cycles Per Issued|stalled_(long|barrier|short|wait|lg|mio|math|not_sel|membar|drain)|dram__bytes|==ERROR|==WARNING" \
    "$OUT/ncu_rgdr.txt" | sed -E 's/ +/ /g' | head -200
cd ../../..
