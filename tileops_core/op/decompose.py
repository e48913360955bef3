"""The decomposition of an op's custom op into its traceable kernel, where the policy asks for it.

Inductor (and any backend that decomposes with its table) replaces a custom op by the
function registered for it in ``torch._inductor.decomposition.decompositions``; a function
that returns ``NotImplemented`` declines and the custom op stays. Each op's boundary gets
one such function, in the table exactly while a traced call decomposes (the boundary's fake
keeps it in step; importing an op imports nothing of Inductor). It runs while the graph is traced, on the
tracing tensors: it plans the call exactly as an eager call does (steps 1-5) and, when the
policy (:mod:`tileops_core.kernels.compile_policy`) names the op, asks the one selection rule
for each interface's kernel among the ``traceable`` kernels only (``choose_kernel(...,
traceable=True)``), so that a specialised kernel serving the eager call (TileLang, not
traceable) gives way to the traceable one: the policy is the explicit choice of Inductor's
code. It then runs ``forward`` with those kernels, so their torch operations become the
graph. Where no traceable kernel can serve, it declines (``tileops explain`` says why). The
policy and the selection state are read at trace time; a change of either makes dynamo
trace again (the boundary's guard), and the decision with it.
"""

from __future__ import annotations

import difflib
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import torch

from ..errors import SelectionError, TileOpsError
from ..kernels.compile_policy import DecomposePolicy, decompose_policy, on_policy_change
from ..kernels.fingerprint import selection_fingerprint
from ..kernels.interface import CallSpec, KernelInterface
from ..kernels.registry import active
from ..kernels.select import Selection, choose_kernel, select_kernel
from ..kernels.targets import Target, current_target
from ..plugins import ensure_plugins_loaded
from ..spec.manifest import load_manifest
from .checks import SymbolicDims
from .plan import CURRENT

if TYPE_CHECKING:
    from .base import Op
    from .boundary import Boundary
    from .definition import OpDef
    from .plan import CallPlan

__all__ = ["sync_decomposition", "decomposed_ops", "compile_key", "compile_path", "CompiledPath"]

#: The custom ops whose decomposition is in Inductor's table, with their op's definition.
_installed: dict[Any, "OpDef"] = {}
_lock = threading.Lock()


