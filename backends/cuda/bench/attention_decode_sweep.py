"""The attention decode kernel's candidate schedules on the issue's rows, in one GPU run: which
schedule and split count each row should get (``SCHEDULE_RULES`` in
``tileops_cuda/kernels/attention_decode.py`` is set from this output).

Usage (from the repository root, tilelang and a CUDA GPU present)::

    python backends/cuda/bench/attention_decode_sweep.py [--reps 30] [--json PATH] [--budget-s 200]
        [--candidates contiguous/par,contiguous/par-bh16] [--max-batch 1]

``--candidates``: only those (``layout/label``, comma-separated; the rows of a layout with none
are skipped); the first listed of a layout is its rows' baseline. ``--max-batch``: only the rows of
at most that many sequences (1: the B=1 rows).

What it does, in order, printing each line as it is measured (a run cut short keeps what it
printed; the JSON is rewritten after every row):

1. Compiles every candidate's programs concurrently (``compile_many``).
2. Checks every candidate schedule against the float64 reference on a ragged batch (padding
   rows, lengths either side of the tiles, NaN in every cache slot no sequence reads, the
   step's own slot included; split count pinned to 4 so the combine runs), caches bit for bit;
   each in its own process, so one that faults the device is only left out of the timings.
3. Measures the copy ceiling (``torch.mul`` on 1 GiB, as ``attention_bench.py``).
4. For each row (Qwen3-Next: NQ 16, NKV 2, D 256, bf16; every sequence at its capacity, as the
   manifest's ``full`` rows): the serial schedule at its planned split count, then each new
   schedule at the planned split count and at pinned split counts around it. Each is checked
   against a float32 reference (first and last sequence) and timed two ways: ``event`` = the
   median of ``--reps`` single calls after an L2 flush (``attention_bench.py``'s method) and
   ``graph`` = a CUDA graph of back-to-back calls on rotated input sets (>= 240 MiB touched, so
   nothing is found in L2), per call. A copy moving the row's bytes (half read, half written)
   is timed both ways too: "% same" is that copy's time over the candidate's; "% peak" is the
   row's bytes over the time against the 1 GiB copy's bandwidth.
5. Prints, per row, the best candidate by graph time and by event time.

Candidates (``DecodeSchedule`` fields): contiguous ``serial`` (2 stages, serial combine),
``par`` (parallel combine), ``par-3st`` (3 stages, parallel combine), ``gather`` (its tiles gathered row by
row, one stage, two programs an SM), ``par-bh16`` (the light split
program: 16 score rows, the rule's schedule at B <= 8), ``par-bh16-sl`` (the same with the sliced combine:
partials loaded beside the log-sum-exps, a program a 64-channel slice), ``gather-bh16`` and ``gather-bh16-sl`` (the
light program reading the contiguous rows with asynchronous copies, as over paged blocks); paged (16-token blocks)
``serial`` (16-position tiles, 8 stages, serial combine), ``par`` (same tiles, parallel
combine), ``gather`` (64-position tiles gathered from 4 blocks, parallel combine), ``gather-bh16`` (the light
program's 32-position tiles gathered from 2 blocks), ``gather-bh16-sl`` (the same with the sliced combine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[0] / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from attention_bench import NKV, D, Timer, copy_us, decode_inputs, decode_key, log, reference_error  # noqa: E402
from cuda_bench_common import ROTATE_BYTES, time_graph  # noqa: E402
from decode_cases import decode_batch, decode_reference, poison_unread  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.attention_decode import (  # noqa: E402
    MAX_SPLITS, DecodeSchedule, build_attention_decode, planned_splits, split_tiling,
)

BLOCK = 16  # the paged rows' block size (vLLM's default)

#: (label, schedule) per layout; the first is the first kernel's (the serial combine), the baseline of the ratios.
#: The small-batch candidate (issue 21; NOTES "Attention decode at small batch"): ``par-bh16`` the light split
#: program (16 score rows), the rule's schedule at B <= 8; ``-sl`` the same with the sliced combine;
#: contiguous ``gather-bh16`` and ``gather`` (the 64-row program) their tiles gathered row by row (cp.async, one
#: stage) as over paged blocks.
CONTIGUOUS = [("serial", DecodeSchedule()), ("par", DecodeSchedule(combine="parallel")),
              ("par-3st", DecodeSchedule(stages=3, combine="parallel")),
              ("gather", DecodeSchedule(tiles="gather", combine="parallel")),
              ("par-bh16", DecodeSchedule(combine="parallel", block_h=16)),
              ("par-bh16-sl", DecodeSchedule(combine="sliced", block_h=16)),
              ("gather-bh16", DecodeSchedule(tiles="gather", combine="parallel", block_h=16)),
              ("gather-bh16-sl", DecodeSchedule(tiles="gather", combine="sliced", block_h=16))]
PAGED = [("serial", DecodeSchedule()), ("par", DecodeSchedule(combine="parallel")),
         ("gather", DecodeSchedule(tiles="gather", combine="parallel")),
         ("gather-bh16", DecodeSchedule(tiles="gather", combine="parallel", block_h=16)),
         ("gather-bh16-sl", DecodeSchedule(tiles="gather", combine="sliced", block_h=16))]

#: (B, context, paged): the issue's range, B = 1 … 64 at 4k … 32k, both layouts; the last three, the small
#: batches between B=1 (where the light program is the rule's) and B=16, for where its rule should end.
ROWS = [(1, 4096, False), (1, 32768, False), (16, 8192, False), (64, 4096, False), (1, 8192, False),
        (64, 32768, False), (1, 4096, True), (8, 32768, True), (64, 16384, True), (16, 8192, True),
        (1, 32768, True), (64, 32768, True), (2, 8192, False), (4, 8192, False), (8, 4096, False)]

NAMES = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")
BF16_TOLERANCE = 1.6e-2  # the conformance suite's bfloat16 relative tolerance


def kv_bytes(B: int, context: int) -> int:
    return 2 * B * context * NKV * D * 2


def launcher_for(paged: bool, schedule: DecodeSchedule, arch: str):
    return build_attention_decode(dataclasses.replace(decode_key(BLOCK if paged else None, arch), schedule=schedule))


def prebuild(arch: str, names: set[str]) -> None:
    """Compile the named candidates' programs at once (pinned split counts reuse them)."""

    def build(paged: bool, schedule: DecodeSchedule):
        def thunk() -> None:
            launcher = launcher_for(paged, schedule, arch)
            if paged:
                launcher.prepare(BLOCK)
        return thunk

    t0 = time.time()
    cands = [(paged, s) for name, paged, s in candidates() if name in names]
    for (paged, schedule), failure in zip(cands, compile_many([build(p, s) for p, s in cands])):
        if isinstance(failure, Exception):
            log(f"build FAILED paged={paged} {schedule}: {type(failure).__name__}: {str(failure)[-400:]}")
    log(f"compiled {len(cands)} candidates' programs in {time.time() - t0:.1f} s")


