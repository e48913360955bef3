"""A decode step's linear layers: the skinny program, the GEMM and ``F.linear`` (cuBLAS) at few rows.

At a decode step a linear layer reads its weight once (2 bytes an element) for one to a few rows of
input, so its ceiling is the copy's bandwidth. For the weight shapes of Qwen3-Next / Qwen3.5 at
hidden 2048 (``SHAPES``) and each row count, this times, with CUDA events after an L2 flush (a
256 MiB write; medians over ``--reps``): TileOPs' skinny program (``kernels.skinny_linear``, the
launcher's choice up to ``rows_for(key)`` rows), its GEMM at the tiling the launcher gives the row
count (``kernels.linear``: the decode tiling up to ``DECODE_GEMM_ROWS``), ``F.linear``, and a same-size copy (``torch.mul(a, 1, out=b)`` moving as many bytes as the
layer reads and writes). The 1 GiB copy ceiling is measured in the same run. Each row is checked
first: the skinny program against ``F.linear`` in float64 (relative error printed), and its
``weights_first`` candidate (``SkinnyLinearTiling``) timed beside it, its output compared bit for bit.

With ``--gemm-tilings``, a second table for the rows past the skinny program's (a batched decode
step's 8-64 rows, where the 128 x 256 GEMM tile leaves ``N / 256`` programs): the GEMM program
compiled at the prefill tiling ("prefill", 128 x 256), the registered decode tiling ("decode",
``kernels.linear.decode_gemm_tiling``) and each of ``GEMM_CANDIDATES`` (narrower tiles, deeper
pipelines: more programs, more weight bytes in flight), each checked against float64, timed beside
``F.linear``. The candidates are reachable from the op only through ``decode_gemm_tiling``.

With ``--graph``, a third: the skinny program as the registered key builds it, with its weights first,
and plain (``graph_candidates``) in CUDA graphs of back-to-back calls, where a dependent launch can
overlap the previous call's tail.

    python backends/cuda/bench/linear_decode_bench.py [--rows 1,2,4,8] [--reps 50] [--gemm-tilings 8,16,32,64]
        [--graph 1,4] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_bench_common import time_graph  # noqa: E402
from model_ops_bench import _FLUSH_BYTES, copy_ceiling, time_reps  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.gemm import GemmBuildKey, GemmTiling, build_gemm  # noqa: E402
from tileops_cuda.kernels.linear import DECODE_GEMM_ROWS, build_linear_kernels, decode_gemm_tiling  # noqa: E402
from tileops_cuda.kernels.skinny_linear import SkinnyLinearTiling, build_skinny_linear, rows_for  # noqa: E402
from tileops_cuda.launch_policy import registered_key  # noqa: E402

#: (label, out_features N, in_features K) of the decode step's linear layers at hidden 2048.
SHAPES = (
    ("qwen3-next gdn in_proj_qkvz", 12288, 2048),
    ("qwen3.5 gdn in_proj_qkv / attn q_proj", 8192, 2048),
    ("qwen3.5 gdn in_proj_z / lm head 4k vocab", 4096, 2048),
    ("gdn out_proj / attn o_proj", 2048, 4096),
    ("attn k_proj / v_proj", 512, 2048),
    ("qwen3.5-35b router", 256, 2048),
    ("qwen3-next gdn in_proj_ba", 64, 2048),
)


#: The skinny program's candidate beside the registered one: its first weight loads before the rows'
#: staging (column "w-first"; "!" where its output differs from the registered program's in a bit).
WEIGHTS_FIRST = SkinnyLinearTiling(weights_first=True)
#: The skinny program's candidates timed in CUDA graphs (``--graph``), where a programmatic dependent
#: launch can overlap the previous call's tail (events between single calls would not show it):
#: "registered" is the tiling ``build_linear_kernels`` gives the registered key (``registered_key``:
#: a programmatic dependent on Hopper), "w-first" the same with its weights first (what would be
#: registered if it wins every row with no "!"), "plain" neither; "16 warps" and "32 warps" the
#: registered tiling with two and four times the features a program: every program stages all the
#: input rows from L2 before its warps start (16 KiB at four rows of K = 2048, half as many bytes again
#: as the weight it then reads at 8 warps), and at four rows the program reads the weight at 60-74% of
#: the same-size copy against 79-89% at one (twenty-ninth session). Same warps an SM at each (about 60
#: registers, no spill), a fourth of the staging at 32.
def graph_candidates(key: GemmBuildKey) -> dict[str, SkinnyLinearTiling]:
    dependent = registered_key(key).dependent_launch
    return {"registered": SkinnyLinearTiling(dependent_launch=dependent),
            "w-first": SkinnyLinearTiling(weights_first=True, dependent_launch=dependent),
            "plain": SkinnyLinearTiling(),
            "16 warps": SkinnyLinearTiling(warps=16, dependent_launch=dependent),
            "32 warps": SkinnyLinearTiling(warps=32, dependent_launch=dependent)}


GRAPH_COPIES = 8


def skinny_graph_table(dev: torch.device, arch: str, rows: list[int]) -> list[dict]:
    """The ``--graph`` table: per shape and row count, each of ``graph_candidates(key)`` as one CUDA graph of
    ``GRAPH_COPIES`` back-to-back calls on as many copies of the weight (more bytes than L2 holds
    on the wide shapes), µs a call (``cuda_bench_common.time_graph``), "!" where a candidate's output
    differs from the registered program's in a bit."""
    gen = torch.Generator(device=dev).manual_seed(2)
    keys = [GemmBuildKey("bfloat16", n, k, False, True, False, arch) for _, n, k in SHAPES]
    jobs = list({(key, t) for key in keys for t in graph_candidates(key).values()})
    built = dict(zip(jobs, compile_many([lambda key=key, t=t: build_skinny_linear(key, t) for key, t in jobs])))
    columns = tuple(graph_candidates(keys[0]))  # (every key's candidates carry the same names)
    print(f"\n{'shape (CUDA graphs)':42s} {'M':>3s}  " + "  ".join(f"{n:>12s}" for n in columns))
    out_rows = []
    for (label, n, k), key in zip(SHAPES, keys):
        ws = [(torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).to(torch.bfloat16) for _ in range(GRAPH_COPIES)]
        for m in rows:
            if m > rows_for(key):
                continue
            x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
            want = None
            row: dict = {"shape": label, "N": n, "K": k, "M": m, "us": {}, "bitwise": {}}
            for name, t in graph_candidates(key).items():
                prog = built[(key, t)]
                if isinstance(prog, BaseException):
                    raise prog
                out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
                prog.fn(x, ws[0], out)
                want = out.clone() if want is None else want
                row["bitwise"][name] = bool(torch.equal(out, want))
                row["us"][name] = time_graph([lambda i=i, prog=prog: prog.fn(x, ws[i], out)
                                              for i in range(GRAPH_COPIES)])
            out_rows.append(row)
            print(f"{label[:42]:42s} {m:3d}  " + "  ".join(
                f"{row['us'][c]:11.2f}{' ' if row['bitwise'][c] else '!'}" for c in columns), flush=True)
    return out_rows


