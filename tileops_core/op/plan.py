"""A call plan: what steps 1-5 decided for one call key, and everything a repeated call needs.

:meth:`OpDef.plan <tileops_core.op.definition.OpDef.plan>` builds a :class:`CallPlan` the
first time an op instance meets a key (per argument: shape, dtype, device, contiguity;
None for an absent one). Everything that depends only on the plan is decided there, once:
the expected outputs, the call spec of each kernel interface, which arguments need a
contiguity copy, and, per target, the launcher bound to its kernel (:class:`BoundKernels`).
A repeated call then does only per-call work: the key, one dict lookup, the kernel, and the
part of step 7 that a kernel could have broken.

A kernel declaring ``writes_outputs`` receives outputs that the plan allocates (right shape,
dtype, device, fresh storage), so step 7 has nothing left to check for them; any other
result goes through :meth:`CallPlan.check_outputs`, whose refusal the caller, which knows the
kernels it bound, extends with their names (:meth:`BoundKernels.name_kernels`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..errors import CheckError, KernelError, Location, TileOpsError, fail
from ..kernels.interface import CallSpec, KernelInterface
from ..kernels.registry import backend_of
from ..kernels.targets import Target
from ..lang.tensor_meta import TensorMeta
from .alloc import fresh_allocator
from .one_launch import OneLaunch
from .overlap import expanded_beyond_limit, overlapping_argument, overlaps_itself, traced_overlapping_argument
from .same_call import Matcher, make_matcher, make_output_matcher
from .storage import TRANSFORM_REFUSAL, check_buffer_storage, storage_address, storage_id, storage_ids
from .torchtypes import name_of

__all__ = ["BoundKernels", "CallPlan", "CURRENT", "TensorMeta", "is_zero", "numel"]

#: The call being executed on this thread: ``CURRENT.call = (op, plan, bound, values)`` while
#: ``forward`` runs (set by :class:`~tileops_core.op.base.Op`, read by ``Op.launch``).
CURRENT = threading.local()


def is_zero(n: Any) -> bool:
    """``n == 0`` for an int; False for a symbolic size (never a guard on a SymInt)."""
    return type(n) is int and n == 0


def numel(shape: Sequence[Any]) -> Any:
    n = 1
    for s in shape:
        n = n * s
    return n


_Tensor = torch.Tensor
_STRIDED = torch.strided


#: ``select(interface, call, target) -> (implementation, built kernel)``.
Select = Callable[[type[KernelInterface], CallSpec, "Target | None"], tuple[type[KernelInterface], Callable[..., Any]]]


class BoundKernels(dict[type[KernelInterface], Callable[..., Any]]):  # a dict: one lookup per launch
    """The launchers of one plan under one target, per interface: a callable taking the
    arguments ``forward`` passes to :meth:`Op.launch`. An interface is bound the first time
    a call launches it (an op need not launch every interface it lists on every call)."""

    def __init__(self, plan: "CallPlan", target: "Target | None", select: Select) -> None:
        super().__init__()
        self.plan = plan
        self.target = target
        self.select = select
        #: Which implementation serves each bound interface (``tileops explain``, tests).
        self.kernels: dict[type[KernelInterface], type[KernelInterface]] = {}
        #: ``direct(values, op) -> outputs``: the op's whole call after step 5 where its forward is
        #: one launch (:mod:`.one_launch`) of a kernel that needs no contiguity copy (:meth:`bind_direct`).
        self.direct: Callable[[Sequence[Any], Any], Any] | None = None

    def __missing__(self, interface: type[KernelInterface]) -> Callable[..., Any]:
        impl, kernel, call = self._select(interface)
        launcher = _launcher(self.plan, interface, impl, kernel, call, self.plan.written_args)
        self[interface] = launcher
        return launcher

    def _select(self, interface: type[KernelInterface]) -> tuple[type[KernelInterface], Callable[..., Any], CallSpec]:
        call = self.plan.call_specs.get(interface)
        if call is None:
            raise TypeError(f"{self.plan.op}: {getattr(interface, '__name__', interface)} is not listed in "
                            "interfaces")
        impl, kernel = self.select(interface, call, self.target)
        self.kernels[interface] = impl
        return impl, kernel, call

    def name_kernels(self, refused: CheckError) -> CheckError:
        """Step 7's refusal of a call's outputs, naming the kernel that produced them (its name and
        backend), so that a plugin's author sees which kernel broke the contract; made on the failure
        path only. A plan's output check knows no kernel (one plan serves every target); the launchers
        bound under this target do. Where ``forward`` launched several interfaces, each bound kernel is
        named: step 7 cannot tell which one wrote the output."""
        if not self.kernels:
            return refused
        names = ", ".join(f"{impl.qualname()} [{backend_of(impl)}]" for impl in self.kernels.values())
        return CheckError(f"{refused}\n  {'kernel' if len(self.kernels) == 1 else 'kernels'}: {names}")

    def bind_direct(self, launch: OneLaunch, op: Any) -> None:
        """Bind ``launch.interface`` (selecting its kernel now, as the first launch would) and,
        where its kernel needs no contiguity copy, set :attr:`direct`: the kernel called with the
        op's arguments and its params, then either fresh outputs (a kernel that writes the outputs
        the plan allocates) or step 7 on what it returns (a kernel that returns its outputs).

        What ``forward`` and the launcher would do per call is done once here: the arguments'
        arrangement is the forward's own (:class:`OneLaunch`), the outputs' shapes are the plan's,
        and the params are those of ``op``, the instance this plan belongs to, read now: each is
        an instance attribute set once, at construction, from its checked value (``Op.__setattr__``
        refuses another), so every ``forward`` would read the same. A param the op's class itself
        defines (a property, say) could change: such an op keeps the general path, which reads it
        per call. Written into fresh outputs, the result is right by construction (step 7 has
        nothing to check: fresh storage, planned metadata); returned, it goes through the plan's
        step 7 as after ``forward``, with the call recorded on the thread while the kernel runs, as
        under ``forward``, unless the kernel declares it never reads it (``reads_current_call``).
        A kernel writing outputs the plan does not allocate keeps the general path.
        """
        interface = launch.interface
        impl, kernel, call = self._select(interface)
        self[interface] = _launcher(self.plan, interface, impl, kernel, call, self.plan.written_args)
        plan = self.plan
        writes = getattr(impl, "writes_outputs", False)
        if (writes and not plan.fresh_outputs) or (plan.copies_needed and interface.needs_contiguous):
            return
        if any(name not in vars(op) or hasattr(type(op), name) for name in launch.params):
            return
        params = tuple(getattr(op, name) for name in launch.params)
        raised = _kernel_error(plan, impl, call)
        if not writes:
            check = plan.check_outputs
            current = CURRENT
            record = impl.reads_current_call

            def direct_returning(values: Sequence[Any], op: Any) -> Any:
                # The call stays current while the kernel runs, as under forward: a kernel may read
                # it (``current_call()``: the plan's device, the op's construction tensors); one that
                # declares it never does runs with nothing recorded.
                if record:
                    previous = getattr(current, "call", None)
                    current.call = (op, plan, self, values)
                try:
                    result = kernel(*values, *params)
                except TileOpsError:
                    raise
                except Exception as exc:
                    raise raised(exc) from exc
                finally:
                    if record:
                        current.call = previous
                try:
                    return check(result, values)
                except CheckError as refused:
                    raise self.name_kernels(refused) from None
            self.direct = direct_returning
            return
        allocs = plan.fresh_allocators()
        if len(allocs) == 1:
            alloc = allocs[0]

            def direct_into_one(values: Sequence[Any], op: Any) -> Any:
                out = alloc()
                try:
                    kernel(*values, *params, out)
                except TileOpsError:
                    raise
                except Exception as exc:
                    raise raised(exc) from exc
                return out
            self.direct = direct_into_one
            return

        def direct_into(values: Sequence[Any], op: Any) -> Any:
            outs = tuple(a() for a in allocs)
            _run_kernel(kernel, (*values, *params, *outs), {}, raised)
            return outs
        self.direct = direct_into


def _kernel_error(plan: "CallPlan", impl: type[KernelInterface], call: CallSpec) -> Callable[[Exception], KernelError]:
    """How a kernel's own exception reaches the caller: a :class:`KernelError` naming the kernel and call spec."""

    def raised(exc: Exception) -> KernelError:
        return KernelError(f"{plan.op}: kernel {impl.qualname()} [{backend_of(impl)}] raised {type(exc).__name__}: "
                           f"{exc}\n  call spec: {call!r}")
    return raised


