"""Checks 6 and 7 on one workload row: instantiate it symbolically, then unify it.

A row names what it fixes: ``<input>_shape`` (present means the optional input is passed),
``<input>_dtype``, params, static dims, index values, ``dtypes`` (the dtypes to run; each
one is taken by the inputs whose dtype is a choice that includes it) and, for rows whose
metadata a random tensor cannot stand for, a ``generator`` that supplies index values and
tensors (run by the conformance pass, which has torch; see :class:`Generated`).

Instantiation computes every present input's shape (from ``<input>_shape``, else from its
declaration and the row's index values), every dtype, and every output's shape, without
allocating anything. Unification then runs the same solve plan as a call
(:func:`~tileops_core.lang.unify.run_solve`), compares what the shapes give with what the
row says, and evaluates ``requires``, ``shape_rules``, ``dtype_combos`` and the roofline on
the result. The :class:`RowInstance` is what the conformance pass feeds to an op's
generated checks on meta tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ExprError
from ..lang.dtypes import (
    DTYPE_NAMES, DTypeExpr, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, promote_int_to_float,
)
from ..lang.evaluate import Unbound, compile_node
from ..lang.parse import parse_expr
from ..lang.shapes import Axis, ShapePattern
from ..lang.unify import UnifyError, run_solve
from ..spec.nodes import REQUIRED, WorkloadRow
from .combos import Combination, Missing
from .context import SpecContext
from .diagnostics import Diagnostic
from .symbolic import UNKNOWN, attempt

__all__ = ["ITEMSIZE", "TensorMeta", "Generated", "RowInstance", "instantiate_row", "row_presence"]

#: Bytes per element of each dtype name (what ``x.itemsize`` reads in roofline formulas).
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
            "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "complex64": 8,
            "complex128": 16}

_EVAL_ERRORS = (Unbound, ExprError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError, KeyError)


@dataclass(frozen=True)
class TensorMeta:
    """A tensor as spec expressions see it: its shape, rank and element size, no data."""

    shape: tuple[int, ...]
    dtype: str | None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        if self.dtype is None:
            raise ExprError("the dtype of this tensor is not known on this row")
        return ITEMSIZE[self.dtype]


@dataclass
class Generated:
    """What a workload generator contributed, as plain data: index values and tensor shapes.

    (A generated tensor's dtype is not the row's: the benchmark casts it to the dtype the
    row's ``dtypes`` entry gives, like every other input.)
    """

    indices: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class RowInstance:
    """A row made concrete: construction values, input shapes, outputs, dtypes per ``dtypes`` entry."""

    row: WorkloadRow
    construct: dict[str, Any]  # params (normalised) and static dims: what __init__ receives
    present: frozenset[str]
    shapes: dict[str, tuple[int, ...]]  # present inputs
    outputs: dict[str, tuple[int, ...]]
    dtypes: list[dict[str, str]]  # one mapping tensor -> dtype name per entry of the row's dtypes
    env: dict[str, Any]


def row_presence(spec: Any, row: WorkloadRow) -> frozenset[str]:
    """The inputs a row passes: every required input, and optional ones whose ``_shape`` it gives."""
    return frozenset(t.name for t in spec.inputs.values() if not t.optional or f"{t.name}_shape" in row.values)


class _RowError(Exception):
    """Stops instantiating a row after a finding that leaves nothing sound to check."""


class _Row:
    """The state of instantiating one row."""

    def __init__(self, ctx: SpecContext, row: WorkloadRow, generated: Generated | None) -> None:
        self.ctx = ctx
        self.spec = ctx.spec
        self.row = row
        self.values = row.values
        self.generated = generated or Generated()
        self.out: list[Diagnostic] = []

    def diag(self, rule: str, message: str, fix: str | None = None, key: str = "") -> None:
        self.out.append(self.ctx.diag(rule, f"workload row {self.row.label!r}: {message}", loc=self.row.loc, fix=fix,
                                      key=key or message))

    def fail(self, rule: str, message: str, fix: str | None = None) -> None:
        self.diag(rule, message, fix)
        raise _RowError()

    # -- construction values and the branch --------------------------------------------------

    def construction(self) -> dict[str, Any]:
        spec, values = self.spec, self.values
        out: dict[str, Any] = {}
        for name, p in spec.params.items():
            if name in values:
                v = values[name]
                if not p.type.accepts(v):
                    self.fail("L4.value", f"{name} = {v!r} is not a {p.type_text}")
                out[name] = p.type.normalise(v)
            elif p.default is not REQUIRED:
                out[name] = p.default
            else:
                self.fail("L4.value", f"param {name} ({p.type_text}) has no default and the row does not give it",
                          fix=f"add {name}: <value> to the row")
        for name in spec.static_dims:
            if name in values:
                v = values[name]
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    self.fail("L4.value", f"static dim {name} = {v!r} is not a non-negative int")
                out[name] = v
        return out

    def combination(self, construct: Mapping[str, Any], present: frozenset[str]) -> Combination:
        spec = self.spec
        env: dict[str, Any] = {n: (UNKNOWN if n in present else None) for n in spec.inputs}
        env.update({n: UNKNOWN for n in spec.outputs})
        env.update({n: UNKNOWN for n in spec.static_dims})
        env.update(construct)
        self.ctx.disc.settle_lets(env)
        excluded_by = None
        for e in spec.requires:
            res = attempt(e.fn, env)
            if res.decided and not res.value:
                excluded_by = e
                break
        return Combination(-1, (), (), env, {}, excluded_by)

    # -- shapes -----------------------------------------------------------------------------

    def given_indices(self) -> dict[str, Any]:
        spec = self.spec
        given: dict[str, Any] = {}
        for name, kind in spec.indices.items():
            if name in self.values:
                v = self.values[name]
                if kind == "shape":
                    if not (isinstance(v, list) and all(_is_size(i) for i in v)):
                        self.fail("L4.value", f"Shape index {name} = {v!r} is not a list of non-negative ints")
                    v = tuple(v)
                elif kind == "dim" and not _is_size(v):
                    self.fail("L4.value", f"index {name} = {v!r} is not a non-negative int")
                given[name] = v
        for name, v in self.generated.indices.items():
            given.setdefault(name, tuple(v) if isinstance(v, list) else v)
        return given

    def input_shape(self, name: str, pattern: ShapePattern | None, env: Mapping[str, Any]) -> tuple[int, ...]:
        if name in self.generated.shapes:
            return tuple(self.generated.shapes[name])
        key = f"{name}_shape"
        if key in self.values:
            raw = self.values[key]
            if not isinstance(raw, list):
                self.fail("L4.value", f"{key} = {raw!r} is not a list")
            dims = []
            for item in raw:
                if _is_size(item):
                    dims.append(item)
                    continue
                if not isinstance(item, str):
                    self.fail("L4.value", f"{key} item {item!r} is neither a non-negative int nor an index name")
                try:
                    value = compile_node(parse_expr(item))(env)
                except Unbound as exc:
                    self.fail("C7.instantiate", f"{key} item {item!r} needs {exc.name}, which the row does not give",
                              fix=f"add {exc.name}: <value> to the row")
                except (ExprError, TypeError, ValueError, ZeroDivisionError) as exc:
                    self.fail("C7.instantiate", f"{key} item {item!r} cannot be evaluated: {exc}")
                if not _is_size(value):
                    self.fail("C7.instantiate", f"{key} item {item!r} = {value!r} is not a non-negative int")
                dims.append(value)
            return tuple(dims)
        if pattern is None:
            self.fail("C7.instantiate", f"input {name} declares no shape, so the row must give {key}",
                      fix=f"add {key}: [...] to the row")
        return self.instantiate(pattern, env, f"input {name}", f"or {key}: [...]")

    def instantiate(self, pattern: ShapePattern, env: Mapping[str, Any], what: str, alt: str = "") -> tuple[int, ...]:
        dims: list[Any] = []
        for item in pattern.items:
            try:
                if isinstance(item, Axis):
                    dims.append(compile_node(item.node)(env))
                else:
                    part = env[item.name]
                    if not isinstance(part, (tuple, list)):
                        self.fail("C7.instantiate", f"{what} {pattern.text}: *{item.name} = {part!r} is not a list")
                    dims.extend(part)
            except (Unbound, KeyError) as exc:
                name = exc.name if isinstance(exc, Unbound) else exc.args[0]
                self.fail("C7.instantiate", f"cannot instantiate {what} {pattern.text}: {name} is given neither by "
                          "the row nor by its generator", fix=f"add {name}: <value> {alt}".strip())
            except _EVAL_ERRORS as exc:
                self.fail("C7.instantiate", f"cannot instantiate {what} {pattern.text}: {exc}")
        for d in dims:
            if not _is_size(d):
                self.fail("C7.instantiate", f"{what} {pattern.text} instantiates to {dims}, which has an axis that is "
                          "not a non-negative int")
        return tuple(dims)

    # -- dtypes -----------------------------------------------------------------------------

    def dtype_entries(self) -> list[Any]:
        """The row's ``dtypes``: dtype names (taken by the inputs whose set has them) or ``{tensor: dtype}``."""
        raw = self.values.get("dtypes")
        if raw is None:
            return [None]
        if not isinstance(raw, list) or not raw or not all(
                isinstance(d, str) or (isinstance(d, dict) and all(isinstance(v, str) for v in d.values()))
                for d in raw):
            self.fail("L4.value", f"dtypes = {raw!r} is not a non-empty list of dtype names or {{tensor: dtype}} "
                      "mappings")
        for d in raw:
            for name in d if isinstance(d, dict) else ():
                if name not in self.spec.inputs:
                    self.fail("L4.value", f"dtypes entry {d!r} names {name!r}, which is not an input")
        return list(raw)

    def dtypes(self, entry: Any, present: frozenset[str], decls: Mapping[str, DTypeExpr | None],
               construct: Mapping[str, Any], denv: Mapping[str, Any]) -> dict[str, str] | None:
        """Every present tensor's dtype for one ``dtypes`` entry; None after reporting a problem."""
        spec = self.spec
        mapping: Mapping[str, str] = entry if isinstance(entry, dict) else {}
        d: str | None = entry if isinstance(entry, str) else None
        actual: dict[str, str] = {}
        bound: dict[str, str] = {}
        took = False
        problems: list[str] = []

        def given(name: str) -> str | None:
            return mapping.get(name) or self.values.get(f"{name}_dtype")

        def value_of(expr: DTypeExpr | None, tensor: str, stack: tuple[str, ...]) -> str | None:
            nonlocal took
            if isinstance(expr, DTypeSet):
                if d is not None and d in expr.names:
                    took = True
                    return d
                if len(expr.names) == 1 or spec.tensor(tensor).role == "input":
                    return expr.names[0]
                return None
            if isinstance(expr, (SameAs, PromoteIntToFloat)):
                if expr.tensor not in present or expr.tensor in stack:
                    return None
                src = dtype_of(expr.tensor, stack)
                return None if src is None else (src if isinstance(expr, SameAs) else promote_int_to_float(src))
            if isinstance(expr, DTypeRef):
                if expr.name in spec.params:
                    v = construct.get(expr.name)
                    return v if isinstance(v, str) else None
                if expr.name not in bound and d is not None:
                    bound[expr.name] = d
                    took = True
                return bound.get(expr.name)
            if isinstance(expr, DTypeIf):
                res = attempt(compile_node(expr.test), denv)
                if not res.decided:
                    return None
                return value_of(expr.body if res.value else expr.orelse, tensor, stack)
            return None

        def accepts(expr: DTypeExpr | None, value: str, tensor: str, stack: tuple[str, ...]) -> bool:
            if isinstance(expr, DTypeSet):
                return value in expr.names
            if isinstance(expr, DTypeRef) and expr.name not in spec.params:
                return bound.setdefault(expr.name, value) == value
            want = value_of(expr, tensor, stack) if expr is not None else None
            return want is None or want == value

        def dtype_of(name: str, stack: tuple[str, ...] = ()) -> str | None:
            if name in actual:
                return actual[name]
            decl = decls.get(name)
            explicit = given(name)
            if explicit is not None:
                if explicit not in DTYPE_NAMES:
                    problems.append(f"{name}_dtype = {explicit!r} is not a dtype name")
                    return None
                if not accepts(decl, explicit, name, stack + (name,)):
                    t = spec.tensor(name)
                    problems.append(f"{name} has dtype {explicit}, which {name}'s dtype {t.dtype_text} does not accept")
                value: str | None = explicit
            else:
                value = value_of(decl, name, stack + (name,))
            if value is not None:
                actual[name] = value
            return value

        for t in spec.inputs.values():
            if t.name in present and dtype_of(t.name) is None and not problems:
                problems.append(f"the dtype of input {t.name} ({t.dtype_text}) is not determined by the row")
        for o in spec.outputs.values():
            if o.alias:
                if o.alias in actual:
                    actual[o.name] = actual[o.alias]
                continue
            if dtype_of(o.name) is None and not problems:
                problems.append(f"the dtype of output {o.name} ({o.dtype_text}) is not determined by the row")
        if d is not None and d not in DTYPE_NAMES:
            return None  # L3.dtype-name, reported with the row's keys
        if problems:
            self.diag("C6.dtype", (f"for dtypes entry {entry!r}: " if entry is not None else "") + "; ".join(problems))
            return None
        if d is not None and not took:
            self.diag("C6.dtype", f"dtype {d} is accepted by no input whose dtype is a choice, so the row never runs "
                      "it", key=f"dtype-untaken:{d}")
            return None
        if spec.dtype_combos and not any(all(actual.get(k) == v for k, v in c.items()) for c in spec.dtype_combos):
            got = ", ".join(f"{k}={actual.get(k)}" for k in spec.dtype_combos[0])
            self.diag("C6.dtype", f"dtypes {got} are not one of the dtype_combos", key=f"combos:{d}")
            return None
        return actual

    # -- the whole row ----------------------------------------------------------------------

    def run(self) -> RowInstance | None:
        spec, ctx = self.spec, self.ctx
        construct = self.construction()
        present = row_presence(spec, self.row) | {n for n in self.generated.shapes if n in spec.inputs}
        combo = self.combination(construct, present)
        if combo.excluded_by is not None:
            passed = ", ".join(f"{t.name} {'present' if t.name in present else 'absent'}"
                               for t in spec.inputs.values() if t.optional)
            self.fail("C6.requires", f"its discriminants ({passed or 'its params'}) are excluded by requires "
                      f"{combo.excluded_by.text!r}")
        patterns: dict[str, ShapePattern] = {}
        decls: dict[str, DTypeExpr | None] = {}
        out_patterns: dict[str, ShapePattern] = {}
        for t in [*spec.inputs.values(), *spec.outputs.values()]:
            if t.role == "input" and t.name not in present:
                continue
            for what, decl in (("shape", t.shape), ("dtype", t.dtype)):
                res = ctx.disc.resolve(decl, combo) if decl is not None else None
                target = None if res is None else res.decl
                if isinstance(target, Missing):
                    self.fail("C7.instantiate", f"{t.name}'s {what}: type family {target.family.name} has no case for "
                              f"{target.value!r}")
                if what == "dtype":
                    decls[t.name] = None if isinstance(target, ShapePattern) else target
                elif isinstance(target, ShapePattern):
                    (patterns if t.role == "input" else out_patterns)[t.name] = target
        given = self.given_indices()
        ienv: dict[str, Any] = {**construct, **given}
        ctx.disc.settle_lets(ienv)
        ienv = {k: v for k, v in ienv.items() if v is not UNKNOWN}
        shapes = {t.name: self.input_shape(t.name, patterns.get(t.name), ienv)
                  for t in spec.inputs.values() if t.name in present}
        metas = {n: TensorMeta(s, None) for n, s in shapes.items()}
        env: dict[str, Any] = dict(construct)
        for name, sd in spec.static_dims.items():
            if sd.tensor not in shapes:
                continue
            try:
                axis = compile_node(sd.axis)(env)
                actual = shapes[sd.tensor][axis]
            except _EVAL_ERRORS as exc:
                self.fail("C6.unify", f"static dim {name} = {sd.expr.text} cannot be read from {sd.tensor} shape "
                          f"{list(shapes[sd.tensor])}: {exc}")
            if name in env and env[name] != actual:
                self.fail("C6.unify", f"static dim {name} = {env[name]}, but {sd.expr.text} is {actual} "
                          f"({sd.tensor} shape {list(shapes[sd.tensor])})")
            env[name] = actual
        solve_patterns = {n: p for n, p in patterns.items() if n in shapes}
        origin: dict[str, str] = {}
        try:
            run_solve(ctx.plan(solve_patterns), solve_patterns, shapes, env, origin)
        except UnifyError as exc:
            self.fail("C6.unify", exc.message)
        except Unbound as exc:
            self.fail("C7.instantiate", f"unifying the inputs needs {exc.name}, which has no value")
        for name, value in given.items():
            if name in env and _norm(env[name]) != _norm(value):
                source = origin.get(name, "the inputs")
                self.fail("C6.unify", f"the row gives {name} = {_show(value)}, but {source} gives {name} = "
                          f"{_show(env[name])}")
            env.setdefault(name, value)
        ctx.disc.settle_lets(env)
        env = {k: v for k, v in env.items() if v is not UNKNOWN}
        outputs: dict[str, tuple[int, ...]] = {}
        for o in spec.outputs.values():
            if o.alias:
                if o.alias in shapes:
                    outputs[o.name] = shapes[o.alias]
                continue
            pattern = out_patterns.get(o.name)
            if pattern is not None:
                outputs[o.name] = self.instantiate(pattern, env, f"output {o.name}")
        renv: dict[str, Any] = {**env, **{n: None for n in spec.inputs}, **metas}
        renv.update({n: TensorMeta(s, None) for n, s in outputs.items()})
        for e in spec.shape_rules:
            try:
                ok = e.fn(renv)
            except _EVAL_ERRORS:
                continue  # what cannot be evaluated is the guard check's finding, not the row's
            if not ok:
                shown = ", ".join(f"{n}={_show(renv[n])}" for n in sorted(e.names) if n in renv)
                self.diag("C6.rule", f"shape rule {e.text!r} does not hold with {shown}", key=f"rule:{e.text}")
        dtypes = []
        for d in self.dtype_entries():
            got = self.dtypes(d, present, decls, construct, combo.env)
            if got is not None:
                dtypes.append(got)
        if dtypes:
            self.roofline(env, shapes, outputs, dtypes[0])
        return RowInstance(self.row, construct, present, shapes, outputs, dtypes, env)

    def roofline(self, env: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
                 outputs: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]) -> None:
        roof = self.spec.roofline
        if roof is None or roof.func is not None or self.ctx.broken("roofline"):
            return
        renv: dict[str, Any] = {**env, **{n: None for n in self.spec.inputs}}
        for n, s in {**shapes, **outputs}.items():
            renv[n] = TensorMeta(s, dtypes.get(n))
        for name, e in roof.vars.items():
            try:
                renv[name] = e.fn(renv)
            except _EVAL_ERRORS as exc:
                self.diag("C7.roofline", f"roofline var {name} = {e.text!r} cannot be evaluated: {_why(exc)}",
                          key=f"roofline:{name}")
                return
        for e in (roof.flops, roof.bytes):
            if e is None:
                continue
            try:
                value = e.fn(renv)
            except _EVAL_ERRORS as exc:
                self.diag("C7.roofline", f"{e.loc.field} = {e.text!r} cannot be evaluated: {_why(exc)}",
                          key=f"roofline:{e.loc.field}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                self.diag("C7.roofline", f"{e.loc.field} = {e.text!r} gives {value!r}, not a non-negative number",
                          key=f"roofline:{e.loc.field}")


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _norm(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _show(v: Any) -> str:
    if isinstance(v, TensorMeta):
        return f"tensor{list(v.shape)}"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(str(i) for i in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def _why(exc: BaseException) -> str:
    return f"{exc.name} has no value" if isinstance(exc, Unbound) else str(exc) or type(exc).__name__


def instantiate_row(ctx: SpecContext, row: WorkloadRow,
                    generated: Generated | None = None) -> tuple[RowInstance | None, list[Diagnostic]]:
    """Instantiate and unify one row; the instance is None when a finding stopped it."""
    state = _Row(ctx, row, generated)
    try:
        instance = state.run()
    except _RowError:
        instance = None
    return instance, state.out
