"""Bench results as data (a JSON document with a written-down schema) and as a terminal table.

The JSON document is what ``tileops bench --json F`` writes and ``--format json`` prints;
:data:`RESULT_SCHEMA` (JSON Schema, draft 2020-12) is its contract, so a dashboard or a
regression checker can rely on it. Times are seconds; rates are per second; ``null``
where a figure does not exist (no profile, a failed case, no baseline). The ``speedup``
of a case is ``baseline time / op time``: above 1 the op is faster than its baseline.
"""

from __future__ import annotations

import datetime
import math
import platform
from typing import Any, Sequence

import torch

from .._version import __version__
from .metrics import Analysis
from .profiles import ProfileEntry
from .runner import BenchConfig, CaseResult
from .timing import Measurement

__all__ = ["SCHEMA_VERSION", "RESULT_SCHEMA", "build_document", "format_table", "format_time", "format_rate"]

SCHEMA_VERSION = "tileops-bench/1"

_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}

_MEASUREMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["method", "median_s", "p10_s", "p90_s", "samples", "calls_per_sample", "note"],
    "properties": {
        "method": {"type": "string", "pattern": "^[a-z0-9]+-(wallclock|graph|events)$"},
        "median_s": {"type": "number", "exclusiveMinimum": 0},
        "p10_s": {"type": "number", "exclusiveMinimum": 0},
        "p90_s": {"type": "number", "exclusiveMinimum": 0},
        "samples": {"type": "integer", "minimum": 1},
        "calls_per_sample": {"type": "integer", "minimum": 1},
        "note": {"type": "string"},
    },
}

_RESULT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["op", "workload", "case", "status", "error", "seed", "dtype", "kernel", "backend", "input_sets",
                 "time", "flops", "bytes", "intensity", "achieved_flops_per_s", "achieved_bytes_per_s", "bound",
                 "efficiency", "attainable_flops_per_s", "compute_dtype", "baseline", "host_time", "notes"],
    "properties": {
        "op": {"type": "string"},
        "workload": {"type": "string"},
        "case": {"type": "string"},
        "status": {"enum": ["ok", "error"]},
        "error": _STR_OR_NULL,
        "seed": {"type": "integer"},
        "dtype": _STR_OR_NULL,
        "kernel": _STR_OR_NULL,
        "backend": _STR_OR_NULL,
        "input_sets": {"type": "integer", "minimum": 1},
        "time": {"oneOf": [_MEASUREMENT, {"type": "null"}]},
        "flops": _NUM_OR_NULL,
        "bytes": _NUM_OR_NULL,
        "intensity": _NUM_OR_NULL,
        "achieved_flops_per_s": _NUM_OR_NULL,
        "achieved_bytes_per_s": _NUM_OR_NULL,
        "bound": {"enum": ["memory", "compute", None]},
        "efficiency": _NUM_OR_NULL,
        "attainable_flops_per_s": _NUM_OR_NULL,
        "compute_dtype": _STR_OR_NULL,
        "baseline": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["kind", "time", "speedup", "error"],
                    "properties": {
                        "kind": {"enum": ["ref", "torch.compile", "eager"]},
                        "time": {"oneOf": [_MEASUREMENT, {"type": "null"}]},
                        "speedup": _NUM_OR_NULL,
                        "error": _STR_OR_NULL,
                    },
                },
            ]
        },
        "host_time": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["op_s", "launch_s", "torch_s", "torch_api", "error"],
                    "properties": {"op_s": _NUM_OR_NULL, "launch_s": _NUM_OR_NULL, "torch_s": _NUM_OR_NULL,
                                   "torch_api": _STR_OR_NULL, "error": _STR_OR_NULL},
                },
            ]
        },
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}

