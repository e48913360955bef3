"""The roofline of a call: its FLOPs and bytes, evaluated from the spec's ``roofline`` field.

No op writes a formula: the spec states it once (inline ``vars``/``flops``/``bytes``
through the expression IR, compiled at load) or names a registered ``func``, and this
module evaluates it in an environment of names: for the last call of an op instance
(:func:`roofline_of_call`, behind ``Op.eval_roofline``) the plan's params, lets, indices
and input tensors, plus the outputs' shapes and dtypes; for a workload row
(:func:`tileops_core.bench.roofline.roofline_of_row`) the row instantiated without
allocating anything. Tensors are :class:`~tileops_core.lang.tensor_meta.TensorMeta` there.

``vars`` are evaluated first, in declaration order (a var may use the ones before it);
``flops`` and ``bytes`` then see vars, params, lets, static dims and indices. A name that
does not bind is an error naming the op, the field and its ``file:line`` (seed 001: a
roofline whose variables do not bind fails the benchmark, it is never guessed).

A ``func`` roofline is a function registered by name (like workload generators: by the
op's module or a plugin, never imported from a path written in the manifest). It gets the
same read-only environment and returns ``(flops, bytes)``.

This module sits below the op layer and imports no torch: an op reads its own roofline
without importing the benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol, Sequence

from .errors import SpecError, TileOpsError
from .lang.evaluate import Unbound
from .lang.tensor_meta import TensorMeta
from .spec.named import NamedFunctions
from .spec.nodes import Expr, OpSpec

__all__ = [
    "CalledOp", "PlannedCall", "Roofline", "RooflineFunc", "register_roofline", "get_roofline", "evaluate_roofline",
    "roofline_of_call", "call_env",
]


class PlannedCall(Protocol):
    """What the roofline reads of a call plan (``tileops_core.op.plan.CallPlan``)."""

    @property
    def env(self) -> Mapping[str, Any]: ...

    @property
    def out_names(self) -> Sequence[str]: ...

    @property
    def out_shapes(self) -> Sequence[Sequence[Any]]: ...

    @property
    def out_dtypes(self) -> Sequence[Any]: ...


class CalledOp(Protocol):
    """What the roofline reads of an op instance (``tileops_core.op.base.Op``): its spec and last call."""

    @property
    def last_plan(self) -> PlannedCall | None: ...

    def op_spec(self) -> OpSpec: ...

#: ``fn(env) -> (flops, bytes)``; ``env`` maps tensor names to tensors or :class:`TensorMeta`
#: (None when absent) and index, param, let and static-dim names to their values.
RooflineFunc = Callable[[Mapping[str, Any]], tuple[float, float]]

_funcs: NamedFunctions[RooflineFunc] = NamedFunctions(
    "roofline function", "the op's module or a plugin registers it with @register_roofline")


@dataclass(frozen=True)
class Roofline:
    """What one call costs: floating-point operations and bytes moved (the efficiency's denominator)."""

    op: str
    flops: float
    bytes: float
    vars: Mapping[str, Any] = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte (inf for a call that moves nothing)."""
        return self.flops / self.bytes if self.bytes else math.inf


def register_roofline(name: str) -> Callable[[RooflineFunc], RooflineFunc]:
    """Decorator: register ``fn(env) -> (flops, bytes)`` as the roofline ``func: name``."""
    return _funcs.register(name)


def get_roofline(name: str) -> RooflineFunc:
    """The roofline function registered under ``name``."""
    return _funcs.get(name)


def _number(value: Any, spec: OpSpec, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = int(value)  # a SymInt or a 0-d tensor
        except (TypeError, ValueError):
            raise TileOpsError(f"{spec.name}: roofline {what} evaluated to {value!r}, not a number") from None
    if value < 0 or value != value:
        raise TileOpsError(f"{spec.name}: roofline {what} evaluated to {value}, expected a non-negative number")
    return value


def _formula(e: Expr | None, spec: OpSpec, what: str) -> Expr:
    # An inline roofline without flops or bytes is a load problem that marks it broken.
    if e is None:
        raise TileOpsError(f"{spec.name}: its roofline declares no {what}; run `tileops validate {spec.name}`")
    return e


def _eval(e: Expr, env: Mapping[str, Any], spec: OpSpec, what: str) -> Any:
    try:
        return e.fn(env)
    except Unbound as exc:
        raise SpecError(f"roofline {what} refers to {exc.name}, which has no value on this call", e.loc,
                        e.text, rule="roofline") from None
    except (ZeroDivisionError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise SpecError(f"roofline {what} cannot be evaluated: {exc}", e.loc, e.text, rule="roofline") from None


def evaluate_roofline(spec: OpSpec, env: Mapping[str, Any]) -> Roofline:
    """Evaluate ``spec.roofline`` in ``env`` (see the module docstring for what ``env`` holds)."""
    roof = spec.roofline
    if roof is None:
        raise TileOpsError(f"{spec.name} declares no roofline ({spec.location.where()})")
    if "roofline" in spec.broken:
        raise TileOpsError(f"{spec.name}: its roofline did not parse; run `tileops validate {spec.name}`")
    if roof.func is not None:
        flops, moved = get_roofline(roof.func)(MappingProxyType(dict(env)))
        return Roofline(spec.name, _number(flops, spec, f"func {roof.func} flops"),
                        _number(moved, spec, f"func {roof.func} bytes"))
    scope = dict(env)
    values: dict[str, Any] = {}
    for name, e in roof.vars.items():
        values[name] = scope[name] = _eval(e, scope, spec, f"var {name}")
    flops = _number(_eval(_formula(roof.flops, spec, "flops"), scope, spec, "flops"), spec, "flops")
    moved = _number(_eval(_formula(roof.bytes, spec, "bytes"), scope, spec, "bytes"), spec, "bytes")
    return Roofline(spec.name, flops, moved, MappingProxyType(values))


def call_env(spec: OpSpec, plan: PlannedCall) -> dict[str, Any]:
    """The environment of a planned call: the plan's values plus each output's shape and dtype."""
    env = dict(plan.env)
    for name, shape, dtype in zip(plan.out_names, plan.out_shapes, plan.out_dtypes):
        env[name] = TensorMeta(tuple(int(s) for s in shape), dtype)
    for t in spec.inputs.values():
        env.setdefault(t.name, None)
    return env


def roofline_of_call(op: CalledOp) -> Roofline:
    """The roofline of ``op``'s last call (an op that was never called has none)."""
    plan = op.last_plan
    if plan is None:
        raise TileOpsError(f"{type(op).__name__}: eval_roofline() needs a call first (it reads the last call)")
    spec = op.op_spec()
    return evaluate_roofline(spec, call_env(spec, plan))
