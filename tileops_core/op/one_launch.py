"""Whether an op's ``forward`` is one kernel launch of its own arguments: then a call can skip it.

Most ops' ``forward`` is a single line, ``return self.launch(Interface, x, weight, self.eps)``:
the forward arguments in order, then params read from the instance. Calling it costs a frame,
the thread's current-call record (what :meth:`Op.launch` reads) and the lookup of the bound
launcher, per call, for nothing the plan does not already know. :func:`one_launch_of` reads
the source of ``forward`` once per op class and recognises exactly that shape; the op's call
then calls the bound kernel itself with the same arguments (``Op._call``, ``BoundKernels.direct``).

Recognised, and nothing else: a body of one ``return self.launch(I, a1, ..., an, self.p1,
..., self.pk)`` (after an optional docstring), where ``I`` names, in ``forward``'s globals or
closure, one of the op's interfaces, ``a1..an`` are ``forward``'s parameters in order and
are the op's forward arguments (out buffers included), and ``p1..pk`` are params or static
dims of the spec. No decorators, no keyword arguments, no ``*``: a ``forward`` that does
anything more (converts a param, launches twice, branches) keeps the general path, which
runs it as written.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from ..kernels.interface import KernelInterface

__all__ = ["OneLaunch", "one_launch_of"]


@dataclass(frozen=True)
class OneLaunch:
    """``forward(*values)`` is ``self.launch(interface, *values, *(getattr(self, p) for p in params))``."""

    interface: type[KernelInterface]
    params: tuple[str, ...]


def one_launch_of(forward: Any, arg_names: tuple[str, ...], interfaces: tuple[type[KernelInterface], ...],
                  param_names: frozenset[str]) -> OneLaunch | None:
    """The launch ``forward`` is, when it is exactly one launch of its arguments (module docstring)."""
    if not isinstance(forward, types.FunctionType):
        return None
    try:
        tree = ast.parse(textwrap.dedent(_source_of(forward)))
    except (OSError, TypeError, SyntaxError):  # no source (a REPL, generated code): the general path
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fn = tree.body[0]
    code = forward.__code__
    if fn.decorator_list or fn.name != code.co_name:
        return None
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or not a.args:
        return None
    self_name, *params = (p.arg for p in a.args)
    if tuple(params) != arg_names or tuple(code.co_varnames[:code.co_argcount]) != (self_name, *params):
        return None  # the source read is not the code that runs, or forward names its arguments otherwise
    body = fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else fn.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    if (call.keywords or not call.args or not isinstance(call.func, ast.Attribute) or call.func.attr != "launch"
            or not _is_name(call.func.value, self_name)):
        return None
    first, *rest = call.args
    interface = _resolve(forward, first)
    if interface is None or not any(interface is i for i in interfaces):
        return None
    passed = rest[:len(params)]
    if len(passed) != len(params) or not all(_is_name(p, name) for p, name in zip(passed, params)):
        return None
    attrs = []
    for node in rest[len(params):]:
        if not (isinstance(node, ast.Attribute) and _is_name(node.value, self_name) and node.attr in param_names):
            return None
        attrs.append(node.attr)
    return OneLaunch(interface, tuple(attrs))


def _source_of(forward: types.FunctionType) -> str:
    """``forward``'s source lines: from its first line to the last line its instructions span.

    ``inspect.getsource`` finds a function's end by tokenising from its first line: 4.0 ms for
    the catalogue's 21 forwards on the CPU, against 1.3 ms for this slice, in the first call of
    a model (``tileops demo``'s first ``generate()`` ran 15 ms over HF's). The code object
    already says where the body ends. Where it cannot (Python 3.10 has no ``co_positions``),
    ``inspect`` reads it.
    """
    code = forward.__code__
    positions = getattr(code, "co_positions", None)
    if positions is None:
        return inspect.getsource(forward)
    lines = linecache.getlines(code.co_filename, forward.__globals__)
    end = max((e for _, e, _, _ in positions() if e is not None), default=0)
    if not lines or end < code.co_firstlineno:
        raise OSError(f"no source for {code.co_name}")  # as inspect says it: the general path
    return "".join(lines[code.co_firstlineno - 1:end])


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _resolve(forward: types.FunctionType, node: ast.expr) -> Any:
    """The object a bare name in ``forward`` refers to (its closure, then its globals), or None."""
    if not isinstance(node, ast.Name):
        return None
    code = forward.__code__
    if node.id in code.co_freevars:
        cell = (forward.__closure__ or ())[code.co_freevars.index(node.id)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell
            return None
    if node.id in code.co_varnames:
        return None  # a local would shadow it; a one-line forward has none, but say no rather than guess
    return forward.__globals__.get(node.id)
