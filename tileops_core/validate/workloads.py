"""L4 and checks 6-7 over a spec's workload rows.

L4 (seed 001): a row's keys are ``<input>_shape``, ``<input>_dtype``, params, static dims,
index names, ``dtypes``, ``label`` and ``generator``; each optional input has at least one
row where it is passed and one where it is not (counted per input, rule 7: n optional
inputs need 2n states covered, not 2**n); labels are distinct. Each row without a
generator is then instantiated and unified (:func:`tileops_core.workloads.check_row`); rows with
a generator need the generator's code, so the conformance pass checks them.
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

from ..lang.dtypes import DTYPE_NAMES
from ..spec.nodes import WorkloadRow
from ..workloads import RESERVED_KEYS, RowInstance, generator_name, row_presence
from .context import SpecContext
from .diagnostics import Diagnostic
from .rows import instantiate_row

__all__ = ["check_workloads", "allowed_keys", "generator_name"]


def allowed_keys(ctx: SpecContext) -> set[str]:
    """Every key a row of this spec may use."""
    spec = ctx.spec
    keys = set(RESERVED_KEYS) | set(spec.params) | set(spec.static_dims) | set(spec.indices)
    for t in spec.inputs:
        keys |= {f"{t}_shape", f"{t}_dtype"}
    return keys


def check_workloads(ctx: SpecContext) -> tuple[list[Diagnostic], list[RowInstance]]:
    """L4 over all rows, then checks 6-7 on each row without a generator."""
    spec = ctx.spec
    out: list[Diagnostic] = []
    instances: list[RowInstance] = []
    if ctx.broken("workloads"):
        return out, instances
    if not spec.workloads:
        out.append(ctx.diag("L4.empty", "the op has no workload rows: benchmarks and tests have nothing to run",
                            field="workloads"))
        return out, instances
    keys = allowed_keys(ctx)
    for row in spec.workloads:
        out.extend(_row_keys(ctx, row, keys))
    out.extend(_coverage(ctx))
    labels = Counter(str(r.values["label"]) for r in spec.workloads if "label" in r.values)
    for row in spec.workloads:
        label = row.values.get("label")
        if label is not None and labels[str(label)] > 1:
            out.append(ctx.diag("L4.label", f"workload label {label!r} is used by {labels[str(label)]} rows",
                                loc=row.loc, key=f"label:{label}"))
    if ctx.broken("signature.inputs", "signature.outputs", "signature.params", "signature.families",
                  "signature.let", "signature.static_dims", "signature.types"):
        return out, instances
    for row in spec.workloads:
        if "generator" in row.values:
            continue
        instance, found = instantiate_row(ctx, row)
        out.extend(found)
        if instance is not None and not found:
            instances.append(instance)
    return out, instances


def _row_keys(ctx: SpecContext, row: WorkloadRow, allowed: set[str]) -> list[Diagnostic]:
    out = []
    label = row.label
    for key, value in row.values.items():
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            out.append(ctx.diag("L4.keys", f"workload row {label!r}: key {key!r} is not <input>_shape, <input>_dtype, "
                                "a param, static dim or index, or one of " + ", ".join(RESERVED_KEYS), loc=row.loc,
                                fix=f"did you mean {close[0]!r}?" if close else
                                "pass generator arguments inside generator: {name: ..., <arg>: ...}",
                                key=f"key:{key}"))
        elif key.endswith("_dtype") and key[:-6] in ctx.spec.inputs and not (isinstance(value, str)
                                                                              and value in DTYPE_NAMES):
            out.append(ctx.diag("L3.dtype-name", f"workload row {label!r}: {key} = {value!r} is not a dtype name",
                                loc=row.loc, key=f"dtype:{key}"))
        elif key == "dtypes" and isinstance(value, list):
            for entry in value:
                for d in entry.values() if isinstance(entry, dict) else [entry]:
                    if isinstance(d, str) and d not in DTYPE_NAMES:
                        out.append(ctx.diag("L3.dtype-name", f"workload row {label!r}: dtypes names {d!r}, which is "
                                            "not a dtype name", loc=row.loc, key=f"dtypes:{d}"))
        elif key == "generator" and not _generator_ok(value):
            out.append(ctx.diag("L4.value", f"workload row {label!r}: generator is a name or a mapping with a "
                                "string 'name'", loc=row.loc, key="generator"))
        elif key == "label" and not isinstance(value, str):
            out.append(ctx.diag("L4.value", f"workload row {label!r}: label must be a string", loc=row.loc,
                                key="label"))
    return out


def _generator_ok(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("name"), str))


def _coverage(ctx: SpecContext) -> list[Diagnostic]:
    spec = ctx.spec
    out = []
    for t in spec.inputs.values():
        if not t.optional:
            continue
        passed = [r for r in spec.workloads if t.name in row_presence(spec, r)]
        if not passed:
            out.append(ctx.diag("L4.optional-coverage", f"no workload row passes optional input {t.name}",
                                loc=t.loc, fix=f"add a row with {t.name}_shape: [...]", key=f"present:{t.name}"))
        if len(passed) == len(spec.workloads):
            out.append(ctx.diag("L4.optional-coverage", f"every workload row passes optional input {t.name}; none "
                                "runs the call without it", loc=t.loc,
                                fix=f"add a row without {t.name}_shape", key=f"absent:{t.name}"))
    return out
