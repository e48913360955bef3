"""The compile boundary: one ``torch.library`` op per op class, made from the spec.

Under ``torch.compile`` an op call becomes a call of ``torch.ops.tileops.<name>``: the
schema holds the call-time tensors (inputs, then out buffers) and every param (and static
dim) as real arguments, then the instance's own target and check_contents setting,
then the compile key (:func:`~.decompose.compile_key`: the selection state where the
decomposition policy names the op, a constant in the traced graph so that torch's on-disk
caches, keyed by the graph, never serve a graph compiled under another decision),
the mutated inputs are exactly those marked ``mutated``, and the fake implementation runs
the generated checks on fake tensors (SymInt shapes) to produce the outputs' shapes and
dtypes without reading data. Eager calls never pass through here (no dispatcher cost).

The op is defined through a :class:`torch.library.Library` fragment rather than
``torch.library.custom_op``: a compiled graph then reaches our implementation straight from
the dispatcher, without custom_op's Python layers, and the implementation runs the plan
the checks already made (the kernel that selection chose for that call spec, bound once)
instead of the whole eager path. The fragment is the registration handle: removing the
boundary destroys it.

Custom ops may not return their inputs, so outputs written into an ``out=`` buffer are
returned fresh by the boundary and copied into the buffer by the traced wrapper, and
alias outputs are returned by the wrapper itself; the fake implementation checks that each
passed buffer fits its output first (:meth:`Boundary.check_buffer_fit`).

Storage an eager call refuses to share is refused here too. The fake implementation refuses
what the trace shows (dynamo's fake tensors share a storage where the caller's tensors do): an
out buffer sharing storage with an input (the buffers are arguments of the op for this, read by
nothing), a mutated input overlapping another argument or itself (an expanded view: torch's
functionalization failed on it with its own error). Dynamo does not guard on storage sharing
between distinct tensors, so a graph traced for separate tensors also runs for aliased ones: the
implementation checks the real out buffers again, and a mutated input is checked there by the
op's own call where the real tensor reaches it (the ``eager`` backend, Inductor's in-place op),
not under ``aot_eager``, whose functionalization hands it a copy. A mutated inference tensor
reaches eager's check only that way too: its fake tensor says it is no inference tensor (under
``aot_eager`` torch refuses it with its own error as it writes the result back).

One sharing eager accepts is refused in the trace as well: a mutated input and another of the
graph's inputs in one buffer without a common element, traced with dynamic shapes, where torch's
AOTAutograd rebuilds them with wrong strides (:func:`~.overlap.traced_argument_torch_mistraces`:
wrong results under ``aot_eager``, a failed compile under Inductor). The trace cannot tell which
backend compiles it, so the ``eager`` backend, which would compute such a call, refuses it too.
"""

from __future__ import annotations

import inspect
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..errors import CheckError, fail
from ..kernels.fingerprint import selection_state_guard
from ..lang.types import DTypeParam, Enum, ListOf, NoneT, ParamType, Prim, TupleOf, UnionT
from ..plugins.loader import ensure_plugins_loaded
from .decompose import compile_key, sync_decomposition
from .overlap import hint_of, traced_argument_torch_mistraces, traced_stand_in
from .storage import check_buffer_storage
from .torchtypes import name_of

if TYPE_CHECKING:
    from .base import Op
    from .definition import OpDef
    from .plan import CallPlan

__all__ = ["Boundary", "make_boundary", "call_boundary", "TARGET_ARG", "CONTENTS_ARG", "COMPILE_KEY_ARG", "NAMESPACE"]

#: The schema argument carrying an op's per-op target (a name no spec param may take).
TARGET_ARG = "tileops_target"
#: The schema argument carrying an op's check_contents= setting.
CONTENTS_ARG = "tileops_check_contents"
#: The schema argument carrying the compile key (empty outside compiled calls, its default).
COMPILE_KEY_ARG = "tileops_compile_key"
#: The torch.library namespace of every op.
NAMESPACE = "tileops"

_names_lock = threading.Lock()
_used_names: set[str] = set()


