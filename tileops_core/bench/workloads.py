"""Instantiate a workload row: op arguments, input shapes and dtypes, and fresh random tensors.

A row writes some of: ``<input>_shape`` (the input is passed; items are ints or index
expressions such as ``T``), ``<input>_dtype``, param values, static dims, index values
(``M: 4096``), ``dtypes`` (one instantiation per entry: a dtype name applied to every input
whose declared set contains it, or a ``{tensor: dtype}`` mapping), ``label`` and
``generator`` (a registered name, or ``{name: ..., <arg>: ...}``). What the row leaves
out is derived: indices by unifying the shapes it gives with the declarations, the rest
of the shapes from the declarations, dtypes from ``same_as`` and the sets.

Used by the conformance suite, ``tileops explain``, ``tileops bench`` and the validator
(``meta_only`` computes shapes and dtypes without allocating anything). Random data is
drawn fresh from the given generator and is never all zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ..errors import SpecError, TileOpsError
from ..lang.dtypes import DTypeExpr, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, promote_int_to_float
from ..lang.evaluate import Unbound, compile_node
from ..lang.parse import parse_expr
from ..lang.shapes import Axis, ShapePattern
from ..lang.unify import UnifyError, plan_solve, run_solve
from ..spec.nodes import FamilyRef, OpSpec, WorkloadRow
from .generators import Generated, get_generator

__all__ = ["TensorMeta", "Instance", "dtype_cases", "instantiate", "output_shapes", "RESERVED_KEYS"]

#: Row keys that are neither params, static dims nor indices.
RESERVED_KEYS = frozenset({"dtypes", "label", "generator"})


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of a tensor that is not allocated (``meta_only``)."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Instance:
    """One runnable instantiation of a workload row."""

    op: str
    label: str
    case: str
    op_kwargs: dict[str, Any]
    inputs: dict[str, Any]  # call-time inputs that are passed (tensors or TensorMeta)
    indices: dict[str, Any]
    dtypes: dict[str, torch.dtype]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def call_args(self, spec: OpSpec) -> list[Any]:
        """Positional forward arguments in declaration order (None for absent inputs)."""
        args = [self.inputs.get(t.name) for t in spec.call_inputs]
        while args and args[-1] is None:
            args.pop()
        return args

    @property
    def name(self) -> str:
        return f"{self.label}[{self.case}]"


def dtype_cases(row: WorkloadRow) -> list[Any]:
    """The entries of the row's ``dtypes`` (one instantiation each)."""
    cases = row.values.get("dtypes")
    if cases is None:
        return [None]
    return list(cases) if isinstance(cases, (list, tuple)) else [cases]


def _case_name(case: Any) -> str:
    if case is None:
        return "default"
    if isinstance(case, Mapping):
        return ",".join(f"{k}={v}" for k, v in case.items())
    return str(case)


def _fail(spec: OpSpec, row: WorkloadRow, message: str) -> None:
    raise SpecError(message, row.loc, rule="C7")


def _resolve(decl: Any, spec: OpSpec, denv: Mapping[str, Any]) -> Any:
    seen = set()
    while isinstance(decl, FamilyRef):
        if decl.name in seen:
            raise TileOpsError(f"type family cycle through {decl.name}")
        seen.add(decl.name)
        family = spec.families[decl.name]
        decl = family.case_for(family.match.fn(denv))
    return decl


