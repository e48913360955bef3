"""Which discriminant combinations the lint visits: every one, every one through a projection, or a sample.

Seed 000 §6 asks for the eight checks on every combination. Up to :data:`EXHAUSTIVE_LIMIT`
that is what happens. Past it, the product is first *projected*: a param axis whose name
no expression, shape or dtype of the spec reads cannot change any check's verdict, so one
value of it stands for all of them (40 unread bool flags make 2**40 combinations and one
branch). When the axes that are read still make more than the limit, the checks run on a
seeded sample of that many combinations (reproducible: the same spec gives the same
sample), and the report says so with the number checked: a finding on a combination
outside the sample can be missed, and a sampled pass is never presented as a full one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Iterator

from ..lang import ir
from ..lang.dtypes import DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs
from ..lang.shapes import ShapePattern, Variadic
from ..spec.discriminants import Axis, Combination, Discriminants
from ..spec.nodes import FamilyRef, OpSpec
from .names import spec_expressions

__all__ = ["EXHAUSTIVE_LIMIT", "SAMPLE_SEED", "Coverage", "plan_coverage", "names_read"]

#: Combinations checked one by one (a combination costs some 40 microseconds).
EXHAUSTIVE_LIMIT = 4096
#: The seed of the sample drawn past the limit (fixed: a report can be reproduced).
SAMPLE_SEED = 0

#: ``Coverage.mode`` values.
ALL, PROJECTED, SAMPLED = "all", "projected", "sampled"


@dataclass(frozen=True)
class Coverage:
    """How the combinations of one spec are visited, and how many each visit stands for."""

    mode: str  # all | projected | sampled
    total: int  # combinations of the spec
    checked: int  # combinations visited
    idle: tuple[Axis, ...]  # param axes no part of the spec reads (projected away)
    disc: Discriminants

    @property
    def weight(self) -> int:
        """How many combinations one visited combination stands for (1 unless projected)."""
        return math.prod(len(a.values) for a in self.idle) if self.mode == PROJECTED else 1

    def describe(self) -> str:
        """What was checked, and whether it was all of it (a whole sentence when sampled)."""
        idle = ", ".join(a.name for a in self.idle)
        if self.mode == PROJECTED:
            return (f"all are covered by checking {self.checked}: the params {idle} are read by no expression, "
                    "shape or dtype, so one value of each stands for every value")
        if self.mode == SAMPLED:
            read = f" (after setting aside the unread params {idle})" if idle else ""
            return (f"SAMPLED: {self.total} discriminant combinations, more than the {EXHAUSTIVE_LIMIT} checked one by "
                    f"one{read}; the per-combination checks ran on {self.checked} combinations drawn with seed "
                    f"{SAMPLE_SEED}, not on all: a problem on another combination may be missed")
        return "all are checked"

    def combinations(self) -> Iterator[Combination]:
        """The combinations to visit, in product order."""
        if self.mode == ALL:
            yield from self.disc.combinations()
            return
        axes = self.disc.axes
        kept = [i for i, a in enumerate(axes) if not any(a is b for b in self.idle)]
        kept_total = math.prod(len(axes[i].values) for i in kept)
        if self.mode == PROJECTED:
            indices: Any = range(kept_total)
        else:  # the first and last combinations, then seeded draws until there are ``checked`` of them
            rng, chosen = random.Random(SAMPLE_SEED), {0, kept_total - 1}
            while len(chosen) < self.checked:
                chosen.add(rng.randrange(kept_total))
            indices = sorted(chosen)
        for k in indices:
            digits = [0] * len(axes)  # an unread axis keeps its first value
            for i in reversed(kept):
                k, digits[i] = divmod(k, len(axes[i].values))
            index = 0
            for axis, digit in zip(axes, digits):
                index = index * len(axis.values) + digit
            yield self.disc.combination(index, tuple(a.values[d] for a, d in zip(axes, digits)))


def plan_coverage(disc: Discriminants, limit: int = EXHAUSTIVE_LIMIT) -> Coverage:
    """All combinations up to ``limit``; past it, the projection, else a sample of ``limit``."""
    total = disc.count
    if total <= limit:
        return Coverage(ALL, total, total, (), disc)
    read = names_read(disc.spec)
    idle = tuple(a for a in disc.axes if a.kind == "param" and read is not None and a.name not in read)
    kept = total // math.prod(len(a.values) for a in idle)
    if kept <= limit:
        return Coverage(PROJECTED, total, kept, idle, disc)
    return Coverage(SAMPLED, total, limit, idle, disc)


def names_read(spec: OpSpec) -> frozenset[str] | None:
    """Every name some part of the spec reads; None when a declaration is of a kind not known here.

    None makes the caller keep every axis: the projection is only taken when it is certain
    that a param is read nowhere.
    """
    names: set[str] = set()
    for e in spec_expressions(spec):
        names |= e.names
    for sd in spec.static_dims.values():
        names |= ir.free_names(sd.axis)
    decls: list[Any] = []
    for t in [*spec.inputs.values(), *spec.outputs.values()]:
        decls.extend((t.shape, t.dtype))
    for fam in spec.families.values():
        decls.extend(case for _, case in fam.cases)
    for decl in decls:
        found = _decl_names(decl)
        if found is None:
            return None
        names |= found
    return frozenset(names)


def _decl_names(decl: Any) -> set[str] | None:
    if decl is None or isinstance(decl, (FamilyRef, DTypeSet, SameAs, PromoteIntToFloat)):
        return set()
    if isinstance(decl, DTypeRef):
        return {decl.name}
    if isinstance(decl, DTypeIf):
        body, orelse = _decl_names(decl.body), _decl_names(decl.orelse)
        if body is None or orelse is None:
            return None
        return set(ir.free_names(decl.test)) | body | orelse
    if isinstance(decl, ShapePattern):
        out: set[str] = set()
        for item in decl.items:
            out |= {item.name} if isinstance(item, Variadic) else set(ir.free_names(item.node))
        return out
    return None
