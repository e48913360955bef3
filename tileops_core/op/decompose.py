"""The decomposition of an op's custom op into its traceable kernel, where the policy asks for it.

Inductor (and any backend that decomposes with its table) replaces a custom op by the
function registered for it in ``torch._inductor.decomposition.decompositions``; a function
that returns ``NotImplemented`` declines and the custom op stays. Each op's boundary gets
one such function, in the table exactly while a traced call decomposes (the boundary's fake
keeps it in step; importing an op imports nothing of Inductor). It runs while the graph is traced, on the
tracing tensors: it plans the call exactly as an eager call does (steps 1-5), asks the
selection rule for each interface's kernel, and when the policy
(:mod:`tileops_core.kernels.compile_policy`) names the op and every chosen kernel is
``traceable``, runs ``forward`` with those kernels, so their torch operations become the
graph. Otherwise it declines. The policy and the selection state are read at trace time; a
change of either makes dynamo trace again (the boundary's guard), and the decision with it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable

from ..kernels.compile_policy import decompose_policy, on_policy_change
from ..kernels.interface import KernelInterface
from ..kernels.select import choose_kernel
from ..kernels.targets import current_target
from .plan import CURRENT

if TYPE_CHECKING:
    from .base import Op
    from .boundary import Boundary
    from .definition import OpDef
    from .plan import CallPlan

__all__ = ["sync_decomposition", "compile_path"]

#: The custom ops whose decomposition is in Inductor's table, with their op's definition.
_installed: dict[Any, "OpDef"] = {}
_lock = threading.Lock()


def sync_decomposition(boundary: "Boundary", op: "Op", values: list[Any]) -> None:
    """Make Inductor's table hold the boundary's decomposition exactly when this traced call
    decomposes (the policy names the op and every kernel chosen for it is traceable).

    Called by the boundary's fake, before Inductor consults the table. An op that stays the
    custom op must not be in the table at all: Inductor refuses to fall back to an op that has
    a decomposition ("both a fallback and a decomp for same op"), even one that declines.
    """
    wanted = _traceable_plan(op, values) is not None
    if not wanted and boundary.fn not in _installed:
        return
    from torch._inductor.decomposition import decompositions  # only when a decomposition is in play

    with _lock:
        if wanted:
            decompositions[boundary.fn] = _decomposition(boundary)
            _installed[boundary.fn] = boundary.definition
        else:
            decompositions.pop(boundary.fn, None)
            _installed.pop(boundary.fn, None)
        _forget_inductor_copies()


def _forget_inductor_copies() -> None:
    """Inductor reads its table through a cached copy (``fast_random_decomps``): a change of the
    table reaches it only once that copy is made again."""
    from torch._inductor import decomposition

    cached = getattr(decomposition, "fast_random_decomps", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


def _drop_unwanted() -> None:
    """After a policy change: no decomposition the new policy does not name stays in the table
    (an op left there would make Inductor refuse to fall back to it)."""
    with _lock:
        unwanted = [fn for fn, definition in _installed.items() if _declined(definition, ()) is not None]
        if not unwanted:
            return
        from torch._inductor.decomposition import decompositions

        for fn in unwanted:
            decompositions.pop(fn, None)
            del _installed[fn]
        _forget_inductor_copies()


on_policy_change(_drop_unwanted)


def _declined(definition: "OpDef", impls: Iterable[type[KernelInterface] | None]) -> str | None:
    """Why a call served by ``impls`` stays the custom op (None: it decomposes)."""
    name = definition.spec.name
    policy = decompose_policy()
    if policy is None or not policy.wants(name):
        return f"the decomposition policy does not name {name} ({policy or 'TILEOPS_COMPILE_DECOMPOSE unset'})"
    boundary = definition.boundary
    if boundary is None or not boundary.plain or any(t.mutated for t in definition.spec.call_inputs):
        return "only an op with one fresh output and no mutated input decomposes"
    for impl in impls:
        if impl is None or not impl.traceable:
            return f"{'no kernel' if impl is None else impl.qualname()} serves it, and is not traceable"
    return None


def _traceable_plan(op: "Op", values: list[Any]) -> tuple["CallPlan", Any] | None:
    """The plan and bound kernels of a call that decomposes (None: it stays the custom op)."""
    definition = op.definition()
    if _declined(definition, ()) is not None:  # the policy first: no planning for ops it does not name
        return None
    plan = definition.plan(op, values)
    target = op.target or current_target()
    if _declined(definition, (choose_kernel(i, c, target)[0] for i, c in plan.call_specs.items())) is not None:
        return None
    return plan, plan.bind(target, choose_kernel)


def _decomposition(boundary: "Boundary") -> Any:
    n_inputs = boundary.n_inputs

    def decompose(*args: Any) -> Any:
        op = boundary.instance(args[n_inputs:])
        values = list(args[:n_inputs])
        found = _traceable_plan(op, values)
        if found is None:
            return NotImplemented
        plan, bound = found
        previous = getattr(CURRENT, "call", None)
        CURRENT.call = (op, plan, bound, values)
        try:
            return op.forward(*values)
        finally:
            CURRENT.call = previous

    return decompose


def compile_path(definition: "OpDef", impls: Iterable[type[KernelInterface] | None]) -> str:
    """Which path a compiled call takes when ``impls`` serve its interfaces (``tileops explain``)."""
    boundary = definition.boundary
    if boundary is None:
        return f"traced as eager Python (no compile boundary: {definition.boundary_reason})"
    impls = list(impls)
    custom = f"the opaque custom op torch.ops.{boundary.qualname.replace('::', '.')} (its kernel chosen at run time)"
    declined = _declined(definition, impls)
    if declined is not None:
        return f"{custom}: {declined}"
    kernels = ", ".join(sorted(impl.qualname() for impl in impls if impl is not None))
    return (f"decomposed into its traceable kernel {kernels} under backends that decompose (Inductor); {custom} "
            "under those that do not (aot_eager)")
