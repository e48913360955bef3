"""The MoE routing kernels at one row's size over many random data sets, each timed alone in a CUDA graph.

Why: a routing call at decode sizes is one wave of one-warp programs, so its time is its slowest warp's. A
token whose warp leaves the candidates program's fast path for the rounds selection (the guard of
``kernels/moe_topk_routing.py``) sets the whole call's time, and whether a random data set holds one is a
lottery: the sweep (``layer_ops_sweep.py``) draws one data set a run, so its 64-token row read 2.2-2.7 us in
some runs and 5.2-6.0 us in others, at one tree as at another (the thirtieth session, ``s30d``/``s30e``). This
bench draws ``--seeds`` data sets (bf16 logits ``randn``, as the workload rows are instantiated) and prints
each program's time on each, then the median and the largest: a guard that keeps every token on the fast path
shows one time throughout. Each data set is copied into 32 input sets, so the graph reads no set twice in a
row. Runs from whichever tree holds it (``s_routeab.sh`` copies it into an older tree's bench folder).
"""

import argparse
import statistics

import torch

from cuda_bench_common import log, time_graph
from tileops_cuda.kernels import moe_topk_routing as routing

#: (label, E, top_k) of the rows timed: the decode rows of both models.
ROWS = [("qwen3-next-80b-decode-b64", 512, 10), ("qwen3.5-35b-decode-b64", 256, 8)]
#: The programs timed: the candidates program at the shape registered until the thirty-first session (a
#: dependent launch) and plain, the logits program at the registered shape (``block_shapes.py``), and the
#: rounds program (both warp programs' fallback, alone). The labels stay those of the logged runs (s31b).
PROGRAMS = {"candidates (registered)": dict(program="candidates", tokens=1, unchecked_index=True,
                                            dependent_launch=True),
            "candidates plain": dict(program="candidates", tokens=1),
            "logits": dict(program="logits", tokens=1, unchecked_index=True, dependent_launch=True),
            "rounds": dict(program="rounds")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64)
    opts = ap.parse_args()
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    log(torch.cuda.get_device_name(), arch, routing.__file__)
    for label, E, K in ROWS:
        runs = {}
        for name, shape in PROGRAMS.items():
            try:
                runs[name] = routing.build_moe_topk_routing(routing.MoETopKRoutingBuildKey(
                    "bfloat16", "int64", E, K, True, arch, **shape)).run
            except ValueError as exc:  # the refusal of a program an older tree does not have
                log(f"{label}: {name} not built here ({type(exc).__name__}: {exc})")
        times: dict = {name: [] for name in runs}
        for seed in range(opts.seeds):
            gen = torch.Generator().manual_seed(seed)
            logits = torch.randn(opts.tokens, E, generator=gen).to(torch.bfloat16).cuda()
            sets = [(logits.clone(), torch.empty(opts.tokens, K, dtype=torch.bfloat16, device="cuda"),
                     torch.empty(opts.tokens, K, dtype=torch.int64, device="cuda")) for _ in range(32)]
            line = []
            for name, run in runs.items():
                us = time_graph([lambda s=s, run=run: run(s[0], K, True, torch.int64, s[1], s[2]) for s in sets])
                times[name].append(us)
                line.append(f"{name} {us:5.2f}")
            log(f"{label} T={opts.tokens} seed {seed:2d}: " + ", ".join(line) + " us")
        for name, ts in times.items():
            log(f"{label} T={opts.tokens} {name}: median {statistics.median(ts):.2f} us, largest {max(ts):.2f}, "
                f"smallest {min(ts):.2f} over {len(ts)} data sets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
