"""Turn IR trees into plain Python closures, once, and evaluate them on ints or SymInts.

``compile_node`` walks the IR a single time and returns a closure over an environment
mapping (name -> value); generated checks call these closures at every op call without
re-parsing or re-walking anything. Arithmetic uses Python's operators, so the same
closures work on Python ints and on torch SymInts under ``torch.compile``. This module
never imports torch (the spec lint runs without it).
"""

from __future__ import annotations

import operator
import sys
from typing import Any, Callable, Mapping

from ..errors import ExprError
from . import ir

__all__ = ["Unbound", "compile_node", "evaluate", "PRIMITIVE_IMPLS"]

Env = Mapping[str, Any]
Closure = Callable[[Env], Any]

#: Largest exponent ``**`` evaluates: formulas need squares and roots, not towers.
MAX_EXPONENT = 64
#: Longest tuple or string a repetition (``(1,) * n``, ``"a" * n``) may build: shapes have a
#: handful of axes, and ``(1,) * 10**9`` would otherwise allocate gigabytes.
MAX_SEQUENCE = 4096
#: Largest integer (in bits) a product or power may produce: sizes and flop counts need far
#: fewer, and unbounded products of big integers cost seconds to compute.
MAX_INT_BITS = 4096


class Unbound(ExprError, LookupError):
    """An expression referred to a name that has no value yet (e.g. an unsolved index).

    An :class:`ExprError` (so evaluating spec text only ever raises the language's own
    error) and a ``LookupError`` (what it is).
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"{name!r} has no value")
        self.name = name


def _is_sym(value: Any) -> bool:
    return type(value).__name__ in ("SymInt", "SymFloat", "SymBool")


def _sym_fold(name: str, items: tuple[Any, ...], builtin: Callable[..., Any]) -> Any:
    if any(_is_sym(v) for v in items):
        fold = getattr(sys.modules["torch"], name)
        result = items[0]
        for item in items[1:]:
            result = fold(result, item)
        return result
    return builtin(items)


def _min(*args: Any) -> Any:
    items = tuple(args[0]) if len(args) == 1 else args
    return _sym_fold("sym_min", items, min)


def _max(*args: Any) -> Any:
    items = tuple(args[0]) if len(args) == 1 else args
    return _sym_fold("sym_max", items, max)


def _product(items: Any) -> Any:
    result: Any = 1
    for item in items:
        result = _mul(result, item)
    return result


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, (str, tuple, list)) or isinstance(b, (str, tuple, list)):
        seq, n = (a, b) if isinstance(a, (str, tuple, list)) else (b, a)
        if isinstance(n, int) and len(seq) * n > MAX_SEQUENCE:
            raise ExprError(f"a repetition of {len(seq)} items {n} times is longer than {MAX_SEQUENCE}")
    elif type(a) is int and type(b) is int and a.bit_length() + b.bit_length() > MAX_INT_BITS:
        raise ExprError(f"a product larger than 2**{MAX_INT_BITS}")
    return a * b


def _add(a: Any, b: Any) -> Any:
    """``a + b``, with concatenations bounded as repetitions are (found in review: a chain of lets that
    each doubled a tuple took gigabytes from a few lines of a manifest)."""
    if isinstance(a, (str, tuple, list)) and isinstance(b, (str, tuple, list)) and len(a) + len(b) > MAX_SEQUENCE:
        raise ExprError(f"a concatenation of {len(a)} and {len(b)} items is longer than {MAX_SEQUENCE}")
    return a + b


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):  # "%s" % x is string formatting, not arithmetic
        raise ExprError("string formatting with % is not in the language")
    return a % b


def _as_axes(dim: Any) -> tuple[Any, ...]:
    return tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)


def _per_axis(value: Any, i: int, n: int) -> Any:
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ExprError(f"per_axis: expected {n} items, got {len(value)}")
        return value[i]
    return value


def _dims_in_range(dim: Any, n: Any) -> bool:
    if dim is None:
        return True
    low, high = (-1, 1) if n == 0 else (-n, n)
    return all(low <= d < high for d in _as_axes(dim))


def _unique_axes(dim: Any, n: Any) -> bool:
    if dim is None:
        return True
    axes = [_mod(d, n) if n else 0 for d in _as_axes(dim)]
    return len(set(axes)) == len(axes)


def _reduced_shape(shape: Any, dim: Any, keepdim: Any) -> tuple[Any, ...]:
    shape = tuple(shape)
    n = len(shape)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        axes = set(range(n))
    else:
        axes = {_mod(d, n) if n else 0 for d in _as_axes(dim)}
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _pow(base: Any, exponent: Any) -> Any:
    if isinstance(exponent, (int, float)) and abs(exponent) > MAX_EXPONENT:
        raise ExprError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 \
            and abs(base).bit_length() * exponent > MAX_INT_BITS:
        raise ExprError(f"a power larger than 2**{MAX_INT_BITS}")
    return base**exponent


PRIMITIVE_IMPLS: dict[str, Callable[..., Any]] = {
    "product": _product,
    "per_axis": _per_axis,
    "unique_axes": _unique_axes,
    "dims_in_range": _dims_in_range,
    "reduced_shape": _reduced_shape,
    "len": len,
    "min": _min,
    "max": _max,
    "abs": abs,
    "tuple": tuple,
}

_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add, "-": operator.sub, "*": _mul, "/": operator.truediv,
    "//": operator.floordiv, "%": _mod, "**": _pow,
}
_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}


def _lookup(name: str) -> Closure:
    def get(env: Env) -> Any:
        try:
            return env[name]
        except KeyError:
            raise Unbound(name) from None

    return get


def compile_node(node: ir.Node) -> Closure:
    """Compile an IR tree into a closure ``env -> value``."""
    if isinstance(node, ir.Const):
        value = node.value
        return lambda env: value
    if isinstance(node, ir.Name):
        return _lookup(node.id)
    if isinstance(node, ir.Attr):
        target, attr = compile_node(node.value), node.attr
        if attr == "ndim":
            return lambda env: len(target(env).shape)
        if attr == "shape":
            return lambda env: tuple(target(env).shape)
        return lambda env: getattr(target(env), attr)
    if isinstance(node, ir.Index):
        target, index = compile_node(node.value), compile_node(node.index)
        return lambda env: target(env)[index(env)]
    if isinstance(node, ir.Slice):
        target = compile_node(node.value)
        parts = [None if p is None else compile_node(p) for p in (node.lower, node.upper, node.step)]
        lo, hi, st = parts
        return lambda env: target(env)[slice(lo and lo(env), hi and hi(env), st and st(env))]
    if isinstance(node, ir.Unary):
        operand = compile_node(node.operand)
        if node.op == "not":
            return lambda env: not operand(env)
        if node.op == "-":
            return lambda env: -operand(env)
        return lambda env: +operand(env)
    if isinstance(node, ir.Binary):
        fn, left, right = _BIN[node.op], compile_node(node.left), compile_node(node.right)
        return lambda env: fn(left(env), right(env))
    if isinstance(node, ir.BoolOp):
        values = tuple(compile_node(v) for v in node.values)
        if node.op == "and":
            def conj(env: Env) -> Any:
                result: Any = True
                for v in values:
                    result = v(env)
                    if not result:
                        return result
                return result
            return conj

        def disj(env: Env) -> Any:
            result: Any = False
            for v in values:
                result = v(env)
                if result:
                    return result
            return result
        return disj
    if isinstance(node, ir.Compare):
        return _compile_compare(node)
    if isinstance(node, ir.IfExp):
        test, body, orelse = compile_node(node.test), compile_node(node.body), compile_node(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ir.Tuple):
        items = tuple(compile_node(i) for i in node.items)
        return lambda env: tuple(i(env) for i in items)
    if isinstance(node, ir.Call):
        if node.func == "present":
            tested = ir.tested_name(node)
            return lambda env: env.get(tested) is not None
        fn = PRIMITIVE_IMPLS[node.func]
        args = tuple(compile_node(a) for a in node.args)
        return lambda env: fn(*(a(env) for a in args))
    if isinstance(node, ir.IsNone):
        name = node.operand.id if isinstance(node.operand, ir.Name) else None
        if name is not None:
            return (lambda env: env.get(name) is not None) if node.negated else (lambda env: env.get(name) is None)
        operand = compile_node(node.operand)
        return (lambda env: operand(env) is not None) if node.negated else (lambda env: operand(env) is None)
    raise TypeError(f"not an IR node: {node!r}")


def _compile_compare(node: ir.Compare) -> Closure:
    left = compile_node(node.left)
    steps = tuple((_CMP[op], compile_node(c)) for op, c in zip(node.ops, node.comparators))
    if len(steps) == 1:
        fn, right = steps[0]
        return lambda env: fn(left(env), right(env))

    def chain(env: Env) -> Any:
        current = left(env)
        result: Any = True
        for fn, right in steps:
            nxt = right(env)
            result = fn(current, nxt)
            if not result:
                return result
            current = nxt
        return result

    return chain


def evaluate(node: ir.Node, env: Env) -> Any:
    """Evaluate an IR tree once (convenience for tools; hot paths keep the compiled closure).

    Whatever goes wrong comes out as :class:`ExprError` (:class:`Unbound` for a name
    without a value), never as the Python error of the operation that failed.
    """
    try:
        return compile_node(node)(env)
    except ExprError:
        raise
    except RecursionError:
        raise ExprError("expression too deep to evaluate") from None
    except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, MemoryError) as exc:
        raise ExprError(f"cannot be evaluated: {type(exc).__name__}: {exc}", ir.unparse(node)) from None
