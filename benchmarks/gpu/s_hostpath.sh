el hostpath
# hostpath (issue 15): eager host time per op call after the hot-path cuts (helper hostpath's check).
# About 3 minutes: each step is cut by its own timeout; the kernels compile in step 1 (TileLang disk cache after).
start=$SECONDS
# 1. Where the eager step's host time goes now (compare with session-2026-12-02e/call_path_profile.log).
timeout -s INT 60 python3 benchmarks/call_path_profile.py --device cuda --way eager --steps 300 --top 24 \
    > "$out/hostpath_profile.log" 2>&1; echo "profile rc=$? at $((SECONDS - start)) s"
# 2. Host time per eager op call beside the raw launch and torch's op (targets: RGDR b1-t1 <= 15 us, RMSNorm m1 <= F.rms_norm).
timeout -s INT 50 python3 -m tileops_core bench --device cuda --host-time --baseline none \
    RMSNormFwdOp RecurrentGatedDeltaRuleFwdOp SiluAndMulFwdOp \
    --workload decode-m1-4096 --workload qwen3.5-b1-t1-fp32state --workload llama3-8b-mlp-decode-256 \
    --json "$out/host_time.json" > "$out/host_time.log" 2>&1; echo "host-time rc=$? at $((SECONDS - start)) s"
# 3. Allocation forms on CUDA (decides whether the plan should allocate with empty_like of an input).
timeout 20 python3 -c "
import timeit, torch
x = torch.randn(1, 4096, dtype=torch.bfloat16, device='cuda'); d = x.device; cf = torch.contiguous_format
for n, f in [('torch.empty(*sizes, dtype, device)', lambda: torch.empty(1, 4096, dtype=torch.bfloat16, device=d)),
             ('torch.empty_like(x)', lambda: torch.empty_like(x)),
             ('torch.empty_like(x, memory_format=contiguous)', lambda: torch.empty_like(x, memory_format=cf))]:
    print(f'{n:48s} {min(timeit.repeat(f, number=20000, repeat=5)) / 20000 * 1e6:.2f} us')
" > "$out/alloc.log" 2>&1; echo "alloc rc=$? at $((SECONDS - start)) s"
# 4. The decode step four ways, host and device time per step (short timing).
left=$((175 - (SECONDS - start)))
timeout -s INT "$left" python3 -m tileops_core bench --device cuda --decode-step --quick \
    --json "$out/decode_step.json" > "$out/decode_step.log" 2>&1; echo "decode-step rc=$? at $((SECONDS - start)) s"
head -40 "$out/hostpath_profile.log"; tail -12 "$out/host_time.log"; cat "$out/alloc.log"; tail -30 "$out/decode_step.log"
