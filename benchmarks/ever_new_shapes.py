"""RSS growth of one op instance called on ever-new shapes (issue 19: under 50 MB for 1M calls).

Every call has a shape no earlier call had (``SumFwdOp`` over ``[2, i]``, i cycling through
``--distinct`` widths so that tensors stay small), so each one plans, selects and checks
anew; the plan cache per instance and the selection cache are bounded, the kernels built
(keyed by build identity) are not re-made. Prints RSS before, after and the growth.

    python benchmarks/ever_new_shapes.py [--calls 1000000] [--distinct 200000]
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from tileops_core.ops.reduction import SumFwdOp


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=200_000, help="widths cycled through (each a new shape)")
    args = ap.parse_args()
    op = SumFwdOp(dim=[-1])
    for i in range(1, 2000):  # warm: the first plans, the build, torch's own caches
        op(torch.ones(2, i))
    before, t0 = _rss_mb(), time.perf_counter()
    for n in range(args.calls):
        op(torch.ones(2, 1 + n % args.distinct))
    after = _rss_mb()
    print(f"{args.calls} calls over {min(args.calls, args.distinct)} distinct shapes in {time.perf_counter() - t0:.0f} s: "
          f"RSS {before:.0f} -> {after:.0f} MB, growth {after - before:.1f} MB (target < 50 MB)")


if __name__ == "__main__":
    main()