#: The JSON Schema of a bench document.
RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "TileOPs bench results",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema", "created", "tileops_version", "torch_version", "host", "device", "baseline", "timing",
                 "profile", "results"],
    "properties": {
        "schema": {"const": SCHEMA_VERSION},
        "created": {"type": "string"},
        "tileops_version": {"type": "string"},
        "torch_version": {"type": "string"},
        "host": {"type": "string"},
        "device": {
            "type": "object",
            "additionalProperties": False,
            "required": ["type", "name", "threads"],
            "properties": {"type": {"type": "string"}, "name": {"type": "string"},
                           "threads": {"type": "integer", "minimum": 1}},
        },
        "baseline": {"enum": ["ref", "torch.compile", "eager", "none"]},
        "timing": {
            "type": "object",
            "additionalProperties": False,
            "required": ["warmup", "min_samples", "max_samples", "min_time_s", "max_time_s", "sample_s",
                         "rotate_bytes"],
            "properties": {
                "warmup": {"type": "integer"}, "min_samples": {"type": "integer"},
                "max_samples": {"type": "integer"}, "min_time_s": _NUM, "max_time_s": _NUM, "sample_s": _NUM,
                "rotate_bytes": {"type": ["integer", "null"]},
            },
        },
        "profile": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "origin", "basis", "bandwidth", "bandwidth_figure", "compute",
                                 "compute_figures"],
                    "properties": {
                        "name": {"type": "string"},
                        "origin": {"type": "string"},
                        "basis": {"enum": ["measured", "peak"]},
                        "bandwidth": _NUM,
                        "bandwidth_figure": {"enum": ["measured", "peak"]},
                        "compute": {"type": "object", "additionalProperties": _NUM},
                        "compute_figures": {"type": "object", "additionalProperties": {"enum": ["measured", "peak"]}},
                    },
                },
            ]
        },
        "results": {"type": "array", "items": _RESULT},
    },
}


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _measurement(m: Measurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"method": m.method, "median_s": m.median_s, "p10_s": m.p10_s, "p90_s": m.p90_s, "samples": m.samples,
            "calls_per_sample": m.calls_per_sample, "note": m.note}


def _result(r: CaseResult) -> dict[str, Any]:
    a: Analysis | None = r.analysis
    roof = r.roofline
    baseline = None
    if r.baseline != "none":
        speedup = None
        if r.measurement is not None and r.baseline_measurement is not None:
            speedup = r.baseline_measurement.median_s / r.measurement.median_s
        baseline = {"kind": r.baseline, "time": _measurement(r.baseline_measurement), "speedup": speedup,
                    "error": r.baseline_error}
    return {
        "op": r.case.spec.name,
        "workload": r.case.row.label,
        "case": r.case.case_text,
        "status": "ok" if r.ok else "error",
        "error": r.error,
        "seed": r.seed,
        "dtype": r.dtype,
        "kernel": r.kernel,
        "backend": r.backend,
        "input_sets": r.sets,
        "time": _measurement(r.measurement),
        "flops": None if roof is None else float(roof.flops),
        "bytes": None if roof is None else float(roof.bytes),
        "intensity": None if roof is None else _finite(roof.intensity),
        "achieved_flops_per_s": None if a is None else a.flops_per_s,
        "achieved_bytes_per_s": None if a is None else a.bytes_per_s,
        "bound": None if a is None else a.bound,
        "efficiency": None if a is None else a.efficiency,
        "attainable_flops_per_s": None if a is None else a.attainable_flops_per_s,
        "compute_dtype": None if a is None else a.compute_dtype,
        "baseline": baseline,
        "host_time": _host_time(r),
        "notes": list(r.notes),
    }


def _host_time(r: CaseResult) -> dict[str, Any] | None:
    if r.host_error is not None:
        return {"op_s": None, "launch_s": None, "torch_s": None, "torch_api": None, "error": r.host_error}
    if r.host is None:
        return None
    return {**r.host.as_dict(), "error": None}


def _profile(entry: ProfileEntry | None, config: BenchConfig) -> dict[str, Any] | None:
    if entry is None:
        return None
    p = entry.profile
    bandwidth, figure = p.bandwidth(config.basis)
    compute = {dtype: rate.value(config.basis) for dtype, rate in p.compute.items()}
    return {"name": p.name, "origin": entry.origin, "basis": config.basis, "bandwidth": bandwidth,
            "bandwidth_figure": figure, "compute": {d: v for d, (v, _) in compute.items()},
            "compute_figures": {d: f for d, (_, f) in compute.items()}}


def build_document(results: Sequence[CaseResult], config: BenchConfig, device_name: str) -> dict[str, Any]:
    """The JSON document of a run (valid against :data:`RESULT_SCHEMA`)."""
    t = config.timing
    return {
        "schema": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tileops_version": __version__,
        "torch_version": torch.__version__,
        "host": platform.node(),
        "device": {"type": config.device.type, "name": device_name, "threads": torch.get_num_threads()},
        "baseline": config.baseline,
        "timing": {"warmup": t.warmup, "min_samples": t.min_samples, "max_samples": t.max_samples,
                   "min_time_s": t.min_time_s, "max_time_s": t.max_time_s, "sample_s": t.sample_s,
                   "rotate_bytes": config.rotate_bytes},
        "profile": _profile(config.profile, config),
        "results": [_result(r) for r in results],
    }


