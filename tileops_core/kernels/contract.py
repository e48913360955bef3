"""The kernel-interface contract: every launcher accepts exactly what its interface declares.

An interface declares its launch signature (:func:`~.interface.launch_signature`): the
parameters ``Op.forward`` passes to ``self.launch(Interface, ...)``, in order, annotated. A
launcher conforms when it takes those parameters, by those names, in that order, each
passable by position, with annotations that accept the declared ones (an unannotated or
``Any`` parameter accepts anything; a union accepts its members). After them it may take
more parameters only with defaults (``out=None``); a kernel declaring ``writes_outputs``
must take one there per output the declaration returns (``-> tuple[Tensor, Tensor]`` is
two), since the core passes the outputs it allocated after the declared arguments.

When each part is checked (pluggy's ``_verify_hook`` and torch's ``infer_schema`` are the
models: a contract is checked when it is registered, never per call):

* at registration (:meth:`~.registry.Registry.add_kernel` through a backend's handle): the
  launchers a kernel class lists in :meth:`~.interface.KernelInterface.launchers`, known
  without building (the reference backend's ``fn``/``direct`` functions, a CUDA launcher
  class's ``run`` method). A mismatch is a :class:`~tileops_core.errors.PluginError`, so the
  plugin's registration is rolled back whole, like any plugin failure;
* at build (:func:`check_built`, called by selection once per build identity): whatever
  ``entry_for(call).build()`` returned, for launchers made per build (closures over a build
  key). A mismatch is a build failure: recorded, warned about, and selection falls back.

An interface that declares nothing is accepted with one :class:`ContractWarning` per
interface that says exactly what to add (``plugins/README.md``, "The launch contract", says
why it is not refused). Annotations a kernel's module cannot resolve (names imported under
``TYPE_CHECKING``) are left out of the comparison; names, order and kinds never are. Annotation
strings are read by :mod:`.annotations`, never handed to ``eval``.
"""

from __future__ import annotations

import inspect
import types
import typing
import warnings
from typing import Any, Callable

from ..errors import PluginError
from .annotations import resolved_signature
from .interface import KernelInterface, LaunchSignature

__all__ = ["ContractWarning", "check_built", "check_registered", "declared_launch", "mismatches",
           "suggested_declaration"]

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)


class ContractWarning(UserWarning):
    """A kernel registered for an interface that declares no launch signature (unchecked)."""


def declared_launch(interface: type[KernelInterface]) -> LaunchSignature | None:
    """The launch signature ``interface`` declares on itself (None when it declares none)."""
    declared = interface.__dict__.get("launch")
    return declared if isinstance(declared, LaunchSignature) else None


def check_registered(impl: type[KernelInterface], warned: set[type[KernelInterface]]) -> None:
    """The registration-time check: ``impl``'s static launchers against its interface.

    Raises :class:`PluginError` naming the kernel, the interface and the parameters that
    differ. Warns about an interface that declares no launch signature unless it is in
    ``warned`` (the registry's set: once per interface and registry), then adds it.
    """
    interface = impl.interface()
    declared = declared_launch(interface)
    if declared is None:
        if interface not in warned:
            warned.add(interface)
            _warn_undeclared(interface, impl)
        return
    _resolve_declared(interface, declared)
    for name, launcher in impl.launchers().items():
        _enforce(impl, interface, declared, launcher, f"its {name}")


def check_built(impl: type[KernelInterface], kernel: Callable[..., Any]) -> None:
    """The build-time check: what ``impl``'s build returned, against its interface (PluginError)."""
    interface = impl.interface()
    if not callable(kernel):  # (found in review: a None build was cached and raised a bare KeyError)
        raise PluginError(f"{impl.qualname()}: its build returned {type(kernel).__name__}, not a callable "
                          f"launcher for {interface.__name__}")
    declared = declared_launch(interface)
    if declared is not None:
        _enforce(impl, interface, declared, kernel, "the launcher its build returned")


def mismatches(declared: LaunchSignature, launcher: Callable[..., Any], writes_outputs: bool = False) -> list[str]:
    """How ``launcher``'s signature differs from ``declared`` (empty: it conforms)."""
    try:
        signature, resolved = _signature(launcher)
    except (TypeError, ValueError):
        return ["its signature cannot be read (a C function?): wrap it in a def taking the interface's parameters, "
                "or return the torch.ops overload (torch.ops.ns.op.default), whose schema names them"]
    expected = list(declared.resolved().parameters.values())
    names = [p.name for p in expected]
    params = signature.parameters
    positional = [p for p in params.values() if p.kind in _POSITIONAL]
    takes_varargs = any(p.kind is _P.VAR_POSITIONAL for p in params.values())
    problems: list[str] = []
    missing = [n for n in names if n not in params]
    if missing:
        problems.append("missing " + _names("parameter", missing))
    keyword_only = [n for n in names if n in params and params[n].kind not in _POSITIONAL]
    if keyword_only:
        problems.append(f"{_names('parameter', keyword_only)} cannot be passed by position, as Op.forward passes it")
    extra_required = [p.name for p in params.values() if p.name not in names and p.default is _P.empty
                      and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)]
    if extra_required:
        problems.append(f"extra required {_names('parameter', extra_required)} (only parameters with a default, "
                        "e.g. out=None, may follow the interface's)")
    head = [p.name for p in positional[:len(names)]]
    if not missing and not keyword_only and head != names:
        problems.append(f"parameters in the order ({', '.join(head)}) where the interface has ({', '.join(names)})")
    if resolved:
        for want in expected:
            have = params.get(want.name)
            if have is not None and not _accepts(have.annotation, want.annotation):
                problems.append(f"{want.name!r} is annotated {_show(have.annotation)} where the interface has "
                                f"{_show(want.annotation)}")
    outputs = _output_count(declared.resolved().return_annotation)
    if writes_outputs and len(positional) - len(names) < outputs and not takes_varargs:
        problems.append(f"it declares writes_outputs but takes {max(len(positional) - len(names), 0)} parameter(s) "
                        f"after the interface's for the {outputs} output(s) the core passes (add out=None for each)")
    return problems


