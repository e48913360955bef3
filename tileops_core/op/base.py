"""The Op base class: an op is bound to its spec, and the spec generates its checks.

An op author writes a class named exactly as its manifest key, lists its kernel
``interfaces``, and writes ``__init__`` (forwarding params to ``super().__init__``) and
``forward`` (building nothing but the kernel launch through :meth:`Op.launch`). The base
class does the rest through the class's :class:`~tileops_core.op.definition.OpDef`:
construction checks, seed 000's seven call steps, the calling device, the empty-call rule,
contiguity and copy-back for mutated inputs, and the compile boundary used under
``torch.compile``.

The eager hot path: a call whose key (per argument shape, dtype, device, and contiguity
where it matters) was seen before by the same instance reuses the plan of its first call,
under the registry generation that plan was made in. It costs the key, a dict lookup, the
launcher the plan bound for the current target, the kernel, and the part of step 7 a
kernel could have broken; it never goes through the dispatcher. Where ``forward`` is one
launch of the op's own arguments (:mod:`.one_launch`) and the kernel writes the outputs the
plan allocates, the call does not run ``forward`` at all: after step 5 it calls the bound
kernel with the same arguments and fresh outputs (``BoundKernels.direct``).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, ClassVar, Sequence

import torch

from ..errors import CheckError, TileOpsError
from ..kernels.interface import KernelInterface
from ..roofline import roofline_of_call
from ..kernels.registry import GENERATION
from ..kernels.select import choose_kernel
from ..kernels.targets import Target, current_target, parse_target
from ..spec.nodes import OpSpec
from .boundary import call_boundary
from .checks import Branch, contents_checking_default
from .definition import OpDef, bind_at_definition, definition_of
from .plan import CURRENT, BoundKernels, CallPlan
from .overlap import extents_of

_grad_enabled = torch.is_grad_enabled

__all__ = ["Op", "current_call"]

_warned_full_shape: set[type] = set()
#: Plans kept per op instance before the oldest are dropped (dynamic shapes).
MAX_PLANS = 4096
#: Instance attributes a copy does not carry: caches rebuilt on use, and the class's definition.
_PER_PROCESS = frozenset({"_def", "_key", "_forward_positional", "_plans", "_branches", "_last_plan", "_calls"})


def current_call() -> tuple["Op", CallPlan, Sequence[Any]]:
    """The op, plan and arguments of the call being executed on this thread (inside ``forward``)."""
    state = getattr(CURRENT, "call", None)
    if state is None:
        raise RuntimeError("Op.launch() is only valid inside an op's forward()")
    return state[0], state[1], state[3]


_is_compiling: Callable[[], bool] = torch.compiler.is_compiling
_is_tracing: Callable[[], bool] = torch._C._is_tracing


class Op:
    """Base of every operator. Subclasses are bound to the manifest entry of their class name."""

    #: The kernel interfaces this op launches (the places where it calls a kernel).
    interfaces: ClassVar[tuple[type[KernelInterface], ...]] = ()
    #: Set on intermediate base classes that have no spec of their own.
    abstract: ClassVar[bool] = False
    #: Marks op classes for layers below this one (the plugin registrar checks ``registrar.ops``).
    __tileops_op__: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        for interface in cls.interfaces:
            if not (isinstance(interface, type) and issubclass(interface, KernelInterface) and interface.is_interface()):
                raise TypeError(f"{cls.__name__}.interfaces must list kernel interfaces, got {interface!r}")
            if interface.op != cls.__name__:
                raise TypeError(f"{cls.__name__}.interfaces: {interface.__name__}.op is {interface.op!r}, "
                                f"expected {cls.__name__!r}")
        bind_at_definition(cls)

    @classmethod
    def definition(cls) -> OpDef:
        """The definition of this op class (spec, checks, compile boundary, planning)."""
        return definition_of(cls)

    @classmethod
    def op_spec(cls) -> OpSpec:
        """The spec this class is bound to."""
        return definition_of(cls).spec

    # -- construction -----------------------------------------------------------------------

    def __init__(self, *, target: str | Target | None = None, check_contents: bool | None = None,
                 **values: Any) -> None:
        if torch.compiler.is_dynamo_compiling():  # (dynamo cannot make the per-thread plan slot: found in review)
            raise TileOpsError(f"{type(self).__name__} constructed inside a compiled function: construct ops "
                               "outside torch.compile and call them inside")
        definition = type(self).definition()
        env, construction = definition.construct(values)
        self._def = definition
        self._env = env
        self._construction = construction
        self._target = parse_target(target, "the op's target=")
        self._check_contents = self._contents_setting(check_contents, "check_contents=")
        self._plans: dict[Any, CallPlan] = {}
        self._branches: dict[frozenset[str], Branch] = {}
        self._last_plan: CallPlan | None = None  # the hot path's first guess (any thread's last call)
        self._calls = threading.local()  # .plan: this thread's last plan (last_plan, last_call_env)
        self._n_args = definition.n_args
        self._key = definition.key
        self._forward_positional = definition.forward_positional
        #: The schema arguments a compiled call passes after the tensors (params, static dims, target).
        self._boundary_args = () if definition.boundary is None else definition.boundary.encode(self)
        for name in (*definition.spec.params, *definition.spec.static_dims):
            if not hasattr(type(self), name):
                setattr(self, name, env[name])

    def __setattr__(self, name: str, value: Any) -> None:
        """A param (or static dim) is set once, at construction, from its checked value: a later assignment
        would bypass the manifest's checks, and a compiled call would still pass the constructed value
        (found in review: ``op.eps = -1e-4`` was taken, eager and compiled then disagreed)."""
        definition = self.__dict__.get("_def")
        if definition is not None and name in self.__dict__ and (name in definition.spec.params
                                                                  or name in definition.spec.static_dims):
            raise AttributeError(f"{type(self).__name__}.{name} is set at construction only: make a new op with "
                                 f"{type(self).__name__}({name}=...)")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        """Nor is a param deleted: ``del op.eps`` then ``op.eps = ...`` was the way round
        :meth:`__setattr__` (found in review: eager took the new eps unchecked, ``params`` and a
        compiled call kept the constructed one)."""
        definition = self.__dict__.get("_def")
        if definition is not None and (name in definition.spec.params or name in definition.spec.static_dims):
            raise AttributeError(f"{type(self).__name__}.{name} is set at construction only: make a new op with "
                                 f"{type(self).__name__}({name}=...)")
        object.__delattr__(self, name)

    @property
    def params(self) -> dict[str, Any]:
        """The checked, normalised param (and static dim) values of this instance."""
        spec = self._def.spec
        return {n: self._env[n] for n in (*spec.params, *spec.static_dims)}

    def params_env(self) -> dict[str, Any]:
        """Params, static dims and the lets they determine, as construction left them (read-only)."""
        return self._env

    def construction_tensors(self) -> dict[str, torch.Tensor]:
        """The construction-time tensors as given (a call moves and casts them to its device)."""
        return self._construction

    @property
    def target(self) -> Target | None:
        return self._target

    @property
    def checks_contents(self) -> bool:
        """Whether calls run the checks that read tensor contents (``check_contents=``)."""
        return self._check_contents

    @checks_contents.setter
    def checks_contents(self, on: bool | None) -> None:
        self._check_contents = self._contents_setting(on, "checks_contents")
        if self._def.boundary is not None:  # a compiled call carries the setting in its schema
            self._boundary_args = self._def.boundary.encode(self)

    def _contents_setting(self, on: Any, where: str) -> bool:
        """A contents-checking setting: True, False or None (the process default). Anything else is
        refused, not read as a truth value ("no" would be True; found in review: the setter took it)."""
        if on is not None and not isinstance(on, bool):
            raise TileOpsError(f"{type(self).__name__}: {where} takes True, False or None, not {on!r}")
        return contents_checking_default() if on is None else on

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
        spec = self._def.spec
        if type(self).specialisation is Op.specialisation and not spec.static_dims:
            arbitrary = {v for t in spec.inputs.values() if not t.optional and t.shape is not None
                         for v in getattr(t.shape, "variadics", ())}
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values: Sequence[Any] = args
        if kwargs:
            values = self._def.bind_values(args, kwargs)
        elif len(args) != self._n_args:
            missing = self._n_args - len(args)
            # omitted == None (seed 001 rule 2); too many arguments: bind_values names the error
            values = args + (None,) * missing if missing > 0 else self._def.bind_values(args, kwargs)
        if _is_compiling() and self._def.boundary is not None:
            return call_boundary(self, values)
        return self._call(values)

    def _traced(self, values: Sequence[Any]) -> Any:
        """A call under ``torch.jit.trace``, which records dispatcher calls only: the eager path runs the kernel
        outside its view (a TileLang launch is no torch op), so the trace would keep the output's allocation
        and drop the kernel that writes it. Through the compile boundary the trace records the custom op,
        as ``torch.export`` does; an op without one is refused (found in review)."""
        if self._def.boundary is None:
            raise TileOpsError(f"{type(self).__name__}: torch.jit.trace records torch ops only, and this op has no "
                               f"custom op to record ({self._def.boundary_reason}): call it outside the trace")
        return call_boundary(self, values)

    def _plan_of(self, values: Sequence[Any]) -> CallPlan:
        """Steps 1-5, or the plan a previous call with this key made (same registry generation).

        The hot path (:meth:`_call`) tries the last plan's same-call matcher first; this is
        what runs when it misses.
        """
        last = self._last_plan
        try:
            key: Any = self._key(values)
        except Exception:  # not a tensor, or a layout without strides: the slow path names it
            key = None
        plan = self._plans.get(key)  # a None key is never stored
        if plan is not None and not self._def.key_has_contiguity:
            # The key does not say which arguments are expanded, so the plan's own list cannot: each call
            # that comes here (its strides unlike those of the last matched call) is checked before a
            # matcher is made for it (found in review: a warm call skipped the refusal a cold one made).
            plan.check_expanded_inputs(values, every_argument=True)
        if plan is not None and plan is last and plan.generation == GENERATION[0]:
            # The last plan's own key, yet its matcher missed: it was made where the dispatch
            # state differs (an eager call versus the compile boundary's implementation, below
            # autograd). Make it here. (Calls alternating between shapes keep their matchers.)
            plan.match_calls_like(values)
        if plan is None or plan.generation != GENERATION[0]:
            plan = self._def.plan(self, values, branches=self._branches)
            if key is not None and not plan.device_by_default:
                if len(self._plans) >= MAX_PLANS:
                    self._plans.clear()
                self._plans[key] = plan
                plan.match_calls_like(values)
        self._last_plan = self._calls.plan = plan
        return plan

    def _call(self, values: Sequence[Any]) -> Any:
        # The hot path (see the module docstring), written out in one frame: a repeated call
        # is the matcher of the last plan, the bound launchers, forward and step 7.
        plan = self._last_plan
        matches = None if plan is None or plan.generation != GENERATION[0] else plan.matches
        if plan is None or matches is None or not matches(values):
            if _is_tracing():  # (a matcher made outside the trace misses in it: the tracer's key is in the TLS)
                return self._traced(values)
            plan = self._plan_of(values)
            matches = None
        else:
            self._calls.plan = plan
        if plan.buffer_args:
            plan.check_buffers(values)  # step 5's storage check reads the buffer object, not the key
        if plan.noncontiguous_args:
            plan.check_expanded_inputs(values)
        if plan.mutated_inputs:  # step 5 for the inputs a kernel writes: it reads the objects too
            check = None if matches is None else matches.check_written  # (set on every matcher of such a plan)
            if check is not None:
                check(values)
            else:
                plan.check_written_inputs(values, extents_of(values))
        if self._check_contents:
            self.check_contents(**dict(zip(self._def.arg_names, values)))
        if plan.empty:
            return plan.empty_result(values)
        target = self._target or current_target()
        bound = plan.bound.get(target)
        if bound is None:
            bound = self._bind(plan, target)
        direct = bound.direct
        # Forward is one launch: its kernel, then fresh outputs or step 7 (bind_direct); with grad
        # mode on and an argument that requires grad, forward runs under no_grad instead (below).
        if direct is not None and not (plan.reads_grad and _grad_enabled()):
            return direct(values, self)
        previous = getattr(CURRENT, "call", None)
        CURRENT.call = (self, plan, bound, values)
        try:
            if plan.reads_grad and _grad_enabled():  # (under no_grad already: the plain path)
                result = self._forward_without_grad(plan, values)
            elif self._forward_positional or plan.n_buffers == 0:
                result = self.forward(*values)
            else:
                result = self._forward_with_buffers(plan, values)
        finally:
            CURRENT.call = previous
        made = plan.made
        if result is made.out and result is not None:  # step 7 holds by construction (see CallPlan.made)
            made.out = None
            return result
        try:
            return plan.check_outputs(result, values)
        except CheckError as refused:  # (a try costs nothing where nothing raises)
            raise bound.name_kernels(refused) from None

    def _bind(self, plan: CallPlan, target: Target | None) -> BoundKernels:
        """The plan's launchers under ``target``; where ``forward`` is one launch of the op's own
        arguments (:mod:`.one_launch`), its kernel bound for :meth:`_call` to call directly
        (``BoundKernels.direct``). A plan whose arguments require grad (a model's weights are
        parameters) uses it on the calls made under ``no_grad``, as inference runs; with grad mode
        on, forward runs under ``no_grad`` so that no output requires grad."""
        bound = plan.bind(target, choose_kernel)
        launch = self._def.one_launch
        if launch is not None and type(self).launch is Op.launch:
            bound.bind_direct(launch, self)
        return bound

    def _forward_without_grad(self, plan: CallPlan, values: Sequence[Any]) -> Any:
        """``forward`` for a call where some argument requires grad: ops record no backward (they
        are forward, inference ops), so no kernel sees autograd and no output requires grad."""
        with torch.no_grad():
            if self._forward_positional or plan.n_buffers == 0:
                return self.forward(*values)
            return self._forward_with_buffers(plan, values)

    def _forward_with_buffers(self, plan: CallPlan, values: Sequence[Any]) -> Any:
        """``forward`` taking its out buffers by keyword (it does not list them positionally)."""
        n_inputs = len(values) - plan.n_buffers
        buffers = dict(zip(self._def.arg_names[n_inputs:], values[n_inputs:]))
        return self.forward(*values[:n_inputs], **buffers)

    def run_planned(self, values: Sequence[Any]) -> Any:
        """The compile boundary's implementation: the planned kernel on real tensors.

        The fake implementation ran steps 1-5 on fake tensors at trace time; here the call
        finds the plan made for its key and goes straight to the bound launcher, as an eager
        call does. Step 7 stays: it is what catches a kernel's mistake.
        """
        return self._call(values)

    # -- what forward uses ------------------------------------------------------------------

    def launch(self, interface: type[KernelInterface], *args: Any, **kwargs: Any) -> Any:
        """Call the kernel selected for ``interface`` on the current call."""
        state = getattr(CURRENT, "call", None)
        if state is None:
            raise RuntimeError("Op.launch() is only valid inside an op's forward()")
        return state[2][interface](*args, **kwargs) if kwargs else state[2][interface](*args)

    def bound(self, name: str) -> Any:
        """The value of an index, let or param on the current call (e.g. ``self.bound("N")``)."""
        return current_call()[1].env[name]

    def construction_tensor(self, name: str) -> torch.Tensor:
        """A construction-time input, moved to the calling device and cast as the spec says."""
        return current_call()[1].construction[name]

    @property
    def last_call_env(self) -> dict[str, Any] | None:
        """Index/param values of this instance's last call on this thread (roofline, explain)."""
        plan = self.last_plan
        return None if plan is None else plan.env

    @property
    def last_plan(self) -> CallPlan | None:
        """The plan of this instance's last call (or :meth:`plan_for`) on this thread.

        Per thread: an instance shared by threads calling it with different shapes tells
        each thread about its own call, never another's.
        """
        return getattr(self._calls, "plan", None)

    # -- copies -----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle keeps: the checked construction, not the per-call caches
        (plans hold launchers and C++ guards) nor the class's shared definition."""
        return {k: v for k, v in self.__dict__.items() if k not in _PER_PROCESS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        definition = type(self).definition()
        self._def, self._key, self._forward_positional = definition, definition.key, definition.forward_positional
        self._plans, self._branches, self._last_plan = {}, {}, None
        self._calls = threading.local()

    def plan_for(self, *args: Any, **kwargs: Any) -> CallPlan:
        """Steps 1-5 for these arguments, without running a kernel: the plan a call would use.

        Works on ``meta`` tensors, so tools (the support matrix of ``tileops docs``) can build
        the call specs of a workload row without allocating it or selecting a kernel.
        """
        return self._plan_of(self._def.bind_values(args, kwargs))

    def eval_roofline(self) -> Any:
        """The spec's roofline (FLOPs, bytes) for this instance's last call.

        Delegates to :func:`tileops_core.roofline.roofline_of_call`: the formula is the
        spec's, never the op's.
        """
        return roofline_of_call(self)
