"""The discriminant combinations of a spec (seed 000 §6), and the branch each one selects.

An *axis* is one discriminant and the values it can take:

* an optional input: present or absent;
* an out buffer: passed or not;
* a param whose type is ``bool`` (both values), a string enum (every value), an ADT (every
  tag) or ``X | None`` (absent, plus present: the values above when ``X`` is one of those
  kinds, else one "present, value unknown");
* a type family whose ``match`` is not decided by the axes above (it reads an ``int``
  param, say): the values its cases name, plus "any other value" (so a missing ``_`` case
  shows up), or ``True``/``False`` when the match is a boolean expression.

A mutated input is written on exactly the combinations where it is present, so the effect
branches of check 8 are the presence axes. A :class:`Combination` is one value per axis.
Its *discriminant environment* binds
everything an expression may read on it: absent things to ``None`` (as at a call), present
things of unknown content to :data:`~tileops_core.spec.symbolic.UNKNOWN`, and
discriminants to their values; ``requires`` evaluated there (and any shape rule that reads
only discriminants, which restricts the domain just the same) says whether the combination
is excluded. Type families are resolved with :meth:`FamilySpec.case_for`, the same rule the
runtime uses.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..lang import ir
from ..lang.types import ADTRef, Enum, NoneT, ParamType, Prim, UnionT
from .nodes import Expr, FamilyRef, FamilySpec, OpSpec
from .symbolic import OTHER, UNKNOWN, Undecided, attempt

__all__ = ["Axis", "Combination", "Missing", "Resolution", "Variant", "Discriminants", "BOOLEAN_NODES"]

#: IR node kinds whose value is a bool (a match over one of them takes True/False only).
BOOLEAN_NODES = (ir.Compare, ir.BoolOp, ir.IsNone)


@dataclass(frozen=True)
class Axis:
    """One discriminant: ``kind`` is input | buffer | param | match; ``values`` what it takes."""

    kind: str
    name: str
    values: tuple[Any, ...]

    def show(self, value: Any) -> str:
        if self.kind == "input":
            return f"{self.name} {'present' if value else 'absent'}"
        if self.kind == "buffer":
            return f"{self.name} buffer {'passed' if value else 'not passed'}"
        if value is OTHER:
            return f"{self.name} = any other value"
        if value is UNKNOWN:
            return f"{self.name} given"
        if isinstance(value, Variant):
            return f"{self.name} = {value.adt}.{value.tag}"
        return f"{self.name} = {value!r}"


@dataclass(frozen=True)
class Variant:
    """An ADT param value on a combination: its tag is known, its fields are not."""

    adt: str
    tag: str

    def __getattr__(self, name: str) -> Any:
        raise Undecided()


@dataclass(frozen=True)
class Missing:
    """A type family with no case for the value its match takes on a combination."""

    family: FamilySpec
    value: Any


@dataclass(frozen=True)
class Resolution:
    """Where a shape/dtype field leads on a combination, and the family cases on the way."""

    decl: Any  # a ShapePattern / DTypeExpr, a Missing, or None (undecided, cyclic)
    chain: tuple[tuple[FamilySpec, Any], ...]


@dataclass(frozen=True)
class Combination:
    """One value per axis, with its discriminant environment."""

    index: int
    values: tuple[Any, ...]
    axes: tuple[Axis, ...]
    env: Mapping[str, Any]
    matches: Mapping[str, Any]  # match text -> value, for match axes
    excluded_by: Expr | None

    @property
    def excluded(self) -> bool:
        return self.excluded_by is not None

    def value(self, kind: str, name: str) -> Any:
        for axis, value in zip(self.axes, self.values):
            if axis.kind == kind and axis.name == name:
                return value
        raise KeyError((kind, name))

    def present(self, tensor: str) -> bool:
        return self.env.get(tensor) is not None

    def describe(self) -> str:
        """``weight absent, trans_a = True`` (or ``the only combination``)."""
        parts = [axis.show(v) for axis, v in zip(self.axes, self.values)]
        return ", ".join(parts) if parts else "the only combination"


def _options(t: ParamType) -> tuple[ParamType, ...]:
    return t.options if isinstance(t, UnionT) else (t,)


def _param_values(name: str, t: ParamType) -> tuple[Any, ...] | None:
    """The values a param contributes as an axis, or None when it is not a discriminant."""
    options = _options(t)
    maybe = any(isinstance(o, NoneT) for o in options)
    values: list[Any] = []
    enumerable = True
    for o in options:
        if isinstance(o, NoneT):
            continue
        if isinstance(o, Prim) and o.kind == "bool":
            values.extend([False, True])
        elif isinstance(o, Enum):
            values.extend(o.values)
        elif isinstance(o, ADTRef):
            values.append(o)  # expanded to tags by Discriminants (it knows the declared ADTs)
        else:
            enumerable = False
    if not maybe and not (enumerable and values):
        return None
    if not (enumerable and values):
        return (None, UNKNOWN)
    return ((None,) if maybe else ()) + tuple(values)


class Discriminants:
    """The axes of one spec and its combinations (enumerated lazily, in a fixed order)."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        axes: list[Axis] = []
        for t in spec.inputs.values():
            if t.optional:
                axes.append(Axis("input", t.name, (True, False)))
        for o in spec.outputs.values():
            if o.buffer:
                axes.append(Axis("buffer", o.buffer, (False, True)))
        self.param_axes: set[str] = set()
        self.presence_params: set[str] = set()
        for name, p in spec.params.items():
            values = _param_values(name, p.type)
            if values is None:
                continue
            expanded: list[Any] = []
            for v in values:
                if isinstance(v, ADTRef):
                    adt = spec.types.get(v.name)
                    expanded.extend(Variant(v.name, tag) for tag in (adt.variants if adt else ()))
                else:
                    expanded.append(v)
            axes.append(Axis("param", name, tuple(expanded)))
            self.param_axes.add(name)
            if any(v is UNKNOWN for v in expanded):
                self.presence_params.add(name)  # only whether it is given is a discriminant, not its value
        self.match_text = {name: ir.unparse(fam.match.node) for name, fam in spec.families.items()}
        self.match_axes: dict[str, FamilySpec] = {}
        for fam in spec.families.values():
            text = self.match_text[fam.name]
            if text in self.match_axes or self._decided(fam.match):
                continue
            self.match_axes[text] = fam
            if isinstance(fam.match.node, BOOLEAN_NODES) or (isinstance(fam.match.node, ir.Unary)
                                                               and fam.match.node.op == "not") \
                    or (isinstance(fam.match.node, ir.Call) and fam.match.node.func == "present"):
                values = (True, False)
            else:
                keys: list[Any] = []
                for f in spec.families.values():
                    if self.match_text[f.name] == text:
                        keys.extend(k for k, _ in f.cases if k != "_" and k not in keys)
                values = tuple(keys) + (OTHER,)
            axes.append(Axis("match", text, values))
        self.axes = tuple(axes)
        #: shape rules that read only discriminants: domain restrictions written in the wrong place.
        self.domain_rules = tuple(e for e in spec.shape_rules if e.names and self._decided(e))

    # -- what is a discriminant --------------------------------------------------------------

    def _decided(self, e: Expr, seen: frozenset[str] = frozenset()) -> bool:
        """True when ``e`` reads only discriminants (presence, param axes, lets of those)."""
        spec = self.spec
        present_nodes = ir.presence_tests(e.node)
        present_args = {n.id for n in present_nodes}
        other_uses = {n.id for n in ir.walk(e.node)
                      if isinstance(n, ir.Name) and not any(n is p for p in present_nodes)}
        for name in e.names:
            presence_only = name in spec.inputs or name in self.presence_params
            if presence_only and name in present_args and name not in other_uses:
                continue
            if name in self.param_axes and not presence_only:
                continue
            let = spec.lets.get(name)
            if let is not None and name not in seen and self._decided(let, seen | {name}):
                continue
            return False
        return True

    # -- enumeration ------------------------------------------------------------------------

    @property
    def count(self) -> int:
        n = 1
        for axis in self.axes:
            n *= len(axis.values)
        return n

    def combinations(self) -> Iterator[Combination]:
        """Every combination, in a fixed order (the product of the axes in declaration order)."""
        for i, values in enumerate(itertools.product(*(a.values for a in self.axes))):
            yield self.combination(i, values)

    def combination(self, index: int, values: tuple[Any, ...]) -> Combination:
        env, matches = self._env(values)
        excluded_by = None
        for e in (*self.spec.requires, *self.domain_rules):
            out = attempt(e.fn, env)
            if out.decided and not out.value:
                excluded_by = e
                break
        return Combination(index, values, self.axes, env, matches, excluded_by)

    def _env(self, values: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = self.spec
        env: dict[str, Any] = {}
        for t in spec.inputs.values():
            env[t.name] = UNKNOWN
        for o in spec.outputs.values():
            env[o.name] = UNKNOWN
        for name in spec.params:
            env[name] = UNKNOWN
        for name in spec.static_dims:
            env[name] = UNKNOWN
        matches: dict[str, Any] = {}
        for axis, value in zip(self.axes, values):
            if axis.kind == "input":
                env[axis.name] = UNKNOWN if value else None
            elif axis.kind == "param":
                env[axis.name] = value
            elif axis.kind == "match":
                matches[axis.name] = value
                if axis.name in spec.params and axis.name not in self.param_axes:
                    env[axis.name] = UNKNOWN if value is OTHER else value
        self.settle_lets(env)
        return env, matches

    def settle_lets(self, env: dict[str, Any]) -> None:
        """Bind every let whose inputs are bound: its value when decided, else UNKNOWN."""
        pending = {n: e for n, e in self.spec.lets.items() if n not in env}
        progressed = True
        while pending and progressed:
            progressed = False
            for name, e in list(pending.items()):
                if not all(n in env for n in e.names):
                    continue
                out = attempt(e.fn, env)
                if out.decided:
                    env[name] = out.value
                elif out.absent is None and out.unbound is None:
                    env[name] = UNKNOWN
                del pending[name]
                progressed = True

    # -- type families ----------------------------------------------------------------------

    def match_value(self, fam: FamilySpec, combo: Combination) -> Any:
        """The value ``fam``'s match takes on ``combo`` (UNKNOWN when undecided)."""
        text = self.match_text.get(fam.name)
        if text is not None and text in combo.matches:
            return combo.matches[text]
        out = attempt(fam.match.fn, combo.env)
        return out.value if out.decided else UNKNOWN

    def resolve(self, decl: Any, combo: Combination) -> "Resolution":
        """Follow type families from ``decl`` to a shape/dtype declaration on ``combo``.

        Each family passed records the key of the case it selected (for the coverage check).
        A family with no case for its value ends in :class:`Missing`; an undecided match or
        a cycle (reported by the family check) ends in None.
        """
        chain: list[tuple[FamilySpec, Any]] = []
        seen: set[str] = set()
        while isinstance(decl, FamilyRef):
            fam = self.spec.families.get(decl.name)
            if fam is None or decl.name in seen:
                return Resolution(None, tuple(chain))
            seen.add(decl.name)
            value = self.match_value(fam, combo)
            if value is UNKNOWN:
                return Resolution(None, tuple(chain))
            try:
                case = fam.case_for(value)
            except (KeyError, Undecided):
                return Resolution(Missing(fam, value), tuple(chain))
            chain.append((fam, next(k for k, c in fam.cases if c is case)))
            decl = case
        return Resolution(decl, tuple(chain))
