"""The CPU fallback beside the plain torch code it replaces: every reference kernel, one run.

Run: ``python benchmarks/cpu_fallback.py`` (``--quick`` for a short run; ``--before REV`` adds
the reference kernels of git revision ``REV`` as a column, timed in the same run).

Three tables, each row timing its candidates interleaved (round after round, the order
shuffled), on the same inputs, after warm-up; a sample is a loop of enough calls to last
``--sample-ms``; the figure is the median over ``--rounds`` samples of µs per call
(``time.perf_counter``), and every ratio is ``torch / candidate`` (above 1: faster than torch):

* RGDR: ``tileops_cpu_ref``'s RecurrentGatedDeltaRule kernel against a Hugging Face style
  ``torch_recurrent_gated_delta_rule`` (written below from its math: a ``[B, H, T, D]``
  float32 loop over tokens with a ``[B, H, DK, DV]`` state), at Qwen3.5's heads (NK=16,
  NV=32, DK=DV=128) for B in {1, 8, 32} and T_b in {1, 2}, plus a tiny model's heads.
  Inputs bf16, state fp32, ``g`` and in-kernel l2norm on, as Qwen3-Next's decode calls it.
  The HF side gets query/key already repeated onto the value heads and a state per
  sequence (no pool gather/scatter): its best case.
* Conv decode: the reference CausalConv1dUpdate kernel against Qwen3-Next's torch
  ``causal_conv1d_update`` (written below from its math: the window shifted in place, a
  depthwise ``F.conv1d``, SiLU) at the tiny model's and Qwen3.5's conv width, one token per sequence.
* SSD decode: the reference kernel against the obvious torch statement of the step
  (``state.copy_(state * exp(dt * A) + dt * x * B)``, ``y = state @ C``) on the manifest rows.
* Every other op: the reference kernel alone (the function its ``entry_for`` builds for the
  op's call), and the whole op call, against the op's
  ``ref_api`` (or, for SiluAndMul, ``F.silu(gate) * up``) called on the native-dtype
  inputs, on the manifest's workload rows (rows above ``--max-mb`` of inputs are skipped).
  The Gated DeltaNet layer's norms and gating and the gated attention output, which have no
  ``ref_api``, race Qwen3-Next's own torch statements of them (``Qwen3NextRMSNorm``,
  ``Qwen3NextRMSNormGated``, the gating lines of ``Qwen3NextGatedDeltaNet.forward``,
  ``attn_output * torch.sigmoid(gate)``), written below from their math.

The machine may be shared: the spread of the samples is not printed, so compare rows by
the ratio, which is measured under the same load for every candidate.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "backends/cpu_ref/tileops_cpu_ref"


# -- timing ---------------------------------------------------------------------------------------------------


#: ``wall``: ``time.perf_counter``. ``cpu``: this thread's CPU time (``time.thread_time``), which on a
#: shared machine leaves out the time the process waits for a core; it sees all the work only
#: with one torch thread (the default), since other threads' time is not this thread's.
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter


def _calls_per_sample(fn: Callable[[], Any], sample_s: float) -> int:
    """How many calls make one sample last about ``sample_s`` (one call is timed after warm-up)."""
    fn()
    start = clock()
    fn()
    once = clock() - start
    return max(1, min(10_000, int(sample_s / max(once, 1e-7))))


def race(candidates: dict[str, Callable[[], Any]], rounds: int, sample_s: float,
         budget_s: float) -> dict[str, float]:
    """Median µs per call of each candidate, sampled in interleaved rounds (in a shuffled order).

    Fewer rounds (at least 3) run when ``rounds`` of them would take over ``budget_s``.
    """
    names = list(candidates)
    calls = {n: _calls_per_sample(candidates[n], sample_s) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    started = time.perf_counter()
    order = random.Random(0)
    for r in range(rounds):
        # A fresh order each round: no candidate always runs right after the same one (a slow
        # one that churns memory can slow the next).
        for n in order.sample(names, len(names)):
            fn, k = candidates[n], calls[n]
            t0 = clock()
            for _ in range(k):
                fn()
            samples[n].append((clock() - t0) / k * 1e6)
        if r >= 2 and time.perf_counter() - started > budget_s:
            break
    return {n: sorted(s)[len(s) // 2] for n, s in samples.items()}


# -- the reference kernels: this tree's, and optionally another revision's -----------------------------------


def kernels_of_revision(rev: str, into: Path) -> ModuleType:
    """``tileops_cpu_ref.kernels`` as it is at git revision ``rev``, imported under another name."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, PACKAGE], check=True, capture_output=True).stdout
    tar_path = into / "before.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    name = f"_cpu_ref_{rev.replace('/', '_').replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, into / PACKAGE / "__init__.py",
                                                  submodule_search_locations=[str(into / PACKAGE)])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.kernels")


