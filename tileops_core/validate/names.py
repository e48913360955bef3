"""Checks 1 (static half) and 4: a param's type fits each place it is used; lets are acyclic.

The spec compiler already gives every name its kind and rejects names used as the wrong
kind (rule ``C1``). What it does not know is whether a param's *type* fits its use: an
axis length needs an ``int``, a variadic part a list of ints, arithmetic a number,
``present()`` something that can be absent, and comparing an enum param with a string it
can never hold is a typo. Those are checked here, over every expression of the spec.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import Location
from ..lang import ir
from ..lang.dtypes import DTypeIf
from ..lang.shapes import ShapePattern, Variadic
from ..lang.types import Enum, ListOf, NoneT, ParamType, Prim, TupleOf, UnionT
from ..spec.nodes import Expr, OpSpec
from .context import SpecContext
from .cycles import find_cycles
from .diagnostics import Diagnostic

__all__ = ["check_param_usage", "check_let_cycles", "spec_expressions"]


def _options(t: ParamType) -> tuple[ParamType, ...]:
    return tuple(o for o in (t.options if isinstance(t, UnionT) else (t,)) if not isinstance(o, NoneT))


def _is_int(t: ParamType) -> bool:
    return isinstance(t, Prim) and t.kind == "int"


def _is_numeric(t: ParamType) -> bool:
    return isinstance(t, Prim) and t.kind in ("int", "float")


def _is_int_seq(t: ParamType) -> bool:
    return (isinstance(t, ListOf) and _is_int(t.item)) or (isinstance(t, TupleOf) and all(_is_int(i) for i in t.items))


def _is_maybe(t: ParamType) -> bool:
    return isinstance(t, UnionT) and any(isinstance(o, NoneT) for o in t.options)


def spec_expressions(spec: OpSpec) -> Iterator[Expr]:
    """Every parsed expression of the spec (refinements, lets, matches, roofline, static dims)."""
    yield from spec.shape_rules
    yield from spec.requires
    yield from spec.lets.values()
    for fam in spec.families.values():
        yield fam.match
    for sd in spec.static_dims.values():
        yield sd.expr
    if spec.roofline is not None:
        yield from spec.roofline.vars.values()
        for e in (spec.roofline.flops, spec.roofline.bytes):
            if e is not None:
                yield e


def _shape_declarations(ctx: SpecContext) -> Iterator[tuple[ShapePattern, Location]]:
    spec = ctx.spec
    for t in [*spec.inputs.values(), *spec.outputs.values()]:
        if isinstance(t.shape, ShapePattern):
            yield t.shape, t.loc
    for fam in spec.families.values():
        for _, case in fam.cases:
            if isinstance(case, ShapePattern):
                yield case, fam.loc


def check_param_usage(ctx: SpecContext) -> list[Diagnostic]:
    """Check 1: every use of a param is one its type allows."""
    spec = ctx.spec
    params = spec.params
    out: list[Diagnostic] = []
    for pattern, loc in _shape_declarations(ctx):
        for item in pattern.items:
            if isinstance(item, Variadic):
                p = params.get(item.name)
                if p is not None and not all(_is_int_seq(o) for o in _options(p.type)):
                    out.append(ctx.diag("C1.param-usage", f"param {item.name} ({p.type_text}) is used as the variadic "
                                        f"part *{item.name} of {pattern.text}, which needs a list of ints",
                                        loc=loc, text=pattern.text, key=f"variadic:{item.name}"))
                continue
            for name in sorted(ir.free_names(item.node)):
                p = params.get(name)
                if p is not None and not any(_is_int(o) for o in _options(p.type)):
                    out.append(ctx.diag("C1.param-usage", f"param {name} ({p.type_text}) is used in the axis "
                                        f"{item.text} of {pattern.text}, which needs an int", loc=loc,
                                        text=pattern.text, key=f"axis:{name}"))
    for sd in spec.static_dims.values():
        if isinstance(sd.axis, ir.Name) and sd.axis.id in params:
            p = params[sd.axis.id]
            if not all(_is_int(o) for o in _options(p.type)) or _is_maybe(p.type):
                out.append(ctx.diag("C1.param-usage", f"static dim {sd.name} indexes {sd.tensor}.shape with param "
                                    f"{sd.axis.id} ({p.type_text}), which must be an int", loc=sd.expr.loc,
                                    text=sd.expr.text))
    for e in spec_expressions(ctx.spec):
        if not ctx.flagged(e.loc):
            out.extend(_expression_usage(ctx, e))
    for t in [*spec.inputs.values(), *spec.outputs.values()]:
        if isinstance(t.dtype, DTypeIf):
            e = Expr(t.dtype.test, ir.unparse(t.dtype.test), t.loc.child("dtype"))
            out.extend(_expression_usage(ctx, e))
    return out


def _expression_usage(ctx: SpecContext, e: Expr) -> Iterator[Diagnostic]:
    spec = ctx.spec
    params = spec.params
    for node in ir.walk(e.node):
        if isinstance(node, ir.Call) and node.func == "present":
            name = ir.tested_name(node)
            t = spec.inputs.get(name)
            p = params.get(name)
            if t is not None and not t.optional:
                yield ctx.diag("C1.param-usage", f"present({name}) is always true: {name} is a required input",
                               loc=e.loc, text=e.text, fix=f"drop present({name}) or declare {name} optional: true")
            elif p is not None and not _is_maybe(p.type):
                yield ctx.diag("C1.param-usage", f"present({name}) is always true: param {name} ({p.type_text}) "
                               "cannot be None", loc=e.loc, text=e.text)
            elif t is None and p is None:
                yield ctx.diag("C1.param-usage", f"present() takes an optional input or a Maybe param, not {name}",
                               loc=e.loc, text=e.text)
        elif isinstance(node, (ir.Binary, ir.Unary)) and not (isinstance(node, ir.Unary) and node.op == "not"):
            operands = (node.left, node.right) if isinstance(node, ir.Binary) else (node.operand,)
            for operand in operands:
                if isinstance(operand, ir.Name) and operand.id in params:
                    p = params[operand.id]
                    if not any(_is_numeric(o) or _is_int_seq(o) for o in _options(p.type)):
                        yield ctx.diag("C1.param-usage", f"param {operand.id} ({p.type_text}) is used in arithmetic "
                                       f"({node.op})", loc=e.loc, text=e.text, key=f"arith:{operand.id}")
        elif isinstance(node, ir.Compare):
            yield from _enum_comparison(ctx, e, node)


def _enum_comparison(ctx: SpecContext, e: Expr, node: ir.Compare) -> Iterator[Diagnostic]:
    params = ctx.spec.params
    sides = (node.left, *node.comparators)
    for left, op, right in zip(sides, node.ops, sides[1:]):
        for a, b in ((left, right), (right, left)):
            if not (isinstance(a, ir.Name) and a.id in params):
                continue
            enums = [o for o in _options(params[a.id].type) if isinstance(o, Enum)]
            if not enums or any(not isinstance(o, Enum) for o in _options(params[a.id].type)):
                continue
            allowed = {v for o in enums for v in o.values}
            consts = [b] if op in ("==", "!=") else (list(b.items) if isinstance(b, ir.Tuple) and op in
                                                      ("in", "not in") else [])
            for c in consts:
                if isinstance(c, ir.Const) and c.value not in allowed:
                    yield ctx.diag("C1.param-usage", f"param {a.id} is compared with {c.value!r}, which is not one of "
                                   f"its values ({', '.join(repr(v) for v in sorted(allowed))})", loc=e.loc,
                                   text=e.text)


def check_let_cycles(ctx: SpecContext) -> list[Diagnostic]:
    """Check 4: let entries do not depend on each other in a cycle (each cycle reported once)."""
    lets = ctx.spec.lets
    deps = {n: sorted(e.names & set(lets)) for n, e in lets.items()}
    return [ctx.diag("C4.cycle", "let entries depend on each other in a cycle: " + " -> ".join(cycle),
                     loc=lets[cycle[0]].loc, text=lets[cycle[0]].text) for cycle in find_cycles(deps)]