# -- internals ----------------------------------------------------------------------------------


def _enforce(impl: type[KernelInterface], interface: type[KernelInterface], declared: LaunchSignature,
             launcher: Callable[..., Any], where: str) -> None:
    problems = mismatches(declared, launcher, bool(getattr(impl, "writes_outputs", False)))
    if problems:
        raise PluginError(
            f"kernel {impl.qualname()} does not conform to the launch signature of interface "
            f"{interface.qualname()} ({where}): {'; '.join(problems)}\n"
            f"  interface: launch{_display(declared.stub)}\n  kernel:    {_display(launcher)}")


def _resolve_declared(interface: type[KernelInterface], declared: LaunchSignature) -> None:
    try:
        declared.resolved()
    except TypeError as exc:
        raise PluginError(f"interface {interface.qualname()}: {exc}") from exc


def _signature(launcher: Callable[..., Any]) -> tuple[inspect.Signature, bool]:
    """The launcher's signature and whether its annotations resolved (TypeError/ValueError: unreadable).

    A ``torch.ops`` operator (an ``OpOverload``) is read from its schema: argument names,
    keyword-only ones and defaults (its types are not compared).
    """
    schema = getattr(launcher, "_schema", None)
    if schema is not None and hasattr(schema, "arguments"):
        return inspect.Signature([
            _P(a.name, _P.KEYWORD_ONLY if a.kwarg_only else _P.POSITIONAL_OR_KEYWORD,
               default=None if a.has_default_value() else _P.empty) for a in schema.arguments]), False
    try:  # an annotation outside the forms .annotations reads is left out; the others are compared
        return resolved_signature(launcher, omit_unreadable=True), True
    except (NameError, AttributeError, SyntaxError):  # names under TYPE_CHECKING: compare without annotations
        return inspect.signature(launcher), False


def _display(fn: Callable[..., Any]) -> str:
    try:
        return str(_signature(fn)[0])
    except (TypeError, ValueError):
        return repr(fn)


def _output_count(returns: Any) -> int:
    """How many outputs a declared return annotation names: ``tuple[Tensor, Tensor]`` is two."""
    args = typing.get_args(returns)
    if typing.get_origin(returns) is tuple and args and Ellipsis not in args:
        return len(args)
    return 1


def _names(word: str, names: list[str]) -> str:
    return f"{word}{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"


def _members(annotation: Any) -> set[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set(typing.get_args(annotation))
    return {annotation}


def _accepts(have: Any, want: Any) -> bool:
    """Whether a launcher's parameter annotated ``have`` accepts what is declared ``want``."""
    if have is _P.empty or want is _P.empty or have is Any or want is Any or have is object:
        return True
    if have == want:
        return True
    return _members(want) <= _members(have)


def _show(annotation: Any) -> str:
    return inspect.formatannotation(annotation)


def suggested_declaration(impl: type[KernelInterface]) -> str:
    """A ``launch`` stub for ``impl``'s interface, from the signature of ``impl``'s first static
    launcher (what to start a missing declaration from; trailing defaults like ``out=None`` go)."""
    example = next(iter(impl.launchers().values()), None)
    if example is None:
        return "def launch(<parameters>) -> <result>: ..."
    try:
        signature = _signature(example)[0]
    except (TypeError, ValueError):
        return "def launch(<parameters>) -> <result>: ..."
    kept = [p.replace(default=_P.empty) for p in signature.parameters.values()
            if p.kind in _POSITIONAL and p.default is _P.empty]
    return f"def launch{signature.replace(parameters=kept)}: ..."


def _warn_undeclared(interface: type[KernelInterface], impl: type[KernelInterface]) -> None:
    warnings.warn(
        f"interface {interface.qualname()} declares no launch signature, so kernel {impl.qualname()} and every "
        f"other kernel of it are registered unchecked. Add to class {interface.__name__}, with the parameters "
        f"its op's forward passes to self.launch({interface.__name__}, ...), in order:\n"
        f"    @launch_signature  # from tileops_core.kernels\n    {suggested_declaration(impl)}",
        ContractWarning, stacklevel=4)
