"""The compile boundary: one ``torch.library`` custom op per op class, made from the spec.

Under ``torch.compile`` an op call becomes a call of ``torch.ops.tileops.<name>``: the
schema holds the call-time tensors and every param (and static dim) as real arguments,
``mutates_args`` is exactly the inputs marked ``mutated``, and the fake implementation
runs the generated checks on fake tensors (SymInt shapes) to produce the outputs' shapes
and dtypes without reading data. Eager calls never pass through here (no dispatcher cost).

Custom ops may not return their inputs, so outputs written into an ``out=`` buffer are
returned fresh by the boundary and copied into the buffer by the traced wrapper, and
alias outputs are returned by the wrapper itself.
"""

from __future__ import annotations

import inspect
import re
import threading
from typing import Any, Callable, Optional, Sequence

import torch

from ..lang.types import DTypeParam, Enum, ListOf, NoneT, ParamType, Prim, TupleOf, UnionT
from ..spec.nodes import OpSpec

__all__ = ["Boundary", "make_boundary", "call_boundary", "TARGET_ARG"]

#: The schema argument carrying an op's per-op target (a name no spec param may take).
TARGET_ARG = "tileops_target"

_names_lock = threading.Lock()
_used_names: set[str] = set()


class Boundary:
    """The custom op of one op class and how to map an op call onto it."""

    def __init__(self, op_cls: type, spec: OpSpec, qualname: str, fn: Any, encoders: list[Callable[[Any], Any]],
                 returned: list[int]) -> None:
        self.op_cls = op_cls
        self.spec = spec
        self.qualname = qualname
        self.fn = fn
        self.encoders = encoders
        self.returned = returned  # indices of outputs the custom op returns
        self.n_inputs = len(spec.call_inputs)
        self._instances: dict[Any, Any] = {}
        self._lock = threading.Lock()

    @property
    def opoverload(self) -> Any:
        """``torch.ops.tileops.<name>.default`` (for ``torch.library.opcheck``)."""
        ns, name = self.qualname.split("::")
        return getattr(getattr(torch.ops, ns), name).default

    def encode(self, op: Any) -> tuple[Any, ...]:
        """The schema arguments for an op instance: params, static dims, then its own target."""
        names = [*self.spec.params, *self.spec.static_dims]
        target = None if op._target is None else str(op._target)
        return (*(enc(op._env[n]) for enc, n in zip(self.encoders, names)), target)

    def instance(self, args: Sequence[Any]) -> Any:
        """An op instance for schema argument values (cached: the impl runs per call)."""
        key = tuple(tuple(p) if isinstance(p, list) else p for p in args)
        op = self._instances.get(key)
        if op is None:
            names = [*self.spec.params, *self.spec.static_dims]
            *params, target = args
            with self._lock:
                op = self._instances.get(key)
                if op is None:
                    options = {} if target is None else {"target": target}
                    op = self.op_cls(**dict(zip(names, params)), **options)
                    self._instances[key] = op
        return op


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _is_int(o: ParamType) -> bool:
    return isinstance(o, Prim) and o.kind == "int"


def _is_int_seq(o: ParamType) -> bool:
    return (isinstance(o, ListOf) and _is_int(o.item)) or (isinstance(o, TupleOf) and all(_is_int(i) for i in o.items))


def _annotation(ptype: ParamType) -> tuple[Any, Callable[[Any], Any]] | None:
    """Schema annotation for a param type and the encoder of its values (None: not expressible)."""
    options = ptype.options if isinstance(ptype, UnionT) else (ptype,)
    maybe = any(isinstance(o, NoneT) for o in options)
    options = tuple(o for o in options if not isinstance(o, NoneT))
    ann: Any
    enc: Callable[[Any], Any]
    if options and all(_is_int(o) or _is_int_seq(o) for o in options) and any(_is_int_seq(o) for o in options):
        ann, enc = list[int], (lambda v: [v] if isinstance(v, int) else list(v))
    elif len(options) == 1 and isinstance(options[0], Prim):
        kind = options[0].kind
        ann = {"bool": bool, "int": int, "float": float, "str": str, "device": str}[kind]
        enc = (lambda v: v)
    elif len(options) == 1 and isinstance(options[0], Enum):
        ann, enc = str, (lambda v: v)
    elif len(options) == 1 and isinstance(options[0], DTypeParam):
        ann, enc = torch.dtype, (lambda v: getattr(torch, v))
    elif options and all(isinstance(o, Prim) and o.kind in ("int", "float") for o in options):
        ann, enc = float, float
    else:
        return None
    if maybe:
        inner_enc = enc
        return Optional[ann], (lambda v: None if v is None else inner_enc(v))
    return ann, enc


