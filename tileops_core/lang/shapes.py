"""Shape declarations: ``"[B, M, K]"``, ``"[M, 2 * N]"``, ``"[B + 1]"``, ``"[*S, N]"``, ``"[N, K // 2]"``.

A shape is a list of items; an item is either one axis (any expression of the language)
or a variadic part ``*S`` standing for several axes. Which axis can *bind* a name is
decided here (seed 000 table 1): a lone unknown name binds; ``a * M + e`` with a known
positive integer ``a`` solves for ``M``; a single unknown ``*S`` binds the remaining axes;
anything else is only checked.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..errors import ExprError
from . import ir
from .parse import parse_python, to_ir

__all__ = ["Axis", "Variadic", "ShapePattern", "parse_shape", "affine_in"]


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis whose length is the value of ``node``."""

    node: ir.Node

    @property
    def text(self) -> str:
        return ir.unparse(self.node)


@dataclass(frozen=True, slots=True)
class Variadic:
    """``*name``: a run of axes whose lengths form the Shape index ``name``."""

    name: str

    @property
    def text(self) -> str:
        return f"*{self.name}"


@dataclass(frozen=True, slots=True)
class ShapePattern:
    """A parsed shape declaration."""

    items: tuple[Axis | Variadic, ...]
    text: str

    @property
    def variadics(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.items if isinstance(i, Variadic))

    @property
    def fixed_rank(self) -> int:
        """Number of single axes (the rank when there is no variadic part)."""
        return sum(1 for i in self.items if isinstance(i, Axis))

    def names(self) -> frozenset[str]:
        """Every name the declaration mentions (indices, params, lets)."""
        out: set[str] = set(self.variadics)
        for item in self.items:
            if isinstance(item, Axis):
                out |= ir.free_names(item.node)
        return frozenset(out)

    def __str__(self) -> str:
        return "[" + ", ".join(i.text for i in self.items) + "]"


def parse_shape(text: str) -> ShapePattern:
    """Parse ``"[...]"`` into a :class:`ShapePattern`."""
    node = parse_python(text)
    if not isinstance(node, ast.List):
        raise ExprError("a shape is written as a list, e.g. \"[B, M, K]\"", text)
    items: list[Axis | Variadic] = []
    seen_variadic: set[str] = set()
    for elt in node.elts:
        if isinstance(elt, ast.Starred):
            if not isinstance(elt.value, ast.Name) or elt.value.id.startswith("_"):
                raise ExprError("a variadic part is written *Name", text, col=elt.col_offset)
            if elt.value.id in seen_variadic:
                raise ExprError(f"variadic part *{elt.value.id} appears twice", text, col=elt.col_offset)
            seen_variadic.add(elt.value.id)
            items.append(Variadic(elt.value.id))
        else:
            axis = to_ir(elt, text, 1)
            constant = _constant(axis)
            if constant is not None and not (isinstance(constant.value, int) and not isinstance(constant.value, bool)
                                             and constant.value >= 0):
                raise ExprError(f"axis length {constant.value!r} is not a non-negative integer", text)
            items.append(Axis(axis))
    return ShapePattern(tuple(items), text)


def _constant(node: ir.Node) -> ir.Const | None:
    """A literal axis, with its sign folded in (``-1`` parses as minus one, not as a literal)."""
    if isinstance(node, ir.Const):
        return node
    if isinstance(node, ir.Unary) and node.op in "+-" and isinstance(node.operand, ir.Const) \
            and isinstance(node.operand.value, (int, float)):
        return ir.Const(-node.operand.value if node.op == "-" else node.operand.value)
    return None


def affine_in(node: ir.Node, unknown: str) -> tuple[int, ir.Node] | None:
    """Write ``node`` as ``a * unknown + e`` with integer ``a`` and ``e`` free of ``unknown``.

    Returns ``(a, e)``, or None when ``node`` is not affine in ``unknown`` with a constant
    integer coefficient (then the axis can only be checked, never solved).
    """
    if unknown not in ir.free_names(node):
        return 0, node
    if isinstance(node, ir.Name):
        return 1, ir.Const(0)
    if isinstance(node, ir.Unary) and node.op in "+-":
        inner = affine_in(node.operand, unknown)
        if inner is None:
            return None
        return (inner[0], inner[1]) if node.op == "+" else (-inner[0], _neg(inner[1]))
    if isinstance(node, ir.Binary) and node.op in ("+", "-"):
        left, right = affine_in(node.left, unknown), affine_in(node.right, unknown)
        if left is None or right is None:
            return None
        if node.op == "+":
            return left[0] + right[0], _add(left[1], right[1])
        return left[0] - right[0], _add(left[1], _neg(right[1]))
    if isinstance(node, ir.Binary) and node.op == "*":
        for const, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(const, ir.Const) and type(const.value) is int:
                inner = affine_in(other, unknown)
                if inner is None:
                    return None
                return const.value * inner[0], _scale(inner[1], const.value)
        return None
    return None


def _add(a: ir.Node, b: ir.Node) -> ir.Node:
    if isinstance(a, ir.Const) and a.value == 0:
        return b
    if isinstance(b, ir.Const) and b.value == 0:
        return a
    return ir.Binary("+", a, b)


def _neg(a: ir.Node) -> ir.Node:
    if isinstance(a, ir.Const) and isinstance(a.value, int):
        return ir.Const(-a.value)
    return ir.Unary("-", a)


def _scale(a: ir.Node, k: int) -> ir.Node:
    if isinstance(a, ir.Const) and isinstance(a.value, int):
        return ir.Const(a.value * k)
    return ir.Binary("*", ir.Const(k), a)
