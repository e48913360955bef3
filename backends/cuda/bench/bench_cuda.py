"""One-call benchmark of the TileLang CUDA kernels on the device (H200).

For every RGDR workload row (NK/NV in {16/32, 8/16}, DK=DV=128, B in {1,8,32,128,256},
tokens per sequence in {1,2,4,8}, state fp32 and bf16, inputs bf16, g present, q/k l2norm
in kernel): a correctness check on fresh random inputs at the row's full shape against
the float64 reference (and the float32 reference, whose drift bounds a 16-bit state),
then device time by CUDA-graph replay (median; input sets rotated so the state pool is not
L2-resident) beside flash-linear-attention 0.6.0's fused_recurrent_gated_delta_rule in its
native layout, the D2D copy ceiling and, per tokens a sequence T_b, the fan copy ceiling (a block read once and
written T_b times, as RGDR reads a state once and writes it after every token). Then a tiling sweep on a subset of rows, the
per-call host overhead, and the other kernels against torch eager / torch.compile /
torch.matmul on the manifest's largest workloads.

Writes $OUT/bench.json (or --json) and prints a compact table last. Shared timing and the
RGDR rows' inputs are in cuda_bench_common.py; the tiling sweep, the schedule search and the
host time per launch layer in rgdr_sweep.py.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/bench_cuda.py
"""

# No `from __future__ import annotations`: the TileLang copy kernel below is annotated with locals.

import argparse
import json
import math
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2] / "cpu_ref")]

from tileops_cuda import registered  # noqa: E402
from tileops_cuda.kernels import gemm as kg  # noqa: E402
from tileops_cuda.kernels import group_norm as kgn  # noqa: E402
from tileops_cuda.kernels import reduce_sum as ks  # noqa: E402
from tileops_cuda.kernels import rmsnorm as kr  # noqa: E402
from tileops_cuda.kernels import silu_and_mul as ksm  # noqa: E402
from tileops_cuda.kernels import softmax as ksf  # noqa: E402
from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.rgdr import build_rgdr, default_schedule  # noqa: E402
from tileops_cuda.testing import check_rgdr, rel_err, rgdr_case  # noqa: E402

from cuda_bench_common import (  # noqa: E402
    RESULTS, RGDR_WARMUP_MS, ROTATE_BYTES, fla_bytes, host_overhead, log, rgdr_bytes, rgdr_calls, rgdr_key, time_graph,
    rgdr_workload_keys,
)
from fan_copy import BLOCK, fan_copy_kernel, fan_destinations  # noqa: E402
from rgdr_sweep import SWEEP, bench_host, choose_schedule, sweep_rgdr  # noqa: E402

_SM_COPY = None


def _sm_copy_kernel():
    """A plain TileLang streaming copy (16-byte accesses, 4 per thread): the SM-driven copy
    that the kernels here compete with (torch's copy_ of one buffer goes through the copy
    engine path and measured lower on this machine)."""
    global _SM_COPY
    if _SM_COPY is None:
        import tilelang.language as T

        from tileops_cuda.kernels._common import compile_prim_func

        nb = T.dynamic("NB")
        blk = 128 * 4 * 4  # a row per program: static, so the accesses vectorise

        @T.prim_func
        def sm_copy(x: T.Tensor((nb, blk), T.float32), y: T.Tensor((nb, blk), T.float32)):
            with T.Kernel(nb, threads=128) as bx:
                for i in T.Parallel(blk):
                    y[bx, i] = x[bx, i]

        _SM_COPY = compile_prim_func(sm_copy, "sm_90")
    return _SM_COPY


def _bandwidth(fn, moved: int) -> dict:
    """``fn``'s graph-replay median (300 ms of replays) and the bandwidth of its ``moved`` bytes (read + written)."""
    us = time_graph([fn], target_ms=300)
    return {"us": us, "GBps": moved / (us * 1e-6) / 1e9}


