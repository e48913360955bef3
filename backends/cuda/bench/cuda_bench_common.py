"""What the CUDA benchmarks share: the results record, CUDA-graph timing, host timing, and the
RGDR workload rows' keys, byte counts and input sets (see bench_cuda.py)."""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

_BACKENDS = Path(__file__).resolve().parents[2]
for _p in (str(_BACKENDS / "cuda"), str(_BACKENDS / "cpu_ref")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tileops_cuda.kernels.rgdr import RGDRBuildKey  # noqa: E402
from tileops_cuda.testing import rgdr_case  # noqa: E402

__all__ = ["GRAPH_MIN_US", "L2_BYTES", "RESULTS", "RGDR_WARMUP_MS", "ROTATE_BYTES", "calls_on", "captured", "fla_bytes",
           "graph_bench_start", "host_overhead", "log", "replay_times", "rgdr_bytes", "rgdr_calls", "rgdr_key",
           "rgdr_workload_keys", "report_rows", "rgdr_check_cases", "same_size_copy", "time_graph", "warm_up"]

L2_BYTES = 60 * 2**20
ROTATE_BYTES = 4 * L2_BYTES  # each timed graph touches at least this much distinct memory
RESULTS: dict = {"rgdr": [], "sweep": [], "sweep_checks": [], "other": [], "errors": []}


def log(*a):
    print(*a, flush=True)


def graph_bench_start(doc: str, switches: dict[str, str] | None = None,
                      ) -> tuple[argparse.Namespace, torch.device, torch.Generator, str]:
    """What a small graph-timed bench starts from: its ``--json`` argument and its on/off
    ``switches`` (flag: help; the parser described by ``doc``'s first paragraph), the CUDA device, a
    generator seeded 0 on it, and the device's arch (``sm_XY``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    for flag, help in (switches or {}).items():
        ap.add_argument(flag, action="store_true", help=help)
    dev = torch.device("cuda")
    return ap.parse_args(), dev, torch.Generator(device=dev).manual_seed(0), "sm_%d%d" % torch.cuda.get_device_capability()


# ----------------------------------------------------------------------------- timing
def captured(calls) -> torch.cuda.CUDAGraph:
    """One CUDA graph holding ``calls``, each run once on a side stream before the capture (its
    lazy builds and allocations stay out of the graph) and the graph replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_times(g: torch.cuda.CUDAGraph, n: int, per: int = 1) -> list[float]:
    """Microseconds of each of ``n`` replays of ``g``, in order, each timed with events and divided by ``per``
    (the calls the graph holds)."""
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        st.record()
        g.replay()
        en.record()
        en.synchronize()
        times.append(st.elapsed_time(en) * 1e3 / per)
    return times


def warm_up(g: torch.cuda.CUDAGraph, warmup_ms: float) -> float:
    """Replay ``g`` untimed for about ``warmup_ms`` (one timed replay says how many replays that is);
    the milliseconds of that replay."""
    est = max(replay_times(g, 1)[0] / 1e3, 1e-3)
    for _ in range(int(warmup_ms / est)):
        g.replay()
    return est


#: Untimed replays before an RGDR row timed right after a check: past the 40-50 ms that a large row stays slow
#: after its check on the H200 (``rgdr_history.py``, session 33).
RGDR_WARMUP_MS = 200.0


#: Device time one timed graph covers at least (µs). Each replay is timed between two events, and the stream idles
#: from the start event until the graph's first kernel (the host still launching the graph): a gap of some
#: microseconds in every replay (``graph_gap.py``). A graph of one 80 µs call carried all of it, one of eight
#: calls an eighth, so rows and the copies they are a % of differed by the gap's share, not by their kernels.
#: Repeating the calls until the graph covers this long makes the gap's share under 1% for every row alike.
GRAPH_MIN_US = 1000.0


def time_graph(calls, target_ms: float = 40.0, max_replays: int = 200, warmup_ms: float = 0.0,
               per_replay: bool = False) -> float:
    """Median device time per call (µs): one CUDA graph holds all ``calls`` (one per input set),
    repeated in order until the graph covers ``GRAPH_MIN_US`` (a call is revisited only after every
    other set); replayed many times, each replay timed with events. ``per_replay``: the graph holds
    ``calls`` once (the measure until the fortieth session, which carries the replay's start gap
    divided by ``len(calls)``). ``warmup_ms`` of untimed replays come first: a large RGDR row run
    right after ``check_rgdr`` stays about 10% slower for its first 40-50 ms of replays on the H200,
    on the same data and pool as the fast replays after (``rgdr_history.py``, session 33), so the
    rows the bench checks first warm up."""
    g = captured(calls)
    est = warm_up(g, warmup_ms)
    repeat = 1 if per_replay else min(64, max(1, math.ceil(GRAPH_MIN_US / (est * 1e3))))
    if repeat > 1:
        del g
        g = captured(list(calls) * repeat)
        est *= repeat
    n = int(max(10, min(max_replays, target_ms / est)))
    times = replay_times(g, n, len(calls) * repeat)
    del g
    return statistics.median(times)


# ----------------------------------------------------------------------------- RGDR
def experiment_args(doc: str) -> tuple[argparse.Namespace, torch.Generator]:
    """The command line every RGDR timing experiment takes (``--states``, ``--rounds``, ``--json``)
    and its seeded CUDA generator (seed 16: the experiments draw the same inputs)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--states", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    return ap.parse_args(), gen


def report_rows(json_path: str | None, results: dict, header: str, rows: list) -> None:
    """The end of an RGDR timing experiment: ``results`` into ``json_path`` (when given), then the
    table, one line per ``(state, B, T_b, copy µs, cells)`` after ``header``."""
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    print("\nstate     B  Tb  copy us | " + header)
    for st, B, tb, copy, cells in rows:
        print(f"{st:8s} {B:4d} {tb:3d} {copy:8.2f} | " + " | ".join(cells))


def rgdr_key(nk: int, nv: int, state: str) -> RGDRBuildKey:
    """The workload rows' key: bf16 inputs, g present, in-kernel q/k l2norm (as Qwen3-Next)."""
    return RGDRBuildKey("bfloat16", state, nk, nv, 128, 128, "lengths", "int32", "int32", None, True, None, True)


def rgdr_workload_keys() -> list[RGDRBuildKey]:
    """The keys whose default schedules bench_cuda.py compiles before any row (fp32 and bf16 state, heads 16/32 and
    8/16); benchmarks/gpu/prebuild_here.py compiles the same ones into the kernel cache the device call carries."""
    return [rgdr_key(nk, nv, st) for st in ("float32", "bfloat16") for nk, nv in ((16, 32), (8, 16))]


def rgdr_bytes(B, tb, nk, nv, state_bytes, in_bytes=2, dk=128, dv=128):
    slot = nv * dv * dk * state_bytes
    T = B * tb
    return B * (1 + tb) * slot + T * (2 * nk * dk + 2 * nv * dv + nv) * in_bytes + T * nv * 4  # + g (fp32)


def fla_bytes(B, tb, nk, nv, state_bytes, in_bytes=2, dk=128, dv=128):
    slot = nv * dv * dk
    T = B * tb
    return B * slot * (state_bytes + 4) + T * (2 * nk * dk + 2 * nv * dv + nv) * in_bytes + T * nv * 4


def rgdr_check_cases(key, gen, decode: int = 33):
    """The cases an RGDR experiment checks a launcher on before timing it, each drawn when it is reached: a
    decode step of ``decode`` one-token sequences and a ragged batch (an empty sequence among them), a tenth
    of the tokens padding and a padding first slot."""
    for lengths in ([1] * decode, [3, 1, 9, 0, 17, 1, 2]):
        yield rgdr_case(key, lengths, device="cuda", generator=gen, padding=0.1, pad_first_of=1)


def same_size_copy(moved: int) -> float:
    """Graph µs of a copy moving ``moved`` bytes (half read, half written), rotated over buffers: the
    baseline an experiment's row is a % of."""
    n = max(1, min(64, -(-ROTATE_BYTES // moved)))
    srcs = [torch.randn(max(1, moved // 4), device="cuda").to(torch.bfloat16) for _ in range(n)]
    dsts = [torch.empty_like(a) for a in srcs]
    us = time_graph([lambda a=a, b=b: torch.mul(a, 1, out=b) for a, b in zip(srcs, dsts)])
    del srcs, dsts
    return us


def rgdr_calls(launcher, key, B, tb, gen, nsets):
    """``nsets`` independent input sets (own pools), one launcher call each."""
    sets = []
    for _ in range(nsets):
        c = rgdr_case(key, [tb] * B, device="cuda", generator=gen, extra_slots=1)
        c["out"] = torch.empty_like(c["value"])
        sets.append(c)

    return sets, calls_on(launcher, sets)


def calls_on(launcher, sets):
    """One checked launcher call per input set (what the timed graphs hold)."""

    def call(c):
        return lambda: launcher(c["query"], c["key"], c["value"], c["beta"], c["state"], c["actual_seq_lengths"],
                                c["ssm_state_indices"], c["g"], c["gk"], c["num_accepted_tokens"], c["out"], None)  # fmt: skip

    return [call(c) for c in sets]


def host_overhead(fn, n=2000) -> float:
    """Host µs per eager call (enqueue cost; the device work is tiny and asynchronous)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host