def instantiate(spec: OpSpec, row: WorkloadRow, case: Any = None, *, device: str | torch.device = "cpu",
                rng: torch.Generator | None = None, meta_only: bool = False) -> Instance:
    """Build the op arguments and inputs of ``row`` for one ``dtypes`` entry ``case``."""
    rng = rng if rng is not None else torch.Generator().manual_seed(0)
    values = dict(row.values)
    generated = Generated()
    gen = values.get("generator")
    if gen is not None:
        name, args = (gen, {}) if isinstance(gen, str) else (gen.get("name"), {k: v for k, v in gen.items()
                                                                                if k != "name"})
        generated = get_generator(str(name))({**values, **args}, rng)
    op_kwargs = {k: values[k] for k in values if k in spec.params or k in spec.static_dims}
    env: dict[str, Any] = {}
    for name, p in spec.params.items():
        raw = op_kwargs.get(name, p.default)
        env[name] = p.type.normalise(raw) if p.type.accepts(raw) else raw
    for name in spec.static_dims:
        if name in values:
            env[name] = values[name]
    for name, e in spec.lets.items():
        try:
            env[name] = e.fn(env)
        except (Unbound, TypeError, ValueError):
            pass
    env.update({k: v for k, v in values.items() if k in spec.indices})
    env.update(generated.indices)

    present = set()
    for t in spec.inputs.values():
        if not t.optional or f"{t.name}_shape" in values or t.name in generated.tensors:
            present.add(t.name)
    denv = dict(env)
    denv.update({t: (True if t in present else None) for t in spec.inputs})
    patterns: dict[str, ShapePattern | None] = {}
    for t in spec.inputs.values():
        if t.name in present:
            patterns[t.name] = _resolve(t.shape, spec, denv) if t.shape is not None else None

    # Shapes the row (or the generator) gives, then indices by unification, then the rest.
    shapes: dict[str, tuple[int, ...]] = {}
    for t in spec.inputs.values():
        if t.name not in present:
            continue
        if t.name in generated.tensors:
            shapes[t.name] = tuple(generated.tensors[t.name].shape)
        elif f"{t.name}_shape" in values:
            shapes[t.name] = _row_shape(values[f"{t.name}_shape"], env, spec, row, t.name)
    known = {n for n in env}
    given = {n: p for n, p in patterns.items() if n in shapes and p is not None}
    plan = plan_solve(given, known, {n: e.node for n, e in spec.lets.items() if n not in env})
    try:
        run_solve(plan, given, shapes, env, {})
    except UnifyError as exc:
        _fail(spec, row, f"workload {row.label}: {exc.message}")
    for name, e in spec.lets.items():
        if name not in env:
            try:
                env[name] = e.fn(env)
            except Unbound:
                pass
    for t in spec.inputs.values():
        if t.name in present and t.name not in shapes:
            pattern = patterns.get(t.name)
            if pattern is None:
                _fail(spec, row, f"workload {row.label}: input {t.name} has no declared shape; give {t.name}_shape")
            shapes[t.name] = _pattern_shape(pattern, env, spec, row, t.name)

    dtypes = _dtypes(spec, row, values, case, present, env)
    inputs: dict[str, Any] = {}
    device = torch.device(device)
    for t in spec.inputs.values():
        if t.name not in present or t.construction:
            continue
        shape, dtype = shapes[t.name], dtypes[t.name]
        if meta_only:
            inputs[t.name] = TensorMeta(shape, dtype)
        elif t.name in generated.tensors:
            inputs[t.name] = generated.tensors[t.name].to(device=device, dtype=dtype)
        else:
            target = torch.device("cpu") if t.device == "cpu" else device
            inputs[t.name] = random_tensor(shape, dtype, rng).to(target)
    for t in spec.construction_inputs:
        if t.name in present:
            op_kwargs[t.name] = TensorMeta(shapes[t.name], dtypes[t.name]) if meta_only else random_tensor(
                shapes[t.name], dtypes[t.name], rng).to(device)
    return Instance(spec.name, row.label, _case_name(case), op_kwargs, inputs, env, dtypes, shapes)


