el shexp
# shexp (issue 21): MoESharedExpertFwdOp's new TileLang kernel (the routed experts'
# wgmma programs over one expert, static tile map, sigmoid gate fused into down) — correctness, then timing.
# From the repo root, the project installed (run.sh's prefix); results into $OUT. Run it last: it unsets
# TILELANG_CACHE_DIR (see below) and sets it back at the end.
# About 3.5 minutes: each step is cut by its own timeout.
OUT="${OUT:-$out}"; mkdir -p "$OUT"; start=$SECONDS
# TileLang's default disk cache, shared by every process: with TILELANG_CACHE_DIR set, the tests' conftest gives
# each xdist worker its own cache and all 12 would compile again the ~30 wgmma kernels step 1 builds once.
unset TILELANG_CACHE_DIR; export PYTHONUNBUFFERED=1
# 1. Compile in parallel every kernel the tests and the timing use: the MoE spec rows' (prebuild_spec_rows'
#    selection, less the routed experts' real-size rows the spec-row tests skip), the shared expert at bf16/fp16 x gated/ungated at H=2048 I=512, the routed experts at the
#    real-size test's E = 512, 256, 8 (int32 offsets).
timeout 140 python3 - > "$OUT/shexp_prebuild.log" 2>&1 <<'PY'
import sys, time, torch
sys.path.insert(0, "backends/cuda/bench")
from prebuild_spec_rows import cuda_entries
from tileops_cuda.kernels._common import compile_many
from tileops_cuda.kernels.moe_grouped_experts import MoEGroupedExpertsBuildKey, build_moe_grouped_experts
from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey, build_moe_shared_expert
arch = "sm_%d%d" % torch.cuda.get_device_capability()
entries = cuda_entries(("MoETopKRoutingFwdOp", "MoEPermuteFwdOp", "MoEUnpermuteFwdOp", "MoEGroupedExpertsFwdOp",
                        "MoESharedExpertFwdOp"), arch)
# the routed experts' real-size spec rows are not run by the spec-row tests (tiny rows only there)
builds = [b for k, b in entries.items() if not (k[0] == "TileLangMoEGroupedExperts" and k[1].hidden > 64)]
builds += [lambda k=MoESharedExpertBuildKey(dt, 2048, 512, g, arch): build_moe_shared_expert(k)
           for dt in ("bfloat16", "float16") for g in (True, False)]
builds += [lambda k=MoEGroupedExpertsBuildKey("bfloat16", e, 2048, 512, "int32", arch): build_moe_grouped_experts(k)
           for e in (512, 256, 8)]
t = time.time()
failed = [r for r in compile_many(builds, 16) if isinstance(r, BaseException)]
for r in failed:
    print("build failed:", type(r).__name__, r)
print(f"prebuilt {len(builds) - len(failed)} of {len(builds)} builds in {time.time() - t:.0f} s")
PY
echo "prebuild rc=$? at $((SECONDS - start)) s"; grep -v "tilelang.jit" "$OUT/shexp_prebuild.log" | tail -5
# 2. The GPU tests: the new ones (NaN-poisoned outputs vs float64, T in 1/7/64/4096, gated or not, bf16/fp16;
#    the op on [*S, H] incl. 2200 rows on the prefill tiling; strided x) and every MoE test of the spec rows
#    (the shared expert's rows now included) and of the model-op file (the routed experts at real sizes).
timeout 75 python3 -m pytest -v -n 12 -p no:cacheprovider backends/cuda/tests/test_moe_shared_expert_gpu.py \
    backends/cuda/tests/test_spec_rows_gpu.py backends/cuda/tests/test_model_ops_gpu.py \
    -k "moe or routing or permute or experts or shared" > "$OUT/shexp_tests.log" 2>&1
echo "tests rc=$? at $((SECONDS - start)) s"
grep -E "FAILED|ERROR" "$OUT/shexp_tests.log" | head -20; tail -3 "$OUT/shexp_tests.log"
# 3. Timing (device time, CUDA events, medians after warm-up): the kernel's launch function against torch's
#    F.linear x3 + silu + mul + sigmoid (the unfused torch code), in the same run. Weights rotate over 16 copies (96 MB > L2) so
#    every call reads them from HBM, as in a model. Every row is timed as cuda_bench_common.time_graph times: one
#    CUDA graph of the 16 calls, replayed, medians (both sides).
timeout -s INT $((230 - (SECONDS - start))) python3 - 2>&1 <<'PY' | grep -v "tilelang.jit" | tee "$OUT/shexp_time.log"
import sys, torch
import torch.nn.functional as F
sys.path.insert(0, "backends/cuda/bench")
from cuda_bench_common import time_graph  # the CUDA benches' graph timing: one graph of the calls, replay medians
from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey
from tileops_cuda.registered_model import TileLangMoESharedExpert

H, I, COPIES = 2048, 512, 16
dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
def w(*s, scale): return (torch.randn(*s, device=dev, generator=gen) * scale).bfloat16()
sets = [(w(I, H, scale=H ** -0.5), w(I, H, scale=H ** -0.5), w(H, I, scale=I ** -0.5), w(1, H, scale=H ** -0.5))
        for _ in range(COPIES)]
arch = "sm_%d%d" % torch.cuda.get_device_capability()
launch = TileLangMoESharedExpert.launcher(MoESharedExpertBuildKey("bfloat16", H, I, True, arch))

def torch_path(x, g, u, d, eg):
    act = (F.silu(F.linear(x, g).float()) * F.linear(x, u).float()).bfloat16()
    return (F.linear(act, d).float() * torch.sigmoid(F.linear(x, eg).float())).bfloat16()

print(f"{'T':>5} {'tilelang us':>12} {'torch us':>9} {'speedup':>8} {'rel diff':>9}")
for T in (1, 32, 4096):
    x = torch.randn(T, H, device=dev, generator=gen).bfloat16()
    out = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    tl = time_graph([lambda i=i: launch(x, *sets[i], out) for i in range(COPIES)])
    th = time_graph([lambda i=i: torch_path(x, *sets[i]) for i in range(COPIES)])
    launch(x, *sets[0], out); ref = torch_path(x, *sets[0])
    diff = float((out.float() - ref.float()).norm() / ref.float().norm())
    print(f"{T:>5} {tl:>12.2f} {th:>9.2f} {th / tl:>7.2f}x {diff:>9.2e}")
PY
echo "timing rc=$? at $((SECONDS - start)) s"
export TILELANG_CACHE_DIR=/tmp/tlc