def kernel_classes(module: ModuleType) -> dict[str, Any]:
    """op name -> the reference kernel class of ``module`` (a ``tileops_cpu_ref.kernels``)."""
    return {k.op: k for k in module.KERNELS}


def kernel_for(kernel: Any, call: Any) -> Callable[..., Any]:
    """What ``kernel`` runs for ``call``: the function its entry builds, as the op would get it."""
    return kernel.entry_for(call).build()


def baseline_mismatch(torch_call: Callable[..., Any], kernel_fn: Callable[..., Any], args: list[Any]) -> str | None:
    """Why ``torch_call`` does not compute what ``kernel_fn`` computes on ``args``, or None: a race against a
    different computation (or one that raises) says nothing. Each side runs on its own copy of the tensors,
    since some kernels write an input (the fused add's residual); outputs compare within 1e-2 for 16-bit
    dtypes and 1e-4 otherwise (both sides round once from float32 sums, in different orders)."""
    def fresh() -> list[Any]:
        return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]

    want, got = kernel_fn(*fresh()), torch_call(*fresh())
    wants = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    gots = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    if len(wants) != len(gots):
        return f"{len(gots)} outputs against the kernel's {len(wants)}"
    for i, (w, g) in enumerate(zip(wants, gots)):
        tol = 1e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-4
        try:
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)
        except AssertionError as exc:
            return f"output {i}: " + " ".join(str(exc).split())
    return None


# -- RGDR against a Hugging Face style torch loop ------------------------------------------------------------