def make_boundary(op_cls: type, spec: OpSpec) -> tuple[Boundary | None, str | None]:
    """Register the custom op for ``op_cls``; return it, or None and why there is none."""
    if not spec.call_inputs:
        return None, "no call-time tensor inputs"
    params: list[inspect.Parameter] = []
    for t in spec.call_inputs:
        ann = Optional[torch.Tensor] if t.optional else torch.Tensor
        params.append(inspect.Parameter(t.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ann))
    encoders: list[Callable[[Any], Any]] = []
    for name, p in spec.params.items():
        got = _annotation(p.type)
        if got is None:
            return None, f"param {name} ({p.type_text}) has no torch schema type"
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=got[0]))
        encoders.append(got[1])
    for name in spec.static_dims:
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=int))
        encoders.append(int)
    # The op's own target= travels with the call, so a compiled call selects as the eager one.
    params.append(inspect.Parameter(TARGET_ARG, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[str]))
    returned = [i for i, o in enumerate(spec.outputs.values()) if o.alias is None]
    ret_ann: Any = None
    if len(returned) == 1:
        ret_ann = torch.Tensor
    elif returned:
        ret_ann = tuple[tuple(torch.Tensor for _ in returned)]  # type: ignore[misc]
    base = f"tileops::{_snake(spec.name)}"
    with _names_lock:
        qualname, n = base, 1
        while qualname in _used_names:
            n += 1
            qualname = f"{base}_{n}"
        _used_names.add(qualname)
    boundary_ref: list[Boundary] = []
    n_inputs = len(spec.call_inputs)
    n_buffers = sum(1 for o in spec.outputs.values() if o.buffer)

    def impl(*args: Any) -> Any:
        b = boundary_ref[0]
        op = b.instance(args[n_inputs:])
        values = list(args[:n_inputs]) + [None] * n_buffers
        result = op._eager(values)
        outs = (result,) if len(spec.outputs) == 1 else tuple(result)
        picked = tuple(outs[i] for i in b.returned)
        if not picked:
            return None
        return picked[0] if len(picked) == 1 else picked

    def fake(*args: Any) -> Any:
        b = boundary_ref[0]
        op = b.instance(args[n_inputs:])
        values = list(args[:n_inputs]) + [None] * n_buffers
        plan = op._checks.plan_call(op, values, op._env, op._construction, (), {})
        outs = tuple(torch.empty(plan.out_shapes[i], dtype=plan.out_dtypes[i], device=plan.device)
                     for i in b.returned)
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else outs

    impl.__signature__ = inspect.Signature(params, return_annotation=ret_ann)  # type: ignore[attr-defined]
    impl.__name__ = qualname.split("::")[1]
    mutated = [t.name for t in spec.call_inputs if t.mutated]
    try:
        fn = torch.library.custom_op(qualname, impl, mutates_args=mutated)
        fn.register_fake(fake)
    except Exception as exc:  # a schema torch cannot express: eager still works, say why
        return None, f"torch.library refused the schema: {exc}"
    boundary = Boundary(op_cls, spec, qualname, fn, encoders, returned)
    boundary_ref.append(boundary)
    return boundary, None


def call_boundary(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op call under ``torch.compile``: the custom op, then buffers and aliases."""
    boundary: Boundary = type(op)._boundary
    values = op._bind_call(args, kwargs)
    tensors = values[: boundary.n_inputs]
    result = boundary.fn(*tensors, *boundary.encode(op))
    spec = boundary.spec
    fresh = list((result,) if len(boundary.returned) == 1 else (result or ()))
    outs = []
    arg_index = op._checks.arg_index
    for i, o in enumerate(spec.outputs.values()):
        if o.alias is not None:
            outs.append(values[arg_index[o.alias]])
            continue
        value = fresh.pop(0)
        if o.buffer is not None and values[arg_index[o.buffer]] is not None:
            buf = values[arg_index[o.buffer]]
            buf.copy_(value)
            value = buf
        outs.append(value)
    return outs[0] if len(outs) == 1 else tuple(outs)
