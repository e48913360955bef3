"""What a workload row's keys mean, read straight from the row (no instantiation).

A row writes some of: ``<input>_shape`` (the optional input is passed), ``<input>_dtype``,
params, static dims, index values, ``dtypes`` (one instantiation per entry: a dtype name
taken by the inputs whose declared set has it, or a ``{tensor: dtype}`` mapping), ``label``
and ``generator`` (a registered name, or ``{name: ..., <arg>: ...}``).
"""

from __future__ import annotations

from typing import Any

from ..spec.nodes import OpSpec, WorkloadRow

__all__ = ["RESERVED_KEYS", "dtype_cases", "generator_args", "generator_name", "row_presence"]

#: Row keys that are neither tensors, params, static dims nor indices (in the order messages list them).
RESERVED_KEYS = ("dtypes", "label", "generator")


def row_presence(spec: OpSpec, row: WorkloadRow) -> frozenset[str]:
    """The inputs a row passes: every required input, and optional ones whose ``_shape`` it gives."""
    return frozenset(t.name for t in spec.inputs.values() if not t.optional or f"{t.name}_shape" in row.values)


def dtype_cases(row: WorkloadRow) -> list[Any]:
    """The entries of the row's ``dtypes`` (one instantiation each); ``[None]`` when it has none."""
    cases = row.values.get("dtypes")
    if cases is None:
        return [None]
    return list(cases) if isinstance(cases, (list, tuple)) else [cases]


def generator_name(row: WorkloadRow) -> str | None:
    """The generator a row names (``generator: name`` or ``generator: {name: ..., ...}``)."""
    g = row.values.get("generator")
    if isinstance(g, dict):
        g = g.get("name")
    return g if isinstance(g, str) else None


def generator_args(row: WorkloadRow) -> dict[str, Any]:
    """What a generator reads: the row's values, with the arguments written inside ``generator:`` on top."""
    values = dict(row.values)
    spec_args = values.get("generator")
    if isinstance(spec_args, dict):
        values.update({k: v for k, v in spec_args.items() if k != "name"})
    return values
