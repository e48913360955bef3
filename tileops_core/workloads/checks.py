"""The refinements the validator evaluates on an instantiated row: shape rules and the roofline.

A shape rule that is false on a row's values means the row describes a call the op must
refuse; a roofline formula that cannot be evaluated on it means the benchmark's report
would have no number. Both are findings of the strict instantiation only: the benchmarks
leave refinements to the op's own checks.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ExprError
from ..lang.evaluate import Unbound
from ..lang.tensor_meta import TensorMeta
from ..spec.nodes import OpSpec
from .instance import DTypeCase, RowFinding, RowInstance

__all__ = ["EVAL_ERRORS", "check_roofline", "check_shape_rules", "show"]

#: What evaluating a spec expression on a row's values can raise.
EVAL_ERRORS = (Unbound, ExprError, TypeError, ValueError, ArithmeticError, IndexError, AttributeError, KeyError)


def show(v: Any) -> str:
    """A value as a finding shows it: ``tensor[2, 3]``, ``(4,)``, ``8``."""
    if isinstance(v, TensorMeta):
        return f"tensor{list(v.shape)}"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(str(i) for i in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def _why(exc: BaseException) -> str:
    return f"{exc.name} has no value" if isinstance(exc, Unbound) else str(exc) or type(exc).__name__


def check_shape_rules(spec: OpSpec, env: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
                      outputs: Mapping[str, tuple[int, ...]]) -> list[RowFinding]:
    """Each ``shape_rules`` entry that is false on the row's values."""
    renv: dict[str, Any] = {**env, **{n: None for n in spec.inputs}}
    renv.update({n: TensorMeta(s) for n, s in {**shapes, **outputs}.items()})
    out = []
    for e in spec.shape_rules:
        try:
            ok = e.fn(renv)
        except EVAL_ERRORS:
            continue  # what cannot be evaluated is the guard check's finding, not the row's
        if not ok:
            shown = ", ".join(f"{n}={show(renv[n])}" for n in sorted(e.names) if n in renv)
            out.append(RowFinding("C6.rule", f"shape rule {e.text!r} does not hold with {shown}", key=f"rule:{e.text}"))
    return out


def check_roofline(spec: OpSpec, instance: RowInstance, case: DTypeCase) -> list[RowFinding]:
    """The roofline's vars, flops and bytes evaluate on the row to non-negative numbers."""
    roof = spec.roofline
    if roof is None or roof.func is not None:
        return []
    renv: dict[str, Any] = {**instance.env, **{n: None for n in spec.inputs}, **instance.metas(case)}
    for name, var in roof.vars.items():
        try:
            renv[name] = var.fn(renv)
        except EVAL_ERRORS as exc:
            return [RowFinding("C7.roofline", f"roofline var {name} = {var.text!r} cannot be evaluated: {_why(exc)}",
                               key=f"roofline:{name}")]
    out = []
    for e in (roof.flops, roof.bytes):
        if e is None:
            continue
        try:
            value = e.fn(renv)
        except EVAL_ERRORS as exc:
            out.append(RowFinding("C7.roofline", f"{e.loc.field} = {e.text!r} cannot be evaluated: {_why(exc)}",
                                  key=f"roofline:{e.loc.field}"))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            out.append(RowFinding("C7.roofline", f"{e.loc.field} = {e.text!r} gives {value!r}, not a non-negative "
                                  "number", key=f"roofline:{e.loc.field}"))
    return out