class Boundary:
    """The torch.library op of one op class and how to map an op call onto it."""

    def __init__(self, definition: "OpDef", qualname: str, library: Any, encoders: list[Callable[[Any], Any]],
                 returned: list[int]) -> None:
        self.definition = definition
        self.spec = definition.spec
        self.qualname = qualname
        self.library = library
        self.encoders = encoders
        self.returned = returned  # indices of outputs the op returns
        self.n_inputs = len(self.spec.call_inputs)
        #: The schema's tensor arguments: the call-time inputs, then the out buffers (the forward arguments).
        self.n_tensors = definition.n_args
        #: Schema arguments after the tensors that make an instance: params, static dims, target,
        #: check_contents (the compile key that follows only keys torch's caches).
        self.n_encoded = len(self.spec.params) + len(self.spec.static_dims) + 2
        #: Where those arguments stand in a call of the op (what :meth:`instance` takes).
        self.encoded = slice(self.n_tensors, self.n_tensors + self.n_encoded)
        self._instances: dict[Any, Any] = {}
        self._last: tuple[tuple[Any, ...], Any] | None = None  # (schema arguments, instance) of the last call
        self._lock = threading.Lock()
        ns, name = qualname.split("::")
        self.fn = getattr(getattr(torch.ops, ns), name).default
        index = definition.arg_index
        #: Per output: the forward-argument index of the input it aliases, and of its out buffer.
        self.out_plan: tuple[tuple[int | None, int | None], ...] = tuple(
            (index[o.alias] if o.alias else None, index[o.buffer] if o.buffer else None)
            for o in self.spec.outputs.values())
        #: One output that is neither an alias nor buffered: the op's result is the custom op's.
        self.plain = len(self.out_plan) == 1 and self.out_plan[0] == (None, None)
        #: Per out buffer: its argument index, forward keyword and declaration (:meth:`check_buffer_sharing`).
        self.buffers = tuple((index[o.buffer], o.buffer, o.loc) for o in self.spec.outputs.values() if o.buffer)
        #: Per out buffer: its output's index and name, and its own argument index and keyword (:meth:`check_buffer_fit`).
        self.buffered_outputs = tuple((i, o.name, index[o.buffer], o.buffer, o.loc)
                                      for i, o in enumerate(self.spec.outputs.values()) if o.buffer)

    @property
    def opoverload(self) -> Any:
        """``torch.ops.tileops.<name>.default`` (for ``torch.library.opcheck``)."""
        return self.fn

    def encode(self, op: "Op") -> tuple[Any, ...]:
        """The schema arguments for an op instance: params, static dims, its own target and
        whether it checks tensor contents (what the implementation's instance must share)."""
        names = [*self.spec.params, *self.spec.static_dims]
        env = op.params_env()
        target = None if op.target is None else str(op.target)
        return (*(enc(env[n]) for enc, n in zip(self.encoders, names)), target, op.checks_contents)

    def instance(self, args: Sequence[Any]) -> Any:
        """An op instance for the schema arguments that make one (``args[self.encoded]`` of a
        call: the compile key plays no part), cached: the implementation runs per call.

        The arguments of the previous call are compared first (a compiled graph passes the
        same values every call; list equality runs in C), then the key is built.
        """
        last = self._last
        if last is not None and last[0] == args:
            return last[1]
        key = tuple(tuple(p) if isinstance(p, list) else p for p in args)
        op = self._instances.get(key)
        if op is None:
            names = [*self.spec.params, *self.spec.static_dims]
            *params, target, check_contents = args
            with self._lock:
                op = self._instances.get(key)
                if op is None:
                    options = {} if target is None else {"target": target}
                    op = self.definition.op_cls(**dict(zip(names, params)), **options)
                    op.checks_contents = check_contents
                    self._instances[key] = op
        self._last = (tuple(args), op)
        return op

    def check_buffer_sharing(self, args: Sequence[Any]) -> None:
        """Step 5's storage rule for the out buffers of a call of the op (``args``: its schema
        arguments; fake tensors in the fake implementation, real ones in the implementation)."""
        inputs = args[: self.n_inputs]
        for j, name, loc in self.buffers:
            if args[j] is not None:
                check_buffer_storage(self.spec.name, name, loc, args[j], inputs)

    def check_buffer_fit(self, plan: "CallPlan", args: Sequence[Any]) -> None:
        """Step 5's fit of each passed out buffer to its output (shape, dtype, device), on the fake tensors
        of a trace (the fake implementation runs this). The op returns the output fresh and the traced
        wrapper copies it into the buffer, which ``copy_`` would cast or broadcast (found in review: a wrong
        dtype was cast silently). Checked here, not in the traced wrapper, so that a refusal traced with
        dynamic shapes names the caller's sizes (the hints) as eager does, not symbols (``[s45]``); the
        comparison of symbolic sizes guards the graph as dynamo's own did."""
        for i, output, j, name, loc in self.buffered_outputs:
            buffer = args[j]
            if buffer is None:
                continue
            shape = plan.out_shapes[i]
            if list(buffer.shape) != list(shape):
                fail(self.spec.name, f"out buffer {name} has shape {[hint_of(n) for n in buffer.shape]}, output "
                                     f"{output} is {[hint_of(n) for n in shape]}", loc)
            for what, got, want in (("dtype", name_of(buffer.dtype), name_of(plan.out_dtypes[i])),
                                    ("device", buffer.device, plan.device)):
                if got != want:
                    fail(self.spec.name, f"out buffer {name} has {what} {got}, output {output} is {want}", loc)

    def check_traced_written_inputs(self, plan: "CallPlan", tensors: Sequence[Any]) -> None:
        """Step 5's rules for the inputs a kernel writes, on the fake tensors of a trace (``tensors``:
        the schema's tensor arguments; the fake implementation runs this), then the sharing torch's
        compile of dynamic shapes gets wrong (module docstring).

        A written input that overlaps itself is judged by the eager check on a stand-in with the
        trace's sizes and strides (:func:`~.overlap.traced_stand_in`), so the message is eager's;
        one that overlaps another argument, by the plan's traced check."""
        stand_ins = list(tensors)
        for m in plan.mutated_inputs:
            if tensors[m] is not None:
                stand_ins[m] = traced_stand_in(tensors[m])
        with unset_fake_temporarily():  # stand-ins are meta tensors, read outside the trace
            plan.check_written_inputs(stand_ins, [0] * len(stand_ins))  # a stand-in touches no memory (extent 0)
        plan.check_traced_written_inputs(tensors)
        for m, loc in zip(plan.mutated_inputs, plan.mutated_locs):
            j = None if tensors[m] is None else traced_argument_torch_mistraces(tensors, m, plan.mutated_inputs)
            if j is not None:
                name, other = plan.arg_names[m], plan.arg_names[j]
                fail(self.spec.name,
                     f"input {name} is mutated (written in place) and shares its buffer with {other} without a "
                     f"common element, which an eager call accepts; compiled with dynamic shapes, torch's "
                     f"AOTAutograd merges such inputs into one base and rebuilds them from it with wrong strides "
                     f"(wrong results under aot_eager, a failed compile under Inductor); pass tensors of separate "
                     f"buffers (e.g. {other}.clone()), or compile with static shapes (dynamic=False)", loc)

    def remove(self) -> None:
        """Undo the registration (the validator binds specs for a while)."""
        self.library._destroy()
        with _names_lock:
            _used_names.discard(self.qualname)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _is_int(o: ParamType) -> bool:
    return isinstance(o, Prim) and o.kind == "int"


