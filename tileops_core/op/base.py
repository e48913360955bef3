"""The Op base class: an op is bound to its spec, and the spec generates its checks.

An op author writes a class named exactly as its manifest key, lists its kernel
``interfaces``, and writes ``__init__`` (forwarding params to ``super().__init__``) and
``forward`` (building nothing but the kernel launch through :meth:`Op.launch`). The base
class does the rest: construction checks, seed 000's seven call steps, the calling
device, the empty-call rule, contiguity and copy-back for mutated inputs, and the
``torch.library`` compile boundary used under ``torch.compile``.

The eager fast path: a call whose (shape, dtype, device, presence) key was seen before by
the same instance reuses the plan of its first call, so it costs a key, a dict lookup,
the kernel and step 7's output check; it never goes through the dispatcher.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from typing import Any, Callable, ClassVar, Sequence

import torch

from ..errors import CheckError, SpecError
from ..kernels.interface import KernelInterface
from ..kernels.registry import _generation as _registry_generation
from ..kernels.select import kernel_for
from ..kernels.targets import Target, current_target, parse_target
from ..spec.manifest import get_spec, load_manifest
from ..spec.nodes import OpSpec
from .generated import Branch, CallPlan, OpChecks, contents_checking_default, fail

__all__ = ["Op", "current_call"]

_tls = threading.local()
_warned_full_shape: set[type] = set()
#: Plans kept per op instance before the oldest are dropped (dynamic shapes).
MAX_PLANS = 4096


def current_call() -> tuple["Op", CallPlan, Sequence[Any]]:
    """The op, plan and arguments of the call being executed on this thread (inside ``forward``)."""
    state = getattr(_tls, "call", None)
    if state is None:
        raise RuntimeError("Op.launch() is only valid inside an op's forward()")
    return state


_is_compiling: Callable[[], bool] = torch.compiler.is_compiling


class Op:
    """Base of every operator. Subclasses are bound to the manifest entry of their class name."""

    #: The kernel interfaces this op launches (the places where it calls a kernel).
    interfaces: ClassVar[tuple[type[KernelInterface], ...]] = ()
    #: Set on intermediate base classes that have no spec of their own.
    abstract: ClassVar[bool] = False

    _checks: ClassVar[OpChecks | None] = None
    _boundary: ClassVar[Any] = None
    _boundary_reason: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._checks = None
        cls._boundary = None
        cls._boundary_reason = None
        if cls.__dict__.get("abstract", False):
            return
        for interface in cls.interfaces:
            if not (isinstance(interface, type) and issubclass(interface, KernelInterface) and interface.is_interface()):
                raise TypeError(f"{cls.__name__}.interfaces must list kernel interfaces, got {interface!r}")
            if interface.op != cls.__name__:
                raise TypeError(f"{cls.__name__}.interfaces: {interface.__name__}.op is {interface.op!r}, "
                                f"expected {cls.__name__!r}")
        # Bind eagerly when the spec is already loadable, so the compile boundary exists from
        # class definition; a spec contributed later by a plugin is bound at first use.
        if cls.__name__ in load_manifest():
            try:
                cls._bind()
            except (SpecError, CheckError):
                pass  # reported at construction, where it cannot be missed

    @classmethod
    def _bind(cls) -> OpChecks:
        checks = cls.__dict__.get("_checks")
        if checks is not None:
            return checks
        if cls.__name__ not in load_manifest():
            from ..plugins.loader import ensure_plugins_loaded  # an op shipped by a plugin brings its spec with it
            ensure_plugins_loaded()
        spec = get_spec(cls.__name__)
        if not spec.usable:
            problems = "\n  ".join(str(p) for p in spec.problems)
            raise SpecError(f"the spec of {cls.__name__} cannot be used:\n  {problems}", spec.location,
                            rule="L0.unusable")
        checks = OpChecks(spec)
        cls._checks = checks
        from .boundary import make_boundary  # torch.library registration, once per class
        cls._boundary, cls._boundary_reason = make_boundary(cls, spec)
        return checks

    @classmethod
    def op_spec(cls) -> OpSpec:
        """The spec this class is bound to."""
        return cls._bind().spec

    # -- construction -----------------------------------------------------------------------

    def __init__(self, *, target: str | Target | None = None, check_contents: bool | None = None,
                 **values: Any) -> None:
        checks = type(self)._bind()
        env, construction = checks.construct(values)
        self._env = env
        self._construction = construction
        self._target = parse_target(target, "the op's target=")
        self._check_contents = contents_checking_default() if check_contents is None else bool(check_contents)
        self._plans: dict[Any, CallPlan] = {}
        self._branches: dict[frozenset[str], Branch] = {}
        self._last_plan: CallPlan | None = None
        self._init_values = dict(values)
        self._n_args = len(checks.arg_names)
        self._buffers_by_position = bool(checks.buffers) and _forward_takes_buffers_by_position(type(self),
                                                                                              checks.arg_names)
        for name in (*checks.spec.params, *checks.spec.static_dims):
            if not hasattr(type(self), name):
                setattr(self, name, env[name])

    @property
    def params(self) -> dict[str, Any]:
        """The checked, normalised param (and static dim) values of this instance."""
        return {n: self._env[n] for n in (*self.op_spec().params, *self.op_spec().static_dims)}

    @property
    def target(self) -> Target | None:
        return self._target

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    # -- a call -----------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def specialisation(self, interface: type[KernelInterface], env: dict[str, Any]) -> dict[str, Any]:
        """The values a kernel may specialise on (the call spec's ``dims``).

        By default, the interface's ``specialise_on`` names. An arbitrary-rank op with empty
        ``static_dims`` whose interface would specialise on a whole Shape index overrides this
        (seed 001: its own cache key), or every new shape would build a new kernel.
        """
        dims = {name: env.get(name) for name in interface.specialise_on}
        if type(self).specialisation is Op.specialisation and not self._checks.spec.static_dims:  # type: ignore[union-attr]
            spec = self._checks.spec  # type: ignore[union-attr]
            arbitrary = {v for t in spec.inputs.values() if not t.optional and hasattr(t.shape, "variadics")
                         for v in t.shape.variadics}  # type: ignore[union-attr]
            shape_indices = [n for n in interface.specialise_on if n in arbitrary and spec.indices.get(n) == "shape"]
            if shape_indices and interface not in _warned_full_shape:
                _warned_full_shape.add(interface)
                warnings.warn(f"{type(self).__name__}: {interface.__name__} specialises on the whole shape "
                              f"{', '.join(shape_indices)} and the spec promises no static_dims, so every new shape "
                              "builds a new kernel; override Op.specialisation with a coarser key", RuntimeWarning,
                              stacklevel=2)
        return dims

    def check_contents(self, **tensors: Any) -> None:
        """Checks that read tensor contents (off by default; ops override where contents matter)."""

    def _bind_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        checks = self._checks
        names = checks.arg_names  # type: ignore[union-attr]
        if len(args) > len(names):
            fail(checks.op, f"takes at most {len(names)} tensor arguments ({', '.join(names)}), got {len(args)}",  # type: ignore[union-attr]
                 checks.loc)  # type: ignore[union-attr]
        values = list(args)
        values.extend([None] * (len(names) - len(args)))
        if kwargs:
            index = checks.arg_index  # type: ignore[union-attr]
            for key, value in kwargs.items():
                i = index.get(key)
                if i is None:
                    fail(checks.op, f"unexpected argument {key!r} (forward takes {', '.join(names)})",  # type: ignore[union-attr]
                         checks.loc)  # type: ignore[union-attr]
                if i < len(args):
                    fail(checks.op, f"argument {key!r} given twice", checks.loc)  # type: ignore[union-attr]
                values[i] = value
        return values

    def _key(self, values: Sequence[Any]) -> tuple[Any, ...] | None:
        """What the checks of steps 1-5 depend on: per argument its shape, dtype and device.

        Contiguity enters only for arguments declared ``contiguous: true``. None when an
        argument is not a tensor (the slow path then names it).
        """
        try:
            if not self._checks.any_contiguous_arg:  # type: ignore[union-attr]
                return tuple([None if v is None else (v.shape, v.dtype, v.device) for v in values])
            return tuple([None if v is None else (v.shape, v.dtype, v.device, v.is_contiguous()) if contiguous
                          else (v.shape, v.dtype, v.device)
                          for v, contiguous in zip(values, self._checks.contiguous_args)])  # type: ignore[union-attr]
        except AttributeError:
            return None  # not a tensor: the slow path names the argument

    def _plan(self, values: Sequence[Any]) -> CallPlan:
        key = self._key(values)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._new_plan(values, key)
        return plan

    def _new_plan(self, values: Sequence[Any], key: tuple[Any, ...] | None) -> CallPlan:
        checks = self._checks
        plan = checks.plan_call(self, values, self._env, self._construction, type(self).interfaces,  # type: ignore[union-attr]
                                self._branches)
        if key is not None and not plan.device_by_default:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _is_compiling() and type(self)._boundary is not None:
            from .boundary import call_boundary
            return call_boundary(self, args, kwargs)
        if not kwargs:  # arguments by position only (the common call) need no binding
            missing = self._n_args - len(args)
            if missing == 0:
                return self._eager(args)
            if missing > 0:
                return self._eager(args + (None,) * missing)  # omitted == None (seed 001 rule 2)
        return self._eager(self._bind_call(args, kwargs))

    def _eager(self, values: Sequence[Any]) -> Any:
        # The hot path: one key, one dict lookup, the kernel, step 7 (see the module docstring).
        if self._checks.any_contiguous_arg:  # type: ignore[union-attr]
            key = self._key(values)
        else:
            try:  # _key inlined: this line is most of the cost of a repeated call
                key = tuple([None if v is None else (v.shape, v.dtype, v.device) for v in values])
            except AttributeError:
                key = None  # not a tensor: the slow path names the argument
        plan = self._plans.get(key)  # a None key is never stored
        if plan is None:
            plan = self._new_plan(values, key)
        self._last_plan = plan
        if plan.buffer_args:
            plan.check_buffers(values)  # step 5's storage check reads the buffer object, not the key
        if self._check_contents:
            self.check_contents(**dict(zip(self._checks.arg_names, values)))  # type: ignore[union-attr]
        if plan.empty:
            return plan.empty_result(values)
        previous = getattr(_tls, "call", None)
        _tls.call = (self, plan, values)
        try:
            if plan.n_buffers == 0 or self._buffers_by_position:
                result = self.forward(*values)
            else:
                n_inputs = len(values) - plan.n_buffers
                buffers = dict(zip(self._checks.arg_names[n_inputs:], values[n_inputs:]))  # type: ignore[union-attr]
                result = self.forward(*values[:n_inputs], **buffers)
        finally:
            _tls.call = previous
        return plan.check_outputs(result, values)

    # -- what forward uses ------------------------------------------------------------------

    def launch(self, interface: type[KernelInterface], *args: Any, **kwargs: Any) -> Any:
        """Call the kernel selected for ``interface`` on the current call."""
        state = getattr(_tls, "call", None)
        if state is None:
            raise RuntimeError("Op.launch() is only valid inside an op's forward()")
        _, plan, values = state
        target = current_target(self._target)
        slot = (interface, target, _registry_generation[0])  # a newly loaded backend may serve better
        kernel = plan.kernels.get(slot)
        if kernel is None:
            call = plan.call_specs.get(interface)
            if call is None:
                raise TypeError(f"{type(self).__name__}: {interface.__name__} is not listed in interfaces")
            kernel = kernel_for(interface, call, target)
            plan.kernels[slot] = kernel
        if not interface.needs_contiguous:
            return kernel(*args, **kwargs) if kwargs else kernel(*args)
        checks = self._checks
        written = {id(values[i]) for i in checks.written_args if values[i] is not None}  # type: ignore[union-attr]
        return _launch_contiguous(kernel, args, kwargs, written)

    def bound(self, name: str) -> Any:
        """The value of an index, let or param on the current call (e.g. ``self.bound("N")``)."""
        return current_call()[1].env[name]

    def construction_tensor(self, name: str) -> torch.Tensor:
        """A construction-time input, moved to the calling device and cast as the spec says."""
        return current_call()[1].construction[name]

    @property
    def last_call_env(self) -> dict[str, Any] | None:
        """Index/param values of this instance's last call (roofline, explain)."""
        return None if self._last_plan is None else self._last_plan.env

    @property
    def last_plan(self) -> CallPlan | None:
        return self._last_plan

    def plan_for(self, *args: Any, **kwargs: Any) -> CallPlan:
        """Steps 1-5 for these arguments, without running a kernel: the plan a call would use.

        Works on ``meta`` tensors, so tools (the support matrix of ``tileops docs``) can build
        the call specs of a workload row without allocating it or selecting a kernel.
        """
        return self._plan(self._bind_call(args, kwargs))

    def eval_roofline(self) -> Any:
        """The spec's roofline (FLOPs, bytes) for this instance's last call.

        Delegates to :func:`tileops_core.bench.roofline.roofline_of_call`: the formula is the
        spec's, never the op's.
        """
        from ..bench.roofline import roofline_of_call  # the bench package is not needed by a plain call

        return roofline_of_call(self)


@functools.lru_cache(maxsize=None)
def _forward_takes_buffers_by_position(cls: type, arg_names: tuple[str, ...]) -> bool:
    """Whether ``cls.forward`` names its parameters exactly like the spec's forward arguments, in order,
    out buffers included, and takes them by position: then a call passes them positionally (cheaper
    than building keyword arguments on every call); otherwise buffers go by keyword."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[: len(arg_names)] == list(arg_names)


def _launch_contiguous(kernel: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                       written: set[int]) -> Any:
    """Give the kernel contiguous tensors; copy results back into written non-contiguous originals."""
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []

    def fix(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and not v.is_contiguous():
            c = v.contiguous()
            if id(v) in written:
                copies.append((v, c))
            return c
        return v

    result = kernel(*(fix(a) for a in args), **{k: fix(v) for k, v in kwargs.items()})
    for original, copy in copies:
        original.copy_(copy)  # a mutated input (or out buffer) written through its contiguous copy
    if any(result is c for _, c in copies):
        return next(o for o, c in copies if result is c)
    return result