def hf_style_recurrent_gated_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor,
                                        beta: torch.Tensor, initial_state: torch.Tensor,
                                        use_qk_l2norm_in_kernel: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule as Hugging Face's torch fallback states it, from the math.

    ``query``/``key`` ``[B, T, H, DK]`` (already one head per value head), ``value`` ``[B, T, H, DV]``,
    ``g``/``beta`` ``[B, T, H]``, ``initial_state`` ``[B, H, DK, DV]``. Returns the output
    ``[B, T, H, DV]`` in ``value``'s dtype and the final float32 state. Per token: decay the
    state by ``exp(g)``, read ``k``'s memory, correct it toward ``v`` by ``beta``, read ``q``.
    """
    out_dtype = value.dtype
    if use_qk_l2norm_in_kernel:
        query = query * torch.rsqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key * torch.rsqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    q, k, v, beta, g = (t.transpose(1, 2).contiguous().to(torch.float32) for t in (query, key, value, beta, g))
    B, H, T, DK = k.shape
    q = q * DK**-0.5
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float32)
    S = initial_state.to(torch.float32)
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        memory = (S * k[:, :, t, :, None]).sum(dim=-2)  # [B, H, DV]: k^T S
        correction = (v[:, :, t] - memory) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * correction[..., None, :]
        out[:, :, t] = (S * q[:, :, t, :, None]).sum(dim=-2)
    return out.transpose(1, 2).contiguous().to(out_dtype), S


RGDR_ROWS = [("tiny model", 1, 1, 2, 4, 32, 32)] + [
    (f"qwen3.5 B={B} T_b={L}", B, L, 16, 32, 128, 128) for B in (1, 8, 32) for L in (1, 2)]


def rgdr_table(kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for label, B, L, NK, NV, DK, DV in RGDR_ROWS:
        T, pool = B * L, B * L + B + 8
        q = torch.randn(T, NK, DK, generator=gen).bfloat16()
        k = torch.randn(T, NK, DK, generator=gen).bfloat16()
        v = torch.randn(T, NV, DV, generator=gen).bfloat16()
        beta = torch.sigmoid(torch.randn(T, NV, generator=gen)).bfloat16()
        g = -(0.05 + 0.5 * torch.rand(T, NV, generator=gen))
        state = torch.randn(pool, NV, DV, DK, generator=gen) * 0.1
        lengths = torch.full((B,), L, dtype=torch.int32)
        slots = torch.randperm(pool, generator=gen)[:T].to(torch.int32)
        # The HF side: heads repeated onto value heads, [B, T, ...] layout, one [DK, DV] state per sequence.
        rep = NV // NK
        hf_in = (q.view(B, L, NK, DK).repeat_interleave(rep, 2), k.view(B, L, NK, DK).repeat_interleave(rep, 2),
                 v.view(B, L, NV, DV), g.view(B, L, NV), beta.view(B, L, NV),
                 state[slots.view(B, L)[:, 0].long()].transpose(-1, -2).contiguous())
        expected, _ = hf_style_recurrent_gated_delta_rule(*hf_in)
        candidates = {"torch": lambda: hf_style_recurrent_gated_delta_rule(*hf_in)}
        for name, fns in kernels.items():
            fn = fns["RecurrentGatedDeltaRuleFwdOp"].fn
            pool_copy = state.clone()
            got = fn(q, k, v, beta, pool_copy, lengths, slots, g, None, None, None, "lengths", True)
            err = float((got.float() - expected.reshape(T, NV, DV).float()).norm() / expected.float().norm())
            assert err < 2e-2, f"{label}: {name} kernel differs from the HF-style loop (relative error {err:.3g})"
            candidates[name] = lambda fn=fn, s=pool_copy: fn(q, k, v, beta, s, lengths, slots, g, None, None, None,
                                                              "lengths", True)
        rows.append([label] + _figures(race(candidates, args.rounds, args.sample_s, args.budget_s), kernels))
    return rows


# -- the conv decode step against Hugging Face's torch causal_conv1d_update -----------------------------------


def hf_style_causal_conv1d_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                                  bias: torch.Tensor) -> torch.Tensor:
    """Qwen3-Next's torch ``causal_conv1d_update`` from its math: ``x`` ``[B, D, 1]``, ``conv_state``
    ``[B, D, W]`` (HF keeps ``W`` inputs), ``weight`` ``[D, W]``; the window shifts in place and a
    depthwise ``F.conv1d`` reads it, then SiLU."""
    D, state_len = x.shape[1], conv_state.shape[-1]
    window = torch.cat([conv_state, x], dim=-1).to(weight.dtype)
    conv_state.copy_(window[:, :, -state_len:])
    out = F.conv1d(window, weight.unsqueeze(1), bias, padding=0, groups=D)[:, :, -1:]
    return F.silu(out).to(x.dtype)


CONV_ROWS = [("tiny model B=1", 1, 96, "float32"), ("tiny model B=8", 8, 96, "float32"),
             ("qwen3.5 B=1", 1, 8192, "bfloat16"), ("qwen3.5 B=32", 32, 8192, "bfloat16")]


def conv_table(kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(3)
    W = 4
    for label, B, D, dtype_name in CONV_ROWS:
        dtype = getattr(torch, dtype_name)
        x, weight, bias = (torch.randn(*s, generator=gen).to(dtype) for s in ((B, D), (D, W), (D,)))
        hf_state = torch.randn(B, D, W, generator=gen).to(dtype)
        pool = hf_state[:, :, 1:].contiguous()  # TileOPs keeps the W - 1 inputs a step reads
        lengths, slots = torch.ones(B, dtype=torch.int32), torch.arange(B, dtype=torch.int32)
        expected = hf_style_causal_conv1d_update(x.unsqueeze(-1), hf_state.clone(), weight, bias).squeeze(-1)
        hf_pool = hf_state.clone()
        candidates = {"torch": lambda: hf_style_causal_conv1d_update(x.unsqueeze(-1), hf_pool, weight, bias)}
        for name, fns in kernels.items():
            fn, s = fns["CausalConv1dUpdateFwdOp"].fn, pool.clone()
            torch.testing.assert_close(fn(x, s, weight, lengths, slots, bias, None, "silu", "lengths"), expected,
                                       rtol=2e-2, atol=2e-2)
            candidates[name] = lambda fn=fn, s=s: fn(x, s, weight, lengths, slots, bias, None, "silu", "lengths")
        rows.append([label] + _figures(race(candidates, args.rounds, args.sample_s, args.budget_s), kernels))
    return rows


# -- SSD decode against the obvious torch step ---------------------------------------------------------------


def torch_ssd_decode(A: torch.Tensor, dt: torch.Tensor, x: torch.Tensor, B_in: torch.Tensor, C_in: torch.Tensor,
                     state: torch.Tensor) -> torch.Tensor:
    """The Mamba2 decode step as one would first write it in torch (float32)."""
    rep = A.shape[0] // B_in.shape[1]
    Bh = B_in.float().repeat_interleave(rep, dim=1)  # [B, H, N]
    Ch = C_in.float().repeat_interleave(rep, dim=1)
    dA = torch.exp(dt.unsqueeze(-1) * A)  # [B, H, P, N]
    dBx = (dt * x.float()).unsqueeze(-1) * Bh.unsqueeze(2)
    state.copy_(state * dA + dBx)
    return torch.einsum("bhpn,bhn->bhp", state, Ch)


def ssd_table(kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(1)
    for label, B, H, P, N, G in [("small", 2, 8, 16, 16, 2), ("mamba2-2.7b B=1", 1, 128, 64, 128, 8),
                                 ("mamba2-2.7b B=64", 64, 128, 64, 128, 8)]:
        A = -torch.exp(torch.randn(H, P, N, generator=gen))
        dt = F.softplus(torch.randn(B, H, P, generator=gen))
        x = torch.randn(B, H, P, generator=gen).bfloat16()
        B_in, C_in = (torch.randn(B, G, N, generator=gen).bfloat16() for _ in range(2))
        state = torch.randn(B, H, P, N, generator=gen)
        expected = torch_ssd_decode(A, dt, x, B_in, C_in, state.clone())
        reference_state = state.clone()
        candidates = {"torch": lambda s=reference_state: torch_ssd_decode(A, dt, x, B_in, C_in, s)}
        for name, fns in kernels.items():
            fn, s = fns["SSDDecodeFwdOp"].fn, state.clone()
            torch.testing.assert_close(fn(A, dt, x, B_in, C_in, s), expected, rtol=1e-4, atol=1e-4)
            candidates[name] = lambda fn=fn, s=s: fn(A, dt, x, B_in, C_in, s)
        rows.append([label] + _figures(race(candidates, args.rounds, args.sample_s, args.budget_s), kernels))
    return rows


# -- every other op against its ref_api ----------------------------------------------------------------------


def _torch_dtype(name: str | None) -> torch.dtype | None:
    """A kernel's dtype argument (the spec's name of a dtype, as ops pass it to their kernels) as torch's."""
    return None if name is None else getattr(torch, name)


