# experts (issue 21): the routed experts' grouped GEMM against torch._grouped_mm on every spec row, decode
# (B·top-k tokens at B = 1, 16, 64) and 4k prefill, both models; never timed at decode before (about 3 minutes).
# Its kernels compile in parallel first (prebuild_spec_rows.py), then model_ops_bench.py times each row with
# CUDA events after a 256 MiB L2 flush (medians), the copy ceiling in the same run, and prints torch/kern and
# the largest difference of the two outputs.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
el experts
timeout 150 python3 -u backends/cuda/bench/prebuild_spec_rows.py MoEGroupedExpertsFwdOp > "$OUT/experts_prebuild.log" 2>&1
tail -3 "$OUT/experts_prebuild.log"
el experts-bench
timeout 150 python3 -u backends/cuda/bench/model_ops_bench.py --ops MoEGroupedExpertsFwdOp --reps 30 \
    > "$OUT/experts_bench.log" 2>&1
grep -v "TileLang:tilelang.jit" "$OUT/experts_bench.log" | tail -14
