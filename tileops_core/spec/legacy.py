"""The ``shape_rules`` forms seed 000 rejects (table 3), recognised with their rewrite.

A shape rule is a refinement only. Written the seed-001 way it may instead read a tensor's
shape (``x.shape[0] == M``: T3.1), compare two shapes (T3.2), define a name with ``==``
(T3.3) or test presence with ``is None`` (T3.4 for a tensor, T3.5 for a value). Each is
reported with the canonical form to write instead; all but T3.3 still evaluate, so a lenient
load keeps working (the problem is not fatal). The presence forms (T3.4, T3.5) are rejected
in every expression field, not only in shape rules (:func:`presence_form`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Mapping

from ..lang import ir
from .nodes import Expr

__all__ = ["LegacyForm", "legacy_form", "presence_form", "rewrite_is_none"]


@dataclass(frozen=True)
class LegacyForm:
    """A rejected form found in a shape rule: what it is, its table-3 rule id and the rewrite.

    ``fatal``: the rule does not evaluate as written (T3.3's ``==`` reads a name nothing
    declares), so its field is marked broken and the checks that depend on it are skipped.
    """

    message: str
    rule: str
    fix: str
    fatal: bool = False


def legacy_form(e: Expr, kinds: Mapping[str, str]) -> LegacyForm | None:
    """The first table-3 form in the shape rule ``e`` (``kinds``: declared name -> kind), or None."""
    node = e.node
    if isinstance(node, ir.Compare) and node.ops == ("==",) and isinstance(node.left, ir.Name) \
            and node.left.id not in kinds:
        return LegacyForm(f"'==' cannot define the new name {node.left.id!r}", "T3.3",
                          f'let: {{{node.left.id}: "{ir.unparse(node.comparators[0])}"}}', fatal=True)
    for sub in ir.walk(node):
        if isinstance(sub, ir.Compare) and sub.ops == ("==",):
            sides = (sub.left, sub.comparators[0])
            shapes = [s for s in sides if _is_shape_read(s, kinds)]
            if len(shapes) == 2:
                return LegacyForm("two tensors' shapes are compared; give both tensors the same shape items instead",
                                  "T3.2", "declare one shape for both, e.g. [*S] on each tensor")
            if len(shapes) == 1:
                other = sides[1] if shapes[0] is sides[0] else sides[0]
                tname = _shape_read_tensor(shapes[0])
                fix = f'{tname}: {{shape: "{_tuple_as_shape(other)}"}}' if isinstance(other, ir.Tuple) else \
                    f"declare the shape of {tname} and use its index names"
                return LegacyForm(f"a shape rule reads {tname}.shape", "T3.1", fix)
    if any(isinstance(s, ir.Attr) and s.attr in ("shape", "ndim") and isinstance(s.value, ir.Name)
           and kinds.get(s.value.id) == "tensor" for s in ir.walk(node)):
        return LegacyForm("a shape rule reads a tensor's shape", "T3.1",
                          "declare the tensor's shape and refer to its index names")
    return presence_form(node, frozenset(n for n, k in kinds.items() if k == "tensor"))


def presence_form(node: ir.Node, tensors: AbstractSet[str]) -> LegacyForm | None:
    """``x is None`` / ``x is not None`` anywhere in ``node`` (T3.4 on a tensor, T3.5 on a value), or None.

    Every expression field gets this check, not only ``shape_rules``: presence is
    ``present(x)`` wherever it is tested (``requires``, ``let``, a family's ``match``, a
    dtype condition, the roofline).
    """
    for sub in ir.walk(node):
        if isinstance(sub, ir.IsNone) and isinstance(sub.operand, ir.Name):
            return LegacyForm(f"'{ir.unparse(sub)}' tests presence with 'is None'",
                              "T3.4" if sub.operand.id in tensors else "T3.5", ir.unparse(rewrite_is_none(node)))
    return None


def rewrite_is_none(node: ir.Node) -> ir.Node:
    """Replace every ``x is None`` / ``x is not None`` with ``not present(x)`` / ``present(x)``."""
    if isinstance(node, ir.IsNone) and isinstance(node.operand, ir.Name):
        call = ir.Call("present", (node.operand,))
        return call if node.negated else ir.Unary("not", call)
    if isinstance(node, ir.BoolOp):
        return ir.BoolOp(node.op, tuple(rewrite_is_none(v) for v in node.values))
    if isinstance(node, ir.Unary):
        return ir.Unary(node.op, rewrite_is_none(node.operand))
    if isinstance(node, ir.Compare):
        return ir.Compare(rewrite_is_none(node.left), node.ops, tuple(rewrite_is_none(c) for c in node.comparators))
    if isinstance(node, ir.IfExp):
        return ir.IfExp(rewrite_is_none(node.test), rewrite_is_none(node.body), rewrite_is_none(node.orelse))
    return node


def _is_shape_read(node: ir.Node, kinds: Mapping[str, str]) -> bool:
    return isinstance(node, ir.Attr) and node.attr == "shape" and isinstance(node.value, ir.Name) \
        and kinds.get(node.value.id) == "tensor"


def _shape_read_tensor(node: ir.Node) -> str:
    """The tensor ``x`` of a shape read ``x.shape`` (see :func:`_is_shape_read`)."""
    assert isinstance(node, ir.Attr) and isinstance(node.value, ir.Name)
    return node.value.id


def _tuple_as_shape(node: ir.Tuple) -> str:
    return "[" + ", ".join(ir.unparse(i) for i in node.items) + "]"
