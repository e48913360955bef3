"""The persistent streamed RGDR program (``RGDRTiling.persistent``) beside the plain streamed one
(issue 16's large-batch rows).

The plain streamed program runs one program per (sequence, key head): each pays the chain
metadata -> slot -> first state bytes before its state starts streaming, and ``rgdr_splits.py``
showed that finer programs only pay it more often. The persistent one launches a wave of
resident programs (SMs x the tiling's occupancy hint) that loop over those items, resolving the
next item's span and slot while the current one runs and prefetching its first row chunk behind
the current item's last, so the chain is paid once per program.

Per state dtype, on the streamed tiling the default schedule runs at B >= 32 (without its
speculation, which the persistent program does not use): first, on decode steps and two-token
steps at B = 1, 5, 32, 128 and on a ragged batch with padding slots and an empty sequence, the
persistent program is checked against float64 (``check_rgdr``) and bit for bit against the plain
one, once at its own program count and once at a few programs (each looping over many items).
Then each row times both on the same rotated input sets (CUDA-graph replay medians,
``time_graph``), interleaved over ``--rounds``, beside a copy of the same bytes timed the same way;
``--per-sm`` adds persistent columns at other program counts. One JSON line per measurement, a
table last.

    python3 rgdr_persistent.py [--rounds 3] [--per-sm 2,8] [--json out.json]
"""

import argparse
import json
import statistics
from dataclasses import replace

import torch
from cuda_bench_common import rgdr_key
from rgdr_splits import Forced, finish, row_sets, run_once, time_row

from tileops_cuda.kernels.rgdr import RGDRSchedule, build_rgdr, default_schedule
from tileops_cuda.testing import check_rgdr, rgdr_case

ROWS = [(32, 1), (64, 1), (128, 1), (256, 1), (128, 2)]
CHECKS = [([tb] * B, {}) for B in (1, 5, 32, 128) for tb in (1, 2)] + [
    ([3, 1, 9, 0, 17, 1, 1, 2, 0, 5], {"padding": 0.15, "pad_first_of": 1})
]


def check(st, plain, persistent, few, gen) -> list:
    """The float64 check and bit equality with the plain program on every case of CHECKS."""
    records = []
    for lengths, extra in CHECKS:
        case = rgdr_case(persistent.key, lengths, device="cuda", generator=gen, **extra)
        res = check_rgdr(persistent, case)
        ref_out, ref_state = run_once(plain, case)
        same = {}
        for name, launcher in (("own_count", persistent), ("few_programs", few)):
            out, state = run_once(launcher, case)
            torch.cuda.synchronize()
            same[name] = torch.equal(out, ref_out) and torch.equal(state, ref_state)
        label = f"B={len(lengths)} Tb={lengths[0]}" if not extra else f"ragged B={len(lengths)}"
        rec = {"check": [st, label], "ok": res["ok"], "why": res["why"], "bits_equal_plain": same}
        records.append(rec)
        print(json.dumps(rec), flush=True)
        if not (res["ok"] and all(same.values())):
            raise SystemExit(f"{st} {label}: the persistent program failed its check: {rec}")
    return records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-sm", default="", help="extra persistent program counts, per SM (comma-separated)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results, table = {"checks": [], "rows": []}, []
    for st in args.states.split(","):
        key = rgdr_key(16, 32, st)
        base = replace(default_schedule(key).pick(128, 128), speculate=False)
        pers = replace(base, persistent=True)
        # the compiled signature Forced calls: g present, no gk, no accepted counts (rgdr_key's rows)
        assert base.stream and key.has_g and key.gk_form is None and key.accepted_dtype is None
        build_rgdr(key, RGDRSchedule(base, pers, 1 << 62))  # both compile concurrently, then are cached
        plain, persistent = build_rgdr(key, base), build_rgdr(key, pers)
        results["checks"] += check(st, plain, persistent, Forced(persistent, pers, pers.min_blocks), gen)
        # "persistent": the launcher's count, min(items, SMs x min_blocks); "persistent xN": N per SM
        variants = {"stream": plain, "persistent": persistent}
        for per_sm in (int(x) for x in args.per_sm.split(",") if x):
            variants[f"persistent x{per_sm}"] = Forced(persistent, pers, sms * per_sm)
        for B, tb in ROWS:
            foot, sets = row_sets(plain, key, B, tb, gen)
            copy, times = time_row(variants, sets, foot, args.rounds)
            row = {"state": st, "B": B, "Tb": tb, "tiling": str(pers), "bytes": foot, "copy_us": copy, "us": times}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            table.append((st, B, tb, copy, {name: statistics.median(v) for name, v in times.items()}))
            del sets
            torch.cuda.empty_cache()
    finish(results, table, args.json, "program", "stream")


if __name__ == "__main__":
    main()
