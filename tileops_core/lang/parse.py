"""Parse spec strings into the IR, accepting only a whitelist of syntax and primitives.

Python's ``ast`` is the tokenizer and parser; everything it produces is then converted
node by node into :mod:`tileops_core.lang.ir`, and any node kind, attribute, call or
operator outside the language is rejected with :class:`ExprError`. Nothing is evaluated
while parsing, so hostile text (``__import__('os')``, lambdas, ``9**9**9**9``) costs at
most a bounded parse and an error.
"""

from __future__ import annotations

import ast
from typing import Any, Callable

from ..errors import ExprError
from . import ir

__all__ = ["PRIMITIVES", "MAX_TEXT", "MAX_DEPTH", "parse_expr", "parse_python", "to_ir"]

#: Longest spec string accepted; a spec expression is a line, not a program.
MAX_TEXT = 2000
#: Deepest IR tree accepted.
MAX_DEPTH = 48

#: Built-in primitives and their accepted argument counts (min, max).
PRIMITIVES: dict[str, tuple[int, int]] = {
    "present": (1, 1),       # present(x): an optional input / Maybe value was given
    "product": (1, 1),       # product(t): product of a tuple's items (1 for ())
    "per_axis": (3, 3),      # per_axis(s, i, n): s[i] if s is a tuple of n items, else s
    "unique_axes": (2, 2),   # unique_axes(dim, n): the axes of dim, taken mod n, are distinct
    "dims_in_range": (2, 2), # dims_in_range(dim, n): every axis of dim lies in [-n, n)
    "reduced_shape": (3, 3), # reduced_shape(S, dim, keepdim): S reduced over dim (None = all)
    "len": (1, 1),
    "min": (1, 8),
    "max": (1, 8),
    "abs": (1, 1),
    "tuple": (1, 1),         # tuple(x): x as a tuple (lists and tuples are one kind here)
}

_BINOPS: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
}
_CMPOPS: dict[type, str] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in",
}
_UNARY: dict[type, str] = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}


def parse_python(text: str) -> ast.expr:
    """Parse ``text`` as one Python expression, turning every parser failure into ExprError."""
    if not isinstance(text, str):
        raise ExprError(f"expected a string, got {type(text).__name__}", repr(text))
    if len(text) > MAX_TEXT:
        raise ExprError(f"expression longer than {MAX_TEXT} characters", text[:60] + "...")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"syntax error: {exc.msg}", text, col=exc.offset) from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise ExprError(f"cannot parse: {type(exc).__name__}", text) from None


def parse_expr(text: str) -> ir.Node:
    """Parse a spec expression (a refinement, ``let``, roofline formula, ...) into the IR."""
    return to_ir(parse_python(text), text)


def to_ir(node: ast.expr, text: str, depth: int = 0,
          extra: Callable[[ast.expr, str, int], ir.Node | None] | None = None) -> ir.Node:
    """Convert one whitelisted ``ast`` node (recursively) into the IR.

    ``extra`` lets the shape/dtype/type parsers handle forms of their own first.
    """
    if depth > MAX_DEPTH:
        raise ExprError(f"expression nested deeper than {MAX_DEPTH}", text)
    if extra is not None:
        special = extra(node, text, depth)
        if special is not None:
            return special

    def sub(child: ast.expr) -> ir.Node:
        return to_ir(child, text, depth + 1, extra)

    col = getattr(node, "col_offset", None)
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (bool, int, float, str)):
            if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) > 2**63:
                raise ExprError("integer literal out of range", text, col=col)
            return ir.Const(node.value)
        raise ExprError(f"literal of type {type(node.value).__name__} is not in the language", text, col=col)
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise ExprError(f"name {node.id!r} is not allowed (names may not start with '_')", text, col=col)
        return ir.Name(node.id)
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            raise ExprError(f"attribute {node.attr!r} is not allowed", text, col=col)
        return ir.Attr(sub(node.value), node.attr)
    if isinstance(node, ast.Subscript):
        target = sub(node.value)
        if isinstance(node.slice, ast.Slice):
            s = node.slice
            return ir.Slice(target, *(None if p is None else sub(p) for p in (s.lower, s.upper, s.step)))
        if isinstance(node.slice, ast.Tuple):
            raise ExprError("multi-dimensional subscripts are not in the language", text, col=col)
        return ir.Index(target, sub(node.slice))
    if isinstance(node, ast.UnaryOp):
        op = _UNARY.get(type(node.op))
        if op is None:
            raise ExprError(f"operator {type(node.op).__name__} is not in the language", text, col=col)
        return ir.Unary(op, sub(node.operand))
    if isinstance(node, ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ExprError(f"operator {type(node.op).__name__} is not in the language", text, col=col)
        left, right = sub(node.left), sub(node.right)
        if op == "**":
            _check_exponent(right, text, col)
        return ir.Binary(op, left, right)
    if isinstance(node, ast.BoolOp):
        return ir.BoolOp("and" if isinstance(node.op, ast.And) else "or", tuple(sub(v) for v in node.values))
    if isinstance(node, ast.Compare):
        return _compare(node, text, sub)
    if isinstance(node, ast.IfExp):
        return ir.IfExp(sub(node.test), sub(node.body), sub(node.orelse))
    if isinstance(node, (ast.Tuple, ast.List)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise ExprError("starred items are only allowed in shapes", text, col=col)
        return ir.Tuple(tuple(sub(e) for e in node.elts))
    if isinstance(node, ast.Call):
        return _call(node, text, sub)
    if isinstance(node, ast.SetComp):
        raise ExprError("comprehensions are not in the language", text, col=col, rule="T3.7",
                        rewrite="unique_axes(dim, n)")
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp)):
        raise ExprError("comprehensions are not in the language", text, col=col)
    raise ExprError(f"{type(node).__name__} is not in the language", text, col=col)


