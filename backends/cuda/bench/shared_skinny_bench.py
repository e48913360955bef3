"""The shared expert at a decode step's rows: the skinny programs against the decode tiling's tensor-core ones.

Qwen3.5's shared expert (bf16, H=2048, I=512, sigmoid gate) at T = 1..4 rows (and 8, where the
skinny key falls back to the decode tiling), three ways in one run: the launch function of the
default key (``skinny_rows=0``: the decode tiling), of a key with ``skinny_rows=4``
(:mod:`tileops_cuda.kernels.moe_shared_skinny`), and torch's unfused path (``F.linear`` x3, SiLU,
mul, sigmoid). Device µs as ``cuda_bench_common.time_graph`` times them: one CUDA graph of 16 calls
whose weights rotate over 16 copies (96 MB > L2), replay medians; the same-size copy (the 6 MB of
weights read, as a copy moving as many bytes) beside them. Each skinny row is checked against the
default key's output first (relative difference printed).

    python backends/cuda/bench/shared_skinny_bench.py [--json F]
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

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey  # noqa: E402
from tileops_cuda.registered_model import TileLangMoESharedExpert  # noqa: E402

H, I, COPIES = 2048, 512, 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    default_key = MoESharedExpertBuildKey("bfloat16", H, I, True, arch)
    skinny_key = MoESharedExpertBuildKey("bfloat16", H, I, True, arch, skinny_rows=4)
    launches = compile_many([lambda k=k: TileLangMoESharedExpert.launcher(k) for k in (default_key, skinny_key)])
    for built in launches:
        if isinstance(built, BaseException):
            raise built
    default, skinny = launches

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
          f"{'rel diff':>9}")
    rows = []
    for T in (1, 2, 3, 4, 8):
        x = torch.randn(T, H, device=dev, generator=gen).bfloat16()
        out_d, out_s = (torch.empty(T, H, device=dev, dtype=torch.bfloat16) for _ in range(2))
        default(x, *sets[0], out_d)
        skinny(x, *sets[0], out_s)
        diff = float((out_s.float() - out_d.float()).norm() / out_d.float().norm())
        d_us = time_graph([lambda i=i: default(x, *sets[i], out_d) for i in range(COPIES)])
        s_us = time_graph([lambda i=i: skinny(x, *sets[i], out_s) for i in range(COPIES)])
        t_us = time_graph([lambda i=i: torch_path(x, *sets[i]) for i in range(COPIES)])
        rows.append({"T": T, "decode_us": d_us, "skinny_us": s_us, "torch_us": t_us, "copy_us": copy_us,
                     "rel_diff": diff})
        print(f"{T:>3} {d_us:>10.2f} {s_us:>10.2f} {t_us:>9.2f} {d_us / s_us:>13.2f}x {100 * copy_us / s_us:>6.1f}% "
              f"{diff:>9.2e}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
