"""MoE experts at a decode step's rows: the skinny programs against the decode tiling's tensor-core ones.

Qwen3.5's shared expert (bf16, H=2048, I=512, sigmoid gate) at T = 1..4 rows (and 8, where the
skinny key falls back to the decode tiling), three ways in one run: the launch function of the
default key (``skinny_rows=0``: the decode tiling), of a key with ``skinny_rows=4``
(:mod:`tileops_cuda.kernels.moe_skinny`), and torch's unfused path (``F.linear`` x3, SiLU,
mul, sigmoid). Device µs as ``cuda_bench_common.time_graph`` times them: one CUDA graph of 16 calls
whose weights rotate over 16 copies (96 MB > L2), replay medians; the same-size copy (the 6 MB of
weights read, as a copy moving as many bytes) beside them. Each skinny row is checked against the
default key's output first (relative difference printed).

Then the routed experts (bf16, H=2048, I=512; Qwen3.5-35B's 256 experts top-8 and Qwen3-Next's 512
top-10) at B = 1, 4, 16, 32, 64 tokens: a key without the skinny programs (the decode tiling) against
one whose ``skinny_max_rows`` takes every call (the registered key's bound, ``skinny_max_rows(E)``,
printed beside: it should fall where the skinny column stops winning),
each call of a graph on its own routing (16 draws, so the experts' weights mostly come from HBM),
with the bytes of the experts a call reads (``3 · H · I · 2`` each) over the same-size copy.

In both tables, the skinny programs under each of ``CANDIDATES`` (:class:`MoESkinnyTiling`) beside the
plain ones (the default tiling: one down feature a warp, launched plainly; the registered tilings are
``SHARED_SKINNY_TILING`` = "dep fl" and ``ROUTED_SKINNY_TILING`` = "f2 split dep", as the registered keys launch
them), in µs, "!" where a candidate's output differs from the plain skinny programs' in a
bit (the candidates keep the sums and their order, so none should; the fused logit's, "w-f fl", is formed
by another program, and its relative difference to the plain programs is printed after the table's
row: 0 on every row on 2026-12-04e).

    python backends/cuda/bench/moe_skinny_bench.py [--shared-only] [--json F]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_bench_common import graph_bench_start, time_graph  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.moe_grouped_experts import (  # noqa: E402
    PREFILL_ROWS_PER_EXPERT, GroupedTiling, MoEGroupedExpertsBuildKey, _make_run, _routed_programs, build_experts,
    skinny_max_rows,
)
from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey  # noqa: E402
from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling  # noqa: E402
from tileops_cuda.registered_model import TileLangMoEGroupedExperts, TileLangMoESharedExpert  # noqa: E402

H, I, COPIES = 2048, 512, 16

#: The skinny programs' candidates, by column name.
CANDIDATES = {"dep": MoESkinnyTiling(weights_first=True, dependent_launch=True),
              "f2": MoESkinnyTiling(down_features=2),
              "f2 dep": MoESkinnyTiling(down_features=2, dependent_launch=True),  # the routed keys' (2026-12-04f)
              # a gate row and an up row to two warps (NCU 2026-12-04f: 96 registers held the B=1 gate/up
              # program to two programs an SM; 56 with the split, compiled for sm_90a)
              "split": MoESkinnyTiling(gate_up_split=True),
              "f2 split dep": MoESkinnyTiling(down_features=2, dependent_launch=True, gate_up_split=True),
              # four down features a warp: the B=1 down program in one wave (512 programs; NCU 2026-12-04f: 2.59 waves
              # at one feature, 36% of DRAM); "w-f f4" lost 1.4 us at B=1 with weights first (2026-12-04e)
              "f4 split dep": MoESkinnyTiling(down_features=4, dependent_launch=True, gate_up_split=True),
              "w-f fl": MoESkinnyTiling(weights_first=True, fused_logit=True),
              "dep fl": MoESkinnyTiling(weights_first=True, fused_logit=True, dependent_launch=True),  # the shared's
              "dep fl split": MoESkinnyTiling(weights_first=True, fused_logit=True, dependent_launch=True,
                                              gate_up_split=True)}
#: Candidates only the shared expert's programs read (the routed experts have no gate logit).
SHARED_ONLY = ("w-f fl", "dep fl", "dep fl split")
ROUTED = {n: t for n, t in CANDIDATES.items() if n not in SHARED_ONLY}


#: A decode tiling of narrower programs, beside the routed rows (NCU 2026-12-04f: at B=1 the decode tiling gives
#: the gate/up kernel 64 programs, each streaming 512 kB of weights): gate/up 16 columns a program (256 programs
#: at B=1), down 32 (512), eight stages in flight. Compiled for sm_90a on the CPU (wgmma n16 / n32).
NARROW_DECODE = GroupedTiling(64, 16, 32, 128, 8)


def _narrow_decode(key: MoEGroupedExpertsBuildKey) -> Any:
    """The launch function of ``key`` (no skinny programs) with :data:`NARROW_DECODE` for every call."""
    return build_experts("moe_grouped_experts_narrow", key, None, _routed_programs, _make_run,
                         (NARROW_DECODE, NARROW_DECODE)).run


def _built(launcher, keys: list) -> list:
    built = compile_many([lambda k=k: launcher(k) for k in keys])
    for b in built:
        if isinstance(b, BaseException):
            raise b
    return built


def _cells(times: dict[str, float], same: dict[str, bool]) -> str:
    return " ".join(f"{times[n]:>9.2f}{' ' if same[n] else '!'}" for n in times)


def main() -> None:
    a, dev, gen, arch = graph_bench_start(__doc__, {"--shared-only": "the shared expert's table alone"})
    keys = [MoESharedExpertBuildKey("bfloat16", H, I, True, arch),
            MoESharedExpertBuildKey("bfloat16", H, I, True, arch, skinny_rows=4)]
    keys += [MoESharedExpertBuildKey("bfloat16", H, I, True, arch, skinny_rows=4, skinny_tiling=t)
             for t in CANDIDATES.values()]
    default, skinny, *candidates = _built(TileLangMoESharedExpert.launcher, keys)

    def w(*s: int, scale: float) -> torch.Tensor:
        return (torch.randn(*s, device=dev, generator=gen) * scale).bfloat16()

    sets = [(w(I, H, scale=H ** -0.5), w(I, H, scale=H ** -0.5), w(H, I, scale=I ** -0.5), w(1, H, scale=H ** -0.5))
            for _ in range(COPIES)]
    weight_bytes = 3 * H * I * 2 + H * 2
    src = torch.empty(weight_bytes // 2 // 2, device=dev, dtype=torch.bfloat16)
    copies = [(torch.empty_like(src), torch.empty_like(src)) for _ in range(COPIES)]

    def torch_path(x, g, u, d, eg):
        act = (F.silu(F.linear(x, g).float()) * F.linear(x, u).float()).bfloat16()
        return (F.linear(act, d).float() * torch.sigmoid(F.linear(x, eg).float())).bfloat16()

    copy_us = time_graph([lambda i=i: torch.mul(copies[i][0], 1, out=copies[i][1]) for i in range(COPIES)])
    print(f"{torch.cuda.get_device_name()}; same-size copy of the weights ({weight_bytes / 1e6:.1f} MB read): "
          f"{copy_us:.2f} us")
    print(f"{'T':>3} {'decode us':>10} {'skinny us':>10} {'torch us':>9} {'skinny/decode':>14} {'% copy':>7} "
          f"{'rel diff':>9}  " + " ".join(f"{n:>10}" for n in CANDIDATES))
    rows = []
    for T in (1, 2, 3, 4, 8):
        x = torch.randn(T, H, device=dev, generator=gen).bfloat16()
        out_d, out_s, out_c = (torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16) for _ in range(3))
        default(x, *sets[0], out_d)
        skinny(x, *sets[0], out_s)
        diff = float((out_s.float() - out_d.float()).norm() / out_d.float().norm())
        want = out_s.clone()  # the timing below rewrites out_s from the last weight set
        d_us = time_graph([lambda i=i: default(x, *sets[i], out_d) for i in range(COPIES)])
        s_us = time_graph([lambda i=i: skinny(x, *sets[i], out_s) for i in range(COPIES)])
        t_us = time_graph([lambda i=i: torch_path(x, *sets[i]) for i in range(COPIES)])
        times, same = {}, {}
        for name, run in zip(CANDIDATES, candidates):
            out_c.fill_(float("nan"))
            run(x, *sets[0], out_c)
            same[name] = bool(torch.equal(out_c, want))
            if name == "w-f fl":
                fused_out = out_c.clone()
            times[name] = time_graph([lambda i=i, run=run: run(x, *sets[i], out_c) for i in range(COPIES)])
        fused_diff = float((fused_out.float() - want.float()).norm() / want.float().norm())
        rows.append({"T": T, "decode_us": d_us, "skinny_us": s_us, "torch_us": t_us, "copy_us": copy_us,
                     "rel_diff": diff, "candidates_us": times, "candidates_bitwise": same,
                     "fused_logit_rel_diff": fused_diff})
        print(f"{T:>3} {d_us:>10.2f} {s_us:>10.2f} {t_us:>9.2f} {d_us / s_us:>13.2f}x {100 * copy_us / s_us:>6.1f}% "
              f"{diff:>9.2e}  " + _cells(times, same) + f"  (w-f fl rel diff {fused_diff:.1e})", flush=True)
    if not a.shared_only:
        rows += routed_rows(dev, gen, arch)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


def routed_rows(dev: torch.device, gen: torch.Generator, arch: str) -> list[dict]:
    """The routed experts, decode tiling against skinny, per model and batch (module docstring)."""
    rows = []
    print(f"{'model':>12} {'B':>3} {'decode us':>10} {'skinny us':>10} {'skinny/decode':>14} {'% copy':>7} "
          f"{'rel diff':>9}  " + " ".join(f"{n:>10}" for n in ROUTED))
    for label, E, K in (("qwen3.5-35b", 256, 8), ("qwen3-next", 512, 10)):
        every = PREFILL_ROWS_PER_EXPERT * E - 1
        keys = [MoEGroupedExpertsBuildKey("bfloat16", E, H, I, "int32", arch),
                MoEGroupedExpertsBuildKey("bfloat16", E, H, I, "int32", arch, skinny_max_rows=every)]
        keys += [MoEGroupedExpertsBuildKey("bfloat16", E, H, I, "int32", arch, skinny_max_rows=every, skinny_tiling=t)
                 for t in ROUTED.values()]
        default, skinny, *candidates = _built(TileLangMoEGroupedExperts.launcher, keys)
        narrow, = _built(_narrow_decode, keys[:1])
        gate_up = (torch.randn(E, 2 * I, H, device=dev, generator=gen) / H ** 0.5).bfloat16()
        down = (torch.randn(E, H, I, device=dev, generator=gen) / I ** 0.5).bfloat16()
        print(f"{label}: the registered key runs the skinny programs up to {skinny_max_rows(E)} rows")
        for B in (1, 4, 16, 32, 64):
            draws = []
            for _ in range(COPIES):
                ids = torch.rand(B, E, device=dev, generator=gen).argsort(dim=1)[:, :K].flatten()
                counts = torch.bincount(ids, minlength=E)
                offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)
                x = torch.randn(B * K, H, device=dev, generator=gen).bfloat16()
                draws.append((x, offsets, int((counts > 0).sum())))
            outs = [torch.empty_like(d[0]) for d in draws]
            x0, off0, _ = draws[0]
            want, got = default(x0, off0, gate_up, down), skinny(x0, off0, gate_up, down)
            diff = float((got.float() - want.float()).norm() / want.float().norm())

            def timed(run):
                return time_graph([lambda i=i: run(draws[i][0], draws[i][1], gate_up, down, outs[i])
                                   for i in range(COPIES)])

            d_us, s_us, n_us = timed(default), timed(skinny), timed(narrow)
            got_n = narrow(x0, off0, gate_up, down, torch.full_like(x0, float("nan")))
            n_diff = float((got_n.float() - want.float()).norm() / want.float().norm())
            times = {n: timed(run) for n, run in zip(ROUTED, candidates)}
            same = {n: bool(torch.equal(run(x0, off0, gate_up, down, torch.full_like(x0, float("nan"))), got))
                    for n, run in zip(ROUTED, candidates)}
            used = sum(d[2] for d in draws) / COPIES
            nbytes = int(used * 3 * H * I * 2)
            src = torch.empty(nbytes // 4, device=dev, dtype=torch.bfloat16)
            dst = torch.empty_like(src)
            copy_us = time_graph([lambda: torch.mul(src, 1, out=dst)] * 4)
            rows.append({"model": label, "B": B, "decode_us": d_us, "skinny_us": s_us, "copy_us": copy_us,
                         "experts_used": used, "rel_diff": diff, "candidates_us": times, "candidates_bitwise": same,
                         "narrow_decode_us": n_us, "narrow_decode_rel_diff": n_diff})
            print(f"{label:>12} {B:>3} {d_us:>10.2f} {s_us:>10.2f} {d_us / s_us:>13.2f}x "
                  f"{100 * copy_us / s_us:>6.1f}% {diff:>9.2e}  " + _cells(times, same)
                  + f"  narrow decode {n_us:.2f} (rel diff {n_diff:.1e})", flush=True)
    return rows


if __name__ == "__main__":
    main()
