el hot
# hot (issue 15, branch wip-hot): host cost per eager op call and per compiled step after the
# direct call (forward skipped), the strided allocators and the lean matcher.
# Run from the repo root of wip-hot with the project installed (the lead's prefix) and $out set.
# About 3 minutes: each step is cut by its own timeout; kernels compile in step 1 (TileLang disk cache after).

out="${out:-$OUT}"; mkdir -p "$out"; start=$SECONDS
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
git log --oneline -1 > "$out/hot_commit.txt"
# 1. Host time per eager op call beside the raw launch and torch's op (targets: RGDR b1-t1 <= 15 us, RMSNorm m1 <= F.rms_norm).
timeout -s INT 55 python3 -m tileops_core bench --device cuda --host-time --baseline none \
    RMSNormFwdOp RecurrentGatedDeltaRuleFwdOp SiluAndMulFwdOp \
    --workload decode-m1-4096 --workload qwen3.5-b1-t1-fp32state --workload llama3-8b-mlp-decode-256 \
    --json "$out/host_time.json" > "$out/host_time.log" 2>&1; echo "host-time rc=$? at $((SECONDS - start)) s"
# 2. Allocation forms on CUDA: the plan now allocates with empty_strided_cuda after a current-device check.
timeout 20 python3 -c "
import timeit, torch
from tileops_core.op.alloc import fresh_allocator
import torch._C._dynamo.guards as g
x = torch.randn(1, 4096, dtype=torch.bfloat16, device='cuda'); d = x.device
plan_alloc = fresh_allocator((1, 4096), torch.bfloat16, d)
assert plan_alloc().device == d and plan_alloc().stride() == (4096, 1)
for n, f in [('torch.empty(*sizes, dtype, device)', lambda: torch.empty(1, 4096, dtype=torch.bfloat16, device=d)),
             ('torch.empty_like(x)', lambda: torch.empty_like(x)),
             ('_empty_strided_cuda', lambda: g._empty_strided_cuda((1, 4096), (4096, 1), torch.bfloat16)),
             ('torch._C._cuda_getDevice()', torch._C._cuda_getDevice),
             ('fresh_allocator (what the plan calls)', plan_alloc)]:
    print(f'{n:48s} {min(timeit.repeat(f, number=20000, repeat=5)) / 20000 * 1e6:.2f} us')
" > "$out/alloc.log" 2>&1; echo "alloc rc=$? at $((SECONDS - start)) s"
# 3. The decode step four ways; a 4th policy auto_again (= all_decompositions, run last) tells an
#    order effect from a policy effect in the default-vs-all_decompositions compile_fullgraph gap.
left=$((178 - (SECONDS - start)))
timeout -s INT "$left" python3 -m tileops_core bench --device cuda --decode-step --quick --policy auto_again=auto \
    --json "$out/decode_step.json" > "$out/decode_step.log" 2>&1; echo "decode-step rc=$? at $((SECONDS - start)) s"
tail -12 "$out/host_time.log"; cat "$out/alloc.log"; tail -30 "$out/decode_step.log"