def _sum(x: torch.Tensor, dim: Any, keepdim: bool, dtype: str | None) -> torch.Tensor:
    if dim is None:
        total = torch.sum(x, dtype=_torch_dtype(dtype))
        return total.reshape((1,) * x.dim()) if keepdim else total
    return torch.sum(x, dim, keepdim=keepdim, dtype=_torch_dtype(dtype))


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def _hf_zero_centred_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``Qwen3NextRMSNorm.forward``: float32 norm times ``1 + weight``, cast back."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())).type_as(x)


def _hf_add_then_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The decoder layer's ``residual + hidden_states`` and the next ``Qwen3NextRMSNorm``."""
    return _hf_zero_centred_rms_norm(residual + x, weight, eps)


def _hf_gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``Qwen3NextRMSNormGated.forward``."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h.to(x.dtype) * F.silu(gate.to(torch.float32))).to(x.dtype)


def _hf_gdn_gating(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor,
                   dt_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gating lines of ``Qwen3NextGatedDeltaNet.forward``."""
    return -A_log.float().exp() * F.softplus(a.float() + dt_bias), b.sigmoid()


#: op name -> the plain torch call, given exactly the arguments the op passes its kernel.
TORCH_CALLS: dict[str, Callable[..., Any]] = {
    "RMSNormFwdOp": lambda x, w, shape, eps: F.rms_norm(x, shape, w, eps),
    "GroupNormFwdOp": lambda x, w, b, groups, eps: F.group_norm(x, groups, w, b, eps),
    "SoftmaxFwdOp": lambda x, dim, dtype: torch.softmax(x, dim, dtype=_torch_dtype(dtype)),
    "SumFwdOp": _sum,
    "ReciprocalFwdOp": lambda x, out: torch.reciprocal(x) if out is None else torch.reciprocal(x, out=out),
    "SiluAndMulFwdOp": _silu_and_mul,
    "BmmFwdOp": torch.bmm,
    "GemmFwdOp": lambda a, b, ta, tb: torch.matmul(a.t() if ta else a, b.t() if tb else b),
    "LinearFwdOp": F.linear,
    "ZeroCentredRMSNormFwdOp": _hf_zero_centred_rms_norm,
    "FusedAddZeroCentredRMSNormFwdOp": _hf_add_then_norm,
    "GatedRMSNormFwdOp": _hf_gated_rms_norm,
    "GDNGatingFwdOp": _hf_gdn_gating,
    "SigmoidGateMulFwdOp": lambda attn, gate: attn * torch.sigmoid(gate),
}


@dataclass
class OpCase:
    """One workload row and dtype case of an op in :data:`TORCH_CALLS`: the op, its call, and the kernel
    launch the call makes (``launch.args`` is what the torch baseline gets too); ``skipped`` says why a row
    too large for ``--max-mb`` has none of them."""

    name: str
    label: str
    skipped: str = ""
    op: Any = None
    call_args: list[Any] = field(default_factory=list)
    launch: Any = None


def op_cases(ops: list[str], max_mb: float, first_only: bool) -> Iterator[OpCase]:
    """Every workload row and dtype case of ``ops`` as the ops table races them (``first_only``: each op's
    first case that fits)."""
    from tileops_core import load_manifest
    from tileops_core.bench.baselines import capture_launches
    from tileops_core.bench.workloads import dtype_cases, instantiate
    from tileops_core.plugins import ensure_plugins_loaded

    ensure_plugins_loaded()  # before the first plan: loading bumps the registry generation plans key on
    manifest = load_manifest()
    for name in ops:
        spec = manifest[name]
        op_cls = getattr(importlib.import_module(spec.source["op"]), name)
        for row, case in ((row, case) for row in spec.workloads for case in dtype_cases(row)):
            meta = instantiate(spec, row, case, meta_only=True)
            size = sum(m.numel() * m.itemsize for m in meta.inputs.values())
            label = f"{name.removesuffix('FwdOp')} {meta.name.split('-', 1)[-1]}"
            if size > max_mb * 2**20:
                yield OpCase(name, label, skipped=f"skipped: {size / 2**20:.0f} MB of inputs > --max-mb")
                continue
            inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(2))
            op = op_cls(**inst.op_kwargs)
            call_args = inst.call_args(spec)
            op(*call_args)
            (launch,) = capture_launches(op, call_args)
            yield OpCase(name, label, op=op, call_args=call_args, launch=launch)
            if first_only:
                break


def ops_table(kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[list[str]]:
    rows = []
    for c in op_cases([n for n in TORCH_CALLS if not args.op or n in args.op], args.max_mb, args.quick):
        if c.skipped:
            rows.append([c.label, c.skipped])
            continue
        a, name = c.launch.args, c.name
        fns = {kname: kernel_for(classes[name], c.launch.call) for kname, classes in kernels.items()}
        why = baseline_mismatch(TORCH_CALLS[name], fns["after"], list(a))
        if why is not None:
            rows.append([c.label, f"not timed: the torch baseline differs from the reference kernel ({why})"])
            continue
        candidates = {"torch": lambda a=a: TORCH_CALLS[name](*a)}
        for kname, fn in fns.items():
            candidates[kname] = lambda fn=fn, a=a: fn(*a)
        candidates["op"] = lambda: c.op(*c.call_args)
        rows.append([c.label] + _figures(race(candidates, args.rounds, args.sample_s, args.budget_s),
                                         kernels, with_op=True))
    return rows


# -- report ---------------------------------------------------------------------------------------------------


def _figures(times: dict[str, float], kernels: dict[str, Any], with_op: bool = False) -> list[str]:
    torch_us = times["torch"]
    cells = [f"{torch_us:.1f}"]
    for name in list(kernels) + (["op"] if with_op else []):
        cells += [f"{times[name]:.1f}", f"{torch_us / times[name]:.2f}"]
    return cells


def _print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}")
    widths = [max(len(header[i]), *(len(r[i]) for r in rows if len(r) == len(header))) for i in range(len(header))]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    for r in rows:
        if len(r) != len(header):
            print(f"{r[0].ljust(widths[0])}  {' '.join(r[1:])}")
            continue
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Reference kernels against the torch code they replace (CPU).")
    parser.add_argument("--before", metavar="REV", help="also time the reference kernels of this git revision")
    parser.add_argument("--only", choices=("rgdr", "conv", "ssd", "ops"), action="append",
                        help="tables to run (default all)")
    parser.add_argument("--op", action="append", choices=sorted(TORCH_CALLS),
                        help="only this op in the ops table (repeatable)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved samples per candidate; the median is shown")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="length of one sample (a loop of calls)")
    parser.add_argument("--budget-s", type=float, default=20.0,
                        help="stop sampling a row after this long (>= 3 rounds)")
    parser.add_argument("--max-mb", type=float, default=64.0, help="skip op rows with more input bytes than this")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, the same for every candidate")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: time.perf_counter (default); cpu: this thread's CPU time (for a busy machine)")
    parser.add_argument("--quick", action="store_true", help="few rounds, the first row of each op")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.sample_ms, args.budget_s = 5, 5.0, 3.0
    args.sample_s = args.sample_ms / 1e3
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)

    import tileops_cpu_ref.kernels as current

    with tempfile.TemporaryDirectory() as tmp:
        kernels = {"after": kernel_classes(current)}
        if args.before:
            kernels = {"before": kernel_classes(kernels_of_revision(args.before, Path(tmp))), **kernels}
        names = list(kernels)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.clock} clock; "
              f"median µs per call of "
              f"{args.rounds} interleaved samples; ratio = torch / candidate (> 1: faster than torch)"
              + (f"; before = {args.before}" if args.before else ""))
        cols = [c for n in names for c in (f"{n} µs", f"{n} ×")]
        tables = args.only or ["rgdr", "conv", "ssd", "ops"]
        if "rgdr" in tables:
            _print_table("RecurrentGatedDeltaRule: reference kernel vs HF-style torch loop "
                         "(bf16 in, fp32 state, g, l2norm)",
                         ["row", "HF µs"] + cols, rgdr_table(kernels, args))
        if "conv" in tables:
            _print_table("CausalConv1dUpdate: reference kernel vs HF's torch causal_conv1d_update (decode, SiLU, bias)",
                         ["row", "HF µs"] + cols, conv_table(kernels, args))
        if "ssd" in tables:
            _print_table("SSDDecode: reference kernel vs the obvious torch step (bf16 x/B/C, fp32 state)",
                         ["row", "torch µs"] + cols, ssd_table(kernels, args))
        if "ops" in tables:
            _print_table("Other ops: reference kernel alone and the whole op call vs the ref_api on native dtypes",
                         ["row", "torch µs"] + cols + ["op µs", "op ×"], ops_table(kernels, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
