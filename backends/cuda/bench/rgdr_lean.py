"""The candidates that cut instructions a state element (issue 16's large-batch rows), by timing.

The streamed program the default schedule runs at B >= 32 spends about 596 warp instructions on a
32-row chunk of a decode step (bf16 state, counted from its SASS: NOTES.md, "RGDR: instructions a
state element"), against about 240 for the arithmetic itself. The candidates
(``rgdr_sweep.LEAN_CANDIDATES``: ``RGDRTiling``'s exact_tokens, unchecked_index, pingpong,
flat_rows, reduce_rows) cut that to about 390-450 with the same arithmetic. If issue and the
bytes each warp keeps in flight between its chunks is what holds bf16 at 70-78% of the copy,
they are faster; if not, they tie.

Round 3 (``rgdr_sweep.LEAN_CANDIDATES`` now): the fields of round 2 (unpack_bits, row_deltas,
stage_live_warps; NOTES.md "RGDR: instructions a state element, round 2") and tile shapes, each on the
rows of the role it targets (``rgdr_sweep.LEAN_ROWS``).

Round 4: every registered role launched as a programmatic dependent
(``RGDRTiling.dependent_launch``). The rows are CUDA-graph replays of back-to-back calls, so a candidate's
time per call includes the overlap of each launch with the previous call's tail, as consecutive kernels
of a decode step would overlap when the kernel before RGDR lets it launch early.

Round 5 (``rgdr_sweep.LEAN_CANDIDATES`` now): bf16's B=1..8 and B=32 decode rows, the two left short of
issue 16's targets.

Round 6 (thirty-third session, deleted since): the tiled roles of the rows at B >= 128 with their grid
transposed (sequences on ``blockIdx.x``): 0.954-0.979x the default schedule on every row it was timed on.

Round 7 (fifty-fifth session, deleted since): bf16's two-token rows through the short role's neighbours (occupancy
3 and 5, 256 threads, 32 lanes a row, 4 rows a lane, round 2's fields): none led a row by more than 0.5% on an H100.

Per state dtype: every candidate is built (concurrently), checked against float64 on a decode step
and a ragged batch (NaN-poisoned output, untouched slots bit-identical) and for bit equality with
the tiling it leans; a candidate that fails either is not timed. Each row then times the default
schedule and every candidate of that row on the same rotated input sets (CUDA-graph replay medians), in turn
over ``--rounds``, beside a copy of the same bytes. One JSON line per measurement, a table last.

    python3 rgdr_lean.py [--states bfloat16,float32] [--rounds 3] [--json out.json]
"""

import functools
import json
import statistics
from dataclasses import asdict, fields, replace

from cuda_bench_common import experiment_args, report_rows, rgdr_check_cases, rgdr_key
from rgdr_speculate import same_bits, time_row
from rgdr_sweep import LEAN_CANDIDATES, LEAN_FIELDS, LEAN_ROWS

from tileops_cuda.kernels._common import compile_many
from tileops_cuda.kernels.rgdr import RGDRTiling, build_rgdr
from tileops_cuda.testing import check_rgdr

ROWS = [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (32, 1), (64, 1), (128, 1), (256, 1), (32, 2), (64, 2), (128, 2),
        (256, 2), (128, 4), (256, 4)]


def plain(tiling):
    """The tiling with the candidate fields at their defaults: the program whose bits a candidate must give."""
    return replace(tiling, **{f.name: f.default for f in fields(RGDRTiling) if f.name in LEAN_FIELDS})


def main() -> None:
    args, gen = experiment_args(__doc__)
    results, table = {"checks": [], "rows": []}, []
    for st in args.states.split(","):
        key = rgdr_key(16, 32, st)
        named = LEAN_CANDIDATES[st]
        todo = [("default", None)] + list(named.items()) + [(f"plain:{n}", plain(t)) for n, t in named.items()]
        built = compile_many([functools.partial(build_rgdr, key, t) for _, t in todo])
        got = {}
        for (name, t), b in zip(todo, built):
            if isinstance(b, BaseException):
                print(json.dumps({"build_failed": [st, name], "why": repr(b)[:300]}), flush=True)
            else:
                got[name] = b
                print(json.dumps({"built": [st, name], "tiling": None if t is None else asdict(t)}), flush=True)
        launchers = {"default": got["default"]} if "default" in got else {}
        for name in named:
            if name not in got or f"plain:{name}" not in got:
                continue
            ok = True
            for case in rgdr_check_cases(key, gen, decode=70):
                res = check_rgdr(got[name], case)
                same = same_bits(got[name], got[f"plain:{name}"], case)
                rec = {"check": [st, name, case["actual_seq_lengths"].numel()], "ok": res["ok"], "why": res["why"],
                       "bits_equal_plain": same}
                results["checks"].append(rec)
                print(json.dumps(rec), flush=True)
                ok = ok and res["ok"] and same
            if ok:
                launchers[name] = got[name]
        for B, tb in ROWS:
            on_row = {n: b for n, b in launchers.items() if n == "default" or (B, tb) in LEAN_ROWS[st].get(n, ROWS)}
            foot, copy, times = time_row(on_row, key, B, tb, gen, args.rounds)
            row = {"state": st, "B": B, "Tb": tb, "bytes": foot, "copy_us": copy, "us": times}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            table.append((st, B, tb, copy, {n: statistics.median(v) for n, v in times.items()}))
    rows = []
    for st, B, tb, copy, med in table:
        base = med.get("default")
        rows.append((st, B, tb, copy, [f"{n}: {m:7.2f} {100 * copy / m:5.1f}%" + (f" {base / m:5.3f}x" if base else "")
                                       for n, m in med.items()]))  # fmt: skip
    report_rows(args.json, results, "variant: median us, % of same-size copy, x vs default", rows)

if __name__ == "__main__":
    main()
