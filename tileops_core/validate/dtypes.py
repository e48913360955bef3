"""L3: dtype declarations name real dtypes, combos are callable, outputs' dtypes are settled.

What the spec compiler already reports (``same_as`` of a non-input or an optional input,
``promote_int_to_float`` outside outputs, ``dtype_combos`` naming a non-tensor) is not
repeated here. This adds:

* a bare name in a dtype field that is not a dtype is read as a DType index, so a typo
  such as ``bfloat61`` would silently accept every dtype: a DType index that looks like a
  dtype name is ``L3.dtype-name``;
* ``dtype_combos`` keys are required tensors (seed 001 optional-input rule 9) and each
  value is one the tensor's own declaration accepts;
* on every combination where no out buffer is passed, each output's dtype is one dtype
  (``same_as``, ``promote_int_to_float``, a DType index, a given dtype param), not a choice.
"""

from __future__ import annotations

import difflib

from ..lang.dtypes import DTYPE_NAMES, DTypeExpr, DTypeIf, DTypeRef, DTypeSet
from ..lang.evaluate import compile_node
from ..spec.discriminants import Combination
from ..spec.symbolic import attempt
from .context import Branch, SpecContext
from .diagnostics import Diagnostic

__all__ = ["check_dtype_names", "check_dtype_combos", "OutputDTypeCheck", "close_dtype"]

_DTYPE_PREFIXES = ("float", "bfloat", "int", "uint", "complex", "bool")


def close_dtype(name: str) -> str | None:
    """The dtype name ``name`` most likely misspells, or None when it does not look like one."""
    match = difflib.get_close_matches(name, sorted(DTYPE_NAMES), n=1, cutoff=0.75)
    if match:
        return match[0]
    if name.lower().startswith(_DTYPE_PREFIXES):
        return difflib.get_close_matches(name, sorted(DTYPE_NAMES), n=1, cutoff=0.0)[0]
    return None


def check_dtype_names(ctx: SpecContext) -> list[Diagnostic]:
    """DType indices that are really misspelt dtype names."""
    spec = ctx.spec
    out = []
    for t in [*spec.inputs.values(), *spec.outputs.values()]:
        for name in sorted(_refs(t.dtype)):
            if spec.indices.get(name) != "dtype":
                continue
            guess = close_dtype(name)
            if guess is not None:
                out.append(ctx.diag("L3.dtype-name", f"{name!r} is not a dtype name (known: "
                                    f"{', '.join(sorted(DTYPE_NAMES))}); as written it is a DType index that accepts "
                                    "every dtype", loc=t.loc.child("dtype"), text=t.dtype_text, fix=guess,
                                    key=f"{t.name}:{name}"))
    return out


def _refs(expr: object) -> set[str]:
    if isinstance(expr, DTypeRef):
        return {expr.name}
    if isinstance(expr, DTypeIf):
        return _refs(expr.body) | _refs(expr.orelse)
    return set()


def check_dtype_combos(ctx: SpecContext) -> list[Diagnostic]:
    """dtype_combos keys are required tensors; values are accepted by the tensor's declaration."""
    spec = ctx.spec
    out = []
    field = "signature.dtype_combos"
    for i, combo in enumerate(spec.dtype_combos):
        for name, dtype in combo.items():
            t = spec.inputs.get(name) or spec.outputs.get(name)
            if t is None:
                continue  # L3.dtype-combos, reported by the compiler
            if t.optional:
                out.append(ctx.diag("L3.dtype-combos-optional", f"dtype_combos[{i}] names optional input {name}, "
                                    "which a call may omit; key the combination on required inputs",
                                    field=f"{field}[{i}]", line=t.loc.line, key=f"{i}:{name}"))
            if isinstance(t.dtype, DTypeSet) and dtype not in t.dtype.names:
                out.append(ctx.diag("L3.dtype-combos", f"dtype_combos[{i}] gives {name} = {dtype}, which {name}'s "
                                    f"dtype {t.dtype_text} does not accept", field=f"{field}[{i}]",
                                    line=t.loc.line, key=f"value:{i}:{name}"))
    return out


class OutputDTypeCheck:
    """Per combination: each output's dtype is settled when no out buffer is passed."""

    def __init__(self, ctx: SpecContext) -> None:
        self.ctx = ctx

    def visit(self, combo: Combination, branch: Branch | None) -> list[Diagnostic]:
        if branch is None or branch.incomplete:
            return []
        spec = self.ctx.spec
        out = []
        for o in spec.outputs.values():
            if o.alias or (o.buffer and combo.value("buffer", o.buffer)):
                continue
            expr = branch.dtypes.get(o.name)
            why = self._unsettled(expr, combo)
            if why:
                out.append(self.ctx.diag("L3.output-dtype-choice", f"output {o.name}'s dtype {o.dtype_text} is "
                                         f"{why} on {combo.describe()}: nothing in the call settles it",
                                         loc=o.loc.child("dtype"), key=f"{o.name}",
                                         fix="tie it to an input with same_as(...), or to a dtype param"))
        return out

    def finish(self) -> list[Diagnostic]:
        return []

    def _unsettled(self, expr: DTypeExpr | None, combo: Combination) -> str | None:
        if isinstance(expr, DTypeSet) and len(expr.names) > 1:
            return f"a choice of {expr}"
        if isinstance(expr, DTypeRef) and expr.name in self.ctx.spec.params and combo.env.get(expr.name, 0) is None:
            return f"the dtype param {expr.name}, not given"
        if isinstance(expr, DTypeIf):
            test = compile_node(expr.test)
            res = attempt(lambda env: bool(test(env)), combo.env)
            if res.decided:
                return self._unsettled(expr.body if res.value else expr.orelse, combo)
            return self._unsettled(expr.body, combo) or self._unsettled(expr.orelse, combo)
        return None

