"""One definition per op class: its spec, generated checks, compile boundary and planning.

An :class:`OpDef` is made once per op class (the first time the class is bound to its
manifest entry, under one lock) and never changes after. Everything about an op that does
not depend on an instance lives here; other modules ask it (:meth:`OpDef.plan`,
:attr:`OpDef.boundary`) instead of reaching into an op's attributes.

Planning loads the plugins first, by construction: :meth:`OpDef.plan` reads the registry
(the arch of the calling device) only through
:func:`~tileops_core.plugins.loader.loaded_registry`, which loads the plugins into it, so
the first call of a process already sees every backend and arch detector; a plan records
the registry generation it was made under (a later load means plan again).
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from ..errors import CheckError, SpecError, fail
from ..kernels.interface import KernelInterface
from ..kernels.registry import GENERATION, active
from ..plugins.loader import ensure_plugins_loaded, loaded_registry
from ..spec.manifest import get_spec, load_manifest
from ..spec.nodes import OpSpec
from .boundary import Boundary, make_boundary
from .checks import Branch, OpChecks
from .one_launch import OneLaunch, one_launch_of
from .plan import CallPlan

if TYPE_CHECKING:
    from .base import Op

__all__ = ["OpDef", "definition_of", "is_bound"]

_lock = threading.RLock()
_definitions: dict[type, "OpDef"] = {}

#: The call-key function of an op: per argument (shape, dtype, device[, contiguous]) or None.
KeyFn = Callable[[Sequence[Any]], tuple[Any, ...]]


class OpDef:
    """Everything about one op class: spec, checks, compile boundary, the call key and planning."""

    def __init__(self, op_cls: type, spec: OpSpec) -> None:
        self.op_cls = op_cls
        self.name = spec.name
        self.spec = spec
        self.checks = OpChecks(spec)
        self.interfaces: tuple[type[KernelInterface], ...] = tuple(getattr(op_cls, "interfaces", ()))
        self.arg_names = self.checks.arg_names
        self.arg_index = self.checks.arg_index
        self.n_args = len(self.arg_names)
        self.written_args = self.checks.written_args
        self.buffers_by_position = bool(self.checks.buffers) and _forward_takes_buffers_by_position(
            op_cls, self.arg_names)
        #: forward takes every argument by position (it lists its out buffers, or has none).
        self.forward_positional = self.buffers_by_position or not self.checks.buffers
        # Contiguity enters the key where a check or a kernel depends on it (a mutated input's
        # check of overlapping itself runs only on plans where it is not contiguous).
        self.key_has_contiguity = (self.checks.any_contiguous_arg or bool(self.checks.mutated_inputs)
                                   or any(i.needs_contiguous for i in self.interfaces))
        self.key: KeyFn = _key_with_contiguity if self.key_has_contiguity else _key
        self.boundary: Boundary | None
        self.boundary_reason: str | None
        self.boundary, self.boundary_reason = make_boundary(self)

    @functools.cached_property
    def one_launch(self) -> OneLaunch | None:
        """The one launch ``forward`` is (:mod:`.one_launch`), or None: read on first use, when
        the names ``forward`` refers to are defined (an interface may follow the op in its module)."""
        names = frozenset((*self.spec.params, *self.spec.static_dims))
        return one_launch_of(getattr(self.op_cls, "forward", None), self.arg_names, self.interfaces, names)

    def __repr__(self) -> str:
        return f"OpDef({self.name})"

    def construct(self, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Construction checks: the normalised env and the construction-time tensors."""
        return self.checks.construct(values)

    def plan(self, op: "Op", values: Sequence[Any], *, kernels: bool = True,
             branches: dict[frozenset[str], Branch] | None = None) -> CallPlan:
        """Steps 1-5 for ``values`` (the forward arguments, None for absent ones) on ``op``.

        With ``kernels`` (the default) the plan carries the call spec of every interface,
        built after the plugins are loaded; without, it carries none (fake tensors at trace
        time, the validator, the docs: nothing that selects a kernel).
        """
        registry = loaded_registry() if kernels else active()
        generation = GENERATION[0]
        plan = self.checks.plan_call(op, values, op.params_env(), op.construction_tensors(),
                                     self.interfaces if kernels else (), {} if branches is None else branches,
                                     registry.device_arch)
        plan.generation = generation
        return plan

    def bind_values(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Forward arguments by position and keyword -> one value per argument (None: omitted)."""
        names = self.arg_names
        if len(args) > len(names):
            fail(self.name, f"takes at most {len(names)} tensor arguments ({', '.join(names)}), got {len(args)}",
                 self.spec.location)
        values = list(args)
        values.extend([None] * (len(names) - len(args)))
        for key, value in kwargs.items():
            i = self.arg_index.get(key)
            if i is None:
                fail(self.name, f"unexpected argument {key!r} (forward takes {', '.join(names)})", self.spec.location)
            if i < len(args):
                fail(self.name, f"argument {key!r} given twice", self.spec.location)
            values[i] = value
        return values


# What steps 1-5 read of a tensor, so a warm call is checked as a cold one: shape, dtype,
# device, layout (a sparse tensor of a cached shape must not reach the kernel), requires_grad
# (a mutated input that requires it is refused at planning), and
# contiguity where a check or a kernel depends on it. Built only when the C++ same-call
# check of the last plan misses (see same_call).
def _key(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple([None if v is None else (v.shape, v.dtype, v.device, v.layout, v.requires_grad) for v in values])


def _key_with_contiguity(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple([None if v is None else (v.shape, v.dtype, v.device, v.layout, v.requires_grad, v.is_contiguous())
                  for v in values])


def is_bound(op_cls: type) -> bool:
    """Whether ``op_cls`` already has its definition (tests of binding at class definition)."""
    return op_cls in _definitions


def definition_of(op_cls: type) -> OpDef:
    """The definition of ``op_cls``, made on first use under the one lock (never twice)."""
    found = _definitions.get(op_cls)
    if found is not None:
        return found
    with _lock:
        found = _definitions.get(op_cls)
        if found is not None:
            return found
        name = op_cls.__name__
        if name not in load_manifest():
            ensure_plugins_loaded()  # an op shipped by a plugin brings its spec with it
        spec = get_spec(name)
        if not spec.usable:
            problems = "\n  ".join(str(p) for p in spec.problems)
            raise SpecError(f"the spec of {name} cannot be used:\n  {problems}", spec.location, rule="L0.unusable")
        try:
            definition = OpDef(op_cls, spec)
        except (KeyError, TypeError, ValueError) as exc:  # a declaration the loader let through (found in review:
            # an alias to no input, a keyword or non-string name failed the class statement with a bare error)
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"the spec of {name} cannot make an op: {type(exc).__name__}: {exc}", spec.location,
                            rule="L0.unusable") from exc
        _definitions[op_cls] = definition
        return definition


def bind_at_definition(op_cls: type) -> None:
    """Bind a new op class when its spec is already loadable, so its compile boundary exists
    from class definition; a spec contributed later by a plugin is bound at first use, and a
    spec that cannot be used is reported at construction, where it cannot be missed."""
    if op_cls.__name__ in load_manifest():
        try:
            definition_of(op_cls)
        except (SpecError, CheckError):
            pass


def rebind(op_cls: type, spec: OpSpec) -> tuple[OpDef, Callable[[], None]]:
    """Bind ``op_cls`` to ``spec`` for a while (the validator's code checks); returns the new
    definition and the function that puts the previous state back, boundary included."""
    with _lock:
        previous = _definitions.get(op_cls)
        definition = OpDef(op_cls, spec)
        _definitions[op_cls] = definition

    def undo() -> None:
        with _lock:
            if definition.boundary is not None:
                definition.boundary.remove()
            if previous is None:
                _definitions.pop(op_cls, None)
            else:
                _definitions[op_cls] = previous
    return definition, undo


@functools.lru_cache(maxsize=None)
def _forward_takes_buffers_by_position(cls: type, arg_names: tuple[str, ...]) -> bool:
    """Whether ``cls.forward`` names its parameters exactly like the spec's forward arguments, in order,
    out buffers included, and takes them by position: then a call passes them positionally (cheaper
    than building keyword arguments on every call); otherwise buffers go by keyword."""
    try:
        params = list(inspect.signature(getattr(cls, "forward")).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[: len(arg_names)] == list(arg_names)
