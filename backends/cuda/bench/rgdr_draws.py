"""RGDR's large rows over many independent draws of their inputs: how often a draw is slow, and which grid
order is faster over the draws, not on one of them.

Why: ``rgdr_pool_pairing.py`` (session 33, H100) showed one row 16% slower on one draw of its inputs than
on another, only for the pairing of a pool with its own slot permutation, while a fan copy writing the same
addresses in the same order ran equally fast on every pairing, and the tiling with its grid transposed
(``RGDRTiling.sequences_fastest``) ran equally fast on both draws but 3-5% slower than the fast one. One
draw cannot say which grid serves a random pool better. So each draw here is new: a spacer of another size
allocated first moves the pool, the generator gives new slots, and the default tiling, its transposed grid
and the fan copy at the draw's addresses are timed on it. The medians over the draws decide.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/rgdr_draws.py --draws 8
"""

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from cuda_bench_common import calls_on, log, rgdr_bytes, rgdr_calls, rgdr_key, time_graph
from rgdr_pool_pairing import time_fan_at
from tileops_cuda.kernels.rgdr import build_rgdr, default_schedule

ROWS = ("16,32,float32,256,4", "16,32,bfloat16,256,4", "16,32,float32,256,2", "16,32,bfloat16,128,2")


def draws_of(row: str, draws: int, gen: torch.Generator) -> dict[str, list[float]]:
    """Per way (``default``, ``sequences fastest``, ``fan copy``), its microseconds on each draw."""
    nk, nv, state, B, tb = (f(v) for f, v in zip((int, int, str, int, int), row.split(",")))
    key = rgdr_key(nk, nv, state)
    tiling = default_schedule(key).pick(B, B * tb)
    ways = {"default": build_rgdr(key)}
    if not tiling.stream:
        ways["sequences fastest"] = build_rgdr(key, replace(tiling, sequences_fastest=True))
    foot = rgdr_bytes(B, tb, nk, nv, 4 if state == "float32" else 2)
    log(f"{nk}/{nv} {state} B={B} T_b={tb}, {foot / 2**30:.2f} GiB a call, tiling {tiling}")
    times: dict[str, list[float]] = {name: [] for name in (*ways, "fan copy")}
    for i in range(draws):
        spacer = torch.empty((i * 37 % 211) << 20, dtype=torch.uint8, device="cuda")  # moves the pool
        sets, _ = rgdr_calls(ways["default"], key, B, tb, gen, 1)
        for name, launcher in ways.items():
            times[name].append(time_graph(calls_on(launcher, sets)))
        pool, slots = sets[0]["state"], sets[0]["ssm_state_indices"]
        times["fan copy"].append(time_fan_at(pool, slots, B, tb, heads_first=False))
        line = "  ".join(f"{name} {t[-1]:7.1f}" for name, t in times.items())
        log(f"  draw {i} (pool at {pool.data_ptr() % 2**32:#010x}): {line} us")
        del sets, pool, slots, spacer
    for name, t in times.items():
        log(f"  {name:18s} median {statistics.median(t):7.1f}  min {min(t):7.1f}  max {max(t):7.1f} us"
            f"  ({foot / statistics.median(t) / 1e3:5.0f} GB/s at the median)")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=list(ROWS), help="NK,NV,state,B,T_b each")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(33)
    log(torch.cuda.get_device_name())
    res = {row: draws_of(row, opts.draws, gen) for row in opts.rows}
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
