"""The streamed RGDR program's state ring (``RGDRTiling.ring``) on issue 16's large-batch rows.

The streamed program keeps one row chunk of state in flight per program (a register prefetch),
and on the H200 every large row stays latency-bound on memory (NOTES.md, eighth session of
2026-12-03): the start chain is not what costs (``rgdr_splits.py``, the persistent program),
the bytes a resident program keeps in flight against its per-chunk work are. A ring of ``n``
stages keeps ``n - 1`` chunks in flight as ``cp.async`` copies into shared memory, which hold
no registers; this measures whether that closes the gap to the copy.

Per state dtype, each candidate ring tiling and its plain twin (the same tiling, ``ring=0``)
build concurrently; each ring is checked once against float64 (``check_rgdr``) on a decode
step and an MTP step (T_b = 2), both with padding slots, and bit for bit against its twin (a
ring that fails either is left out of the timing). Then each row (B = 32..256 at T_b = 1,
B = 128 at T_b = 2) times the default schedule (what serves today), every twin and every ring
on the same rotated input sets (CUDA-graph replay medians, ``time_graph``), interleaved over
``--rounds``, beside a copy of the same bytes timed the same way. One JSON line per
measurement, a table last: µs, % of the same-size copy, and the ratio to the plain twin (a
ring) or to the default schedule (anything else).

    python3 rgdr_ring.py [--rounds 3] [--json out.json]
"""

import functools
import json
import statistics
from dataclasses import replace

import torch
from cuda_bench_common import experiment_args, rgdr_key
from rgdr_speculate import same_bits, time_row

from tileops_cuda.kernels._common import compile_many
from tileops_cuda.kernels.rgdr import RGDRTiling, build_rgdr
from tileops_cuda.testing import RING_TILINGS, check_rgdr, rgdr_case

ROWS = [(32, 1), (64, 1), (128, 1), (256, 1), (128, 2)]
CANDIDATES = RING_TILINGS  # shared with the GPU tests (tileops_cuda.testing)


def label(t: RGDRTiling) -> str:
    """``ring2 R4 b6``: stages (or ``plain``), rows a thread, programs an SM (min_blocks)."""
    return f"{f'ring{t.ring}' if t.ring else 'plain'} R{t.rows_per_thread} b{t.min_blocks}"


def main() -> None:
    args, gen = experiment_args(__doc__)
    results, tables = {"checks": [], "rows": []}, []
    for st in args.states.split(","):
        key = rgdr_key(16, 32, st)
        rings = CANDIDATES[st]
        twins = list(dict.fromkeys(replace(t, ring=0) for t in rings))
        built = compile_many([functools.partial(build_rgdr, key)]
                             + [functools.partial(build_rgdr, key, t) for t in twins + rings])  # fmt: skip
        failed = next((b for b in built if isinstance(b, BaseException)), None)
        if failed is not None:
            raise failed
        variants = {"default": built[0], **{label(t): b for t, b in zip(twins + rings, built[1:])}}
        baseline = {label(t): "default" for t in twins} | {label(t): label(replace(t, ring=0)) for t in rings}
        for t, tb in [(t, tb) for t in rings for tb in (1, 2)]:  # float64, then the plain twin's bits
            if label(t) not in variants:
                continue
            case = rgdr_case(key, [tb] * 70, device="cuda", generator=gen, padding=0.1, pad_first_of=1)
            res = check_rgdr(variants[label(t)], case)
            same = same_bits(variants[label(t)], variants[baseline[label(t)]], case)
            rec = {"check": [st, label(t), tb], "ok": res["ok"], "why": res["why"], "bits_equal_plain": same}
            results["checks"].append(rec)
            print(json.dumps(rec), flush=True)
            if not (res["ok"] and same):  # a wrong ring is not timed; the others are
                del variants[label(t)]
        table = []
        for B, tb in ROWS:
            foot, copy, times = time_row(variants, key, B, tb, gen, args.rounds)
            row = {"state": st, "B": B, "Tb": tb, "bytes": foot, "copy_us": copy, "us": times}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            table.append((B, tb, copy, {name: statistics.median(v) for name, v in times.items()}))
        tables.append((st, table, baseline))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    for st, table, baseline in tables:
        print_table(st, table, baseline)


def print_table(state: str, table: list, baseline: dict) -> None:
    """One line a variant, one cell a row (``table``: ``(B, T_b, copy µs, {variant: median µs})``);
    ``baseline`` names what each variant's ratio is against (the default schedule if absent)."""
    print(f"\n{state}: µs, % of the same-size copy, x vs plain twin (rings) or default (the rest)")
    print(f"{'':13s} | " + " | ".join(f"B{B} Tb{tb} copy {copy:.2f}".ljust(24) for B, tb, copy, _ in table))
    for name in table[0][3]:
        cells = []
        for _, _, copy, med in table:
            ref = med[baseline.get(name, "default")]
            cells.append(f"{med[name]:7.2f} {100 * copy / med[name]:5.1f}% {ref / med[name]:5.3f}x".ljust(24))
        print(f"{name:13s} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
