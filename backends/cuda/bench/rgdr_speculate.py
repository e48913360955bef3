"""The speculative RGDR programs (``RGDRTiling.speculate``) on the decode rows of issue 16
(NK16/NV32, DK=DV=128, bf16 inputs, l2norm, T_b = 1 at B = 1, 8, 32, 128, 256) and one MTP row
(B = 32, T_b = 2, which a speculating schedule must leave as it was). Variants: ``plain`` (no
role speculates), ``default`` (``default_schedule``: the roles its table lists), ``speculate``
(every role, where the default leaves one plain); ratios are against ``plain``.

Every variant builds first, all concurrently; each is then checked against float64 on a decode
step and on a ragged batch (NaN-poisoned output, untouched slots bit-identical). Each row times
every variant on the same rotated input sets (CUDA-graph replay medians, ``time_graph``, each
after ``RGDR_WARMUP_MS`` of untimed replays: the checks leave a slow phase behind them), in
the order old, new, old, new, ... (``--rounds``), beside a copy of the same bytes timed the same
way. Prints one JSON line per measurement and a table last; ``--json`` writes everything.
"""

import argparse
import functools
import json
import math
import statistics
from dataclasses import asdict, replace

import torch
from cuda_bench_common import (RGDR_WARMUP_MS, ROTATE_BYTES, calls_on, rgdr_bytes, rgdr_calls, rgdr_check_cases,
                               rgdr_key, same_size_copy, time_graph)

from tileops_cuda.kernels._common import ELEM_BYTES, compile_many
from tileops_cuda.kernels.rgdr import build_rgdr, default_schedule
from tileops_cuda.testing import check_rgdr

ROWS = [(1, 1), (8, 1), (32, 1), (128, 1), (256, 1), (32, 2)]


def variants(state: str) -> dict:
    """Name -> schedule: no speculation, the default, every role speculating. (Nsight Compute,
    session 34: bf16's streamed twin, which the default runs at B >= 32, makes 16 local-memory
    spill requests a program under its 128-register cap; its plain program none.)"""
    key = rgdr_key(16, 32, state)
    base = default_schedule(key)
    every = frozenset({"small", "large", "short"})
    out = {"plain": replace(base, speculating=frozenset()), "default": base}
    if base.speculating != every:  # fp32's default already speculates in every role
        out["speculate"] = replace(base, speculating=every)
    return out


def time_row(launchers: dict, key, B: int, tb: int, gen, rounds: int) -> tuple[int, float, dict]:
    """One row of B sequences of ``tb`` tokens: every launcher (name -> launcher) timed on the same
    rotated input sets (``time_graph``), interleaved over ``rounds``, each round beside a copy of the
    same bytes. Returns (bytes moved, median copy µs, {name: [µs, one a round]})."""
    foot = rgdr_bytes(B, tb, key.num_k_heads, key.num_v_heads, ELEM_BYTES[key.state_dtype],
                      ELEM_BYTES[key.input_dtype], key.head_k_dim, key.head_v_dim)  # fmt: skip
    nsets = max(1, min(64, math.ceil(ROTATE_BYTES / foot)))
    sets, _ = rgdr_calls(next(iter(launchers.values())), key, B, tb, gen, nsets)
    times = {name: [] for name in launchers}
    copies = []
    for _ in range(rounds):
        copies.append(same_size_copy(foot))
        for name, launcher in launchers.items():
            times[name].append(time_graph(calls_on(launcher, sets), warmup_ms=RGDR_WARMUP_MS))
    del sets
    torch.cuda.empty_cache()
    return foot, statistics.median(copies), times


def same_bits(a, b, case: dict) -> bool:
    """Whether launchers ``a`` and ``b`` give the same output and state bits on ``case`` (keys with
    neither ``gk`` nor accepted counts)."""
    runs = []
    for launcher in (a, b):
        state, out = case["state"].clone(), torch.full_like(case["value"], float("nan"))
        launcher(case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
                 case["ssm_state_indices"], case["g"], None, None, out)  # fmt: skip
        runs.append((out, state))
    torch.cuda.synchronize()
    return torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--build-only", action="store_true", help="compile every variant and stop")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    states = args.states.split(",")
    todo = [(st, name, sc) for st in states for name, sc in variants(st).items()]
    built = compile_many([functools.partial(build_rgdr, rgdr_key(16, 32, st), sc) for st, _, sc in todo])
    launchers, results = {}, {"checks": [], "rows": []}
    for (st, name, sc), b in zip(todo, built):
        if isinstance(b, BaseException):
            print(json.dumps({"build_failed": [st, name], "why": repr(b)[:300]}), flush=True)
            continue
        launchers[st, name] = b
        print(json.dumps({"built": [st, name], "schedule": asdict(sc)}, default=sorted), flush=True)
    if args.build_only:
        return
    for (st, name), L in launchers.items():
        key = rgdr_key(16, 32, st)
        for case in rgdr_check_cases(key, gen):
            res = check_rgdr(L, case)
            rec = {"check": [st, name, case["actual_seq_lengths"].numel()], "ok": res["ok"], "why": res["why"]}
            results["checks"].append(rec)
            print(json.dumps(rec), flush=True)
            if not res["ok"]:
                launchers[st, name] = None
    table = []
    for st in states:
        key = rgdr_key(16, 32, st)
        names = [n for (s, n), L in launchers.items() if s == st and L is not None]
        for B, tb in ROWS:
            foot, copy, times = time_row({n: launchers[st, n] for n in names}, key, B, tb, gen, args.rounds)
            row = {"state": st, "B": B, "Tb": tb, "bytes": foot, "copy_us": copy, "us": times}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            med = {n: statistics.median(v) for n, v in times.items()}
            table.append((st, B, tb, copy, med, {n: (min(v), max(v)) for n, v in times.items()}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("\nstate     B  Tb  copy us | variant: median us (min-max over rounds), % of same-size copy, x vs plain")
    for st, B, tb, copy, med, span in table:
        cells = [f"{n}: {m:7.2f} ({span[n][0]:.2f}-{span[n][1]:.2f}) {100 * copy / m:5.1f}% {med['plain'] / m:5.3f}x"
                 for n, m in med.items()]
        print(f"{st:8s} {B:4d} {tb:3d} {copy:8.2f} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
