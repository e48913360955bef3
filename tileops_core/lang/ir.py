"""The IR of the spec language: a small, closed set of frozen expression nodes.

Every string of a spec is parsed (by :mod:`tileops_core.lang.parse`) into these nodes and
nothing else. Evaluation, name resolution, solvability analysis and code generation all
walk this IR; no spec text is ever handed to Python's ``eval``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Union

__all__ = [
    "Node", "Const", "Name", "Attr", "Index", "Slice", "Unary", "Binary", "BoolOp", "Compare",
    "IfExp", "Tuple", "Call", "IsNone", "walk", "free_names", "called", "presence_tests", "tested_name",
    "unparse",
]


@dataclass(frozen=True, slots=True)
class Const:
    """A literal: int, float, bool, str or None."""

    value: Any


@dataclass(frozen=True, slots=True)
class Name:
    """A reference to a tensor, param, index, let or roofline var (resolved by the spec compiler)."""

    id: str


@dataclass(frozen=True, slots=True)
class Attr:
    """``value.attr``: tensor metadata (``shape``, ``ndim``, ``itemsize``) or an ADT field/``tag``."""

    value: "Node"
    attr: str


@dataclass(frozen=True, slots=True)
class Index:
    """``value[index]`` with a single index."""

    value: "Node"
    index: "Node"


@dataclass(frozen=True, slots=True)
class Slice:
    """``value[lower:upper:step]``; absent bounds are None."""

    value: "Node"
    lower: "Node | None"
    upper: "Node | None"
    step: "Node | None"


@dataclass(frozen=True, slots=True)
class Unary:
    """``-x``, ``+x`` or ``not x``."""

    op: str
    operand: "Node"


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic: ``+ - * / // % **``."""

    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True, slots=True)
class BoolOp:
    """``a and b and ...`` / ``a or b or ...`` (short-circuiting)."""

    op: str
    values: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Compare:
    """A (possibly chained) comparison: ``a < b <= c``."""

    left: "Node"
    ops: tuple[str, ...]
    comparators: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class IfExp:
    """``body if test else orelse``."""

    test: "Node"
    body: "Node"
    orelse: "Node"


@dataclass(frozen=True, slots=True)
class Tuple:
    """A tuple display ``(a, b)``; lists in spec text become tuples too."""

    items: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Call:
    """A call of a built-in primitive (never of anything else)."""

    func: str
    args: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class IsNone:
    """``x is None`` / ``x is not None``: a legacy spelling of ``not present(x)`` / ``present(x)``.

    Kept in the IR so that a lenient load still works while the validator reports the
    form with its rewrite (seed 000 table 3, rows 4 and 5).
    """

    operand: "Node"
    negated: bool


Node = Union[Const, Name, Attr, Index, Slice, Unary, Binary, BoolOp, Compare, IfExp, Tuple, Call, IsNone]


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, (Attr,)):
        yield node.value
    elif isinstance(node, Index):
        yield node.value
        yield node.index
    elif isinstance(node, Slice):
        yield node.value
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                yield part
    elif isinstance(node, Unary):
        yield node.operand
    elif isinstance(node, Binary):
        yield node.left
        yield node.right
    elif isinstance(node, (BoolOp,)):
        yield from node.values
    elif isinstance(node, Compare):
        yield node.left
        yield from node.comparators
    elif isinstance(node, IfExp):
        yield node.test
        yield node.body
        yield node.orelse
    elif isinstance(node, Tuple):
        yield from node.items
    elif isinstance(node, Call):
        yield from node.args
    elif isinstance(node, IsNone):
        yield node.operand


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, parents before children (iteratively: trees may be deep)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(_children(current))))


def free_names(node: Node) -> frozenset[str]:
    """The names an expression refers to."""
    return frozenset(n.id for n in walk(node) if isinstance(n, Name))


def tested_name(call: Call) -> str:
    """The name a ``present(x)`` call tests (the parser admits only a name there)."""
    arg = call.args[0]
    if not isinstance(arg, Name):
        raise TypeError(f"present({unparse(arg)}): the parser admits only a name")
    return arg.id


def presence_tests(node: Node) -> list[Name]:
    """The name nodes that ``present(...)`` tests in an expression (the parser admits only a name there)."""
    return [a for n in walk(node) if isinstance(n, Call) and n.func == "present" for a in n.args[:1]
            if isinstance(a, Name)]


def called(node: Node) -> frozenset[str]:
    """The primitives an expression calls."""
    return frozenset(n.func for n in walk(node) if isinstance(n, Call))


_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7,
               "neg": 8, "**": 9}


def unparse(node: Node, parent: int = 0) -> str:
    """Canonical text of an IR tree (used in messages and by ``validate --fix``)."""
    if isinstance(node, Const):
        return repr(node.value)
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Attr):
        return f"{unparse(node.value, 10)}.{node.attr}"
    if isinstance(node, Index):
        return f"{unparse(node.value, 10)}[{unparse(node.index)}]"
    if isinstance(node, Slice):
        parts = ["" if p is None else unparse(p) for p in (node.lower, node.upper)]
        text = ":".join(parts) + ("" if node.step is None else ":" + unparse(node.step))
        return f"{unparse(node.value, 10)}[{text}]"
    if isinstance(node, Unary):
        if node.op == "not":
            return _wrap(f"not {unparse(node.operand, 3)}", 3, parent)
        return _wrap(f"{node.op}{unparse(node.operand, 8)}", 8, parent)
    if isinstance(node, Binary):
        prec = _PRECEDENCE[node.op]
        right_prec = prec + (0 if node.op == "**" else 1)
        left_prec = prec + (1 if node.op == "**" else 0)
        return _wrap(f"{unparse(node.left, left_prec)} {node.op} {unparse(node.right, right_prec)}", prec, parent)
    if isinstance(node, BoolOp):
        prec = _PRECEDENCE[node.op]
        return _wrap(f" {node.op} ".join(unparse(v, prec + 1) for v in node.values), prec, parent)
    if isinstance(node, Compare):
        parts = [unparse(node.left, 5)]
        for op, comp in zip(node.ops, node.comparators):
            parts.append(f"{op} {unparse(comp, 5)}")
        return _wrap(" ".join(parts), 4, parent)
    if isinstance(node, IfExp):
        return _wrap(f"{unparse(node.body, 1)} if {unparse(node.test, 1)} else {unparse(node.orelse, 0)}", 0, parent)
    if isinstance(node, Tuple):
        if len(node.items) == 1:
            return f"({unparse(node.items[0])},)"
        return "(" + ", ".join(unparse(i) for i in node.items) + ")"
    if isinstance(node, Call):
        return f"{node.func}(" + ", ".join(unparse(a) for a in node.args) + ")"
    if isinstance(node, IsNone):
        return _wrap(f"{unparse(node.operand, 5)} is {'not ' if node.negated else ''}None", 4, parent)
    raise TypeError(f"not an IR node: {node!r}")


def _wrap(text: str, prec: int, parent: int) -> str:
    return f"({text})" if prec < parent else text