def _launcher(plan: "CallPlan", interface: type[KernelInterface], impl: type[KernelInterface],
              kernel: Callable[..., Any], call: CallSpec, written: tuple[int, ...]) -> Callable[..., Any]:
    """The launch of one kernel for one plan, decided once: output allocation, contiguity copies,
    and the translation of a kernel's own exception into a :class:`KernelError` naming it."""
    raised = _kernel_error(plan, impl, call)

    if plan.copies_needed and interface.needs_contiguous:
        def launch_copying(*args: Any, **kwargs: Any) -> Any:
            values = CURRENT.call[3]
            written_ids = {id(values[i]) for i in written if values[i] is not None}
            return _launch_contiguous(kernel, args, kwargs, written_ids, raised)
        return launch_copying
    if getattr(impl, "writes_outputs", False) and plan.fresh_outputs:
        allocs = plan.fresh_allocators()
        if len(allocs) == 1:
            alloc = allocs[0]

            def launch_into_one(*args: Any, **kwargs: Any) -> Any:  # the common case, kept lean
                out = alloc()
                try:
                    kernel(*args, out, **kwargs)
                except TileOpsError:
                    raise
                except Exception as exc:
                    raise raised(exc) from exc
                plan.made.out = out
                return out
            return launch_into_one

        def launch_into(*args: Any, **kwargs: Any) -> Any:
            outs = tuple(a() for a in allocs)
            _run_kernel(kernel, (*args, *outs), kwargs, raised)
            plan.made.out = outs
            return outs
        return launch_into

    def launch(*args: Any, **kwargs: Any) -> Any:
        try:
            return kernel(*args, **kwargs) if kwargs else kernel(*args)
        except TileOpsError:
            raise
        except Exception as exc:
            raise raised(exc) from exc
    return launch


