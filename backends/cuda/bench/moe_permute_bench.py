"""The MoE permute at a decode step's copies: the one-launch program against the three kernels.

For Qwen3-Next (512 experts, top-10) and Qwen3.5-35B (256, top-8), H=2048 bf16, at B = 1, 4, 8, 12, 16
tokens (as many copies as fit ``one_launch_copies`` = 128): the three kernels (rank, offsets, scatter: what
calls past the registered keys' ``REGISTERED_ONE_LAUNCH_COPIES`` run) and the one-launch program
(``_one_launch_program``, registered since 2026-12-04f, when this bench measured it 1.60-1.92x), each
as one CUDA graph of 16 back-to-back calls on 16 draws of ids (``cuda_bench_common.time_graph``, µs a
call), their outputs compared bit for bit on the first draw ("!" where they differ).

    python backends/cuda/bench/moe_permute_bench.py [--json F]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_bench_common import graph_bench_start, time_graph  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.moe_permute import MoEPermuteBuildKey, build_moe_permute  # noqa: E402

H, COPIES, ONE_LAUNCH = 2048, 16, 128


def main() -> None:
    a, dev, gen, arch = graph_bench_start(__doc__)
    rows = []
    print(f"{torch.cuda.get_device_name()}; µs a call in CUDA graphs")
    print(f"{'model':>12} {'B':>3} {'copies':>6} {'three us':>9} {'one us':>8} {'three/one':>10}")
    for label, E, K in (("qwen3-next", 512, 10), ("qwen3.5-35b", 256, 8)):
        key = MoEPermuteBuildKey("bfloat16", "int64", H, K, E, arch)
        built = compile_many([lambda k=k: build_moe_permute(k).run
                              for k in (key, dataclasses.replace(key, one_launch_copies=ONE_LAUNCH))])
        for b in built:
            if isinstance(b, BaseException):
                raise b
        three, one = built
        for B in (1, 4, 8, 12, 16):
            if B * K > ONE_LAUNCH:
                continue
            x = torch.randn(B, H, device=dev, generator=gen).bfloat16()
            draws = [torch.rand(B, E, device=dev, generator=gen).argsort(dim=1)[:, :K] for _ in range(COPIES)]
            outs = [(torch.empty(B * K, H, device=dev, dtype=torch.bfloat16),
                     torch.empty(E + 1, device=dev, dtype=torch.int32),
                     torch.empty(B, K, device=dev, dtype=torch.int32)) for _ in range(2)]
            same = all(torch.equal(p, q) for p, q in zip(three(x, draws[0], E, *outs[0]), one(x, draws[0], E, *outs[1])))

            def timed(run, o):
                return time_graph([lambda i=i: run(x, draws[i], E, *o) for i in range(COPIES)])

            t_us, o_us = timed(three, outs[0]), timed(one, outs[1])
            rows.append({"model": label, "B": B, "copies": B * K, "three_us": t_us, "one_us": o_us, "bitwise": same})
            print(f"{label:>12} {B:>3} {B * K:>6} {t_us:>9.2f} {o_us:>7.2f}{' ' if same else '!'} {t_us / o_us:>9.2f}x",
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
