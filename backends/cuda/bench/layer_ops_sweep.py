"""Time the gated-delta-net layer's memory-bound TileLang kernels (issue 17) at their largest
workload rows, over a few block shapes each, against the copy ceiling measured in this run.

Usage (on a GPU machine, from the repository root, the project installed):
    python3 backends/cuda/bench/layer_ops_sweep.py [--reps 60] [--only GDNGating] [--json PATH]

For every (op, row, config): the row's inputs come from the manifest (``instantiate``); the op
is called once through its public API to record the launch it makes; the TileLang kernel is
then built for the row's build key with the config's fields replaced (``dataclasses.replace``:
threads, rows or tokens per program, ...) and

* checked once against the float64 reference of the conformance suite on fresh copies of the
  inputs, with NaN-poisoned outputs (an unwritten element fails) and the suite's tolerances;
* timed: ``reps`` launches after a warm-up, each alone between two CUDA events, with a 256 MB
  buffer written before each one so that no input is found in L2; the median is reported;
* and timed as ``tileops bench`` does (column ``graph``): a CUDA graph of back-to-back calls,
  each on its own input set (256 MB touched in all), replayed; the median per call. A single
  launch pays the whole launch latency; calls in a graph overlap part of it.

Bandwidth counts the bytes of the manifest's roofline (each input read once, each output
written once). The copy ceiling is ``torch.mul(a, 1, out=b)`` on 1 GiB timed the same way;
the floor of the method (an empty launch between events after a flush) is printed too, since
a single launch of a 10 MB kernel is not bandwidth-bound. A config a kernel refuses is listed
with the reason. The last lines are a table: op, row, config, µs, TB/s, % of copy, graph µs, its % of copy,
error.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import torch

_ROOT = Path(__file__).resolve().parents[3]
for _p in (_ROOT / "backends" / "cuda", _ROOT / "backends" / "cpu_ref", _ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402

from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.baselines import capture_launches  # noqa: E402
from tileops_core.bench.roofline import roofline_of_row  # noqa: E402
from tileops_core.bench.workloads import instantiate  # noqa: E402
from tileops_core.kernels import select_kernel  # noqa: E402
from tileops_core.workloads import dtype_cases  # noqa: E402

FLUSH_BYTES = 256 * 2**20
ROTATE_BYTES = 256 * 2**20
COPY_BYTES = 2**30

#: (op, row label, configs): each config is the build-key fields it replaces ({} = the default).
SWEEP: list[tuple[str, str, list[dict[str, Any]]]] = [
    ("GDNGatingFwdOp", "qwen3-next-prefill-32k", [{}, {"threads": 128, "vectors": 1}]),
    ("ZeroCentredRMSNormFwdOp", "qwen3.5-h4096-prefill-4k", [{}, {"threads": 256, "rows": 1}]),
    ("FusedAddZeroCentredRMSNormFwdOp", "qwen3.5-h4096-prefill-4k", [{}]),
    ("GatedRMSNormFwdOp", "qwen3-next-prefill-4k", [{}, {"threads": 256, "rows": 32}]),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t1", [{}, {"registers": 0}]),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t2-mtp", [{}]),
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-8seq", [{}, {"threads": 64, "tokens": 8}]),
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-1seq", [{}]),
]


def log(*a: Any) -> None:
    print(*a, flush=True)


class Timer:
    """Median device time of one launch, each launch alone after a write of ``FLUSH_BYTES``."""

    def __init__(self, reps: int, warmup: int = 5) -> None:
        self.reps, self.warmup = reps, warmup
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def us(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            self.flush.fill_(1)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def graph_us(row: "Row", fn: Callable[..., Any], replays: int = 20) -> float:
    """Per-call time as ``tileops bench`` measures it: one CUDA graph of back-to-back calls, each
    on its own input set (at least ``ROTATE_BYTES`` touched, so none is found in L2), replayed."""
    sets = [fresh_args(row) for _ in range(max(2, min(32, -(-ROTATE_BYTES // max(int(row.bytes), 1)))))]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as capture requires
        for args, outs in sets:
            fn(*args, *outs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args, outs in sets:
            fn(*args, *outs)
    times = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / len(sets))
    del graph, sets
    return statistics.median(times)


def copy_ceiling(timer: Timer) -> float:
    """Bytes per second of ``torch.mul(a, 1, out=b)`` on 1 GiB (read + write counted)."""
    a = torch.randn(COPY_BYTES // 2, device="cuda").to(torch.bfloat16)
    b = torch.empty_like(a)
    us = timer.us(lambda: torch.mul(a, 1, out=b))
    del a, b
    return 2 * COPY_BYTES / (us * 1e-6)


def launch_floor(timer: Timer) -> float:
    """The method's floor: the smallest kernel torch launches, timed like every kernel here."""
    t = torch.zeros(1, device="cuda")
    return timer.us(lambda: t.add_(1))


@dataclasses.dataclass
class Row:
    """One workload row, ready to launch: the kernel class, its base key, the launch arguments."""

    spec: Any
    params: dict
    impl: Any
    key: Any
    originals: dict  # input name -> CPU tensor
    arg_names: list  # per launch argument: an input name, or None for a non-tensor argument
    launch_args: tuple
    out_shapes: list
    out_dtypes: list
    bytes: float


