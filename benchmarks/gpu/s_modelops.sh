# modelops (issue 21): the memory-bound model ops through their registered kernels on every spec row against
# the copy ceiling (model_ops_bench.py: CUDA events after a 256 MiB L2 flush, medians), QKNormRope with the
# block shape registered in the twelfth session, permute/unpermute never timed before (about 3 minutes).
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
ops=QKNormRopeFwdOp,SigmoidGateMulFwdOp,MoETopKRoutingFwdOp,MoEPermuteFwdOp,MoEUnpermuteFwdOp
el modelops
timeout 120 python3 -u backends/cuda/bench/prebuild_spec_rows.py ${ops//,/ } > "$OUT/modelops_prebuild.log" 2>&1
tail -2 "$OUT/modelops_prebuild.log"
timeout 150 python3 -u backends/cuda/bench/model_ops_bench.py --ops $ops --reps 30 > "$OUT/modelops_bench.log" 2>&1
grep -v "TileLang:" "$OUT/modelops_bench.log" | tail -40