def candidates() -> list[tuple[str, bool, DecodeSchedule]]:
    """``(name, paged, schedule)`` of every candidate, e.g. ``("paged/gather", True, ...)``."""
    return ([(f"contiguous/{label}", False, s) for label, s in CONTIGUOUS]
            + [(f"paged/{label}", True, s) for label, s in PAGED])


def check_ragged(name: str, arch: str) -> dict:
    """One candidate against float64 on a ragged, NaN-poisoned batch (splits pinned to 4)."""
    _, paged, schedule = next(c for c in candidates() if c[0] == name)
    gen = torch.Generator(device="cuda")
    gen.seed()
    inputs = decode_batch("cuda", gen, [0, 63, -1, 64, 65, 127, 1, 300, -1, 128], block=BLOCK if paged else None)
    poison_unread(inputs)
    expected, kc, vc = decode_reference(inputs, None)
    out = torch.full_like(inputs["query"], float("nan"))
    launcher_for(paged, dataclasses.replace(schedule, splits=4), arch).run(*[inputs.get(n) for n in NAMES], None, out)
    torch.cuda.synchronize()
    err = float((out.double() - expected).norm() / expected.norm())
    caches = all(torch.equal(got.view(torch.int16), want.view(torch.int16))
                 for got, want in ((inputs["key_cache"], kc), (inputs["value_cache"], vc)))
    ok = err <= BF16_TOLERANCE and caches and not torch.isnan(out).any().item()
    return dict(candidate=name, rel_err=err, caches_equal=caches, ok=ok)