def _run_kernel(kernel: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                raised: Callable[[Exception], KernelError]) -> Any:
    """Call a kernel, its own exception translated into a :class:`KernelError` that names it."""
    try:
        return kernel(*args, **kwargs)
    except TileOpsError:
        raise
    except Exception as exc:
        raise raised(exc) from exc


def _unknown_output(result: Any) -> bool:
    """The output guard of a plan that has none (yet): it says nothing, the fields are checked."""
    return False


class _Made:
    """The output a ``writes_outputs`` launcher allocated on this plan's latest call: a call
    whose result is this object passes step 7 without a check (``Op._call``), and clears it.

    Per plan, not per thread: two threads calling one plan at once can overwrite it, and then
    the result simply goes to the full step-7 check (never a wrong answer, only a slower one)."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: Any = None


@dataclass
class CallPlan:
    """Everything a repeated call with the same key needs; built by :meth:`OpDef.plan`."""

    op: str
    device: torch.device
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[torch.dtype, ...]
    out_names: tuple[str, ...]
    buffer_index: tuple[int | None, ...]  # per output: index into the forward args of its buffer
    alias_index: tuple[int | None, ...]  # per output: index into the forward args of its aliased input
    contiguous_outputs: tuple[bool, ...]
    empty: bool
    call_specs: dict[type[KernelInterface], CallSpec]
    env: dict[str, Any]
    construction: dict[str, torch.Tensor]
    loc: Location
    #: Per output: where it is declared (step 7 names the output's declaration).
    out_locs: tuple[Location, ...] = ()
    #: Forward args that are out buffers (declared), and those passed on this plan's calls.
    n_buffers: int = 0
    buffer_args: tuple[int, ...] = ()
    #: The forward argument names (messages name an out buffer by its keyword).
    arg_names: tuple[str, ...] = ()
    #: True when no tensor decided the device (the target or the accelerator did): such a
    #: plan depends on more than its key and is not cached.
    device_by_default: bool = False
    #: Forward args that are tensors and not contiguous on this plan's calls (from the key).
    noncontiguous_args: tuple[int, ...] = ()
    #: Forward args a kernel writes (mutated inputs, out buffers).
    written_args: tuple[int, ...] = ()
    #: Some argument requires grad (the key says so): the kernels run under ``torch.no_grad()``.
    #: Ops are forward (inference) ops: they record no backward, so every kernel, the
    #: reference's torch code included, sees the same thing and no output requires grad.
    reads_grad: bool = False
    #: Forward args that are mutated inputs (not out buffers), and where each is declared.
    mutated_inputs: tuple[int, ...] = ()
    mutated_locs: tuple[Location, ...] = ()
    #: The registry generation the plan was made under; another one means plan again.
    generation: int = -1
    #: Per target: the launchers bound to their kernels.
    bound: dict[Target | None, BoundKernels] = field(default_factory=dict)
    #: The fast same-metadata check of this plan's key (:mod:`.same_call`), when there is one;
    #: :meth:`match_calls_like` makes it.
    matches: Matcher | None = None

    def __post_init__(self) -> None:
        if not self.out_locs:
            self.out_locs = (self.loc,) * len(self.out_shapes)
        passed = set(self.buffer_args)
        # Per output, decided once per plan (the key fixes which buffers are passed):
        # (index, identity arg or None, what the identity is, non-empty).
        slots: list[tuple[int, int | None, str, bool]] = []
        for i, shape in enumerate(self.out_shapes):
            b, a = self.buffer_index[i], self.alias_index[i]
            if b is not None and b in passed:
                slots.append((i, b, "the out buffer passed by the caller", False))
            elif a is not None:
                slots.append((i, a, "the very input it aliases", False))
            else:
                slots.append((i, None, "", not is_zero(numel(shape))))
        self._slots = tuple(slots)
        self._single = len(self.out_shapes) == 1
        # Outputs a writes_outputs kernel gets from the plan: every output when none is a
        # passed buffer or an alias (otherwise the kernel returns them itself).
        fresh = [i for i, ident, _, _ in slots if ident is None]
        self.fresh_outputs = len(fresh) == len(slots)
        self.fresh_shapes = tuple(self.out_shapes[i] for i in fresh)
        self.fresh_dtypes = tuple(self.out_dtypes[i] for i in fresh)
        self.copies_needed = bool(self.noncontiguous_args)
        self.made = _Made()
        #: Per output, for step 7: the guard of a fresh output's metadata, made with the matcher
        #: (:meth:`match_calls_like`), or a check that says nothing (the fields are then read one by one).
        self._output_like: list[Callable[[Any], bool]] = [_unknown_output] * len(slots)
        self._output_guards_made = False
        #: Step 7 for this plan: a fast closure where every output is fresh, else the full check.
        self.check_outputs: Callable[[Any, Sequence[Any]], Any] = (
            self.check_outputs_in_full if not self.fresh_outputs
            else self._one_fresh_output_check() if self._single else self._fresh_outputs_check())

    # -- kernels ----------------------------------------------------------------------------

    def fresh_allocators(self) -> tuple[Callable[[], torch.Tensor], ...]:
        """Per fresh output, its allocation (:func:`.alloc.fresh_allocator`: contiguous, the planned
        shape, dtype and device), what a ``writes_outputs`` kernel is handed on every call."""
        return tuple(fresh_allocator(s, d, self.device) for s, d in zip(self.fresh_shapes, self.fresh_dtypes))

    def bind(self, target: Target | None, select: Select) -> BoundKernels:
        """The launchers of this plan under ``target`` (made once per target, bound lazily)."""
        bound = BoundKernels(self, target, select)
        self.bound[target] = bound
        return bound

    def match_calls_like(self, values: Sequence[Any]) -> None:
        """Make :attr:`matches` for calls with the metadata of ``values``, carrying the check of
        written inputs that the calls it accepts run (its ``check_written``); the first time, also the
        guards step 7 checks fresh outputs with (:func:`.same_call.make_output_matcher`).

        A matched call has these sizes and strides, so each argument's byte extent, and whether
        a written input overlaps itself, are known here: what the overlap rule compares per
        call is decided once. The check travels on the matcher, so a thread that matched with
        one matcher never runs the check made for another.
        """
        matches = make_matcher(values)
        if matches is not None and self.mutated_inputs:
            matches.check_written = self._written_inputs_check(values, matches.extents)
        self.matches = matches
        if not self._output_guards_made:
            # Once, with the plan's first matcher: they compare dispatch keys, so calls in another dispatch state
            # (inference mode, a compiled call's implementation) read the fields, as before there were guards;
            # remade with every matcher, they would cost the calls that alternate strides on one key 3 µs each.
            self._output_guards_made = True
            for i, identity, _, _ in self._slots:
                if identity is None:
                    like = make_output_matcher(self.out_shapes[i], self.out_dtypes[i], self.device,
                                               self.contiguous_outputs[i])
                    self._output_like[i] = _unknown_output if like is None else like

    def _written_inputs_check(self, values: Sequence[Any], extents: Sequence[int]) -> Callable[[Sequence[Any]], None]:
        """:meth:`check_written_inputs` for calls with the sizes and strides of ``values``, as one closure.

        Per written input it holds its extent and the other arguments that touch memory, with
        theirs; a call reads one ``data_ptr()`` per such argument and compares ranges. Anything
        suspect (an input that overlaps itself, two ranges that meet) goes to the full check,
        which decides exactly (interleaved views pass) and names the overlap.
        """
        full = self.check_written_inputs
        if any(m in self.noncontiguous_args and overlaps_itself(values[m]) for m in self.mutated_inputs) or (
                not torch.is_inference_mode_enabled()
                and any(values[m] is not None and values[m].is_inference() for m in self.mutated_inputs)):
            return lambda vals: full(vals, extents)  # refused on every such call, as on the first
        ranges = tuple((m, extents[m], tuple((j, e) for j, e in enumerate(extents) if e and j != m))
                       for m in self.mutated_inputs if extents[m])
        # A matcher made inside inference_mode matches inference tensors passed outside it (inside, plain tensors
        # carry the dispatch keys inference tensors carry outside), which the full check refuses (found in
        # review): such a plan reads the mode per call. One made outside it misses on an inference tensor
        # (its keys differ from the plain tensor's it was made for), so the full path sees that call anyway,
        # and its calls skip the per-call test (0.3-0.4 us a call of RGDR on the CPU).
        mutated = self.mutated_inputs if torch.is_inference_mode_enabled() else ()

        def check(vals: Sequence[Any]) -> None:
            if mutated and not torch.is_inference_mode_enabled():  # (a loop, not any(): this is the hot path)
                for m in mutated:
                    v = vals[m]
                    if v is not None and v.is_inference():
                        return full(vals, extents)
            for m, size, others in ranges:
                lo = vals[m].data_ptr()
                hi = lo + size
                for j, e in others:
                    p = vals[j].data_ptr()
                    if p < hi and lo < p + e:
                        return full(vals, extents)
            return None

        return check

    # -- empty calls and step 5 -------------------------------------------------------------

    def empty_result(self, values: Sequence[Any]) -> Any:
        """The rule for calls that write nothing: fresh empty outputs, buffers as given."""
        outs = []
        for i, (shape, dtype) in enumerate(zip(self.out_shapes, self.out_dtypes)):
            b, a = self.buffer_index[i], self.alias_index[i]
            if b is not None and values[b] is not None:
                outs.append(values[b])
            elif a is not None:
                outs.append(values[a])
            else:
                outs.append(torch.empty(shape, dtype=dtype, device=self.device))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def check_buffers(self, values: Sequence[Any]) -> None:
        """Step 5's preconditions that depend on the objects, not on the plan key (re-run on every
        call that passes a buffer): a passed out buffer can be written (no leaf that requires
        grad, no element written twice through an expanded view) and shares no storage with an input."""
        n_inputs = len(values) - self.n_buffers
        for j in self.buffer_args:
            buf = values[j]
            if buf is None:
                continue
            name, loc = self.arg_names[j], self.out_locs[self.buffer_index.index(j)]
            if buf.requires_grad:
                fail(self.op, f"out buffer {name} requires grad: torch writes no op's result into a tensor that "
                              "autograd tracks; pass one with requires_grad=False", loc)
            if any(st == 0 and sz > 1 for st, sz in zip(buf.stride(), buf.shape)):
                fail(self.op, f"out buffer {name} is expanded (stride 0 on an axis of size > 1): its elements "
                              f"overlap, strides {list(buf.stride())}; pass a buffer of its own memory", loc)
            check_buffer_storage(self.op, name, loc, buf, values[:n_inputs])

    def check_expanded_inputs(self, values: Sequence[Any], every_argument: bool = False) -> None:
        """On plans with non-contiguous arguments (or ``every_argument``): an expanded (stride-0)
        input whose dense size is out of all proportion to its memory is refused before any kernel
        materialises it (a GEMM whose ``a`` is one element expanded to 2**31 columns asked for 8.6 GB)."""
        for i in range(len(values)) if every_argument else self.noncontiguous_args:
            sizes = expanded_beyond_limit(values[i])
            if sizes is not None:
                dense, real = sizes
                fail(self.op, f"input {self.arg_names[i]} is expanded (strides {list(values[i].stride())}): read "
                              f"densely it is {dense / 2**30:.1f} GiB from {real} bytes of memory, and kernels "
                              f"read inputs densely; pass {self.arg_names[i]}.contiguous() if that is meant, or "
                              "the tensor it was expanded from where the op broadcasts", self.loc)

    def check_written_inputs(self, values: Sequence[Any], extents: Sequence[int]) -> None:
        """Step 5's rule for the inputs a kernel writes (see :mod:`.overlap`), on every call: a
        mutated input neither overlaps itself nor shares memory with any other argument.
        ``extents``: the byte extent of each argument (fixed by the sizes and strides)."""
        for m, loc in zip(self.mutated_inputs, self.mutated_locs):
            v = values[m]
            if v is None:
                continue
            name = self.arg_names[m]
            if v.is_inference() and not torch.is_inference_mode_enabled():  # (found in review: written part-way)
                fail(self.op, f"input {name} is mutated (written in place) and is an inference tensor (made under "
                              "torch.inference_mode()), which torch writes only inside inference mode: a kernel "
                              "would fail after its first writes; call the op under torch.inference_mode(), or pass "
                              f"a tensor made outside it ({name}.clone() there)", loc)
            if m in self.noncontiguous_args and overlaps_itself(v):
                fail(self.op, f"input {name} is mutated (written in place) and overlaps itself (strides "
                              f"{list(v.stride())}, an expanded view): a kernel would write some elements more "
                              "than once; pass a tensor of its own memory", loc)
            self._refuse_shared_memory(m, overlapping_argument(values, m, extents), loc)

    def check_traced_written_inputs(self, values: Sequence[Any]) -> None:
        """:meth:`check_written_inputs`'s rule against other arguments, on the fake tensors of a
        compiled call's trace (the boundary's fake implementation runs it). Functionalization then
        hands the implementation a copy of each mutated input, so the run-time check cannot see
        what it shares (``aot_eager``); the trace still can."""
        for m, loc in zip(self.mutated_inputs, self.mutated_locs):
            if values[m] is not None:
                self._refuse_shared_memory(m, traced_overlapping_argument(values, m), loc)

    def _refuse_shared_memory(self, m: int, j: int | None, loc: Location) -> None:
        """Refuse a call whose mutated input ``m`` (declared at ``loc``) overlaps argument ``j`` (None: none does)."""
        if j is not None:
            name, other = self.arg_names[m], self.arg_names[j]
            fail(self.op, f"input {name} is mutated (written in place) and shares memory with {other}: a kernel "
                          f"would change {other} while reading it; pass arguments that do not overlap (e.g. "
                          f"{other}.clone())", loc)

    # -- step 7 -----------------------------------------------------------------------------

    def _one_fresh_output_check(self) -> Callable[[Any, Sequence[Any]], Any]:
        """Step 7 for the common plan, one freshly allocated output, as a closure over its facts.

        A result the plan itself allocated (a ``writes_outputs`` kernel) never comes here: the
        op returns it at once (:attr:`made`), its metadata right by construction and its
        storage new. The metadata is one C++ check where the plan has an output guard (made with
        its matcher, :func:`.same_call.make_output_matcher`), else, or where the guard does not
        match, the fields read one by one; the storage is compared by identity with every input's
        (:func:`storage_id`, read without a Python storage object). Anything here that looks off
        goes to the full check, which names what is wrong.
        """
        shape, dtype, device = self.out_shapes[0], self.out_dtypes[0], self.device
        on_cpu = device.type == "cpu"
        contiguous = self.contiguous_outputs[0]
        nonempty = self._slots[0][3]
        full = self.check_outputs_in_full
        op, name, loc = self.op, self.out_names[0], self.out_locs[0]
        address = storage_address
        like = self._output_like

        def check(result: Any, values: Sequence[Any]) -> Any:
            if not like[0](result) and (  # one C++ check of the metadata, else field by field
                    (type(result) is not _Tensor and not isinstance(result, _Tensor)) or result.shape != shape
                    or result.dtype is not dtype or result.layout is not _STRIDED
                    or (not result.is_cpu if on_cpu else result.device != device)
                    or (contiguous and not result.is_contiguous())):
                return full(result, values)
            if nonempty:
                try:
                    sid = address(result)
                    for v in values:
                        if v is not None and address(v) == sid:
                            fail(op, f"output {name} shares storage with an input", loc)
                except NotImplementedError as exc:  # (the try costs nothing where nothing raises)
                    raise TileOpsError(f"{op}: {TRANSFORM_REFUSAL}") from exc
            return result

        return check

    def _fresh_outputs_check(self) -> Callable[[Any, Sequence[Any]], Any]:
        """Step 7 for a plan of several outputs, every one fresh, as a closure (see
        :meth:`_one_fresh_output_check`): a tuple of outputs each matching its guard needs only
        the storage compared; anything else goes to the full check, which names what is wrong."""
        n = len(self._slots)
        likes = self._output_like
        nonempty = tuple(i for i, _, _, non_empty in self._slots if non_empty)
        full = self.check_outputs_in_full
        address = storage_address

        def check(result: Any, values: Sequence[Any]) -> Any:
            if type(result) is not tuple or len(result) != n:
                return full(result, values)
            for like, out in zip(likes, result):
                if not like(out):
                    return full(result, values)
            if nonempty:
                try:
                    storages = {address(v) for v in values if v is not None}
                    for i in nonempty:
                        if address(result[i]) in storages:
                            return full(result, values)
                except NotImplementedError as exc:
                    raise TileOpsError(f"{self.op}: {TRANSFORM_REFUSAL}") from exc
            return result

        return check

    def check_outputs_in_full(self, result: Any, values: Sequence[Any]) -> Any:
        """Step 7: count, None-ness, shape, dtype, device, layout, identity, storage sharing."""
        if self._single:
            outs: Sequence[Any] = (result,)
        elif isinstance(result, (tuple, list)) and len(result) == len(self.out_shapes):
            outs = result
        else:
            n = len(self.out_shapes)
            fail(self.op, f"the implementation returned {type(result).__name__}, expected {n} outputs "
                          f"({', '.join(self.out_names)})", self.loc)
        storages = None
        like = self._output_like
        for i, identity, what, nonempty in self._slots:
            out = outs[i]
            if identity is not None or not like[i](out):  # (a fresh output's guard: its metadata in one check)
                if not isinstance(out, torch.Tensor):
                    fail(self.op, f"output {self.out_names[i]} is {type(out).__name__}, expected a tensor",
                         self.out_locs[i])
                if identity is not None:
                    if out is not values[identity]:
                        fail(self.op, f"output {self.out_names[i]} must be {what}", self.out_locs[i])
                    continue
                if (out.shape != self.out_shapes[i] or out.dtype is not self.out_dtypes[i]
                        or out.device != self.device or out.layout is not torch.strided
                        or (self.contiguous_outputs[i] and not out.is_contiguous())):
                    self._mismatch(i, out)
            if nonempty:
                if storages is None:
                    storages = storage_ids(values)
                if storage_id(out) in storages:
                    fail(self.op, f"output {self.out_names[i]} shares storage with an input", self.out_locs[i])
        return result

    def _mismatch(self, i: int, out: torch.Tensor) -> None:
        name, loc = self.out_names[i], self.out_locs[i]
        if out.shape != self.out_shapes[i]:
            fail(self.op, f"output {name} has shape {list(out.shape)}, the spec gives {list(self.out_shapes[i])}", loc)
        if out.dtype != self.out_dtypes[i]:
            fail(self.op, f"output {name} has dtype {name_of(out.dtype)}, the spec gives "
                          f"{name_of(self.out_dtypes[i])}", loc)
        if out.device != self.device:
            fail(self.op, f"output {name} is on {out.device}, the call is on {self.device}", loc)
        if out.layout is not torch.strided:
            fail(self.op, f"output {name} has layout {out.layout}, expected strided", loc)
        fail(self.op, f"output {name} must be contiguous", loc)


def _launch_contiguous(kernel: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], written: set[int],
                       raised: Callable[[Exception], KernelError]) -> Any:
    """Give the kernel contiguous tensors; copy results back into written non-contiguous originals.

    Only plans whose key recorded a non-contiguous argument come here; the common call goes
    straight to the kernel.
    """
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []

    def fix(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and not v.is_contiguous():
            c = v.contiguous()
            if id(v) in written:
                copies.append((v, c))
            return c
        return v

    result = _run_kernel(kernel, tuple(fix(a) for a in args), {k: fix(v) for k, v in kwargs.items()}, raised)
    for original, copy in copies:
        original.copy_(copy)  # a mutated input (or out buffer) written through its contiguous copy
    if any(result is c for _, c in copies):
        return next(o for o, c in copies if result is c)
    return result