def fan_ceilings(fans) -> dict:
    """Per fan-out ``k``: the bandwidth (bytes read + written) of reading 512 MiB once and writing it
    ``k`` times, by the TileLang fan copy and by torch's copy_ of an expanded source (the best of
    the two): the ceiling of an RGDR row with ``k`` tokens a sequence, measured in the same run."""
    res = {}
    n = 2**29
    a = torch.randn(n // 4, device="cuda")
    for k in fans:
        b = torch.empty(k, n // 4, device="cuda")
        kern = fan_copy_kernel(k)
        dst = fan_destinations(k, n // 4 // BLOCK).cuda()  # copy i of the source is b[i]
        blocks = b.view(-1, k, BLOCK)  # torch's form: block i's k copies side by side
        ways = {"tilelang": lambda a=a, b=b, kern=kern, dst=dst: kern(a.view(-1, BLOCK), dst, b.view(-1, BLOCK)),
                "copy_expand": lambda a=a, blocks=blocks, k=k: blocks.copy_(a.view(-1, 1, BLOCK).expand(-1, k, -1))}
        row = {}
        for name, fn in ways.items():
            fn()
            torch.cuda.synchronize()
            row[name] = _bandwidth(fn, (1 + k) * n)
        kern(a.view(-1, BLOCK), dst, b.view(-1, BLOCK))
        assert all(torch.equal(b[i], a) for i in range(k)), "fan copy kernel wrote wrong data"
        row["GBps"] = max(v["GBps"] for v in row.values())
        res[k] = row
        del b, blocks, dst
        torch.cuda.empty_cache()
    log("fan", json.dumps(res))
    return res


def copy_ceiling(tag: str) -> dict:
    """D2D copy bandwidth (bytes read + written) at 1 and 4 GiB, by torch's copy_, by torch's
    elementwise kernel (mul by 1) and by a TileLang SM copy, after a warm-up burn. The best
    of them is the ceiling (the strictest target)."""
    res = {}
    kern = _sm_copy_kernel()
    for n in (2**30, 2**32):
        a = torch.randn(n // 4, device="cuda")
        b = torch.empty_like(a)
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
        for name, fn in (("copy_", lambda a=a, b=b: b.copy_(a)), ("mul1", lambda a=a, b=b: torch.mul(a, 1.0, out=b)),
                         ("tilelang", lambda a=a, b=b: kern(a.view(-1, 2048), b.view(-1, 2048)))):  # fmt: skip
            res[f"{name}@{n >> 30}GiB"] = _bandwidth(fn, 2 * n)
        assert torch.equal(a, b), "SM copy kernel wrote wrong data"
        del a, b
        torch.cuda.empty_cache()
    res["GBps"] = max(v["GBps"] for v in res.values())
    log("copy", tag, json.dumps(res))
    return res


def in_place_ceiling() -> dict:
    """Bandwidth (bytes read + written) of 1 GiB copied onto itself, each element read and written back
    to its own address, as an RGDR decode step at T_b = 1 rewrites each state in its own slot: whether
    in-place traffic reaches what a copy into another buffer does on this card. Informational: the
    rows' %copy stays against :func:`copy_ceiling`."""
    res = {}
    kern = _sm_copy_kernel()
    n = 2**30
    a = torch.randn(n // 4, device="cuda")
    for name, fn in (("mul1", lambda: torch.mul(a, 1.0, out=a)),
                     ("tilelang", lambda: kern(a.view(-1, 2048), a.view(-1, 2048)))):
        res[name] = _bandwidth(fn, 2 * n)
    del a
    torch.cuda.empty_cache()
    res["GBps"] = max(v["GBps"] for v in res.values())
    log("in-place", json.dumps(res))
    return res


def fla_calls(fla_fn, sets, B, tb):
    """FLA in its native layout: [B, T_b, H, K] inputs, initial_state [B, HV, K, V] gathered
    from the same pool (fp32 or bf16, as our state), final state out (fp32)."""
    calls = []
    for c in sets:
        nk, dk = c["query"].shape[1:]
        nv, dv = c["value"].shape[1:]
        q = c["query"].view(B, tb, nk, dk)
        k = c["key"].view(B, tb, nk, dk)
        v = c["value"].view(B, tb, nv, dv)
        beta = c["beta"].view(B, tb, nv)
        g = c["g"].view(B, tb, nv)
        first = c["ssm_state_indices"].view(B, tb)[:, 0].long()
        h0 = c["state"][first].transpose(-1, -2).contiguous()  # [B, HV, K, V]
        c["fla"] = (q, k, v, g, beta, h0)

        def run(q=q, k=k, v=v, g=g, beta=beta, h0=h0):
            return fla_fn(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                          use_qk_l2norm_in_kernel=True)  # fmt: skip

        calls.append(run)
    return calls


def bench_rgdr(copy_gbps: float, fla_fn, gen, heads, batches, tbs, states, tiling=None, record="rgdr", check=True):
    for nk, nv in heads:
        for state in states:
            key = rgdr_key(nk, nv, state)
            launcher = build_rgdr(key, tiling)
            sbytes = 4 if state == "float32" else 2
            for B in batches:
                for tb in tbs:
                    row = dict(NK=nk, NV=nv, state=state, B=B, Tb=tb)
                    if tiling is not None:
                        row["tiling"] = asdict(tiling)
                    try:
                        if check:
                            case = rgdr_case(key, [tb] * B, device="cuda", generator=gen)
                            res = check_rgdr(launcher, case)
                            row.update({k: res[k] for k in ("ok", "why", "state_err", "state_err_ref32", "out_err",
                                                            "out_err_ref32", "unwritten_outputs",
                                                            "untouched_slots_identical")})  # fmt: skip
                            del case
                        foot = rgdr_bytes(B, tb, nk, nv, sbytes)
                        nsets = max(1, min(64, math.ceil(ROTATE_BYTES / foot)))
                        sets, calls = rgdr_calls(launcher, key, B, tb, gen, nsets)
                        fcalls = None
                        if fla_fn is not None:
                            try:
                                fcalls = fla_calls(fla_fn, sets, B, tb)  # gathers h0 from the untouched pools
                                if state == "float32" and record == "rgdr":
                                    c = sets[0]
                                    pool = c["state"].clone()
                                    mine = torch.empty_like(c["value"])
                                    launcher(c["query"], c["key"], c["value"], c["beta"], pool, c["actual_seq_lengths"],
                                             c["ssm_state_indices"], c["g"], None, None, mine, None)  # fmt: skip
                                    o, _ = fcalls[0]()
                                    row["fla_vs_ours_out_err"] = rel_err(o.reshape(mine.shape).float(), mine.float())
                                    del pool, mine, o
                            except Exception as exc:  # reported, not hidden
                                row["fla_error"] = f"{type(exc).__name__}: {exc}"[:300]
                                fcalls = None
                        us = time_graph(calls, warmup_ms=RGDR_WARMUP_MS)
                        # the measure before the fortieth session (the graph of the sets alone, each replay's
                        # start gap carried by its nsets calls), kept beside the row for a session or two
                        us_per_replay = time_graph(calls, per_replay=True)
                        row.update(us=us, bytes=foot, GBps=foot / (us * 1e-6) / 1e9, nsets=nsets,
                                   us_per_replay=us_per_replay)
                        row["frac_copy"] = row["GBps"] / copy_gbps
                        if tb in RESULTS.get("fan", {}):
                            row["frac_fan"] = row["GBps"] / RESULTS["fan"][tb]["GBps"]
                        if fcalls is not None:
                            try:
                                fus = time_graph(fcalls, warmup_ms=RGDR_WARMUP_MS)
                                fb = fla_bytes(B, tb, nk, nv, sbytes)
                                row.update(fla_us=fus, fla_bytes=fb, fla_GBps=fb / (fus * 1e-6) / 1e9,
                                           speedup_vs_fla=fus / us)  # fmt: skip
                            except Exception as exc:
                                row["fla_error"] = f"{type(exc).__name__}: {exc}"[:300]
                        if B == 1 and tb == 1 and record == "rgdr":
                            c = sets[0]
                            row["host_us"] = host_overhead(calls[0])
                            if fcalls is not None:
                                row["fla_host_us"] = host_overhead(fla_calls(fla_fn, [c], B, tb)[0], n=500)
                        del sets, calls
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                        RESULTS["errors"].append(traceback.format_exc()[-2000:])
                    torch.cuda.empty_cache()
                    RESULTS[record].append(row)
                    log(record, json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                                            if k not in ("tiling",)}))  # fmt: skip


# ----------------------------------------------------------------------------- other kernels
def nsets_for(footprint: int) -> int:
    """Input sets to rotate so one graph replay touches ROTATE_BYTES of distinct memory."""
    return max(1, min(32, math.ceil(ROTATE_BYTES / max(footprint, 1))))


def other_row(name, make, ours, eager, compiled, ref64, bytes_moved, flops=None):
    """``make()`` draws one input set (a dict); ``ours``/``eager``/``compiled`` map a set to its
    result; ``ref64`` maps a set to the float64 truth. Sets rotate so caches do not flatter."""
    row = {"name": name}
    try:
        sets = [make() for _ in range(nsets_for(bytes_moved))]
        row["nsets"] = len(sets)
        got = ours(sets[0])
        torch.cuda.synchronize()
        want = ref64(sets[0])
        row["nan"] = int(torch.isnan(got.float()).sum())
        row["err"] = rel_err(got, want)
        row["rounding"] = rel_err(want.to(got.dtype), want) if got.dtype != torch.float64 else 0.0
        row["ok"] = row["nan"] == 0 and row["err"] <= 2 * row["rounding"] + 2e-5
        del got, want
        row["us"] = time_graph([lambda s=s: ours(s) for s in sets])
        row["GBps"] = bytes_moved / (row["us"] * 1e-6) / 1e9
        if flops:
            row["TFLOPs"] = flops / (row["us"] * 1e-6) / 1e12
        if eager is not None:
            row["eager_us"] = time_graph([lambda s=s: eager(s) for s in sets])
        if compiled is not None:
            try:
                row["compile_us"] = time_graph([lambda s=s: compiled(s) for s in sets])
            except Exception as exc:
                row["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
        del sets
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        RESULTS["errors"].append(traceback.format_exc()[-2000:])
    RESULTS["other"].append(row)
    log("other", json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}))
    torch.cuda.empty_cache()


def bench_others(copy_gbps, use_compile: bool):
    dev = "cuda"

    def comp(fn):
        return torch.compile(fn, dynamic=False) if use_compile else None

    # RMSNorm: llama3-70b-prefill-16k (no weight) and llama3-8b-prefill-2k (weight)
    for shape, w, dt in [((16384, 8192), False, torch.bfloat16), ((8192, 4096), True, torch.bfloat16),
                         ((8192, 4096), True, torch.float32)]:  # fmt: skip
        key = kr.RMSNormBuildKey(str(dt)[6:], shape[-1], w)
        L = registered.TileLangRMSNorm.launcher(key)

        def make(shape=shape, w=w, dt=dt):
            x = torch.randn(shape, device=dev, dtype=dt)
            return {"x": x, "w": torch.randn(shape[-1], device=dev, dtype=dt) if w else None, "y": torch.empty_like(x)}

        def ref(s):
            return F.rms_norm(s["x"], (s["x"].shape[-1],), s["w"], 1e-6)

        def ref64(s):
            return F.rms_norm(s["x"].double(), (s["x"].shape[-1],), None if s["w"] is None else s["w"].double(), 1e-6)

        other_row(f"rmsnorm{list(shape)}{'+w' if w else ''}/{key.dtype}", make,
                  lambda s, L=L: L(s["x"], s["w"], (s["x"].shape[-1],), 1e-6, s["y"]), ref, comp(ref), ref64,
                  2 * math.prod(shape) * (2 if dt != torch.float32 else 4))  # fmt: skip
    # SiluAndMul: llama3-8b-mlp-prefill-8k, decode-256
    for shape, dt in [((8192, 28672), torch.bfloat16), ((256, 28672), torch.float16)]:
        n = shape[-1] // 2
        L = registered.TileLangSiluAndMul.launcher(ksm.SiluAndMulBuildKey(str(dt)[6:], n))

        def make(shape=shape, dt=dt, n=n):
            return {"x": torch.randn(shape, device=dev, dtype=dt), "y": torch.empty(shape[0], n, device=dev, dtype=dt)}

        def ref(s, n=n):
            return F.silu(s["x"][:, :n]) * s["x"][:, n:]

        def ref64(s, n=n):
            x64 = s["x"].double()
            return F.silu(x64[:, :n]) * x64[:, n:]

        other_row(f"silu_and_mul{list(shape)}/{str(dt)[6:]}", make, lambda s, L=L: L(s["x"], s["y"]), ref, comp(ref),
                  ref64, 3 * shape[0] * n * 2)  # fmt: skip
    # Softmax: llama2-vocab-4k-rows, attn-probs-2k, a 16k x 4k
    for shape, dt in [((4096, 32000), torch.bfloat16), ((32 * 32, 2048), torch.float16), ((16384, 4096), torch.bfloat16)]:
        L = registered.TileLangSoftmax.launcher(ksf.SoftmaxBuildKey(str(dt)[6:], shape[-1]))

        def make(shape=shape, dt=dt):
            x = torch.randn(shape, device=dev, dtype=dt) * 3
            return {"x": x, "y": torch.empty_like(x)}

        def ref(s):
            return torch.softmax(s["x"], -1)

        def ref64(s):
            return torch.softmax(s["x"].double(), -1)

        other_row(f"softmax{list(shape)}/{str(dt)[6:]}", make, lambda s, L=L: L(s["x"], -1, None, s["y"]), ref, comp(ref),
                  ref64, 2 * math.prod(shape) * 2)  # fmt: skip
    # GEMM: square-4k NT (bf16, fp16), NN bf16, down-prefill, up-decode, batched attention scores
    gemms = [
        ("gemm4096^3 NT", (4096, 4096, 4096), False, True, torch.bfloat16, None),
        ("gemm4096^3 NN", (4096, 4096, 4096), False, False, torch.bfloat16, None),
        ("gemm4096^3 NT", (4096, 4096, 4096), False, True, torch.float16, None),
        ("gemm down-prefill", (8192, 4096, 14336), False, False, torch.bfloat16, None),
        ("gemm up-decode M16", (16, 14336, 4096), False, True, torch.bfloat16, None),
        ("bmm 32x2048x2048x128", (2048, 2048, 128), False, False, torch.bfloat16, 32),
    ]
    for name, (M, N, K), ta, tb, dt, nb in gemms:
        lead = (nb,) if nb else ()
        key = kg.GemmBuildKey(str(dt)[6:], N, K, ta, tb, bool(nb))
        L = registered.TileLangBmm.launcher(key) if nb else registered.TileLangGemm.launcher(key)
        if not nb:
            L = lambda a, b, c, L=L, ta=ta, tb=tb: L(a, b, ta, tb, c)  # noqa: E731

        def make(M=M, N=N, K=K, ta=ta, tb=tb, dt=dt, lead=lead):
            return {"a": torch.randn(*lead, *((K, M) if ta else (M, K)), device=dev, dtype=dt),
                    "b": torch.randn(*lead, *((N, K) if tb else (K, N)), device=dev, dtype=dt),
                    "c": torch.empty(*lead, M, N, device=dev, dtype=dt)}  # fmt: skip

        def ops(s, ta=ta, tb=tb, f=lambda t: t):
            a, b = f(s["a"]), f(s["b"])
            return (a.transpose(-1, -2) if ta else a), (b.transpose(-1, -2) if tb else b)

        def ref(s, ops=ops):
            a, b = ops(s)
            return torch.matmul(a, b)

        def ref64(s, ops=ops):
            a, b = ops(s, f=lambda t: t.double())
            return torch.matmul(a, b)

        fl = 2 * M * N * K * (nb or 1)
        by = (M * K + K * N + M * N) * (nb or 1) * 2
        other_row(f"{name}/{str(dt)[6:]}", make, lambda s, L=L: L(s["a"], s["b"], s["c"]), ref, None, ref64, by, flops=fl)
    # Sum: rows-16m (bf16), full-64m (fp32), columns (dim 0), upcast
    sums = [((4096, 4096), (-1,), torch.bfloat16, None), ((67108864,), None, torch.float32, None),
            ((4096, 4096), (0,), torch.bfloat16, None), ((4096, 32000), (-1,), torch.bfloat16, torch.float32)]  # fmt: skip
    for shape, dims, dt, odt in sums:
        L = registered.TileLangSum.launcher((str(dt)[6:], str(odt or dt)[6:], "sm_90"))

        def make(shape=shape, dt=dt):
            return {"x": torch.randn(shape, device=dev, dtype=dt)}

        def ours(s, dims=dims, odt=odt, L=L):
            return L(s["x"], dims, False, odt)

        def ref(s, dims=dims, odt=odt):
            return torch.sum(s["x"], dims, dtype=odt) if dims else torch.sum(s["x"], dtype=odt)

        def ref64(s, dims=dims):
            return torch.sum(s["x"].double(), dims) if dims else torch.sum(s["x"].double())

        other_row(f"sum{list(shape)} dims={dims}/{str(dt)[6:]}->{odt}", make, ours, ref, None, ref64,
                  math.prod(shape) * (2 if dt != torch.float32 else 4))  # fmt: skip
    # GroupNorm: sd-unet-mid-affine, image-g32-affine
    for shape, G, dt in [((2, 512, 64, 64), 32, torch.bfloat16), ((8, 128, 32, 32), 32, torch.float16)]:
        L = registered.TileLangGroupNorm.launcher(
            kgn.GroupNormBuildKey(str(dt)[6:], G, shape[1], math.prod(shape[2:]), True))

        def make(shape=shape, dt=dt):
            return {"x": torch.randn(shape, device=dev, dtype=dt), "w": torch.randn(shape[1], device=dev, dtype=dt),
                    "b": torch.randn(shape[1], device=dev, dtype=dt)}  # fmt: skip

        def ours(s, G=G, L=L):
            return L(s["x"], s["w"], s["b"], G, 1e-5)

        def ref(s, G=G):
            return F.group_norm(s["x"], G, s["w"], s["b"], 1e-5)

        def ref64(s, G=G):
            return F.group_norm(s["x"].double(), G, s["w"].double(), s["b"].double(), 1e-5)

        other_row(f"group_norm{list(shape)} G={G}/{str(dt)[6:]}", make, ours, ref, None, ref64, 2 * math.prod(shape) * 2)


def precompile(sweep_tilings, others: bool = True):
    """Every kernel this run uses, compiled concurrently (TVM lowering and nvcc run in parallel)."""
    thunks = []
    for st, tilings in sweep_tilings.items():
        for t in tilings:
            thunks.append(lambda k=rgdr_key(16, 32, st), t=t: build_rgdr(k, t))
    for key in rgdr_workload_keys():
        for t in default_schedule(key).tilings():
            thunks.append(lambda k=key, t=t: build_rgdr(k, t))
    thunks += [] if not others else [
        lambda: kr.build_rmsnorm(kr.RMSNormBuildKey("bfloat16", 8192, False)),
        lambda: kr.build_rmsnorm(kr.RMSNormBuildKey("bfloat16", 4096, True)),
        lambda: kr.build_rmsnorm(kr.RMSNormBuildKey("float32", 4096, True)),
        lambda: ksm.build_silu_and_mul(ksm.SiluAndMulBuildKey("bfloat16", 14336)),
        lambda: ksm.build_silu_and_mul(ksm.SiluAndMulBuildKey("float16", 14336)),
        lambda: ksf.build_softmax(ksf.SoftmaxBuildKey("bfloat16", 32000)),
        lambda: ksf.build_softmax(ksf.SoftmaxBuildKey("float16", 2048)),
        lambda: ksf.build_softmax(ksf.SoftmaxBuildKey("bfloat16", 4096)),
        lambda: kg.build_gemm(kg.GemmBuildKey("bfloat16", 4096, 4096, False, True)),
        lambda: kg.build_gemm(kg.GemmBuildKey("bfloat16", 4096, 4096, False, False)),
        lambda: kg.build_gemm(kg.GemmBuildKey("float16", 4096, 4096, False, True)),
        lambda: kg.build_gemm(kg.GemmBuildKey("bfloat16", 4096, 14336, False, False)),
        lambda: kg.build_gemm(kg.GemmBuildKey("bfloat16", 14336, 4096, False, True)),
        lambda: kg.build_gemm(kg.GemmBuildKey("bfloat16", 2048, 128, False, False, True)),
        lambda: ks.build_sum(ks.SumBuildKey("rows", "bfloat16", "float32", 4096)),
        lambda: ks.build_sum(ks.SumBuildKey("rows", "bfloat16", "float32", 32000)),
        lambda: ks.build_sum(ks.SumBuildKey("rows", "float32", "float32", 67108864)),
        lambda: ks.build_sum(ks.SumBuildKey("cols", "float32", "bfloat16", 1)),
        lambda: ks.build_sum(ks.SumBuildKey("cols", "float32", "float32", 1)),
        lambda: ks.build_sum(ks.SumBuildKey("cols", "bfloat16", "float32", 4096)),
        lambda: ks.build_sum(ks.SumBuildKey("cols", "float32", "bfloat16", 4096)),
        lambda: kgn.build_group_norm(kgn.GroupNormBuildKey("bfloat16", 32, 512, 4096)),
        lambda: kgn.build_group_norm(kgn.GroupNormBuildKey("float16", 32, 128, 1024)),
    ]
    t = time.time()
    res = compile_many(thunks)
    bad = [r for r in res if isinstance(r, Exception)]
    for r in bad:
        RESULTS["errors"].append(f"build: {type(r).__name__}: {r}"[:3000])
        log("BUILD ERROR", f"{type(r).__name__}: {str(r)[-1500:]}")
    log(f"precompiled {len(thunks)} kernels in {time.time() - t:.1f}s, {len(bad)} failed")
    RESULTS["compile_s"] = time.time() - t


def table() -> str:
    lines = []
    cp = RESULTS.get("copy", {}).get("GBps", float("nan"))
    cp_end = RESULTS.get("copy_end", {}).get("GBps", float("nan"))
    lines.append(f"copy ceiling {cp:.0f} GB/s at start, {cp_end:.0f} GB/s at end (read+write; %copy uses the start value)"
                 f"   compile {RESULTS.get('compile_s', 0):.0f}s")  # fmt: skip
    for st, sc in (RESULTS.get("schedules") or RESULTS.get("default_schedules", {})).items():
        sm, lg = sc["small"], sc["large"]
        lines.append(f"schedule {st}: small (tpr {sm['threads_per_row']}, rows {sm['rows_per_thread']}, minblk {sm['min_blocks']}, "
                     f"stream {sm['stream']}) large (tpr {lg['threads_per_row']}, rows {lg['rows_per_thread']}, "
                     f"minblk {lg['min_blocks']}, stream {lg['stream']}) "
                     f"from B>={sc['large_from_seqs']}; short {sc.get('short')} from B>={sc.get('short_from_seqs')} "
                     f"up to {sc.get('short_max_tokens')} tokens/seq")  # fmt: skip
    bad = [c for c in RESULTS.get("sweep_checks", []) if not c["ok"]]
    lines.append(f"sweep correctness checks: {len(RESULTS.get('sweep_checks', [])) - len(bad)} ok, {len(bad)} failed {bad[:2]}")
    for k, f in RESULTS.get("fan", {}).items():
        lines.append(f"fan copy ceiling, read once and written {k}x: {f['GBps']:.0f} GB/s ({100 * f['GBps'] / cp:.1f}% of the "
                     "copy ceiling): what %fan below compares with")  # fmt: skip
    if "in_place" in RESULTS:
        ip = RESULTS["in_place"]["GBps"]
        lines.append(f"in-place copy, each element written back to its own address (a T_b=1 row's traffic): {ip:.0f} GB/s "
                     f"({100 * ip / cp:.1f}% of the copy ceiling)")
    lines.append("RGDR  NK/NV state  B  Tb |   us    GB/s  %copy  %fan |  FLA us  x-vs-FLA | ok  state_err  (ref32)   "
                 "out_err (ref32) | us a replay alone (graph of nsets calls)")
    for r in RESULTS["rgdr"]:
        if "us" not in r:
            lines.append(f"      {r['NK']}/{r['NV']} {r['state'][:4]} {r['B']:>3} {r['Tb']} | ERROR {r.get('error', '')[:80]}")
            continue
        lines.append(
            f"      {r['NK']:>2}/{r['NV']:<2} {r['state'][:4]} {r['B']:>3} {r['Tb']} | {r['us']:7.1f} {r['GBps']:6.0f} "
            f"{100 * r['frac_copy']:5.1f} {100 * r.get('frac_fan', float('nan')):5.1f} | {r.get('fla_us', float('nan')):7.1f} {r.get('speedup_vs_fla', float('nan')):6.2f} | "
            f"{'Y' if r.get('ok') else 'N'} {r.get('state_err', float('nan')):9.2e} ({r.get('state_err_ref32', float('nan')):.1e}) "
            f"{r.get('out_err', float('nan')):8.2e} ({r.get('out_err_ref32', float('nan')):.1e}) | "
            f"{r.get('us_per_replay', float('nan')):7.1f} ({r.get('nsets', 0)})"
        )
    for r in RESULTS["rgdr"]:
        if "host_us" in r:
            lines.append(f"host overhead per eager call: ours {r['host_us']:.1f} us, FLA {r.get('fla_host_us', float('nan')):.1f} us "
                         f"(NK/NV {r['NK']}/{r['NV']} {r['state']})")  # fmt: skip
    if RESULTS["sweep"]:
        cells = sorted({(r["B"], r["Tb"]) for r in RESULTS["sweep"]})
        lines.append("sweep (NK16/NV32) tiling(threads,tpr,rows,minblk[,stream]): us at B x Tb = "
                     + " ".join(f"{b}x{t}" for b, t in cells))  # fmt: skip
        for st in ("float32", "bfloat16"):
            for t in SWEEP[st]:
                ta = asdict(t)
                us = {(r["B"], r["Tb"]): r.get("us", float("nan")) for r in RESULTS["sweep"]
                      if r["state"] == st and r["tiling"] == ta}  # fmt: skip
                if us:
                    lines.append(f"   {st[:4]} ({t.threads},{t.threads_per_row},{t.rows_per_thread},{t.min_blocks}"
                                 f"{',s' if t.stream else ''}): " + " ".join(f"{us.get(c, float('nan')):7.1f}" for c in cells))  # fmt: skip
        for st, info in RESULTS.get("chosen", {}).items():
            lines.append(f"chosen {st}: score {info['score']:.3f} worst-vs-default {info['worst_vs_default']:.3f} "
                         + " ".join(f"{k}:{v['chosen']:.1f}/{v['default']:.1f}" for k, v in info["rows"].items()))  # fmt: skip
    if "host" in RESULTS:
        lines.append("host us per call: " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in RESULTS["host"].items()))  # fmt: skip
    lines.append("other kernels: us  GB/s(%copy) [TFLOP/s] | eager  compile | ok err")
    for r in RESULTS["other"]:
        if "us" not in r:
            lines.append(f"  {r['name']}: ERROR {r.get('error', '')[:100]}")
            continue
        tf = f" {r['TFLOPs']:.0f}TF" if "TFLOPs" in r else ""
        lines.append(
            f"  {r['name']:<40} {r['us']:9.1f} {r['GBps']:6.0f}({100 * r['GBps'] / cp:4.1f}%){tf} | "
            f"{r.get('eager_us', float('nan')):9.1f} {r.get('compile_us', float('nan')):9.1f} | "
            f"{'Y' if r.get('ok') else 'N'} {r.get('err', float('nan')):.1e}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "bench.json"))
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-others", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a few rows only")
    ap.add_argument("--batches", default=None, help="the RGDR table's batch sizes, comma-separated")
    ap.add_argument("--tbs", default=None, help="the RGDR table's tokens a sequence (T_b), comma-separated")
    ap.add_argument("--heads", default="16/32,8/16",
                    help="the RGDR table's NK/NV pairs, comma-separated (issue 16's rows are 16/32)")
    ap.add_argument("--host", action="store_true", help="host µs per call of each launch layer")
    ap.add_argument("--no-table", action="store_true", help="stop after the host numbers and the sweep")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    RESULTS["device"] = {"name": props.name, "sms": props.multi_processor_count, "torch": torch.__version__}
    try:
        import tilelang

        RESULTS["device"]["tilelang"] = tilelang.__version__
    except Exception as exc:
        RESULTS["device"]["tilelang"] = repr(exc)
    log("device", RESULTS["device"])
    fla_fn = None
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn  # noqa: N813

        import fla

        RESULTS["device"]["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:
        RESULTS["errors"].append(f"fla import: {exc!r}")
        log("FLA import failed:", repr(exc))

    precompile({} if args.no_sweep else SWEEP, others=not args.no_others)
    RESULTS["copy"] = copy_ceiling("start")
    cp = RESULTS["copy"]["GBps"]
    batches, tbs = ([1, 256], [1, 8]) if args.quick else ([1, 8, 32, 128, 256], [1, 2, 4, 8])
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    if args.tbs:
        tbs = [int(t) for t in args.tbs.split(",")]
    heads = [(int(nk), int(nv)) for nk, nv in (pair.split("/") for pair in args.heads.split(","))]
    RESULTS["fan"] = fan_ceilings(tbs)
    RESULTS["in_place"] = in_place_ceiling()
    gen = torch.Generator(device="cuda")
    gen.seed()

    schedules = {}
    if args.host:
        bench_host(gen)
        _dump(args.json)
    if not args.no_sweep:
        sweep_rgdr(gen)
        RESULTS["chosen"] = {}
        for st in SWEEP:
            schedules[st], RESULTS["chosen"][st] = choose_schedule(st)
            log("chosen", st, schedules[st], json.dumps(RESULTS["chosen"][st]))
        _dump(args.json)
    if args.no_table:
        log(table())
        return 0
    RESULTS["schedules"] = {st: asdict(sc) for st, sc in schedules.items()}
    RESULTS["default_schedules"] = {st: asdict(default_schedule(rgdr_key(16, 32, st))) for st in ("float32", "bfloat16")}

    for st in ("float32", "bfloat16"):
        bench_rgdr(cp, fla_fn, gen, heads, batches, tbs, [st], tiling=schedules.get(st))
    _dump(args.json)
    if not args.no_others:
        bench_others(cp, not args.no_compile)
    RESULTS["copy_end"] = copy_ceiling("end")
    _dump(args.json)
    log(table())
    return 0


def _dump(path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