def _is_int_seq(o: ParamType) -> bool:
    return (isinstance(o, ListOf) and _is_int(o.item)) or (isinstance(o, TupleOf) and all(_is_int(i) for i in o.items))


def _annotation(ptype: ParamType) -> tuple[Any, Callable[[Any], Any]] | None:
    """Schema annotation for a param type and the encoder of its values (None: not expressible)."""
    options = ptype.options if isinstance(ptype, UnionT) else (ptype,)
    maybe = any(isinstance(o, NoneT) for o in options)
    options = tuple(o for o in options if not isinstance(o, NoneT))
    ann: Any
    enc: Callable[[Any], Any]
    if options and all(_is_int(o) or _is_int_seq(o) for o in options) and any(_is_int_seq(o) for o in options):
        ann, enc = list[int], (lambda v: [v] if isinstance(v, int) else list(v))
    elif len(options) == 1 and isinstance(options[0], Prim):
        kind = options[0].kind
        ann = {"bool": bool, "int": int, "float": float, "str": str, "device": str}[kind]
        enc = (lambda v: v)
    elif len(options) == 1 and isinstance(options[0], Enum):
        ann, enc = str, (lambda v: v)
    elif len(options) == 1 and isinstance(options[0], DTypeParam):
        ann, enc = torch.dtype, (lambda v: getattr(torch, v))
    elif options and all(isinstance(o, Prim) and o.kind in ("int", "float") for o in options):
        ann, enc = float, float
    else:
        return None
    if maybe:
        inner_enc = enc
        return Optional[ann], (lambda v: None if v is None else inner_enc(v))
    return ann, enc