def _compare(node: ast.Compare, text: str, sub: Callable[[ast.expr], ir.Node]) -> ir.Node:
    if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
        right = node.comparators[0]
        if isinstance(right, ast.Constant) and right.value is None:
            return ir.IsNone(sub(node.left), negated=isinstance(node.ops[0], ast.IsNot))
    ops = []
    for op in node.ops:
        name = _CMPOPS.get(type(op))
        if name is None:
            raise ExprError(f"comparison {type(op).__name__} is not in the language (only 'is None' is)", text,
                            col=node.col_offset)
        ops.append(name)
    return ir.Compare(sub(node.left), tuple(ops), tuple(sub(c) for c in node.comparators))


def _call(node: ast.Call, text: str, sub: Callable[[ast.expr], ir.Node]) -> ir.Node:
    col = node.col_offset
    if not isinstance(node.func, ast.Name):
        raise ExprError("only built-in primitives can be called", text, col=col)
    func = node.func.id
    if func == "isinstance":
        raise ExprError("isinstance is not in the language", text, col=col, rule="T3.6",
                        rewrite="per_axis(s, i, n)")
    if func not in PRIMITIVES:
        raise ExprError(f"unknown primitive {func!r}; known: {', '.join(sorted(PRIMITIVES))}", text, col=col)
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise ExprError(f"{func}() takes positional arguments only", text, col=col)
    lo, hi = PRIMITIVES[func]
    if not lo <= len(node.args) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise ExprError(f"{func}() takes {want} argument(s), got {len(node.args)}", text, col=col)
    args = tuple(sub(a) for a in node.args)
    if func == "present" and not isinstance(args[0], ir.Name):
        raise ExprError("present() takes the name of an input or a param", text, col=col)
    return ir.Call(func, args)


#: Largest exponent the language accepts in a constant: formulas need squares and roots, not
#: towers (the evaluator enforces the same bound on exponents known only at a call).
MAX_CONST_EXPONENT = 64


def _constant_value(node: ir.Node) -> Any:
    """The value of a constant subexpression (literals, unary minus, and ``**`` of constants), else None."""
    if isinstance(node, ir.Const):
        return node.value if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) else None
    if isinstance(node, ir.Binary) and node.op == "**":
        base, exponent = _constant_value(node.left), _constant_value(node.right)
        if base is None or exponent is None:
            return None
        return base**exponent  # both checked: the exponent is at most MAX_CONST_EXPONENT
    return None


def _check_exponent(exponent: ir.Node, text: str, col: int | None) -> None:
    """A constant exponent beyond the bound is a spec error at compile time, with its text and column."""
    value = _constant_value(exponent)
    if value is not None and abs(value) > MAX_CONST_EXPONENT:
        raise ExprError(f"exponent {value} is larger than {MAX_CONST_EXPONENT}", text, col=col)