def check_all(results: dict, names: set[str]) -> set[str]:
    """The named candidates' ragged checks, each in its own process (concurrently): a candidate that
    faults the device takes only its process down, and is left out of the timings. Returns the
    names that passed."""
    procs = {name: subprocess.Popen([sys.executable, __file__, "--check", name], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
             for name, _, _ in candidates() if name in names}
    passed = set()
    for name, proc in procs.items():
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            output = "timed out (120 s): a hang"
        record = next((json.loads(line[len("CHECK "):]) for line in output.splitlines() if line.startswith("CHECK ")),
                      dict(candidate=name, ok=False, error=output[-600:]))
        results["checks"].append(record)
        if record.get("ok"):
            passed.add(name)
            log(f"check {name:22s} rel.err {record['rel_err']:.2e} caches equal: ok")
        else:
            log(f"check {name:22s} FAILED (left out of the timings): {json.dumps(record)[-700:]}")
    return passed


def split_options(B: int, capacity: int, block_n: int, slots: int, sms: int = 0, most: int = 1) -> list[int | None]:
    """The plan (None) and pinned split counts from about 1/8 of a wave to 2 waves of programs
    (``slots``: programs the plan fills, multiprocessors times the tiling's ``resident``), then the counts that
    fill one wave at 1 to ``most`` programs an SM (``sms`` multiprocessors; the light tiling's launch bounds
    allow 3, its plan fills at most 2: whether a third program an SM, more loads in flight, pays on a card
    with more bandwidth)."""
    tiles = -(-capacity // block_n)
    units = B * NKV
    pinned = [s for s in (1, 2, 4, 8, 16, 32, 64, 128, 256) if s <= tiles and slots // 8 <= units * s <= 2 * slots]
    waves = [k * sms // units for k in range(1, most + 1) if sms]
    pinned += [s for s in waves if 1 <= s <= min(tiles, MAX_SPLITS) and s not in pinned]
    return [None, *pinned]


def same_size_copy(timer: Timer, moved: int) -> tuple[float, float]:
    """(event µs, graph µs) of a copy moving ``moved`` bytes, rotated over buffers in the graph."""
    n = max(1, min(32, -(-ROTATE_BYTES // moved)))
    srcs = [torch.zeros(max(1, moved // 4), device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    dsts = [torch.empty_like(a) for a in srcs]
    graph = time_graph([lambda a=a, b=b: torch.mul(a, 1, out=b) for a, b in zip(srcs, dsts)])
    del srcs, dsts
    return copy_us(timer, moved), graph


def bench_row(B: int, context: int, paged: bool, timer: Timer, copy_bw: float, arch: str, sms: int,
              gen: torch.Generator, results: dict, passed: set[str], order: list[str]) -> None:
    block = BLOCK if paged else None
    moved = kv_bytes(B, context)
    capacity = -(-context // BLOCK) * BLOCK if paged else context
    nsets = max(1, min(32, -(-ROTATE_BYTES // moved)))
    sets = [decode_inputs(B, context, block, gen) for _ in range(nsets)]
    copy_event, copy_graph = same_size_copy(timer, moved)
    row = f"{'paged' if paged else 'contig'} B={B} ctx={context}"
    log(f"\n== {row}: {moved / 1e6:.1f} MB of KV; same-size copy {copy_event:.2f} us (event) "
        f"{copy_graph:.2f} us (graph); peak-copy time {moved / copy_bw * 1e6:.2f} us; {nsets} input sets")
    log(f"{'candidate':10s} {'splits':>6s} {'event us':>9s} {'graph us':>9s} {'%peak ev':>8s} {'%peak gr':>8s} "
        f"{'%same ev':>8s} {'%same gr':>8s} {'rel.err':>8s}")
    layout = "paged" if paged else "contiguous"
    cands = [(label, s) for label, s in (PAGED if paged else CONTIGUOUS) if f"{layout}/{label}" in passed]
    cands.sort(key=lambda c: order.index(f"{layout}/{c[0]}"))  # the first listed is the baseline
    outs = [torch.empty_like(s["query"]) for s in sets]
    for index, (label, schedule) in enumerate(cands):
        tiling = split_tiling(decode_key(block, arch), schedule, block)[1]
        block_n = tiling.block_n
        planned = planned_splits(B, NKV, capacity, tiling, sms, schedule.min_split_tiles)[0]
        options = [None] if index == 0 else split_options(B, capacity, block_n, sms * tiling.resident, sms,
                                                          max(tiling.resident, tiling.launch_bound))
        for pinned in options:
            if pinned == planned:
                continue  # the plan's own count, measured as "plan"
            try:
                sched = schedule if pinned is None else dataclasses.replace(schedule, splits=pinned)
                run = launcher_for(paged, sched, arch).run
                splits = planned if pinned is None else pinned
                calls = [lambda s=s, o=o: run(*[s[n] for n in NAMES], None, o) for s, o in zip(sets, outs)]
                calls[0]()
                torch.cuda.synchronize()
                err = max(reference_error(sets[0], outs[0], 0), reference_error(sets[0], outs[0], B - 1))
                event = timer(calls[0])
                graph = time_graph(calls)
                rec = dict(row=row, B=B, context=context, paged=paged, candidate=label,
                           schedule=dataclasses.asdict(schedule), splits=splits, planned=pinned is None,
                           event_us=round(event, 2), graph_us=round(graph, 2), kv_bytes=moved,
                           pct_peak_event=round(100 * moved / (event * 1e-6) / copy_bw, 1),
                           pct_peak_graph=round(100 * moved / (graph * 1e-6) / copy_bw, 1),
                           same_copy_event_us=round(copy_event, 2), same_copy_graph_us=round(copy_graph, 2),
                           pct_same_event=round(100 * copy_event / event, 1),
                           pct_same_graph=round(100 * copy_graph / graph, 1), rel_err=err,
                           ok=err <= BF16_TOLERANCE)
                results["rows"].append(rec)
                log(f"{label:10s} {str(splits) + ('*' if pinned is None else ''):>6s} {event:9.2f} {graph:9.2f} "
                    f"{rec['pct_peak_event']:8.1f} {rec['pct_peak_graph']:8.1f} {rec['pct_same_event']:8.1f} "
                    f"{rec['pct_same_graph']:8.1f} {err:8.1e}{'' if rec['ok'] else '  WRONG'}")
            except Exception as exc:
                results["rows"].append(dict(row=row, candidate=label, splits=pinned,
                                            error=f"{type(exc).__name__}: {exc}"))
                log(f"{label:10s} {str(pinned):>6s} FAILED: {type(exc).__name__}: {str(exc)[-300:]}")
    mine = [r for r in results["rows"] if r.get("row") == row and "graph_us" in r and r["ok"]]
    if mine:
        current = next((r for r in mine if r["candidate"] == "serial"), None)
        for clock in ("graph", "event"):
            best = min(mine, key=lambda r: r[f"{clock}_us"])
            gain = f", {current[f'{clock}_us'] / best[f'{clock}_us']:.2f}x the serial combine" if current else ""
            log(f"best by {clock}: {best['candidate']} splits={best['splits']} {best[f'{clock}_us']:.2f} us "
                f"({best[f'pct_same_{clock}']:.1f}% of a same-size copy, {best[f'pct_peak_{clock}']:.1f}% of peak"
                f"{gain})")
            results["best"].append(dict(row=row, clock=clock, candidate=best["candidate"], splits=best["splits"],
                                        schedule=best["schedule"], us=best[f"{clock}_us"]))
    del sets, outs
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=200.0, help="start no row after this many seconds")
    parser.add_argument("--check", default=None, help="(internal) check one candidate and print CHECK <json>")
    parser.add_argument("--max-batch", type=int, default=None, help="only the rows of at most this many sequences")
    parser.add_argument("--candidates", default=None,
                        help="comma-separated layout/label names (default: all), the first of a layout its baseline")
    args = parser.parse_args()
    start = time.time()
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    if args.check:
        print("CHECK " + json.dumps(check_ragged(args.check, arch)), flush=True)
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results: dict = dict(device=torch.cuda.get_device_name(), arch=arch, sms=sms, checks=[], rows=[], best=[])

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))

    every = [name for name, _, _ in candidates()]
    order = every if args.candidates is None else args.candidates.split(",")
    unknown = sorted(set(order) - set(every))
    if unknown:
        parser.error(f"--candidates: {unknown} are not candidates; choose from {every}")
    prebuild(arch, set(order))
    passed = check_all(results, set(order))
    gen = torch.Generator(device="cuda")
    gen.seed()
    timer = Timer(args.reps)
    copy_bw = 2 * 2**30 / (copy_us(timer, 2 * 2**30) * 1e-6)
    results["copy_ceiling_bytes_per_s"] = copy_bw
    log(f"device {results['device']} ({arch}, {sms} SMs); copy ceiling {copy_bw / 1e12:.3f} TB/s "
        f"(torch.mul on 1 GiB bf16); {time.time() - start:.0f} s so far")
    save()
    for B, context, paged in ROWS:
        if args.max_batch is not None and B > args.max_batch:
            continue
        if not any(name.startswith("paged/" if paged else "contiguous/") for name in passed):
            continue  # no candidate of this layout selected (or passed)
        if time.time() - start > args.budget_s:
            log(f"budget of {args.budget_s:.0f} s spent: rows from B={B} ctx={context} paged={paged} on not run")
            break
        try:
            bench_row(B, context, paged, timer, copy_bw, arch, sms, gen, results, passed, order)
        except Exception as exc:
            log(f"row B={B} ctx={context} paged={paged} FAILED: {type(exc).__name__}: {exc}")
        save()
        log(f"({time.time() - start:.0f} s so far)")
    save()


if __name__ == "__main__":
    main()
