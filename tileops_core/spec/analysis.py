"""What the torch-free readers of one spec share: its discriminants and its solve plans.

The validator (which reports) and the workload instantiator (which the validator and the
benchmarks both use) ask the same questions of a spec: which type-family case a value
selects, which ``let`` values follow from what is known, and in which order the indices of
a set of input declarations are solved. One :class:`SpecAnalysis` per spec answers them,
and memoises the solve plans: many discriminant combinations and workload rows share one.
"""

from __future__ import annotations

import threading
from typing import Any

from ..lang.shapes import ShapePattern
from ..lang.unify import SolvePlan, plan_solve
from .discriminants import Discriminants
from .nodes import OpSpec

__all__ = ["SpecAnalysis"]


class SpecAnalysis:
    """One spec's discriminants and memoised solve plans (plans are computed by the runtime's own
    :func:`~tileops_core.lang.unify.plan_solve`)."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.disc = Discriminants(spec)
        self.known = frozenset(spec.params) | frozenset(spec.static_dims)
        self._plans: dict[tuple[Any, ...], SolvePlan] = {}
        self._lock = threading.Lock()  # one analysis per spec is shared by every thread that instantiates its rows

    def broken(self, *fields: str) -> bool:
        """True when one of ``fields`` (or the whole signature) did not parse: skip what needs it."""
        return bool(self.spec.broken & ({"signature", *fields}))

    def plan(self, patterns: dict[str, ShapePattern]) -> SolvePlan:
        """The solve plan of these input declarations (memoised: branches and rows share plans)."""
        key = tuple((n, id(p)) for n, p in patterns.items())
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                lets = {n: e.node for n, e in self.spec.lets.items()}
                plan = self._plans[key] = plan_solve(patterns, self.known, lets)
            return plan

    def solve_orders(self) -> list[tuple[str, ...]]:
        """The distinct solve orders met so far (for the validator's JSON report)."""
        with self._lock:
            return [plan.order for plan in self._plans.values()]
