"""The dtype of every tensor of a row, for one entry of its ``dtypes``.

An entry is a dtype name (taken by every tensor whose declaration is a set that has it, or a
DType index it binds), a ``{tensor: dtype}`` mapping, or None (the row has no ``dtypes``);
``<input>_dtype`` keys fix one tensor on every entry. ``same_as`` and
``promote_int_to_float`` follow their source; a conditional dtype follows the branch the
row's discriminants select. Strictly (the validator) a value a declaration does not accept,
an entry no tensor takes, or a combination outside ``dtype_combos`` is a finding; leniently
(the benchmarks, which may run a dtype on purpose to see the op refuse it) only an input
whose dtype cannot be determined is.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..lang.dtypes import DTYPE_NAMES, DTypeExpr, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, \
    promote_int_to_float
from ..lang.evaluate import compile_node
from ..spec.nodes import OpSpec, WorkloadRow
from ..spec.symbolic import attempt
from .instance import RowFinding

__all__ = ["case_dtypes"]


class _CaseDTypes:
    """The state of resolving one entry: dtypes found so far and DType indices bound."""

    def __init__(self, spec: OpSpec, row: WorkloadRow, entry: Any, present: frozenset[str],
                 decls: Mapping[str, DTypeExpr | None], construct: Mapping[str, Any], denv: Mapping[str, Any]) -> None:
        self.spec = spec
        self.values = row.values
        self.mapping: Mapping[str, str] = entry if isinstance(entry, dict) else {}
        self.d: str | None = entry if isinstance(entry, str) else None
        self.present, self.decls, self.construct, self.denv = present, decls, construct, denv
        self.actual: dict[str, str] = {}
        self.bound: dict[str, str] = {}
        self.took = False  # some tensor took the entry's dtype name
        self.problems: list[str] = []  # in the order found (strict mode reports them all)

    def given(self, name: str) -> str | None:
        return self.mapping.get(name) or self.values.get(f"{name}_dtype")

    def value_of(self, expr: DTypeExpr | None, tensor: str, stack: tuple[str, ...]) -> str | None:
        spec, d = self.spec, self.d
        if isinstance(expr, DTypeSet):
            if d is not None and d in expr.names:
                self.took = True
                return d
            if len(expr.names) == 1 or spec.tensor(tensor).role == "input":
                return expr.names[0]
            return None
        if isinstance(expr, (SameAs, PromoteIntToFloat)):
            if expr.tensor not in self.present or expr.tensor in stack:
                return None
            src = self.dtype_of(expr.tensor, stack)
            return None if src is None else (src if isinstance(expr, SameAs) else promote_int_to_float(src))
        if isinstance(expr, DTypeRef):
            if expr.name in spec.params:
                v = self.construct.get(expr.name)
                return v if isinstance(v, str) else None
            if expr.name not in self.bound and d is not None:
                self.bound[expr.name] = d
                self.took = True
            return self.bound.get(expr.name)
        if isinstance(expr, DTypeIf):
            res = attempt(compile_node(expr.test), self.denv)
            if not res.decided:
                return None
            return self.value_of(expr.body if res.value else expr.orelse, tensor, stack)
        return None

    def accepts(self, expr: DTypeExpr | None, value: str, tensor: str, stack: tuple[str, ...]) -> bool:
        if isinstance(expr, DTypeSet):
            return value in expr.names
        if isinstance(expr, DTypeRef) and expr.name not in self.spec.params:
            return self.bound.setdefault(expr.name, value) == value
        want = self.value_of(expr, tensor, stack) if expr is not None else None
        return want is None or want == value

    def dtype_of(self, name: str, stack: tuple[str, ...] = ()) -> str | None:
        if name in self.actual:
            return self.actual[name]
        decl = self.decls.get(name)
        explicit = self.given(name)
        if explicit is not None:
            if not isinstance(explicit, str) or explicit not in DTYPE_NAMES:  # (a list: found in review)
                self.problems.append(f"{name}_dtype = {explicit!r} is not a dtype name")
                return None
            if not self.accepts(decl, explicit, name, stack + (name,)):
                t = self.spec.tensor(name)
                self.problems.append(f"{name} has dtype {explicit}, which {name}'s dtype {t.dtype_text} does not "
                                     "accept")
            value: str | None = explicit
        else:
            value = self.value_of(decl, name, stack + (name,))
        if value is not None:
            self.actual[name] = value
        return value

    def resolve(self) -> None:
        problems = self.problems
        for t in self.spec.inputs.values():
            if t.name in self.present and self.dtype_of(t.name) is None and not problems:
                problems.append(f"the dtype of input {t.name} ({t.dtype_text}) is not determined by the row")
        for o in self.spec.outputs.values():
            if o.alias:
                if o.alias in self.actual:
                    self.actual[o.name] = self.actual[o.alias]
                continue
            if self.dtype_of(o.name) is None and not problems:
                problems.append(f"the dtype of output {o.name} ({o.dtype_text}) is not determined by the row")


def case_dtypes(spec: OpSpec, row: WorkloadRow, entry: Any, present: frozenset[str],
                decls: Mapping[str, DTypeExpr | None], construct: Mapping[str, Any], denv: Mapping[str, Any], *,
                strict: bool) -> tuple[dict[str, str] | None, list[RowFinding]]:
    """Every present tensor's dtype name for ``entry``, or None with the findings that stopped it."""
    state = _CaseDTypes(spec, row, entry, present, decls, construct, denv)
    state.resolve()
    d = state.d
    if not strict:
        missing = [t.name for t in spec.inputs.values() if t.name in present and t.name not in state.actual]
        if missing:
            return None, [RowFinding("C7.instantiate", f"cannot determine the dtype of {', '.join(missing)}")]
        return state.actual, []
    if d is not None and d not in DTYPE_NAMES:
        return None, []  # L3.dtype-name, reported with the row's keys
    problems = state.problems
    if problems:
        where = f"for dtypes entry {entry!r}: " if entry is not None else ""
        message = where + "; ".join(problems)
        return None, [RowFinding("C6.dtype", message, key=message)]
    if d is not None and not state.took:
        return None, [RowFinding("C6.dtype", f"dtype {d} is accepted by no input whose dtype is a choice, so the row "
                                 "never runs it", key=f"dtype-untaken:{d}")]
    actual = state.actual
    if spec.dtype_combos and not any(all(actual.get(k) == v for k, v in c.items()) for c in spec.dtype_combos):
        got = ", ".join(f"{k}={actual.get(k)}" for k in spec.dtype_combos[0])
        return None, [RowFinding("C6.dtype", f"dtypes {got} are not one of the dtype_combos", key=f"combos:{d}")]
    return actual, []
