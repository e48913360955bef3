"""The last wave of the streamed RGDR program (issue 16's large-batch rows), by timing experiment.

The streamed layout runs one program per (sequence, key head, share of the group's value rows):
``splits`` shares, a runtime argument of the compiled function, so no rebuild is needed to vary
it. ``_make_run`` picks ``splits`` to reach 8 programs per SM and otherwise leaves 1; at B = 128
that is 2048 programs of 8 chunks each, about 2.6 waves at 6 resident programs per SM. If the
tail of the last wave is what keeps the large rows at 78-89% of the copy ceiling, more, shorter
programs (``splits`` 2, 4, 8) shrink it and the rows get faster; if the chain before each
program's first state byte is what costs, they get slower. This measures which.

Per state dtype (the default schedule's streamed tiling for decode steps, the one B >= 32 runs):
every ``splits`` is first checked against ``splits = 1`` bit for bit (rows of the state evolve
independently, so the arithmetic is the same) and once against float64 (``check_rgdr``); then
each row times every ``splits`` on the same rotated input sets (CUDA-graph replay medians,
``time_graph``), interleaved over ``--rounds``, beside a copy of the same bytes timed the same
way. One JSON line per measurement, a table last.

    python3 rgdr_splits.py [--rounds 3] [--json out.json]
"""

import json
import statistics

import torch
from cuda_bench_common import experiment_args, report_rows, rgdr_key
from rgdr_speculate import same_bits, time_row

from tileops_cuda.kernels.rgdr import build_rgdr
from tileops_cuda.testing import check_rgdr, rgdr_case

ROWS = [(32, 1), (64, 1), (128, 1), (256, 1), (128, 2)]
SPLITS = (1, 2, 4, 8)


class Forced:
    """A launcher of one compiled streamed program with ``splits`` fixed (what ``check_rgdr`` and
    the timed calls take: ``launcher(query, ..., num_accepted_tokens, out, scale)``)."""

    def __init__(self, launcher, tiling, splits):
        self.key, self.splits = launcher.key, splits
        self.fn = launcher.entries[tiling]
        self.scale = float(launcher.key.head_k_dim) ** -0.5

    def __call__(self, q, k, v, beta, state, meta, slots, g, gk, nacc, out, scale=None):
        self.fn(q, k, v, beta, state, meta, slots, g, out, self.scale if scale is None else scale, self.splits)
        return out


def main() -> None:
    args, gen = experiment_args(__doc__)
    results, table = {"checks": [], "rows": []}, []
    for st in args.states.split(","):
        key = rgdr_key(16, 32, st)
        launcher = build_rgdr(key)
        tiling = launcher.schedule.pick(128, 128)
        # the compiled signature below: g present, no gk, no accepted counts (rgdr_key's rows)
        assert tiling.stream and key.has_g and key.gk_form is None and key.accepted_dtype is None
        nch = key.num_v_heads // key.num_k_heads * key.head_v_dim // tiling.block_v
        forced = {s: Forced(launcher, tiling, s) for s in SPLITS if s <= nch}
        for s, f in forced.items():  # the float64 check, then bit equality with splits = 1
            case = rgdr_case(key, [1] * 70, device="cuda", generator=gen, padding=0.1, pad_first_of=1)
            res = check_rgdr(f, case)
            same = same_bits(forced[1], f, case)
            rec = {"check": [st, s], "ok": res["ok"], "why": res["why"], "bits_equal_splits1": same}
            results["checks"].append(rec)
            print(json.dumps(rec), flush=True)
            if not (res["ok"] and same):
                raise SystemExit(f"{st} splits={s} failed its check: {rec}")
        for B, tb in ROWS:
            foot, copy, times = time_row(forced, key, B, tb, gen, args.rounds)
            row = {"state": st, "B": B, "Tb": tb, "tiling": str(tiling), "bytes": foot, "copy_us": copy,
                   "us": times, "programs_splits1": B * key.num_k_heads}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            table.append((st, B, tb, copy, {s: statistics.median(v) for s, v in times.items()}))
    report_rows(args.json, results, "splits: median us, % of same-size copy, x vs splits=1",
                [(st, B, tb, copy, [f"{s}: {m:7.2f} {100 * copy / m:5.1f}% {med[1] / m:5.3f}x" for s, m in med.items()])
                 for st, B, tb, copy, med in table])  # fmt: skip


if __name__ == "__main__":
    main()
