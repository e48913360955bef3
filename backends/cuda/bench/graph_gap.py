"""What one timed graph replay adds to a per-call time: the copy timed with 1 to 16 calls a graph.

Every graph-timed row here is ``(replay time) / (calls in the graph)``, each replay between two events
(``cuda_bench_common.replay_times``). If the stream sits idle between the start event and the graph's first
kernel (the host still launching the graph), that gap is in every replay, and a row's per-call time carries
``gap / calls``. A row and the copy it is a % of then differ by more than their kernels when they hold different
numbers of calls (``conv_varlen_layouts.py`` until the fortieth session: 8 input sets against the copy's 2).
This script measures the gap: the same copy of each size in graphs of 1, 2, 4, 8 and 16 calls (distinct
buffers), each replay timed alone, and again as groups of back-to-back replays between two events (the host
launches ahead, so the stream never waits), and by ``time_graph``, which repeats the calls until the graph
covers ``GRAPH_MIN_US``.
``t(n) = k + gap / n`` fits the first; the other two should show no ``1 / n`` term.

    python3 graph_gap.py [--sizes-mb 33.6,135,268]     (in backends/cuda/bench, the project installed)
"""

import argparse
import statistics

import torch
from cuda_bench_common import GRAPH_MIN_US, captured, replay_times, time_graph

CALLS = (1, 2, 4, 8, 16)


def graph_of(bufs) -> torch.cuda.CUDAGraph:
    """One graph of ``torch.mul(a, 1, out=b)`` over each buffer pair (``captured``: warmed on a side stream)."""
    return captured([lambda a=a, b=b: torch.mul(a, 1, out=b) for a, b in bufs])


def per_replay(g, calls: int, n: int = 60) -> float:
    """Median µs per call, each replay between its own two events (``replay_times``, the benches' measure)."""
    return statistics.median(replay_times(g, n, calls))


def grouped(g, calls: int, groups: int = 15, per_group: int = 8) -> float:
    """Median µs per call over groups of ``per_group`` back-to-back replays between two events."""
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(groups):
        st.record()
        for _ in range(per_group):
            g.replay()
        en.record()
        en.synchronize()
        out.append(st.elapsed_time(en) * 1e3 / (calls * per_group))
    return statistics.median(out)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``t = k + gap / n``: returns ``(k, gap)``."""
    xs, ys = [1 / n for n, _ in points], [t for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    gap = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - gap * mx, gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", default="33.6,135,268", help="bytes moved a call (half read, half written), MB")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    for mb in (float(s) for s in args.sizes_mb.split(",")):
        n = int(mb * 1e6) // 4  # bf16 elements read, and as many written
        bufs = [(torch.randn(n, device="cuda").to(torch.bfloat16), torch.empty(n, device="cuda", dtype=torch.bfloat16))
                for _ in range(max(CALLS))]
        alone, back, filled = [], [], []
        for calls in CALLS:
            g = graph_of(bufs[:calls])
            for _ in range(5):
                g.replay()
            alone.append((calls, per_replay(g, calls)))
            back.append((calls, grouped(g, calls)))
            del g
            filled.append((calls, time_graph([lambda a=a, b=b: torch.mul(a, 1, out=b) for a, b in bufs[:calls]])))
        for name, pts in (("each replay timed alone", alone), ("back-to-back replays", back),
                          (f"time_graph (>= {GRAPH_MIN_US:.0f} us)", filled)):
            k, gap = fit(pts)
            cells = "  ".join(f"{c:2d}: {t:7.2f}" for c, t in pts)
            print(f"{mb:6.1f} MB  {name:24s} {cells}   fit: {k:7.2f} us + {gap:5.2f} us / calls", flush=True)
        del bufs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
