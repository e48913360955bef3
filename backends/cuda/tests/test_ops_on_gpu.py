"""The ops through their public API on an NVIDIA GPU: selection, results, compile, graphs.

Everything a user does: construct an op, call it with CUDA tensors, let the plugin's
TileLang kernel be selected, get the reference's answer (the same call on the CPU through
the reference backend, float32 accumulation) within the dtype's tolerance. Plus the
``torch.compile(fullgraph=True)`` boundary on the GPU and RGDR captured in a CUDA graph.
Skips cleanly where there is no GPU or no tilelang.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.kernels import select_kernel
from tileops_core.workloads import dtype_cases

TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}

#: (op, workload label): rows each TileLang kernel was written for.
ROWS = [
    ("RMSNormFwdOp", "qwen3-14b-decode-256"),
    ("SoftmaxFwdOp", "attn-probs-2k"),
    ("SiluAndMulFwdOp", "llama3-8b-mlp-decode-256"),
    ("GroupNormFwdOp", "image-g32-affine"),
    ("SumFwdOp", "rows-16m"),
    ("GemmFwdOp", "llama3-8b-up-decode"),
    ("LinearFwdOp", "llama3-8b-up-decode"),
    ("BmmFwdOp", "llama-attn-values-1k"),
    ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b8-t2-bf16state"),
    ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b32-t4-mtp"),
    ("RecurrentGatedDeltaRuleFwdOp", "tiny-gates-mtp"),
    ("AttentionDecodeFwdOp", "qwen3-next-b1-4k"),
    ("AttentionDecodeFwdOp", "qwen3-next-paged-b1-4k"),
    ("AttentionDecodeFwdOp", "tiny-paged-padding"),
    ("AttentionPrefillFwdOp", "qwen3-next-paged-4k-b4"),
    ("AttentionPrefillFwdOp", "tiny-contiguous-fp16"),
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.isfinite(a).all()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("name,label", ROWS, ids=[f"{n}-{l}" for n, l in ROWS])
def test_op_on_cuda_selects_tilelang_and_matches_the_reference(cuda_device, name, label):
    spec = load_manifest()[name]
    cls = getattr(importlib.import_module(spec.source["op"]), name)
    row = next(r for r in spec.workloads if r.label == label)
    seed = int.from_bytes(os.urandom(4), "little")
    inst = instantiate(spec, row, dtype_cases(row)[0], rng=torch.Generator().manual_seed(seed))
    cpu_args = [None if a is None else a.clone() for a in inst.call_args(spec)]
    gpu_args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    out = op(*gpu_args)
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        assert selection.chosen_backend == "cuda", f"{label}: {selection.report()}"
    ref = cls(**inst.op_kwargs, target="cpu@cpu_ref")(*cpu_args)
    assert out.device.type == "cuda" and out.dtype == ref.dtype and out.shape == ref.shape
    assert _rel(out, ref) <= TOL[out.dtype], f"{label} seed={seed}: out error {_rel(out, ref):.3g}"
    for i, t in enumerate(spec.call_inputs):
        if t.mutated and i < len(gpu_args) and gpu_args[i] is not None:
            assert _rel(gpu_args[i], cpu_args[i]) <= TOL[gpu_args[i].dtype], f"{label}: mutated {t.name}"


def _rgdr_args(B=4, L=2, NK=16, NV=32, D=128, state_dtype=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    T = B * L
    q = torch.nn.functional.normalize(torch.randn(T, NK, D, device="cuda", generator=g), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(T, NK, D, device="cuda", generator=g), dim=-1).bfloat16()
    v = torch.randn(T, NV, D, device="cuda", generator=g).bfloat16()
    beta = torch.sigmoid(torch.randn(T, NV, device="cuda", generator=g)).bfloat16()
    state = torch.randn(T + 4, NV, D, D, device="cuda", generator=g).to(state_dtype)
    lengths = torch.full((B,), L, dtype=torch.int32, device="cuda")
    slots = torch.randperm(T + 4, device="cuda", generator=g)[:T].int()
    decay = -(0.05 + 0.5 * torch.rand(T, NV, device="cuda", generator=g))
    return q, k, v, beta, state, lengths, slots, decay


def test_a_module_calling_rgdr_and_rmsnorm_compiles_fullgraph_cold_and_runs(cuda_device):
    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
    from tileops_core.ops.normalization import RMSNormFwdOp

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rgdr = RecurrentGatedDeltaRuleFwdOp(check_contents=False)
            self.norm = RMSNormFwdOp([128], eps=1e-6, check_contents=False)

        def forward(self, q, k, v, beta, state, lengths, slots, decay, w):
            o = self.rgdr(q, k, v, beta, state, lengths, slots, decay)
            return self.norm(o, w)

    torch._dynamo.reset()
    args = _rgdr_args()
    w = torch.randn(128, device="cuda").bfloat16()
    eager_state = args[4].clone()
    eager = Block()(*args[:4], eager_state, *args[5:], w)
    compiled = torch.compile(Block(), fullgraph=True)
    out = compiled(*args, w)
    assert _rel(out, eager) <= 2e-2
    assert torch.equal(args[4], eager_state)  # the same state writes, bit for bit


def test_rgdr_captures_in_a_cuda_graph_and_replays_like_eager(cuda_device):
    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

    op = RecurrentGatedDeltaRuleFwdOp(check_contents=False)
    args = list(_rgdr_args(B=8, L=2))
    initial = args[4].clone()
    expected_state = initial.clone()
    expected = op(*args[:4], expected_state, *args[5:])
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op(*args[:4], initial.clone(), *args[5:])  # warm-up on the capture stream (plan, selection, build)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(*args)
    args[4].copy_(initial)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
    assert torch.equal(args[4], expected_state)


def test_launchers_call_the_compiled_tvm_ffi_function_not_the_jit_kernel(cuda_device):
    from tileops_cuda.kernels import rmsnorm
    from tileops_cuda.kernels.rgdr import RGDRBuildKey, build_rgdr

    launcher = build_rgdr(RGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128, arch=cuda_device[1]))
    norm = rmsnorm.build_rmsnorm(rmsnorm.RMSNormBuildKey("bfloat16", 4096, True, cuda_device[1]))
    assert norm.fn is not norm.kernel and type(norm.fn).__module__.startswith("tvm_ffi"), type(norm.fn)
    assert all(type(fn).__module__.startswith("tvm_ffi") for fn in launcher.entries.values()), launcher.entries