def sync_decomposition(boundary: "Boundary", op: "Op", values: list[Any]) -> None:
    """Make Inductor's table hold the boundary's decomposition exactly when this traced call
    decomposes (the policy names the op and a traceable kernel serves each of its interfaces).

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


def decomposed_ops() -> list[str]:
    """The ops whose decomposition is in Inductor's table now: each one's last traced call
    decomposed (the bench reports what a compiled step inlined)."""
    with _lock:
        return sorted({definition.spec.name for definition in _installed.values()})


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
        unwanted = [fn for fn, definition in _installed.items() if _declined(definition) is not None]
        if not unwanted:
            return
        from torch._inductor.decomposition import decompositions

        for fn in unwanted:
            decompositions.pop(fn, None)
            del _installed[fn]
        _forget_inductor_copies()


on_policy_change(_drop_unwanted)


def _declined(definition: "OpDef") -> str | None:
    """Why no call of the op decomposes, whatever kernels are installed (None: its calls may)."""
    name = definition.spec.name
    policy = decompose_policy()
    if policy is not None:
        _check_names(policy)
    if policy is None or not policy.wants(name):
        return f"the decomposition policy does not name {name} ({policy or 'TILEOPS_COMPILE_DECOMPOSE unset'})"
    boundary = definition.boundary
    if boundary is None or not boundary.plain or any(t.mutated for t in definition.spec.call_inputs):
        return "only an op with one fresh output and no mutated input decomposes"
    return None


_names_checked: list[DecomposePolicy | None] = [None]


def _check_names(policy: DecomposePolicy) -> None:
    """Every op a policy names (or takes out) is an op of the manifest, checked once per policy: a typo
    would otherwise name no op, silently (found in review; TILEOPS_KERNELS refuses its typos too)."""
    if _names_checked[0] is policy:
        return
    ops = list(load_manifest())
    unknown = sorted(n for n in policy.named | policy.excluded if n not in ops)
    if unknown:
        hints = [f"{n} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(n, ops, n=1)) else n
                 for n in unknown]
        raise TileOpsError(f"{policy}: names no op of the manifest: {', '.join(hints)}")
    _names_checked[0] = policy


def _select_traceable(interface: type[KernelInterface], call: CallSpec, target: Target | None
                      ) -> tuple[type[KernelInterface], Any]:
    """The one selection rule among traceable kernels, built (what a decomposition traces)."""
    return choose_kernel(interface, call, target, traceable=True)


def _traceable_plan(op: "Op", values: list[Any]) -> tuple["CallPlan", Any] | None:
    """The plan and bound traceable kernels of a call that decomposes (None: it stays the custom op)."""
    definition = op.definition()
    if _declined(definition) is not None:  # the policy first: no planning for ops it does not name
        return None
    try:
        plan = definition.plan(op, values)
    except SymbolicDims:  # a dynamic-shape trace of a dim a kernel specialises on: the custom op serves it (found
        return None       # in review: SiluAndMul's N = D // 2 raised "unhashable SymInt" inside the fake)
    target = op.target or current_target()
    for interface, call in plan.call_specs.items():
        try:
            _select_traceable(interface, call, target)
        except SelectionError:
            _warn_no_traceable_kernel(definition, interface)
            return None
    return plan, plan.bind(target, _select_traceable)  # a fresh plan: eager calls never see these bindings


def _warn_no_traceable_kernel(definition: "OpDef", interface: type[KernelInterface]) -> None:
    """Once per op and interface: the policy names the op by hand (not through ``auto`` or
    ``measured``, which name ops whatever their kernels), and no traceable kernel can serve."""
    name = definition.spec.name
    policy = decompose_policy()
    if policy is None or name not in policy.named:
        return
    registry = active()
    key = ("no traceable kernel", name, interface)
    with registry.lock:
        if key in registry.caches.warned:
            return
        registry.caches.warned.add(key)
    warnings.warn(f"{name}: the decomposition policy ({policy}) names it, and no traceable kernel can serve "
                  f"{interface.__name__} for this call, so the compiled call stays the custom op; "
                  f"`tileops explain {name}` shows why each kernel dropped out", RuntimeWarning, stacklevel=2)


@torch.compiler.assume_constant_result
def compile_key(op_name: str) -> str:
    """The compile key of a traced call of ``op_name``: empty where the policy does not name the
    op (the call is the custom op whatever else holds), else the selection fingerprint, which
    holds the policy and every kernel's declarations.

    Dynamo calls it while tracing and puts the result in the graph as a constant argument of
    the custom op (``assume_constant_result``: it traces nothing inside). AOTAutograd's on-disk
    cache is keyed by that graph, taken before the decomposition: without the key, a graph
    compiled with the custom op would be served where the policy now decomposes it, and the
    other way round. In-process, the selection guard already traces the call again.
    """
    ensure_plugins_loaded()  # the fingerprint of the loaded state, on the first trace too (found in review)
    policy = decompose_policy()
    return selection_fingerprint() if policy is not None and policy.wants(op_name) else ""


def _decomposition(boundary: "Boundary") -> Any:
    n_inputs = boundary.n_inputs

    def decompose(*args: Any) -> Any:
        op = boundary.instance(args[boundary.encoded])
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


@dataclass(frozen=True)
class CompiledPath:
    """The path a compiled call takes (``text``) and, where the policy names the op, the
    selection among traceable kernels for each interface (what the decomposition traces)."""

    text: str
    selections: tuple[Selection, ...] = ()


def compile_path(definition: "OpDef", calls: Mapping[type[KernelInterface], CallSpec],
                 target: Target | None) -> CompiledPath:
    """Which path a compiled call with these call specs takes under ``target`` (``tileops explain``).

    Selects without building, as ``explain`` does: the traceable selection, and the eager one
    to say when the decomposition replaces a different kernel.
    """
    boundary = definition.boundary
    if boundary is None:
        return CompiledPath(f"traced as eager Python (no compile boundary: {definition.boundary_reason})")
    custom = f"the opaque custom op torch.ops.{boundary.qualname.replace('::', '.')} (its kernel chosen at run time)"
    declined = _declined(definition)
    if declined is not None:
        return CompiledPath(f"{custom}: {declined}")
    selections = tuple(select_kernel(i, c, target, traceable=True) for i, c in calls.items())
    for s in selections:
        if s.chosen is None:
            why = "; ".join(f"{c.impl.qualname()}: {c.reason}" for c in s.candidates) or "no kernel is installed"
            return CompiledPath(f"{custom}: no traceable kernel can serve {s.interface.__name__} ({why})", selections)
    traced = []
    for s in selections:
        assert s.chosen is not None
        eager = select_kernel(s.interface, s.call, target).chosen
        replaces = "" if eager is s.chosen else (f" (in place of {'no kernel' if eager is None else eager.qualname()}, "
                                                 "which serves the eager call)")
        traced.append(f"{s.chosen.qualname()}{replaces}")
    return CompiledPath(f"decomposed into its traceable kernel {', '.join(sorted(traced))} under backends that "
                        f"decompose (Inductor); {custom} under those that do not (aot_eager)", selections)
