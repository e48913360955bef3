"""A decode step's linear layers: the skinny program, the GEMM and ``F.linear`` (cuBLAS) at few rows.

At a decode step a linear layer reads its weight once (2 bytes an element) for one to a few rows of
input, so its ceiling is the copy's bandwidth. For the weight shapes of Qwen3-Next / Qwen3.5 at
hidden 2048 (``SHAPES``) and each row count, this times, with CUDA events after an L2 flush (a
256 MiB write; medians over ``--reps``): TileOPs' skinny program (``kernels.skinny_linear``, the
launcher's choice up to ``rows_for(key)`` rows), its GEMM (``kernels.gemm``, the 128 x 256 wgmma
tile), ``F.linear``, and a same-size copy (``torch.mul(a, 1, out=b)`` moving as many bytes as the
layer reads and writes). The 1 GiB copy ceiling is measured in the same run. Each row is checked
first: the skinny program against ``F.linear`` in float64 (relative error printed).

    python backends/cuda/bench/linear_decode_bench.py [--rows 1,2,4,8] [--reps 50] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_ops_bench import _FLUSH_BYTES, copy_ceiling, time_reps  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.gemm import GemmBuildKey  # noqa: E402
from tileops_cuda.kernels.skinny_linear import build_linear_kernels, rows_for  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    flush = torch.empty(_FLUSH_BYTES // 4, device=dev)
    ceiling = copy_ceiling(a.reps, flush)
    print(f"copy ceiling (torch.mul 1 GiB): {ceiling:.0f} GB/s   [{torch.cuda.get_device_name()}]", flush=True)
    print(f"{'shape':42s} {'M':>3s} {'skinny us':>9s} {'gemm us':>8s} {'F.linear':>8s} {'copy us':>8s} "
          f"{'skinny %copy':>12s} {'%ceil':>6s} {'x F.lin':>7s} {'x gemm':>7s} {'rel.err':>8s}")
    results = []
    gen = torch.Generator(device=dev).manual_seed(0)
    keys = [GemmBuildKey("bfloat16", n, k, False, True, False, arch) for _, n, k in SHAPES]
    built = compile_many([lambda key=key: build_linear_kernels(key) for key in keys])  # every shape's pair at once
    for (label, n, k), key, pair in zip(SHAPES, keys, built):
        if isinstance(pair, BaseException):
            raise pair
        gemm, skinny = pair
        w = (torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).to(torch.bfloat16)
        for m in (int(r) for r in a.rows.split(",")):
            x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            nbytes = (n * k + m * k + m * n) * 2
            half = torch.empty(nbytes // 4, device=dev, dtype=torch.bfloat16)  # read + written = nbytes
            half2 = torch.empty_like(half)
            row = {"shape": label, "N": n, "K": k, "M": m, "bytes": nbytes}
            fits = skinny is not None and m <= rows_for(key)
            if fits:
                skinny.fn(x, w, out)
                want = x.double() @ w.double().t()
                row["rel_err"] = float((out.double() - want).abs().max() / want.abs().max())
                row["skinny_us"] = time_reps(lambda: skinny.fn(x, w, out), a.reps, flush)
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
            print(f"{label[:42]:42s} {m:3d} {sk or float('nan'):9.2f} {row['gemm_us']:8.2f} {row['torch_us']:8.2f} "
                  f"{row['copy_us']:8.2f} {pct} {ceil} {vs_t} {vs_g} {err}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"ceiling_GBps": ceiling, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