#: GEMM tilings tried at 8-64 rows (``--gemm-tilings``): one consumer warpgroup (64-row wgmma tiles)
#: and 96, 64, 32 or 16 output features a program, K tiles of 128 or 256 in 4-8 stages (shared memory under
#: 200 KiB: the 64-row A tiles dominate it).
GEMM_CANDIDATES = (
    GemmTiling(block_m=64, block_n=64, block_k=128, stages=4, threads=128),
    GemmTiling(block_m=64, block_n=32, block_k=128, stages=8, threads=128),
    GemmTiling(block_m=64, block_n=16, block_k=256, stages=4, threads=128),
    # One wave: N / 96 = 128 programs at N = 12288 (132 SMs), where 64 features leave 1.45 waves.
    GemmTiling(block_m=64, block_n=96, block_k=128, stages=4, threads=128),
)


def gemm_tilings_table(dev: torch.device, arch: str, rows: list[int], reps: int, flush: torch.Tensor) -> list[dict]:
    """The ``--gemm-tilings`` table (module docstring)."""
    gen = torch.Generator(device=dev).manual_seed(1)
    keys = [GemmBuildKey("bfloat16", n, k, False, True, False, arch) for _, n, k in SHAPES]
    tilings = {key: (None, decode_gemm_tiling(key), *GEMM_CANDIDATES) for key in keys}
    jobs = [(key, t) for key in keys for t in tilings[key]]
    built = compile_many([lambda key=key, t=t: build_gemm(key, t) for key, t in jobs])
    programs = {(key, t): b for (key, t), b in zip(jobs, built)}
    print(f"\n{'shape':42s} {'M':>3s} {'F.linear':>8s} {'gemm':>8s}  candidates (us, x F.linear; '!' wrong, '-' no build)")
    out_rows = []
    for (label, n, k), key in zip(SHAPES, keys):
        w = (torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).to(torch.bfloat16)
        for m in rows:
            x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
            want = x.double() @ w.double().t()
            torch_us = time_reps(lambda: F.linear(x, w), reps, flush)
            row = {"shape": label, "N": n, "K": k, "M": m, "torch_us": torch_us, "tilings": {}}
            cells = []
            for i, t in enumerate(tilings[key]):
                prog = programs[(key, t)]
                name = ("prefill", "decode")[i] if i < 2 else f"{t.block_m}x{t.block_n}x{t.block_k}/{t.stages}"
                if isinstance(prog, BaseException):
                    row["tilings"][name] = {"error": f"{type(prog).__name__}: {prog}"[:200]}
                    cells.append(f"{name} -")
                    continue
                out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
                prog.fn(x, w, out)
                err = float((out.double() - want).abs().max() / want.abs().max())
                us = time_reps(lambda: prog.fn(x, w, out), reps, flush)
                row["tilings"][name] = {"us": us, "rel_err": err}
                mark = "!" if not err < 1e-2 else ""
                cells.append(f"{name} {us:.2f}{mark} ({torch_us / us:.2f}x)")
            out_rows.append(row)
            print(f"{label[:42]:42s} {m:3d} {torch_us:8.2f}  " + "  ".join(cells), flush=True)
    return out_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--graph", default=None, metavar="ROWS",
                    help="also the skinny candidates in CUDA graphs at these rows (e.g. 1,4)")
    ap.add_argument("--gemm-tilings", default=None, metavar="ROWS",
                    help="also the GEMM candidates' table at these rows (e.g. 8,16,32,64)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    flush = torch.empty(_FLUSH_BYTES // 4, device=dev)
    ceiling = copy_ceiling(a.reps, flush)
    print(f"copy ceiling (torch.mul 1 GiB): {ceiling:.0f} GB/s   [{torch.cuda.get_device_name()}]", flush=True)
    print(f"{'shape':42s} {'M':>3s} {'skinny us':>9s} {'w-first':>8s} {'gemm us':>8s} {'F.linear':>8s} {'copy us':>8s} "
          f"{'skinny %copy':>12s} {'%ceil':>6s} {'x F.lin':>7s} {'x gemm':>7s} {'rel.err':>8s}")
    results = []
    gen = torch.Generator(device=dev).manual_seed(0)
    keys = [GemmBuildKey("bfloat16", n, k, False, True, False, arch) for _, n, k in SHAPES]
    built = compile_many([lambda key=key: build_linear_kernels(key) for key in keys]  # every shape's programs at once
                         + [lambda key=key: build_skinny_linear(key, WEIGHTS_FIRST) for key in keys])
    for (label, n, k), key, pair, first in zip(SHAPES, keys, built, built[len(keys):]):
        for b in (pair, first):
            if isinstance(b, BaseException):
                raise b
        skinny = pair.skinny
        w = (torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).to(torch.bfloat16)
        for m in (int(r) for r in a.rows.split(",")):
            x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            nbytes = (n * k + m * k + m * n) * 2
            half = torch.empty(nbytes // 4, device=dev, dtype=torch.bfloat16)  # read + written = nbytes
            half2 = torch.empty_like(half)
            row = {"shape": label, "N": n, "K": k, "M": m, "bytes": nbytes}
            fits = skinny is not None and m <= pair.skinny_rows
            gemm = pair.decode_gemm if m <= DECODE_GEMM_ROWS else pair.gemm
            if fits:
                skinny.fn(x, w, out)
                want = x.double() @ w.double().t()
                row["rel_err"] = float((out.double() - want).abs().max() / want.abs().max())
                row["skinny_us"] = time_reps(lambda: skinny.fn(x, w, out), a.reps, flush)
                check = torch.full_like(out, float("nan"))
                first.fn(x, w, check)
                row["weights_first_bitwise"] = bool(torch.equal(check, out))
                row["weights_first_us"] = time_reps(lambda: first.fn(x, w, out), a.reps, flush)
            row["gemm_us"] = time_reps(lambda: gemm.fn(x, w, out), a.reps, flush)
            row["torch_us"] = time_reps(lambda: F.linear(x, w), a.reps, flush)
            row["copy_us"] = time_reps(lambda: torch.mul(half, 1, out=half2), a.reps, flush)
            results.append(row)
            sk = row.get("skinny_us")
            pct = f"{100 * row['copy_us'] / sk:11.1f}%" if sk else f"{'-':>12s}"
            ceil = f"{100 * nbytes / (sk * 1e-6) / (ceiling * 1e9):5.1f}%" if sk else f"{'-':>6s}"
            vs_t = f"{row['torch_us'] / sk:7.2f}" if sk else f"{'-':>7s}"
            vs_g = f"{row['gemm_us'] / sk:7.2f}" if sk else f"{'-':>7s}"
            err = f"{row['rel_err']:8.1e}" if "rel_err" in row else f"{'-':>8s}"
            wf = (f"{row['weights_first_us']:7.2f}" + ("" if row["weights_first_bitwise"] else "!")).ljust(8)[:8] \
                if sk else f"{'-':>8s}"
            print(f"{label[:42]:42s} {m:3d} {sk or float('nan'):9.2f} {wf} {row['gemm_us']:8.2f} {row['torch_us']:8.2f} "
                  f"{row['copy_us']:8.2f} {pct} {ceil} {vs_t} {vs_g} {err}", flush=True)
    tilings = (gemm_tilings_table(dev, arch, [int(r) for r in a.gemm_tilings.split(",")], a.reps, flush)
               if a.gemm_tilings else [])
    graphs = skinny_graph_table(dev, arch, [int(r) for r in a.graph.split(",")]) if a.graph else []
    if a.json:
        Path(a.json).write_text(json.dumps({"ceiling_GBps": ceiling, "rows": results, "gemm_tilings": tilings,
                                            "graphs": graphs},
                                           indent=1))


if __name__ == "__main__":
    main()
