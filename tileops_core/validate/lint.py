"""The pure spec lint: everything that can be checked from the YAML alone, without torch.

For one :class:`~tileops_core.spec.OpSpec` it reports the compiler's own findings (L0,
names, language, table 3), then walks every discriminant combination once and runs the
per-combination checks on it (type-family coverage, solvability, guards, settled output
dtypes), then the checks that need no combination (param usage, let cycles, effects,
dtype names and combos, workloads). Past a bound the walk is projected onto the params
something reads, or sampled and labelled so (:mod:`.coverage`). Checks that depend on a field that did not parse are
skipped; the field's own problem is already reported.

Importing this module imports no torch (a test asserts it): CI can lint specs on a
machine without it, and a plugin author can lint a spec before writing any code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..spec.discriminants import Combination
from ..spec.nodes import OpSpec
from ..workloads import RowInstance
from .context import Branch, SpecContext
from .coverage import plan_coverage
from .diagnostics import Diagnostic, from_spec_error
from .dtypes import OutputDTypeCheck, check_dtype_combos, check_dtype_names
from .effects import check_effects
from .families import FamilyCheck
from .guards import GuardCheck
from .names import check_let_cycles, check_param_usage
from .solving import SolveCheck
from .workloads import check_workloads

__all__ = ["DEFAULT_MAX_COMBINATIONS", "LintResult", "lint_spec"]

#: Past this many combinations a spec gets an advisory note (seed 000 §6); all are still checked.
DEFAULT_MAX_COMBINATIONS = 256

#: Fields the combination walk needs; if one did not parse, the walk is skipped.
_SIGNATURE_FIELDS = ("signature.inputs", "signature.outputs", "signature.params", "signature.types",
                     "signature.families", "signature.let", "signature.static_dims")


class _ComboCheck(Protocol):
    def visit(self, combo: Combination, branch: Branch | None) -> list[Diagnostic]: ...

    def finish(self) -> list[Diagnostic]: ...


@dataclass
class LintResult:
    """The lint's findings on one spec, plus what the conformance pass reuses."""

    spec: OpSpec
    diagnostics: list[Diagnostic]
    combinations: int = 0  # of the spec, whether checked one by one or not (see ``coverage``)
    checked: int = 0  # visited one by one
    coverage: str = "all"  # all | projected (every one, through unread params) | sampled (``checked`` of them)
    excluded: int = 0  # excluded by requires, among those covered (all, or the sample)
    solve_orders: list[tuple[str, ...]] = field(default_factory=list)
    rows: list[RowInstance] = field(default_factory=list)
    context: SpecContext | None = None


def lint_spec(spec: OpSpec, *, max_combinations: int = DEFAULT_MAX_COMBINATIONS) -> LintResult:
    """Lint one spec: every check that reads only the spec."""
    diagnostics = [from_spec_error(p) for p in spec.problems]
    ctx = SpecContext(spec)
    result = LintResult(spec, diagnostics, context=ctx)
    if not ctx.broken(*_SIGNATURE_FIELDS):
        diagnostics.extend(_walk(ctx, result, max_combinations))
        diagnostics.extend(check_param_usage(ctx))
        diagnostics.extend(check_let_cycles(ctx))
        diagnostics.extend(check_effects(ctx))
        diagnostics.extend(check_dtype_names(ctx))
        if not ctx.broken("signature.dtype_combos"):
            diagnostics.extend(check_dtype_combos(ctx))
    found, rows = check_workloads(ctx)
    diagnostics.extend(found)
    result.rows = rows
    result.solve_orders = ctx.solve_orders()
    return result


def _walk(ctx: SpecContext, result: LintResult, cap: int) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    coverage = plan_coverage(ctx.disc)
    result.combinations, result.checked, result.coverage = coverage.total, coverage.checked, coverage.mode
    axes = ", ".join(f"{a.name} ({len(a.values)})" for a in ctx.disc.axes)
    if coverage.mode == "sampled":
        out.append(ctx.diag("C0.sampled", f"{coverage.describe()} (axes: {axes})", key="combinations"))
    elif coverage.total > cap:
        out.append(ctx.diag("C0.combinations", f"{coverage.total} discriminant combinations, more than the cap of "
                            f"{cap}; {coverage.describe()} (axes: {axes})", key="combinations"))
    checks: list[_ComboCheck] = [FamilyCheck(ctx), SolveCheck(ctx), GuardCheck(ctx), OutputDTypeCheck(ctx)]
    for combo in coverage.combinations():
        branch = None
        if combo.excluded:
            result.excluded += coverage.weight
        else:
            branch = ctx.branch(combo)
        for check in checks:
            out.extend(check.visit(combo, branch))
    for check in checks:
        out.extend(check.finish())
    return out
