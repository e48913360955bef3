"""Where a decode step's host time goes: a cProfile of the bench's decode step, per way.

``tileops bench --decode-step`` says how long a step takes on the host (eager, compiled); this
says which functions that time is spent in, so the call path is changed where the time is and
not where it is guessed to be. The step is the bench's own (RMSNorm -> RGDR -> SiluAndMul over a
state pool, B=32 at Qwen3.5's heads; the tiny sizes on a CPU). For each way it runs ``--steps``
steps under cProfile (no synchronize inside, as the bench's host loop) and prints the functions
with the most own time, as microseconds per step. cProfile's own cost inflates every figure by
a similar factor; read the shares, and take absolute times from the bench.

    python benchmarks/call_path_profile.py [--device cuda] [--way eager --way compile_fullgraph] [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

import torch

from tileops_core.bench.decode_step import TINY, WAYS, DecodeStepConfig, _prepare, _Step


def profile_way(way: str, device: torch.device, cfg: DecodeStepConfig, steps: int, top: int) -> str:
    """The ``top`` functions by own time over ``steps`` steps of ``way``, in µs per step."""
    s = _Step(cfg, device, seed=0)
    run = _prepare(way, s, device)
    for _ in range(20):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        run()
    prof.disable()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # (cc, nc, tottime, cumtime, callers)
    total = sum(v[2] for _, v in rows)
    lines = [f"== {way} on {device}: {total / steps * 1e6:.1f} µs of profiled host time per step ({steps} steps)",
             f"{'own µs/step':>12s} {'cum µs/step':>12s} {'calls/step':>10s}  function"]
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in rows[:top]:
        where = f"{file.split('site-packages/')[-1].split('/work/')[-1]}:{line}" if line else file
        lines.append(f"{tottime / steps * 1e6:12.2f} {cumtime / steps * 1e6:12.2f} {ncalls / steps:10.1f}  {name}  ({where})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--way", action="append", choices=WAYS, help="default: eager and compile_fullgraph")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    cfg = DecodeStepConfig() if device.type == "cuda" else TINY
    for way in a.way or ["eager", "compile_fullgraph"]:
        print(profile_way(way, device, cfg, a.steps, a.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
