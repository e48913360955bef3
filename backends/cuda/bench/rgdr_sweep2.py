"""Issue 16's sweep: the staged RGDR kernel's tilings beside the register-tiled kernel's
schedule (what runs today), on the issue's rows, in one device call.

For each state dtype: every candidate is built (concurrently), checked once on a small
ragged, padded case against float64 (a failing candidate is reported and not timed), then
timed by CUDA-graph replay on the same rotated input sets per row (rows outer). Per row it
prints today's time, the best staged tiling's, both as % of the copy ceiling measured in the
same run, and the float64 check of the row's best candidate at the row's full shape. Raw
numbers go to ``$OUT/sweep2.json``.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/rgdr_sweep2.py [--quick]
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from bench_cuda import copy_ceiling  # noqa: E402  (also puts the backends on sys.path)
from cuda_bench_common import RESULTS, ROTATE_BYTES, calls_on, log, rgdr_bytes, rgdr_calls, rgdr_key, time_graph  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.rgdr import build_rgdr  # noqa: E402
from tileops_cuda.kernels.rgdr_staged import RGDRStagedTiling, build_rgdr_staged, rgdr_staged_refusal  # noqa: E402
from tileops_cuda.testing import check_rgdr, rgdr_case  # noqa: E402

__all__ = ["ROWS", "STAGED_SWEEP", "main"]


def _st(threads, tpr, rows, min_blocks, rif, load="async", seqs=1):
    return RGDRStagedTiling(threads, tpr, rows, min_blocks, rows_in_flight=rif, load=load, seqs_per_program=seqs)


#: Staged tilings per state dtype, the three expected best (few: compiles dominate a device
#: call): a 64-row block (32 for fp32), a whole head (64 rows for fp32), and two sequences per
#: program; ``min_blocks`` near what shared memory and ~80 registers per thread allow (it caps
#: registers: 65536 / (threads * min_blocks) must stay above what ptxas needs).
STAGED_SWEEP = {
    "bfloat16": [_st(128, 16, 8, 6, 4), _st(128, 16, 16, 4, 4), _st(128, 16, 8, 4, 4, seqs=2)],
    "float32": [_st(128, 16, 4, 8, 2), _st(128, 16, 8, 4, 4), _st(128, 16, 4, 6, 2, seqs=2)],
}  # fmt: skip

#: Issue 16's rows (NK16/NV32): B=1 T=1, B=32 T_b=1, B >= 128 at T_b 1, 2, 4.
ROWS = [(1, 1), (32, 1), (128, 1), (128, 2), (128, 4), (256, 1), (256, 2), (256, 4)]


def _name(t) -> str:
    if isinstance(t, RGDRStagedTiling):
        seqs = f",x{t.seqs_per_program}" if t.seqs_per_program > 1 else ""
        return f"staged({t.threads},{t.threads_per_row},bv{t.block_v},rif{t.rows_in_flight},mb{t.min_blocks},{t.load}{seqs})"
    return "tiled-default"


def _candidates(state: str) -> dict:
    """name -> launcher: today's schedule, then every staged tiling (built concurrently)."""
    key = rgdr_key(16, 32, state)
    tilings = [t for t in STAGED_SWEEP[state] if rgdr_staged_refusal(key, t) is None]
    for t in STAGED_SWEEP[state]:
        if t not in tilings:
            log("refused", state, _name(t), rgdr_staged_refusal(key, t))
    thunks = [lambda: build_rgdr(key)] + [lambda t=t: build_rgdr_staged(key, t) for t in tilings]
    t0 = time.time()
    built = compile_many(thunks)
    log(f"built {len(thunks)} {state} candidates in {time.time() - t0:.0f}s")
    out = {}
    for name, b in zip(["tiled-default"] + [_name(t) for t in tilings], built):
        if isinstance(b, Exception):
            RESULTS["errors"].append(f"build {state} {name}: {type(b).__name__}: {b}"[:3000])
            log("BUILD ERROR", state, name, f"{type(b).__name__}: {str(b)[-1500:]}")
        else:
            out[name] = b
    return out