def prepare(op_name: str, label: str, seed: int) -> Row:
    spec = load_manifest()[op_name]
    row = next(r for r in spec.workloads if r.label == label)
    case = dtype_cases(row)[0]
    cls = getattr(importlib.import_module(spec.source["op"]), op_name)
    inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(seed))
    originals = {n: t.clone() for n, t in inst.inputs.items() if isinstance(t, torch.Tensor)}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    launch = capture_launches(op, args)[0]
    selection = select_kernel(launch.interface, launch.call)
    if selection.chosen_backend != "cuda":
        raise RuntimeError(f"{op_name} {label}: the TileLang kernel refuses the row: "
                           f"{selection.chosen.refusal(launch.call)}")
    names = {id(a): t.name for a, t in zip(args, spec.call_inputs) if a is not None}
    plan = op.last_plan
    params = {"activation": None, "seq_lens_style": "lengths", **op.params}  # the references read these
    return Row(spec, params, selection.chosen, selection.chosen.key(launch.call), originals,
               [names.get(id(a)) for a in launch.args], tuple(launch.args), list(plan.out_shapes),
               list(plan.out_dtypes), roofline_of_row(spec, row, case).bytes)


def fresh_args(row: Row) -> tuple[list, list]:
    """Launch arguments on fresh CUDA copies of the original inputs, and NaN-filled outputs."""
    args = [row.originals[n].to("cuda") if n is not None else a for n, a in zip(row.arg_names, row.launch_args)]
    outs = [torch.full(s, float("nan"), dtype=d, device="cuda") for s, d in zip(row.out_shapes, row.out_dtypes)]
    return args, outs


def check(row: Row, fn: Callable[..., Any]) -> float:
    """The largest relative error of the outputs and mutated inputs against float64 (inf on a NaN)."""
    args, outs = fresh_args(row)
    fn(*args, *outs)
    torch.cuda.synchronize()
    got = dict(zip(row.spec.outputs, outs))
    by_name = {n: a for n, a in zip(row.arg_names, args) if n is not None}
    got.update({t.name: by_name[t.name] for t in row.spec.call_inputs if t.mutated and t.name in by_name})
    expected = REFERENCES[row.spec.name](None, row.originals, row.params)
    worst = 0.0
    for name, out in got.items():
        err = relative_error(out.cpu(), expected[name])
        if err > TOLERANCE[out.dtype]:
            raise AssertionError(f"{name}: relative error {err:.3g} > {TOLERANCE[out.dtype]:g}")
        worst = max(worst, err)
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--only", default="", help="substring of the op names to run")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "layer_ops_sweep.json"))
    opts = ap.parse_args()
    timer = Timer(opts.reps)
    copy = copy_ceiling(timer)
    floor = launch_floor(timer)
    log(f"copy ceiling {copy / 1e12:.3f} TB/s (torch.mul, 1 GiB); launch floor {floor:.2f} us; "
        f"{torch.cuda.get_device_name()}")
    results: list[dict[str, Any]] = []
    seed = int.from_bytes(os.urandom(4), "little")
    sweep = [(op, label, configs) for op, label, configs in SWEEP if opts.only in op]
    # Row by row, so each prints as it finishes; a row's configs compile concurrently.
    for op_name, label, configs in sweep:
        recs: list[dict[str, Any]] = [{"op": op_name, "row": label, "config": cfg or "default"} for cfg in configs]
        results.extend(recs)
        try:
            row = prepare(op_name, label, seed)
        except Exception as exc:  # reported, the sweep goes on
            for rec in recs:
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                log(json.dumps(rec))
            continue
        keys = [dataclasses.replace(row.key, **cfg) for cfg in configs]
        reasons = [row.impl.reason(None, key) for key in keys]
        launchers = compile_many([lambda key=key: row.impl.launcher(key) for key in keys])
        for rec, reason, fn in zip(recs, reasons, launchers):
            rec["bytes"] = row.bytes
            if reason is not None:
                rec["error"] = f"refused: {reason}"
                log(json.dumps(rec))
                continue
            try:
                if isinstance(fn, Exception):
                    raise fn
                rec["rel_err"] = check(row, fn)
                args, outs = fresh_args(row)
                us = timer.us(lambda: fn(*args, *outs))
                rec.update(us=us, tbps=row.bytes / (us * 1e-6) / 1e12, pct=100 * row.bytes / (us * 1e-6) / copy)
                g_us = graph_us(row, fn)
                rec.update(graph_us=g_us, graph_pct=100 * row.bytes / (g_us * 1e-6) / copy)
            except Exception as exc:  # a config that fails to build or check is reported, not fatal
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(json.dumps(rec))
    with open(opts.json, "w") as f:
        json.dump({"copy_tbps": copy / 1e12, "launch_floor_us": floor, "seed": seed, "results": results}, f, indent=1)
    log("")
    log(f"{'op':32} {'row':28} {'config':34} {'us':>8} {'TB/s':>6} {'%copy':>6} {'graph':>7} {'%copy':>6} {'err':>8}")
    for r in results:
        shape = json.dumps(r.get("config", ""))
        if "us" in r:
            log(f"{r['op'][:32]:32} {r['row'][:28]:28} {shape[:34]:34} {r['us']:8.2f} {r['tbps']:6.2f} "
                f"{r['pct']:6.1f} {r['graph_us']:7.2f} {r['graph_pct']:6.1f} {r['rel_err']:8.1e}")
        else:
            log(f"{r['op'][:32]:32} {r['row'][:28]:28} {shape[:34]:34} {r['error'][:120]}")
    return 1 if any("error" in r and not r["error"].startswith("refused") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
