"""Checks 6 and 7 on one workload row: the strict instantiation, reported as diagnostics.

:func:`tileops_core.workloads.check_row` instantiates and unifies the row (the same code the
benchmarks run, leniently) and evaluates ``requires``, ``shape_rules``, ``dtype_combos`` and
the roofline on it; this module gives each finding the row's location and the op. The
:class:`~tileops_core.workloads.RowInstance` is what the conformance pass feeds to an op's
generated checks on meta tensors.
"""

from __future__ import annotations

from ..spec.nodes import WorkloadRow
from ..workloads import GeneratedMeta, RowInstance, check_row
from .context import SpecContext
from .diagnostics import Diagnostic

__all__ = ["Generated", "RowInstance", "instantiate_row"]

#: What a workload generator contributed, as plain data (the validator runs generators itself).
Generated = GeneratedMeta


def instantiate_row(ctx: SpecContext, row: WorkloadRow,
                    generated: GeneratedMeta | None = None) -> tuple[RowInstance | None, list[Diagnostic]]:
    """Instantiate and unify one row; the instance is None when a finding stopped it."""
    instance, findings = check_row(ctx, row, generated)
    return instance, [ctx.diag(f.rule, f"workload row {row.label!r}: {f.message}", loc=row.loc, fix=f.fix,
                               key=f.key or f.message) for f in findings]