def sweep(gen, states, rows, dump) -> dict:
    """The sweep (see the module docstring); ``dump(res)`` runs after every row."""
    res: dict = {"rows": [], "checks": []}
    for state in states:
        key = rgdr_key(16, 32, state)
        cands = {}
        for name, L in _candidates(state).items():
            try:
                chk = check_rgdr(L, rgdr_case(key, [3, 1, 9, 0, 17, 1, 2], device="cuda", generator=gen, padding=0.1,
                                              pad_first_of=1, repeat_slots_of=2))  # fmt: skip
            except Exception as exc:
                chk = {"ok": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
            res["checks"].append({"state": state, "cand": name, "ok": chk["ok"], "why": chk["why"]})
            if chk["ok"]:
                cands[name] = L
            else:
                log("CHECK FAILED", state, name, chk["why"])
        if not cands:
            log("no", state, "candidate passed its check; nothing timed")
            continue
        for B, tb in rows:
            foot = rgdr_bytes(B, tb, 16, 32, 4 if state == "float32" else 2)
            nsets = max(1, min(64, math.ceil(ROTATE_BYTES / foot)))
            sets, _ = rgdr_calls(next(iter(cands.values())), key, B, tb, gen, nsets)
            times = {}
            for name, L in cands.items():
                try:
                    times[name] = time_graph(calls_on(L, sets))
                except Exception as exc:
                    RESULTS["errors"].append(f"time {state} {B}x{tb} {name}: {exc}"[:500])
            del sets
            torch.cuda.empty_cache()
            best = min((n for n in times if n != "tiled-default"), key=times.get, default=None)
            row = dict(state=state, B=B, Tb=tb, bytes=foot, us=times, best=best)
            if best is not None:
                # Padding slots (and a padding first slot) only where other tokens still write.
                case = rgdr_case(key, [tb] * B, device="cuda", generator=gen, padding=0.05 if B * tb > 8 else 0.0,
                                 pad_first_of=0 if B > 1 else None)  # fmt: skip
                chk = check_rgdr(cands[best], case)
                row["best_check"] = {k: chk[k] for k in ("ok", "why", "state_err", "state_err_ref32", "out_err")}
                del case
                torch.cuda.empty_cache()
            res["rows"].append(row)
            dump(res)
            fastest = sorted(times, key=times.get)[:3]
            log("row", state, B, tb, f"today {times.get('tiled-default', float('nan')):.1f} |",
                " ".join(f"{n} {times[n]:.1f}" for n in fastest), "| check", row.get("best_check", {}).get("ok"))
    return res


def table(res: dict, copy_gbps: float) -> str:
    lines = [f"copy ceiling {copy_gbps:.0f} GB/s; us (% of copy); best staged = fastest staged tiling of the row; "
             "check = float64 check of that tiling at the row's full shape"]  # fmt: skip
    bad = [c for c in res["checks"] if not c["ok"]]
    lines.append(f"small-case checks: {len(res['checks']) - len(bad)} ok, {len(bad)} failed "
                 + "; ".join(f"{c['state']} {c['cand']}: {c['why'][:120]}" for c in bad))  # fmt: skip

    def pct(r, us):
        return 100 * r["bytes"] / (us * 1e-6) / 1e9 / copy_gbps

    lines.append("state     B  Tb | today us (%copy) | best staged us (%copy) x-vs-today | check | best staged tiling")
    for r in res["rows"]:
        today = r["us"].get("tiled-default", float("nan"))
        b = r["best"]
        bu = r["us"].get(b, float("nan")) if b else float("nan")
        chk = r.get("best_check", {})
        lines.append(f"{r['state'][:8]:<8} {r['B']:>3} {r['Tb']:>3} | {today:8.1f} ({pct(r, today):4.1f}) | "
                     f"{bu:8.1f} ({pct(r, bu):4.1f}) {today / bu:5.2f}x | {'Y' if chk.get('ok') else 'N'} "
                     f"{chk.get('state_err', float('nan')):.1e} | {b}")  # fmt: skip
    lines.append("every candidate, us per row (" + " ".join(f"{B}x{tb}" for B, tb in ROWS) + "):")
    for state in dict.fromkeys(r["state"] for r in res["rows"]):
        rs = [r for r in res["rows"] if r["state"] == state]
        for name in rs[0]["us"]:
            lines.append(f"  {state[:4]} {name:<44} " + " ".join(f"{r['us'].get(name, float('nan')):7.1f}" for r in rs))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "sweep2.json"))
    ap.add_argument("--quick", action="store_true", help="bf16 state, three rows")
    args = ap.parse_args()
    states = ["bfloat16"] if args.quick else ["bfloat16", "float32"]
    rows = [(1, 1), (32, 1), (128, 1)] if args.quick else ROWS
    gen = torch.Generator(device="cuda")
    gen.seed()
    RESULTS["copy"] = copy_ceiling("start")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)

    def dump(res: dict) -> None:
        res["copy"] = RESULTS["copy"]
        res["errors"] = RESULTS["errors"]
        res["staged_sweep"] = {st: [asdict(t) for t in ts] for st, ts in STAGED_SWEEP.items()}
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))

    res = sweep(gen, states, rows, dump)
    dump(res)
    log(table(res, RESULTS["copy"]["GBps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
