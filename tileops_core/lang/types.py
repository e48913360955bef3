"""Param types: ``bool``, ``int``, ``float``, ``str`` enums, ``list[int]``, ``tuple[int, ...]``,
``dtype[...]``, ``X | None`` (Maybe) and declared ADTs.

A type checks a Python value and normalises it (lists become tuples, torch dtypes become
their names) so that generated checks and cache keys see one spelling of each value.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Union

from ..errors import ExprError
from .dtypes import DTypeSet, _union_names
from .parse import parse_python

__all__ = [
    "Prim", "Enum", "ListOf", "TupleOf", "DTypeParam", "ADTRef", "NoneT", "UnionT", "ParamType",
    "parse_type", "is_maybe", "dtype_name",
]


def dtype_name(value: Any) -> str | None:
    """The name of a dtype given as a string or a ``torch.dtype`` (None if it is neither)."""
    if isinstance(value, str):
        return value
    if type(value).__name__ == "dtype" and type(value).__module__ == "torch":
        return str(value).removeprefix("torch.")
    return None


@dataclass(frozen=True, slots=True)
class Prim:
    """``bool``, ``int``, ``float``, ``str`` or ``device``."""

    kind: str

    def accepts(self, value: Any) -> bool:
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.kind == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind == "device":
            return isinstance(value, str) or type(value).__name__ == "device"
        return isinstance(value, str)

    def normalise(self, value: Any) -> Any:
        if self.kind == "float":
            return float(value)
        if self.kind == "device":
            return str(value)
        return value

    def __str__(self) -> str:
        return self.kind


@dataclass(frozen=True, slots=True)
class Enum:
    """One of a fixed set of strings: ``"lengths" | "cu_seqlens"``."""

    values: tuple[str, ...]

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def normalise(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        return " | ".join(repr(v) for v in self.values)


@dataclass(frozen=True, slots=True)
class ListOf:
    """``list[T]``: any length; normalised to a tuple."""

    item: "ParamType"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(self.item.accepts(v) for v in value)

    def normalise(self, value: Any) -> Any:
        return tuple(self.item.normalise(v) for v in value)

    def __str__(self) -> str:
        return f"list[{self.item}]"


@dataclass(frozen=True, slots=True)
class TupleOf:
    """``tuple[T, ...]`` (any length) or ``tuple[A, B]`` (fixed)."""

    items: tuple["ParamType", ...]
    variadic: bool

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if self.variadic:
            return all(self.items[0].accepts(v) for v in value)
        return len(value) == len(self.items) and all(t.accepts(v) for t, v in zip(self.items, value))

    def normalise(self, value: Any) -> Any:
        if self.variadic:
            return tuple(self.items[0].normalise(v) for v in value)
        return tuple(t.normalise(v) for t, v in zip(self.items, value))

    def __str__(self) -> str:
        if self.variadic:
            return f"tuple[{self.items[0]}, ...]"
        return "tuple[" + ", ".join(str(t) for t in self.items) + "]"


@dataclass(frozen=True, slots=True)
class DTypeParam:
    """``dtype`` or ``dtype[float16 | bfloat16]``: a torch dtype, optionally from a set."""

    allowed: DTypeSet | None

    def accepts(self, value: Any) -> bool:
        name = dtype_name(value)
        if name is None:
            return False
        return self.allowed is None or name in self.allowed.names

    def normalise(self, value: Any) -> Any:
        return dtype_name(value)

    def __str__(self) -> str:
        return "dtype" if self.allowed is None else f"dtype[{self.allowed}]"


@dataclass(frozen=True, slots=True)
class ADTRef:
    """A tagged union declared under the spec's ``types`` (checked by the spec compiler)."""

    name: str

    def accepts(self, value: Any) -> bool:
        return getattr(value, "adt", None) == self.name

    def normalise(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class NoneT:
    """``None``: the absent half of a Maybe."""

    def accepts(self, value: Any) -> bool:
        return value is None

    def normalise(self, value: Any) -> Any:
        return None

    def __str__(self) -> str:
        return "None"


@dataclass(frozen=True, slots=True)
class UnionT:
    """``A | B``: the first option that accepts a value normalises it."""

    options: tuple["ParamType", ...]

    def accepts(self, value: Any) -> bool:
        return any(o.accepts(value) for o in self.options)

    def normalise(self, value: Any) -> Any:
        for option in self.options:
            if option.accepts(value):
                return option.normalise(value)
        return value

    def __str__(self) -> str:
        return " | ".join(str(o) for o in self.options)


ParamType = Union[Prim, Enum, ListOf, TupleOf, DTypeParam, ADTRef, NoneT, UnionT]

_PRIMS = ("bool", "int", "float", "str", "device")


def is_maybe(t: ParamType) -> bool:
    """True for ``X | None``."""
    return isinstance(t, UnionT) and any(isinstance(o, NoneT) for o in t.options)


def parse_type(text: str, adts: frozenset[str] = frozenset()) -> ParamType:
    """Parse a param type; ``adts`` are the ADT names the spec declares."""
    return _convert(parse_python(text), text, adts)


def _flatten_union(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flatten_union(node.left) + _flatten_union(node.right)
    return [node]


def _convert(node: ast.expr, text: str, adts: frozenset[str]) -> ParamType:
    parts = _flatten_union(node)
    if len(parts) > 1:
        if all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
            values = tuple(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str))
            if len(set(values)) != len(values):
                raise ExprError("an enum value is listed twice", text)
            return Enum(values)
        options = tuple(_convert(p, text, adts) for p in parts)
        return UnionT(options)
    if isinstance(node, ast.Constant):
        if node.value is None:
            return NoneT()
        if isinstance(node.value, str):
            return Enum((node.value,))
        raise ExprError(f"literal {node.value!r} is not a type", text)
    if isinstance(node, ast.Name):
        if node.id in _PRIMS:
            return Prim(node.id)
        if node.id == "dtype":
            return DTypeParam(None)
        if node.id in adts:
            return ADTRef(node.id)
        raise ExprError(f"unknown type {node.id!r} (known: {', '.join(_PRIMS)}, dtype, list[...], tuple[...], "
                        f"string enums, declared types{': ' + ', '.join(sorted(adts)) if adts else ''})", text)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        head, arg = node.value.id, node.slice
        if head == "list":
            return ListOf(_convert(arg, text, adts))
        if head == "tuple":
            elts = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            if len(elts) == 2 and isinstance(elts[1], ast.Constant) and elts[1].value is Ellipsis:
                return TupleOf((_convert(elts[0], text, adts),), variadic=True)
            return TupleOf(tuple(_convert(e, text, adts) for e in elts), variadic=False)
        if head == "dtype":
            names = _union_names(arg, text)
            if names is None:
                raise ExprError("dtype[...] takes dtype names, e.g. dtype[float16 | bfloat16]", text)
            return DTypeParam(DTypeSet(tuple(names)))
    raise ExprError(f"{type(node).__name__} is not a type", text)
