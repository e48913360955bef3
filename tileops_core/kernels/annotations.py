"""Annotations written as text (``from __future__ import annotations``), read without ``eval``.

The launch contract (:mod:`.contract`) compares a launcher's annotations with its interface's.
Under postponed evaluation both are strings, and ``inspect.signature(eval_str=True)`` would
hand each to ``eval`` in the defining module's globals: a plugin's string run as code, which
this project never does with what a manifest or a plugin supplies. Here a string is parsed
(``ast.parse``) and only the forms annotations are made of are resolved: names (the module's
globals, then builtins), attributes of modules and classes, subscripts of the standard
library's generics (``tuple[int, ...]``, ``Optional[X]``, ``Callable[[A], R]``, a
``typing.Generic`` subclass; constants inside ``Literal[...]`` and ``Annotated[X, ...]``'s
metadata), ``X | Y`` of types, ``None``, ``...`` and nested strings.
Anything else (a call, an operator other than ``|``, a subscript of some other object, such as
a third-party array generic) is an :class:`UnreadableAnnotation`: the contract leaves that
annotation out of the comparison and compares the others; names, order and kinds always.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["UnreadableAnnotation", "resolve_annotation", "resolved_signature"]

#: Modules whose generics and union operators are the language's own, never a plugin's code.
_STDLIB = frozenset({"builtins", "typing", "types", "collections.abc", "_collections_abc", "abc", "typing_extensions"})


class UnreadableAnnotation(ValueError):
    """An annotation string outside the forms annotations are made of (see the module docstring)."""


def resolved_signature(fn: Callable[..., Any], *, omit_unreadable: bool = False) -> inspect.Signature:
    """``inspect.signature(fn)`` with its string annotations resolved in ``fn``'s module, as
    ``eval_str=True`` would resolve them, without ``eval``. Raises NameError or AttributeError
    for a name that is not there and SyntaxError for text that is no expression. An annotation
    outside the grammar raises :class:`UnreadableAnnotation`, or with ``omit_unreadable`` is left
    out (``inspect.Parameter.empty``: compared with nothing) while the others stay resolved."""
    signature = inspect.signature(fn)
    namespace = _namespace_of(fn)

    def read(annotation: Any) -> Any:
        if not isinstance(annotation, str):
            return annotation
        try:
            return resolve_annotation(annotation, namespace)
        except UnreadableAnnotation:
            if omit_unreadable:
                return inspect.Parameter.empty
            raise

    return signature.replace(parameters=[p.replace(annotation=read(p.annotation))
                                         for p in signature.parameters.values()],
                             return_annotation=read(signature.return_annotation))


def resolve_annotation(text: str, namespace: Mapping[str, Any]) -> Any:
    """The object the annotation ``text`` names, its names looked up in ``namespace`` then builtins."""
    return _value(ast.parse(text.strip(), mode="eval").body, namespace)


def _value(node: ast.expr, ns: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        if node.value is None or node.value is Ellipsis:
            return node.value
        if isinstance(node.value, str):  # a forward reference inside the annotation
            return resolve_annotation(node.value, ns)
    elif isinstance(node, ast.Name):
        if node.id in ns:
            return ns[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise NameError(f"name {node.id!r} is not defined")
    elif isinstance(node, ast.Attribute):
        base = _value(node.value, ns)
        if isinstance(base, (types.ModuleType, type)):
            return getattr(base, node.attr)
    elif isinstance(node, ast.Subscript):
        base = _value(node.value, ns)
        if _standard_generic(base):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            # Literal's arguments are values, and so is Annotated's metadata after its first argument.
            typed = 0 if base is typing.Literal else 1 if base is typing.Annotated else len(items)
            parts = [_value(e, ns) for e in items[:typed]] + [_literal(e) for e in items[typed:]]
            args = tuple(parts) if isinstance(node.slice, ast.Tuple) else parts[0]
            return _applied(node, lambda: base[args])
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _value(node.left, ns), _value(node.right, ns)
        if _union_operand(left) and _union_operand(right):
            return _applied(node, lambda: left | right)
    elif isinstance(node, ast.List):  # the parameter list of Callable[[A, B], R]
        return [_value(e, ns) for e in node.elts]
    raise UnreadableAnnotation(f"{ast.unparse(node)!r} is not a form an annotation is made of")


def _literal(node: ast.expr) -> Any:
    """A value inside ``Literal[...]`` or ``Annotated[X, ...]``: a constant (a negative number included)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        if isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
            return -node.operand.value
    if isinstance(node, ast.Constant):
        return node.value
    raise UnreadableAnnotation(f"{ast.unparse(node)!r} is not a constant")


def _applied(node: ast.expr, form: Callable[[], Any]) -> Any:
    """A subscript or union of resolved parts; the standard library's TypeError (``tuple[1]``,
    ``Optional[int, str]``) is an unreadable annotation, not an unreadable signature."""
    try:
        return form()
    except TypeError as exc:
        raise UnreadableAnnotation(f"{ast.unparse(node)!r}: {exc}") from exc


def _standard_generic(base: Any) -> bool:
    """Whether subscripting ``base`` runs only the standard library's code (no plugin's ``__getitem__``)."""
    if not isinstance(base, type):
        return type(base).__module__ in _STDLIB  # typing's special forms and aliases, GenericAlias
    if base.__module__ == "builtins":
        return hasattr(base, "__class_getitem__")  # tuple, list, dict, type, ...
    getitem = getattr(base, "__class_getitem__", None)
    return getattr(getattr(getitem, "__func__", getitem), "__module__", None) in _STDLIB


def _union_operand(value: Any) -> bool:
    """Whether ``|`` on ``value`` is the language's union (no plugin's ``__or__``)."""
    if value is None:
        return True
    if isinstance(value, type):
        return type(value).__or__ is type.__or__ and type(value).__ror__ is type.__ror__
    return type(value).__module__ in _STDLIB


def _namespace_of(fn: Callable[..., Any]) -> Mapping[str, Any]:
    """The globals ``fn``'s annotations were written in: those of the function ``inspect.signature``
    reads them from (through ``__wrapped__``, bound methods, partials and ``__call__``)."""
    obj: Any = fn
    while True:
        obj = inspect.unwrap(obj)
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        elif isinstance(obj, functools.partial):
            obj = obj.func
        else:
            break
    if isinstance(obj, types.FunctionType):
        return obj.__globals__
    call = getattr(type(obj), "__call__", None)
    if isinstance(call, types.FunctionType):
        return call.__globals__
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return vars(module) if module is not None else {}
