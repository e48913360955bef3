"""What every check of one spec shares: its discriminants, its branches, and its locations.

A *branch* is what a combination selects: the present tensors, the shape and dtype each
one declares after type families are resolved, and the solve plan (seed 000 §3) for the
indices of the present inputs. Plans come from :class:`~tileops_core.spec.analysis.SpecAnalysis`,
which memoises them: many combinations (a bool that only selects a kernel, say) share one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Location
from ..lang.dtypes import DTypeExpr
from ..lang.shapes import ShapePattern
from ..lang.unify import SolvePlan
from ..spec.analysis import SpecAnalysis
from ..spec.discriminants import Combination, Missing
from ..spec.nodes import FamilySpec, OpSpec, TensorSpec
from ..spec.symbolic import UNKNOWN
from .diagnostics import Diagnostic, make

__all__ = ["Branch", "SpecContext"]


@dataclass
class Branch:
    """The declarations a combination selects and how its indices are solved."""

    combo: Combination
    present: frozenset[str]  # present inputs
    shapes: dict[str, ShapePattern]  # present tensors with a (resolved) shape
    dtypes: dict[str, DTypeExpr]  # present tensors with a (resolved) dtype
    missing: list[tuple[TensorSpec, str, Missing]]
    cases: list[tuple[FamilySpec, Any]]  # (family, selected case key) on the way
    plan: SolvePlan
    determined: frozenset[str]  # names with a value once the inputs are unified
    env: dict[str, Any]  # the combination's env, plus UNKNOWN for everything determined
    incomplete: bool  # a declaration did not resolve (a missing case, a cycle, a wrong kind)

    def input_patterns(self, spec: OpSpec) -> dict[str, ShapePattern]:
        return {n: p for n, p in self.shapes.items() if n in spec.inputs}


class SpecContext(SpecAnalysis):
    """One spec under validation: its combinations, branches and a diagnostic factory."""

    def __init__(self, spec: OpSpec) -> None:
        super().__init__(spec)
        self.flagged_fields = frozenset(p.location.field for p in spec.problems if p.location.field)

    # -- diagnostics ------------------------------------------------------------------------

    def diag(self, rule: str, message: str, *, loc: Location | None = None, field: str | None = None,
             line: int | None = None, fix: str | None = None, text: str | None = None, key: str = "",
             severity: str | None = None) -> Diagnostic:
        """A finding on this spec; ``loc`` (a declaration's location) gives field and line."""
        if loc is not None:
            field = field if field is not None else loc.field
            line = line if line is not None else loc.line
        return make(rule, message, file=self.spec.file, line=line if line is not None else self.spec.line,
                    op=self.spec.name, field=field, fix=fix, text=text, key=key, severity=severity)

    def flagged(self, loc: Location) -> bool:
        """True when the compiler already reported a problem at this declaration (do not pile on)."""
        return loc.field in self.flagged_fields

    # -- branches ---------------------------------------------------------------------------

    def branch(self, combo: Combination) -> Branch:
        """The branch ``combo`` selects (call on combinations that requires does not exclude)."""
        spec = self.spec
        present = frozenset(t.name for t in spec.inputs.values() if combo.present(t.name))
        shapes: dict[str, ShapePattern] = {}
        dtypes: dict[str, DTypeExpr] = {}
        missing: list[tuple[TensorSpec, str, Missing]] = []
        cases: list[tuple[FamilySpec, Any]] = []
        incomplete = False
        for t in [*spec.inputs.values(), *spec.outputs.values()]:
            if t.role == "input" and t.name not in present:
                continue
            for what, decl in (("shape", t.shape), ("dtype", t.dtype)):
                if decl is None:
                    continue
                res = self.disc.resolve(decl, combo)
                cases.extend(res.chain)
                if isinstance(res.decl, Missing):
                    missing.append((t, what, res.decl))
                    incomplete = True
                elif what == "shape" and isinstance(res.decl, ShapePattern):
                    shapes[t.name] = res.decl
                elif what == "dtype" and res.decl is not None and not isinstance(res.decl, ShapePattern):
                    dtypes[t.name] = res.decl
                else:
                    incomplete = True  # a cycle or a family of the wrong kind: reported by the family check
        plan = self.plan({n: p for n, p in shapes.items() if n in spec.inputs})
        determined = self.known | frozenset(plan.order)
        env = dict(combo.env)
        for name in plan.order:
            env.setdefault(name, UNKNOWN)
        self.disc.settle_lets(env)
        return Branch(combo, present, shapes, dtypes, missing, cases, plan, determined, env, incomplete)