def format_time(seconds: float | None) -> str:
    """``12.3 us``, ``4.56 ms``: three significant digits, a unit a reader does not convert."""
    if seconds is None:
        return "-"
    seconds = float(f"{seconds:.3g}")  # rounded before the unit is chosen: 0.99996 s is "1 s", not "1e+03 ms"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_rate(value: float | None, unit: str) -> str:
    """``1.23 T{unit}/s`` with an SI prefix."""
    if value is None:
        return "-"
    value = float(f"{value:.3g}")  # (rounded first, as format_time)
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}/s"
    return f"{value:.3g} {unit}/s"


def _short(kernel: str | None) -> str:
    """``tileops_cpu_ref.kernels:RefRMSNorm`` -> ``RefRMSNorm`` (the JSON keeps the full name)."""
    return "+".join(k.split(":")[-1] for k in kernel.split("+")) if kernel else "-"


def _row_cells(r: dict[str, Any]) -> list[str]:
    if r["status"] != "ok":
        return [r["op"], f"{r['workload']}[{r['case']}]", _short(r["kernel"]), "error: " + (r["error"] or "?")]
    base = r["baseline"]
    if base is None:
        vs = "-"
    elif base["error"]:
        vs = "n/a"
    else:
        vs = f"{base['speedup']:.2f}x" if base["speedup"] is not None else "-"
    eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.1f}%"
    intensity = "-" if r["intensity"] is None else f"{r['intensity']:.3g}"
    return [r["op"], f"{r['workload']}[{r['case']}]", _short(r["kernel"]), format_time(r["time"]["median_s"]),
            format_rate(r["achieved_bytes_per_s"], "B"), format_rate(r["achieved_flops_per_s"], "FLOP"), intensity,
            r["bound"] or "-", eff, format_time(base["time"]["median_s"]) if base and base["time"] else "-", vs]


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} µs"


def _host_lines(results: list[dict[str, Any]]) -> list[str]:
    """Host time per eager call beside the raw launch and torch's op (only rows that measured it)."""
    rows = [r for r in results if r.get("host_time")]
    if not rows:
        return []
    out = ["", "host time per call (eager; the launch queue never fills):"]
    for r in rows:
        h = r["host_time"]
        name = f"  {r['op']} {r['workload']}[{r['case']}]"
        if h["error"]:
            out.append(f"{name}: not measured: {h['error']}")
            continue
        torch_part = f", {h['torch_api']} {_us(h['torch_s'])}" if h["torch_api"] else ""
        out.append(f"{name}: op {_us(h['op_s'])}, raw launch {_us(h['launch_s'])}{torch_part}")
    return out


def format_table(doc: dict[str, Any]) -> str:
    """The terminal table: a header naming device, profile and baseline, one line per case."""
    kind = doc["baseline"]
    headers = ["op", "workload[dtype]", "kernel", "time", "bandwidth", "compute", "flop/B", "bound", "eff",
               kind if kind != "none" else "baseline", "speedup"]
    rows = [_row_cells(r) for r in doc["results"]]
    widths = [len(h) for h in headers]
    for cells in rows:
        if len(cells) == len(headers):
            widths = [max(w, len(c)) for w, c in zip(widths, cells)]
    right = {3, 4, 5, 6, 8, 9, 10}

    def line(cells: list[str]) -> str:
        if len(cells) != len(headers):  # an error row: op, workload, kernel, then the message
            return "  ".join(c.ljust(w) for c, w in zip(cells[:3], widths)) + "  " + cells[3]
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    dev = doc["device"]
    prof = doc["profile"]
    if prof is None:
        where = "no hardware profile fits this device: no bound or efficiency (see `tileops calibrate`)"
    else:
        used = {r["compute_dtype"] for r in doc["results"]}
        ceilings = [f"{format_rate(prof['bandwidth'], 'B')} {prof['bandwidth_figure']}"]
        ceilings += [f"{d} {format_rate(v, 'FLOP')} {prof['compute_figures'][d]}" for d, v in prof["compute"].items()
                     if d in used]
        where = f"profile {prof['name']} ({prof['origin']}): " + ", ".join(ceilings)
    out = [f"device {dev['type']} ({dev['name']}, {dev['threads']} threads); {where}",
           f"time = median per call; speedup = {kind} time / op time" if kind != "none" else "time = median per call",
           "", line(headers), line(["-" * w for w in widths])]
    out.extend(line(cells) for cells in rows)
    out.extend(_host_lines(doc["results"]))
    failed = [r for r in doc["results"] if r["baseline"] and r["baseline"]["error"]]
    for r in failed:
        out.append(f"note: {r['op']} {r['workload']}: baseline {kind} failed: {r['baseline']['error']}")
    return "\n".join(out)
