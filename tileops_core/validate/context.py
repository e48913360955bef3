"""What every check of one spec shares: its discriminants, its branches, and its locations.

A *branch* is what a combination selects: the present tensors, the shape and dtype each
one declares after type families are resolved, and the solve plan (seed 000 §3) for the
indices of the present inputs. Plans are computed with :func:`tileops_core.lang.unify.plan_solve`,
the function the runtime uses, and memoised by the declarations they depend on: many
combinations (a bool that only selects a kernel, say) share one plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Location
from ..lang.dtypes import DTypeExpr
from ..lang.shapes import ShapePattern
from ..lang.unify import SolvePlan, plan_solve
from ..spec.nodes import FamilySpec, OpSpec, TensorSpec
from .combos import Combination, Discriminants, Missing
from .diagnostics import Diagnostic, make
from .symbolic import UNKNOWN

__all__ = ["Branch", "SpecContext", "tensor_of"]


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


class SpecContext:
    """One spec under validation: its combinations, branches and a diagnostic factory."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.disc = Discriminants(spec)
        self.known = frozenset(spec.params) | frozenset(spec.static_dims)
        self.flagged_fields = frozenset(p.location.field for p in spec.problems if p.location.field)
        self._plans: dict[tuple[Any, ...], SolvePlan] = {}

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

    def broken(self, *fields: str) -> bool:
        """True when one of ``fields`` (or the whole signature) did not parse: skip what needs it."""
        return bool(self.spec.broken & ({"signature", *fields}))

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

    def plan(self, patterns: dict[str, ShapePattern]) -> SolvePlan:
        """The solve plan of these input declarations (memoised: branches and rows share plans)."""
        key = tuple((n, id(p)) for n, p in patterns.items())
        plan = self._plans.get(key)
        if plan is None:
            lets = {n: e.node for n, e in self.spec.lets.items()}
            plan = plan_solve(patterns, self.known, lets)
            self._plans[key] = plan
        return plan

    def solve_orders(self) -> list[tuple[str, ...]]:
        """The distinct solve orders met so far (for the JSON report)."""
        return [plan.order for plan in self._plans.values()]


def tensor_of(spec: OpSpec, name: str) -> TensorSpec | None:
    """The input or output named ``name``."""
    return spec.inputs.get(name) or spec.outputs.get(name)

