"""Dtype declarations: sets, ``same_as``, ``promote_int_to_float``, DType indices, conditionals.

The forms (seed 001 "读 dtype 的四种写法" and seed 000 table 1 row 4):

* ``"float16 | bfloat16"``: one of these (a :class:`DTypeSet`);
* ``"same_as(x)"``: the dtype of input ``x`` at run time;
* ``"promote_int_to_float(x)"``: float32 when ``x`` is an integer dtype, else ``x``'s dtype
  (outputs only);
* ``"T"``: a DType index (bound to the first actual dtype it meets, checked elsewhere) or a
  param of type ``dtype``;
* ``"dtype if present(dtype) else same_as(x)"``: a conditional over discriminants.

Dtypes are handled by name here (``"bfloat16"``), so the lint needs no torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Union

from ..errors import ExprError
from . import ir
from .parse import parse_python, to_ir

__all__ = [
    "FLOAT_DTYPES", "INT_DTYPES", "DTYPE_NAMES", "DTypeSet", "SameAs", "PromoteIntToFloat", "DTypeRef",
    "DTypeIf", "DTypeExpr", "parse_dtype", "parse_dtype_set", "dtype_refs", "promote_int_to_float",
]

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64")
COMPLEX_DTYPES = ("complex64", "complex128")
#: Every dtype name the language knows (torch's attribute names).
DTYPE_NAMES = frozenset(FLOAT_DTYPES + INT_DTYPES + COMPLEX_DTYPES)


@dataclass(frozen=True, slots=True)
class DTypeSet:
    """One of ``names`` (in declaration order)."""

    names: tuple[str, ...]

    def __str__(self) -> str:
        return " | ".join(self.names)


@dataclass(frozen=True, slots=True)
class SameAs:
    """The run-time dtype of input ``tensor``."""

    tensor: str

    def __str__(self) -> str:
        return f"same_as({self.tensor})"


@dataclass(frozen=True, slots=True)
class PromoteIntToFloat:
    """float32 when ``tensor`` is an integer (or bool) dtype, else the same dtype."""

    tensor: str

    def __str__(self) -> str:
        return f"promote_int_to_float({self.tensor})"


@dataclass(frozen=True, slots=True)
class DTypeRef:
    """A DType index or a ``dtype`` param, by name."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class DTypeIf:
    """``body if test else orelse``, the test over discriminants."""

    test: ir.Node
    body: "DTypeExpr"
    orelse: "DTypeExpr"

    def __str__(self) -> str:
        return f"{self.body} if {ir.unparse(self.test)} else {self.orelse}"


DTypeExpr = Union[DTypeSet, SameAs, PromoteIntToFloat, DTypeRef, DTypeIf]


def promote_int_to_float(name: str) -> str:
    """The dtype name ``promote_int_to_float`` gives for an input of dtype ``name``."""
    return "float32" if name in INT_DTYPES else name


def parse_dtype_set(text: str) -> DTypeSet:
    """Parse ``"a | b | c"`` where every item is a dtype name."""
    result = _convert(parse_python(text), text)
    if not isinstance(result, DTypeSet):
        raise ExprError("expected a set of dtype names such as \"float16 | bfloat16\"", text)
    return result


def parse_dtype(text: str) -> DTypeExpr:
    """Parse a dtype declaration into a :data:`DTypeExpr`."""
    return _convert(parse_python(text), text)


def _union_names(node: ast.expr, text: str) -> list[str] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _union_names(node.left, text), _union_names(node.right, text)
        if left is None or right is None:
            return None
        return left + right
    if isinstance(node, ast.Name) and node.id in DTYPE_NAMES:
        return [node.id]
    return None


def _convert(node: ast.expr, text: str) -> DTypeExpr:
    names = _union_names(node, text)
    if names is not None:
        if len(set(names)) != len(names):
            raise ExprError("a dtype is listed twice", text)
        return DTypeSet(tuple(names))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        raise ExprError("every item of a dtype set must be a dtype name (known: "
                        + ", ".join(sorted(DTYPE_NAMES)) + ")", text, col=node.col_offset)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        func = node.func.id
        if func in ("same_as", "promote_int_to_float"):
            if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], ast.Name):
                raise ExprError(f"{func}() takes the name of one input", text, col=node.col_offset)
            arg = node.args[0].id
            return SameAs(arg) if func == "same_as" else PromoteIntToFloat(arg)
        raise ExprError(f"unknown dtype function {func!r} (known: same_as, promote_int_to_float)", text,
                        col=node.col_offset)
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise ExprError(f"name {node.id!r} is not allowed", text)
        return DTypeRef(node.id)
    if isinstance(node, ast.IfExp):
        return DTypeIf(to_ir(node.test, text, 1), _convert(node.body, text), _convert(node.orelse, text))
    raise ExprError(f"{type(node).__name__} is not a dtype declaration", text, col=getattr(node, "col_offset", None))


def dtype_refs(expr: DTypeExpr) -> frozenset[str]:
    """Names a dtype declaration refers to (tensors, params, DType indices, test names)."""
    if isinstance(expr, DTypeSet):
        return frozenset()
    if isinstance(expr, (SameAs, PromoteIntToFloat)):
        return frozenset({expr.tensor})
    if isinstance(expr, DTypeRef):
        return frozenset({expr.name})
    return ir.free_names(expr.test) | dtype_refs(expr.body) | dtype_refs(expr.orelse)