def make_boundary(definition: "OpDef") -> tuple[Boundary | None, str | None]:
    """Define the torch.library op of an op class; return it, or None and why there is none."""
    spec = definition.spec
    if not spec.call_inputs:
        return None, "no call-time tensor inputs"
    params: list[inspect.Parameter] = []
    for t in spec.call_inputs:
        ann = Optional[torch.Tensor] if t.optional else torch.Tensor
        params.append(inspect.Parameter(t.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ann))
    # The out buffers, which the op never writes (the traced wrapper copies into them): it takes them
    # to refuse one that shares storage with an input (module docstring).
    for o in spec.outputs.values():
        if o.buffer:
            params.append(inspect.Parameter(o.buffer, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            annotation=Optional[torch.Tensor]))
    encoders: list[Callable[[Any], Any]] = []
    for name, p in spec.params.items():
        got = _annotation(p.type)
        if got is None:
            return None, f"param {name} ({p.type_text}) has no torch schema type"
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=got[0]))
        encoders.append(got[1])
    for name in spec.static_dims:
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=int))
        encoders.append(int)
    # The op's own target= travels with the call, so a compiled call selects as the eager one.
    params.append(inspect.Parameter(TARGET_ARG, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[str]))
    # So does check_contents=: a compiled call of an instance made with it off never reads
    # contents (a sync, which a CUDA graph cannot hold), whatever TILEOPS_CHECK_CONTENTS says.
    params.append(inspect.Parameter(CONTENTS_ARG, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=bool))
    # The compile key: a constant of the traced graph, so torch's caches key on the decision (module docstring).
    params.append(inspect.Parameter(COMPILE_KEY_ARG, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str,
                                    default=""))
    returned = [i for i, o in enumerate(spec.outputs.values()) if o.alias is None]
    ret_ann: Any = None
    if len(returned) == 1:
        ret_ann = torch.Tensor
    elif returned:
        ret_ann = tuple[tuple(torch.Tensor for _ in returned)]  # type: ignore[misc]  # a tuple type of a length known at run time
    n_inputs = len(spec.call_inputs)
    n_buffers = sum(1 for o in spec.outputs.values() if o.buffer)
    boundary_ref: list[Boundary] = []

    def pick(outs: tuple[Any, ...]) -> Any:
        picked = tuple(outs[i] for i in boundary_ref[0].returned)
        if not picked:
            return None
        return picked[0] if len(picked) == 1 else picked

    single = len(spec.outputs) == 1 and spec.outputs[next(iter(spec.outputs))].alias is None
    padding = [None] * n_buffers

    def impl(*args: Any) -> Any:
        op = boundary_ref[0].instance(args[boundary_ref[0].encoded])
        result = op.run_planned([*args[:n_inputs], *padding])
        # Fresh outputs packed, as the fake makes them: Inductor compares the real strides with the fake's
        # (found in review: a kernel's strided output, which eager accepts, failed the compiled call).
        if single:  # the common case: the op's one output is the custom op's result
            return result if result.is_contiguous() else result.contiguous()
        picked = pick((result,) if len(spec.outputs) == 1 else tuple(result))
        if isinstance(picked, tuple):
            return tuple(o if o.is_contiguous() else o.contiguous() for o in picked)
        return picked if picked is None or picked.is_contiguous() else picked.contiguous()

    def impl_checking_buffers(*args: Any) -> Any:
        # The trace's verdict on the buffers does not hold for a later call's tensors (module docstring).
        boundary_ref[0].check_buffer_sharing(args)
        return impl(*args)

    def fake(*args: Any) -> Any:
        # Hooks (kernels/fingerprint.py, op/decompose.py): the trace sees the loaded selection
        # state, so the guard call_boundary reads after this op is not failed by the first call's
        # plugin load; and Inductor's table holds this op's decomposition exactly when this call
        # decomposes, before Inductor consults it.
        ensure_plugins_loaded()
        boundary = boundary_ref[0]
        op = boundary.instance(args[boundary.encoded])
        values = list(args[:n_inputs]) + [None] * n_buffers
        plan = _plan_in_trace(definition, op, values)
        boundary.check_buffer_fit(plan, args)
        boundary.check_buffer_sharing(args)
        boundary.check_traced_written_inputs(plan, args[: boundary.n_tensors])
        sync_decomposition(boundary, op, values)
        return pick(tuple(torch.empty(s, dtype=d, device=plan.device) for s, d in zip(plan.out_shapes,
                                                                                     plan.out_dtypes)))

    signature = inspect.Signature(params, return_annotation=ret_ann)
    setattr(impl, "__signature__", signature)  # what infer_schema reads (no such attribute on a function type)
    mutated = [t.name for t in spec.call_inputs if t.mutated]
    try:
        schema = torch.library.infer_schema(impl, mutates_args=mutated)
    except Exception as exc:  # a schema torch cannot express: eager still works, say why
        return None, f"torch.library refused the schema: {exc}"
    base = _snake(spec.name)
    with _names_lock:
        name, n = base, 1
        while f"{NAMESPACE}::{name}" in _used_names:
            n += 1
            name = f"{base}_{n}"
        qualname = f"{NAMESPACE}::{name}"
        _used_names.add(qualname)
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    try:
        library.define(name + schema)
        library.impl(name, impl_checking_buffers if n_buffers else impl, "CompositeExplicitAutograd")
        # No autograd formula: skip autograd, so a compiled call's outputs require no grad, as eager ones
        # (found in review: they required grad, and backward() left the inputs' .grad silently None).
        library.impl(name, torch.library.fallthrough_kernel, "Autograd")
        torch.library.register_fake(qualname, fake, lib=library)
    except Exception as exc:
        library._destroy()
        with _names_lock:
            _used_names.discard(qualname)
        return None, f"torch.library refused the schema: {exc}"
    boundary = Boundary(definition, qualname, library, encoders, returned)
    boundary_ref.append(boundary)
    return boundary, None