def output_shapes(spec: OpSpec, row: WorkloadRow, inst: Instance) -> dict[str, tuple[int, ...]]:
    """The shape of every output of ``inst`` (made from ``row``), from the declarations and indices.

    The roofline of a workload row reads outputs (``product(output.shape)``) without
    running the op, so the shapes come from the spec exactly as a call would give them:
    the output's pattern (its type-family case for this row) over the row's indices, or
    the shape of the input an alias output is.
    """
    denv = dict(inst.indices)
    denv.update({t: (True if t in inst.shapes else None) for t in spec.inputs})
    out: dict[str, tuple[int, ...]] = {}
    for o in spec.outputs.values():
        if o.alias is not None:
            out[o.name] = inst.shapes[o.alias]
            continue
        pattern = _resolve(o.shape, spec, denv) if o.shape is not None else None
        if pattern is None:
            raise TileOpsError(f"{spec.name}: output {o.name} declares no shape")
        out[o.name] = _pattern_shape(pattern, inst.indices, spec, row, o.name)
    return out


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, rng: torch.Generator) -> torch.Tensor:
    """Fresh random data: normal for floats, small non-zero integers otherwise."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=rng, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=rng).bool()
    low, high = (1, 100) if dtype != torch.uint8 else (1, 255)
    sign = torch.where(torch.rand(shape, generator=rng) < 0.5, -1, 1) if dtype not in (torch.uint8,) else 1
    return (torch.randint(low, high, shape, generator=rng) * sign).to(dtype)


def _row_shape(raw: Any, env: Mapping[str, Any], spec: OpSpec, row: WorkloadRow, name: str) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)):
        _fail(spec, row, f"workload {row.label}: {name}_shape must be a list")
    out = []
    for item in raw:
        if isinstance(item, int) and not isinstance(item, bool):
            out.append(item)
            continue
        try:
            out.append(int(_eval_text(str(item), env)))
        except (Unbound, TileOpsError, TypeError, ValueError) as exc:
            _fail(spec, row, f"workload {row.label}: {name}_shape item {item!r} cannot be evaluated: {exc}")
    return tuple(out)


def _eval_text(text: str, env: Mapping[str, Any]) -> Any:
    return compile_node(parse_expr(text))(env)


def _pattern_shape(pattern: ShapePattern, env: Mapping[str, Any], spec: OpSpec, row: WorkloadRow,
                   name: str) -> tuple[int, ...]:
    dims: list[int] = []
    for item in pattern.items:
        try:
            if isinstance(item, Axis):
                dims.append(int(compile_node(item.node)(env)))
            else:
                dims.extend(int(v) for v in env[item.name])
        except (Unbound, KeyError) as exc:
            missing = exc.name if isinstance(exc, Unbound) else exc.args[0]
            _fail(spec, row, f"workload {row.label}: the shape {pattern.text} of {name} needs {missing}; give it in "
                             f"the row or give {name}_shape")
    return tuple(dims)


def _dtypes(spec: OpSpec, row: WorkloadRow, values: Mapping[str, Any], case: Any, present: set[str],
            env: Mapping[str, Any]) -> dict[str, torch.dtype]:
    chosen: dict[str, str] = {}
    pending: dict[str, DTypeExpr] = {}
    mapping = case if isinstance(case, Mapping) else {}
    denv = dict(env)
    denv.update({t: (True if t in present else None) for t in spec.inputs})
    for t in spec.inputs.values():
        if t.name not in present or t.dtype is None:
            continue
        expr = _resolve(t.dtype, spec, denv)
        explicit = values.get(f"{t.name}_dtype") or mapping.get(t.name)
        if explicit is not None:
            chosen[t.name] = str(explicit)
        elif isinstance(expr, DTypeSet):
            chosen[t.name] = str(case) if isinstance(case, str) and case in expr.names else expr.names[0]
        else:
            pending[t.name] = expr
    for _ in range(len(pending) + 1):
        for name, expr in list(pending.items()):
            value = _dtype_of(expr, chosen, env, denv)
            if value is not None:
                chosen[name] = value
                del pending[name]
    if pending:
        _fail(spec, row, f"workload {row.label}: cannot determine the dtype of {', '.join(pending)}")
    out = {n: getattr(torch, d) for n, d in chosen.items()}
    for o in spec.outputs.values():
        if o.alias is not None:
            out[o.name] = out[o.alias]
        elif o.dtype is not None:
            value = _dtype_of(_resolve(o.dtype, spec, denv), chosen, env, denv)
            if value is not None:
                out[o.name] = getattr(torch, value)
    return out


def _dtype_of(expr: DTypeExpr, chosen: Mapping[str, str], env: Mapping[str, Any],
              denv: Mapping[str, Any]) -> str | None:
    if isinstance(expr, DTypeSet):
        return expr.names[0]
    if isinstance(expr, SameAs):
        return chosen.get(expr.tensor)
    if isinstance(expr, PromoteIntToFloat):
        src = chosen.get(expr.tensor)
        return None if src is None else promote_int_to_float(src)
    if isinstance(expr, DTypeRef):
        value = env.get(expr.name)
        return None if value is None else str(value)
    if isinstance(expr, DTypeIf):
        branch = expr.body if compile_node(expr.test)(denv) else expr.orelse
        return _dtype_of(branch, chosen, env, denv)
    return None
