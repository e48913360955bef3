"""Which part of the bench's history before a draw makes a large RGDR row slow on it: each history in a process
of its own, then one draw of the row's inputs, timed replay by replay.

Why: ``rgdr_draws.py`` (session 33, H100; deleted since with the transposed grid it raced) timed 16/32 heads fp32 B=256 T_b=4 on eight new draws, pools
moved by spacers, and every draw ran at 968-971 us, within 1% of the fan copy at the same addresses; but
the draw the bench makes right after ``check_rgdr`` ran a same-size case ran at 1111 us
(``rgdr_pool_pairing.py``, deleted likewise). So something the check leaves behind slows the next draw. The histories:
none (``fresh``, whose slots are another permutation: its generator drew no case before); a same-size
case made and freed (``alloc``); that case launched once on a copy of its pool (``launch``); the float64
reference alone (``reference``); the bench's ``check_rgdr`` (``check``), then the allocator's cache emptied
(``check-empty``), 5 s of sleep (``check-sleep``), 200 ms of torch copies (``check-copy``), or 400 replays
timed instead of 60 (``check-long``). Each prints where the pool landed in the caching allocator, the first
graph's replays in order, the same graph timed again with the pool refilled with its drawn values (is a fast
phase the state decaying over replays?), and four more graphs.

What it said on the H200 (session 33, ``results/session-2026-12-05j/s33e-s33j``): after a check the first 40-50
ms of the row's replays run 10% slower (790-800 against 714-724 us), then every later replay and graph runs
fast, refilled pool or not; sleep, an emptied cache or a copy load in between leave it slow, a launch alone
does not (one slow replay), and the pool lands at offset 0 of its own segment every time. So the bench warms
each RGDR row up for longer than that (``cuda_bench_common.RGDR_WARMUP_MS``).

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/rgdr_history.py
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from cuda_bench_common import calls_on, captured, log, replay_times, rgdr_bytes, rgdr_calls, rgdr_key, time_graph
from tileops_cuda.kernels.rgdr import build_rgdr
from tileops_cuda.testing import check_rgdr, rgdr_case, rgdr_reference

HISTORIES = ("fresh", "alloc", "launch", "reference", "check", "check-empty", "check-sleep", "check-copy", "check-long")
ROWS = ("16,32,float32,256,4", "16,32,bfloat16,256,8")


def pool_place(ptr: int) -> str:
    """The caching allocator's segment holding ``ptr``: its size and ``ptr``'s offset in it."""
    for seg in torch.cuda.memory_snapshot():
        if seg["address"] <= ptr < seg["address"] + seg["total_size"]:
            size, offset = seg["total_size"] / 2**30, (ptr - seg["address"]) / 2**20
            return f"segment {size:.2f} GiB, pool at offset {offset:.0f} MiB"
    return "not in a cached segment"


def one(row: str, history: str) -> dict:
    """This process: the history, then the draw, timed."""
    nk, nv, state, B, tb = (f(v) for f, v in zip((int, int, str, int, int), row.split(",")))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(31)
    key = rgdr_key(nk, nv, state)
    launcher = build_rgdr(key)
    if history != "fresh":
        case = rgdr_case(key, [tb] * B, device="cuda", generator=gen)
        if history == "launch":
            out = torch.empty_like(case["value"])
            calls_on(launcher, [dict(case, state=case["state"].clone(), out=out)])[0]()
            torch.cuda.synchronize()
        elif history.startswith("check"):
            check_rgdr(launcher, case)
        elif history == "reference":
            rgdr_reference(case, key, torch.float64)
            torch.cuda.synchronize()
        del case
        if history == "check-empty":
            torch.cuda.empty_cache()
        if history == "check-copy":  # 200 ms of another memory-bound kernel: a generic warm-up
            a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
            b = torch.empty_like(a)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.2:
                b.copy_(a)
                torch.cuda.synchronize()
            del a, b
        if history == "check-sleep":
            time.sleep(5.0)
    sets, calls = rgdr_calls(launcher, key, B, tb, gen, 1)
    pool = sets[0]["state"]
    drawn = pool.clone()
    first = replay_times(captured(calls), 400 if history == "check-long" else 60)
    decayed = pool.abs().float().mean().item()
    refilled = []
    for _ in range(3):  # the pool's drawn values back before each graph: is the fast phase the decayed state?
        pool.copy_(drawn)
        refilled.append(statistics.median(replay_times(captured(calls), 60)))
    us = statistics.median(first)
    again = [time_graph(calls) for _ in range(4)]
    foot = rgdr_bytes(B, tb, nk, nv, 4 if state == "float32" else 2)
    shown = first[:6] + first[6:-3:max(1, len(first) // 20)] + first[-3:]  # the start, 20 spread over the rest, the end
    return dict(us=us, refilled=refilled, mean_abs=(drawn.abs().float().mean().item(), decayed),
                replays=[round(t, 1) for t in shown], again=again, GBps=foot / us / 1e3,
                place=pool_place(pool.data_ptr()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=list(ROWS), help="NK,NV,state,B,T_b each")
    ap.add_argument("--histories", nargs="*", default=list(HISTORIES))
    ap.add_argument("--one", nargs=2, metavar=("ROW", "HISTORY"), help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    if opts.one:
        print(json.dumps(one(*opts.one)), flush=True)
        return 0
    log(torch.cuda.get_device_name())
    res: dict = {}
    for row in opts.rows:
        for history in opts.histories:
            run = subprocess.run([sys.executable, __file__, "--one", row, history], capture_output=True, text=True)
            lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
            if run.returncode or not lines:
                log(f"{row} {history}: failed rc={run.returncode}: {run.stderr[-600:]}")
                continue
            r = res.setdefault(row, {})[history] = json.loads(lines[-1])
            again = " ".join(f"{t:.1f}" for t in r["again"])
            refilled = " ".join(f"{t:.1f}" for t in r["refilled"])
            log(f"{row:22s} {history:12s} {r['us']:8.1f} us {r['GBps']:6.0f} GB/s, then {again} us; {r['place']}; "
                f"first graph's replays {r['replays']}; pool refilled: {refilled} us; "
                f"mean |state| drawn, after: {r['mean_abs']}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