def _plan_in_trace(definition: "OpDef", op: "Op", values: Sequence[Any]) -> "CallPlan":
    """Steps 1-5 on the fake tensors of a trace, refusing a call with eager's message.

    Traced with dynamic shapes, the checks see symbolic sizes and a refusal would name them
    (``query shape [s10, s21]``, found in review). The refused call is planned again on ``meta``
    stand-ins with the trace's sizes and strides at their hints (the caller's own), and where that
    refuses at the same declaration, its message, eager's, is the one raised."""
    try:
        return definition.plan(op, values, kernels=False)
    except CheckError as traced:
        if not any(isinstance(v, torch.Tensor) and any(isinstance(n, torch.SymInt) for n in (*v.shape, *v.stride()))
                   for v in values):
            raise
        stand_ins = [traced_stand_in(v) if isinstance(v, torch.Tensor) else v for v in values]
        try:
            with unset_fake_temporarily():
                definition.plan(op, stand_ins, kernels=False)
        except CheckError as eager:
            if _declaration(eager) and _declaration(eager) == _declaration(traced):
                raise eager from traced
        raise


def _declaration(error: CheckError) -> str:
    """The ``(file:line)`` a check's message ends with: where the refusing declaration is."""
    text = str(error)
    return text[text.rfind(" ("):] if text.endswith(")") else ""


def call_boundary(op: "Op", values: Sequence[Any]) -> Any:
    """An op call under ``torch.compile``: the torch.library op, then buffers and aliases.

    Dynamo traces this function, and every attribute it reads becomes a guard checked on
    each call of the compiled graph: it reads the boundary's few precomputed facts and the
    op's encoded params (:meth:`Boundary.encode`, made once at construction), nothing else.
    """
    boundary = op._def.boundary  # the instance's own reference: dynamo guards on it, not on a registry dict
    assert boundary is not None  # callers check
    result = boundary.fn(*values, *op._boundary_args, compile_key(boundary.spec.name))
    # Hook (kernels/fingerprint.py): dynamo guards on the selection state's generation, so a
    # compiled graph is traced again after kernels, overrides or the lock change.
    selection_state_guard()
    if boundary.plain:
        return result
    fresh = list((result,) if len(boundary.returned) == 1 else (result or ()))
    outs = []
    for alias, buffer in boundary.out_plan:
        if alias is not None:
            outs.append(values[alias])
            continue
        value = fresh.pop(0)
        if buffer is not None and values[buffer] is not None:  # (it fits: the fake implementation checked it)
            values[buffer].copy_(value)
            value = values[buffer]
        outs.append(value)
    return outs[0] if len(outs) == 1 else tuple(outs)

