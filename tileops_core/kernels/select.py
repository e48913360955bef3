"""The one selection rule, and building each chosen kernel exactly once.

For an interface and a call spec, among the registered implementations:

1. availability: the call's device type is in ``devices`` (or ``devices`` has ``"*"``) and its
   arch is in ``supported_archs`` (or that has ``"*"``); an explicit target narrows further;
2. applicability: ``refusal(call)`` is None;
3. priority: specialised (non-general) implementations beat general ones; among those
   left, one ``preferred_over`` another removes it; more than one left is an ambiguity
   error; none left is an error listing every candidate and why it dropped out.

Under ``torch.compile``, the decomposition of an op the compile policy names asks the same
rule with ``traceable=True``: kernels that do not declare ``traceable`` drop out first, with
that reason, and the rule picks among the rest (:mod:`tileops_core.op.decompose`).

Before the rule, the user's steering (:mod:`.steering`: per-op overrides, a lock file)
drops denied kernels and, under a pin or a lock line, every kernel but the named one,
each with its reason. Candidates are considered sorted by name, so registration and
install order decide nothing. A repeated (interface, call spec, target) costs one dict lookup; a new build
identity is built once, under a per-identity lock, however many threads race for it.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SelectionError
from . import dispatch_stats
from .archs import arch_matches
from .contract import check_built
from .interface import CallSpec, KernelInterface
from .records import LoadFailure
from .registry import GENERATION, BuildKey, Registry, active
from .steering import Steering, steering_for
from .targets import Target

__all__ = ["Candidate", "Selection", "NOT_TRACEABLE", "select_kernel", "kernel_for", "choose_kernel", "clear_caches", "build_count",
           "MAX_SELECTIONS"]

#: Selections kept before the cache starts again (a re-selection costs microseconds; the
#: built kernels, keyed by build identity, are kept).
MAX_SELECTIONS = 16384


@dataclass(frozen=True)
class Candidate:
    """One implementation considered for a call, and its fate."""

    impl: type[KernelInterface]
    backend: str
    kept: bool
    reason: str

    def line(self) -> str:
        mark = "kept   " if self.kept else "dropped"
        return f"{mark} {self.impl.qualname()} [{self.backend}]: {self.reason}"


@dataclass(frozen=True)
class Selection:
    """The chosen implementation and every candidate's story (for errors and ``explain``)."""

    interface: type[KernelInterface]
    call: CallSpec
    target: Target | None
    chosen: type[KernelInterface] | None
    candidates: tuple[Candidate, ...]
    failures: tuple[LoadFailure, ...] = ()
    #: The user's steering that applied (overrides, lock) and the target the rule honoured.
    steering: Steering | None = None
    #: Why kernels may be missing at all: plugins switched off and by what, a target naming no
    #: installed backend, loading notices (see :func:`selection_context`).
    context: tuple[str, ...] = ()

    @property
    def chosen_backend(self) -> str | None:
        """The backend of the chosen implementation (None when none was chosen)."""
        return next((c.backend for c in self.candidates if c.kept), None)

    def report(self) -> str:
        lines = [f"{self.interface.qualname()} for {self.call!r}"]
        lines.append(f"target: {self.target if self.target is not None else 'automatic'}")
        if self.steering is not None:
            lines.extend(f"steering: {note}" for note in self.steering.notes)
        lines.extend("  " + c.line() for c in self.candidates)
        failures = self.failures
        if failures:
            lines.append("plugins that failed to load:")
            lines.extend(f"  {f}" for f in failures)
        lines.extend(self.context)
        return "\n".join(lines)


def target_problem(registry: Registry, target: Target | None) -> str | None:
    """A target naming a backend that is not installed can never be served; say so up front."""
    if target is None or target.backend is None:
        return None
    installed = registry.backends()
    if target.backend in installed:
        return None
    return (f"target {target} names backend {target.backend!r}, which is not installed (installed: "
            f"{', '.join(sorted(installed)) or 'none'}); see `tileops backends`")


def selection_context(registry: Registry, target: Target | None) -> tuple[str, ...]:
    """The lines that explain an empty or surprising candidate list by the installation itself:
    the target's backend missing, plugins switched off on purpose (and by which variable), and
    what loading noticed."""
    lines = []
    problem = target_problem(registry, target)
    if problem:
        lines.append(problem)
    state = registry.plugins
    if state.autoload_skipped:
        lines.append(f"plugins: {state.autoload_skipped}")
    lines.extend(f"plugins: {r.name} ({r.distribution or r.origin}) is switched off: {r.reason}"
                 for r in sorted(state.records.values(), key=lambda r: r.name) if r.status == "disabled")
    lines.extend(f"plugins: {n}" for n in state.notices)
    return tuple(lines)


def _available(impl: type[KernelInterface], backend: str, call: CallSpec, target: Target | None) -> str | None:
    if "*" not in impl.devices and call.device_type not in impl.devices:
        return f"runs on {', '.join(impl.devices)}, the call is on {call.device_type}"
    if not arch_matches(impl.supported_archs, call.arch):
        return f"supports archs {', '.join(impl.supported_archs)}, the device is {call.arch}"
    if target is not None:
        why = target.allows(call.device_type, call.arch, backend)
        if why:
            return why
    return None


#: Why a kernel drops out of a selection restricted to traceable kernels.
NOT_TRACEABLE = ("not traceable: the decomposition under torch.compile traces only kernels that declare "
                 "traceable = True")


def select_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None,
                  broken: dict[type[KernelInterface], str] | None = None,
                  registry: Registry | None = None, *, traceable: bool = False) -> Selection:
    """Apply the selection rule (no caching; ``kernel_for`` caches). ``broken``: implementations
    whose build failed for this call, with why; they drop out like a refusal. ``registry``:
    the one to read (the active one by default). ``traceable``: only kernels that declare
    ``traceable`` are candidates (a decomposition under ``torch.compile``)."""
    registry = active() if registry is None else registry
    backend_of = registry.backend_of
    steering = steering_for(interface, call, target, registry)
    target = steering.target
    candidates: dict[type[KernelInterface], Candidate] = {}

    def drop(impl: type[KernelInterface], why: str) -> None:
        candidates[impl] = Candidate(impl, backend_of(impl), False, why)

    survivors: list[type[KernelInterface]] = []
    for impl in registry.implementations(interface):
        why = (steering.why_out(impl) or (NOT_TRACEABLE if traceable and not impl.traceable else None)
               or _available(impl, backend_of(impl), call, target))
        if why is None and broken and impl in broken:
            why = broken[impl]
        if why is None:
            try:
                refusal = impl.refusal(call)
            except Exception as exc:  # a refusal that crashes is reported as such, not swallowed
                refusal = f"refusal() raised {type(exc).__name__}: {exc}"
            why = None if refusal is None else f"refused: {refusal}"
        if why is not None:
            drop(impl, why)
        else:
            survivors.append(impl)
    specialised = [s for s in survivors if not s.general]
    if specialised:
        for s in survivors:
            if s.general:
                drop(s, "general; a specialised implementation applies")
        survivors = specialised
    removed: set[type[KernelInterface]] = set()
    for s in survivors:
        for loser in registry.resolve_preferred(s):
            if loser in survivors and loser is not s:
                removed.add(loser)
                drop(loser, f"{s.qualname()} is preferred over it")
    survivors = [s for s in survivors if s not in removed]
    if len(survivors) == 1:
        only = survivors[0]
        candidates[only] = Candidate(only, backend_of(only), True, "general" if only.general
                                     else "specialised and applicable")
    else:
        for s in survivors:
            drop(s, "ambiguous: another applicable implementation has the same priority")
    ordered = tuple(candidates[c] for c in sorted(candidates, key=lambda c: c.qualname()))
    return Selection(interface, call, target, survivors[0] if len(survivors) == 1 else None, ordered,
                     tuple(registry.failures()), steering, selection_context(registry, target))


def build_count() -> int:
    """How many kernels the active registry built (tests of build-once)."""
    return active().caches.built


def clear_caches() -> None:
    """Forget the active registry's selections and built kernels."""
    registry = active()
    with registry.lock:
        registry.caches.clear()


def kernel_for(interface: type[KernelInterface], call: CallSpec, target: Target | None = None) -> Callable[..., Any]:
    """The launchable kernel for ``call``: selected once, built once per build identity."""
    return choose_kernel(interface, call, target)[1]


def choose_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None, *,
                  traceable: bool = False, count: bool = True) -> tuple[type[KernelInterface], Callable[..., Any]]:
    """The implementation chosen for ``call`` and its built kernel (cached per registry generation).

    Selection reads the active registry as it is: loading plugins is the caller's job, done
    before any call spec is built (:meth:`OpDef.plan <tileops_core.op.definition.OpDef.plan>`).
    ``traceable``: among traceable kernels only (:func:`select_kernel`); the general kernel
    chosen so is the compile policy's explicit choice, not a fallback to warn about. ``count``: off for
    a build ahead of any call (``build_kernels``), which binds no plan and is not a dispatch to report.
    """
    registry = active()
    caches = registry.caches
    key = (interface, call, target, traceable)
    if caches.generation == GENERATION[0]:
        cached = caches.selections.get(key)
        if cached is not None:
            return _counted(registry, call, *cached) if count else (cached[0], cached[1])
    broken: dict[type[KernelInterface], str] = {}
    while True:  # a kernel whose build fails drops out, and the rule runs again without it
        generation = GENERATION[0]
        selection = select_kernel(interface, call, target, broken, registry, traceable=traceable)
        if selection.chosen is None:
            raise SelectionError(_no_choice(selection))
        chosen = selection.chosen
        entry = chosen.entry_for(call)
        build_key = (chosen, entry.build_key)
        kernel = caches.builds.get(build_key)
        if kernel is None:
            kernel = _build_once(registry, build_key, entry.build, call)
        if kernel is not None:
            break
        broken[chosen] = caches.failed_builds[build_key]
    fallback = None
    if (chosen.general and call.device_type != "cpu" and not traceable
            and not (selection.steering and selection.steering.explicit)):
        fallback = _fallback_reason(selection)
        if call.device_type != "meta":  # shape inference computes nothing: no speed is lost there
            _warn_fallback(registry, selection, fallback)
    with registry.lock:
        if generation == GENERATION[0]:  # an answer made while the registry changed is not kept
            if caches.generation != generation or len(caches.selections) >= MAX_SELECTIONS:
                # nor are those of an older generation; and an op called on ever-new shapes
                # (call specs with new dims) does not grow the cache without bound
                caches.selections.clear()
                caches.generation = generation
            caches.selections[key] = (chosen, kernel, fallback)
    return _counted(registry, call, chosen, kernel, fallback) if count else (chosen, kernel)


def _counted(registry: Registry, call: CallSpec, chosen: type[KernelInterface], kernel: Callable[..., Any],
             fallback: str | None) -> tuple[type[KernelInterface], Callable[..., Any]]:
    """Count a plan binding ``chosen`` (dispatch statistics); in per-call mode, a kernel counting its calls."""
    backend = registry.backend_of(chosen)
    if dispatch_stats.counts_calls():
        return chosen, dispatch_stats.counting(kernel, chosen, backend, call, fallback)
    dispatch_stats.count(chosen, backend, call, fallback)
    return chosen, kernel


def _no_choice(selection: Selection) -> str:
    """The error text when nothing serves: a lock line that cannot be honoured is named first."""
    call, target, steering = selection.call, selection.target, selection.steering
    if steering is not None and steering.lock is not None:
        entry = steering.lock
        why = next((c.reason for c in selection.candidates if c.impl.qualname() == entry.kernel), "")
        return (f"{entry.where}: the lock names {entry.kernel} [{entry.backend}] for this call, and it cannot serve "
                f"it: {why}\n{selection.report()}")
    ambiguous = [c for c in selection.candidates if c.reason.startswith("ambiguous")]
    what = "more than one implementation applies" if ambiguous else "no implementation can serve this call"
    if target is not None:
        what += f" within the explicit target {target}"
    if steering is not None and steering.pin is not None:
        what += f" within the per-op pin {steering.pin.entry!r}"
    return f"{call.op}: {what}\n{selection.report()}"


def _build_once(registry: Registry, build_key: BuildKey, build: Callable[[], Callable[..., Any]],
                call: CallSpec) -> Callable[..., Any] | None:
    """Build one identity once, under its own lock; None when its build raised (then it is marked
    failed for that identity, recorded as a failure naming kernel and backend, warned about once,
    and selection falls back).

    The registry's lock guards the caches; the build itself runs under the identity's own
    lock, so that a long compile holds up only the threads that wait for that very kernel.
    """
    caches = registry.caches
    with registry.lock:
        lock = caches.build_locks.setdefault(build_key, threading.Lock())
    with lock:
        kernel = caches.builds.get(build_key)
        if kernel is not None or build_key in caches.failed_builds:
            return kernel
        impl = build_key[0]
        named = f"kernel {impl.qualname()} [{registry.backend_of(impl)}]"
        try:
            kernel = build()
            check_built(impl, kernel)  # the launch contract of launchers made per build (kernels.contract)
        except Exception as exc:  # contained: this kernel is out for this build identity, the rest serve
            reason = f"build failed for {build_key[1]!r}: {type(exc).__name__}: {exc}"
            with registry.lock:
                caches.failed_builds[build_key] = reason
            registry.record_failure(LoadFailure(named, None, None, reason))
            warnings.warn(f"{call.op}: {named} {reason}; selection falls back to the next implementation",
                          RuntimeWarning, stacklevel=6)
            return None
        with registry.lock:
            caches.built += 1
            caches.builds[build_key] = kernel
        return kernel


def _dropped_specialised(selection: Selection) -> list[Candidate]:
    device = selection.call.device_type
    return [c for c in selection.candidates if not c.kept and not c.impl.general
            and ("*" in c.impl.devices or device in c.impl.devices)]


def _fallback_reason(selection: Selection) -> str:
    """Why the general kernel serves an accelerator call: each specialised kernel for this
    device type that dropped out and why (a refusal, an arch it was not written for, a deny),
    and the plugins that failed to load; only when there is none of those is no specialised
    kernel installed."""
    reasons = [f"{c.impl.qualname()}: {c.reason}" for c in _dropped_specialised(selection)]
    reasons += [str(f) for f in selection.failures]
    return "; ".join(reasons) or f"no specialised implementation for {selection.call.device_type} is installed"


def _warn_fallback(registry: Registry, selection: Selection, why: str) -> None:
    """Warn once per op, device type and cause that the general kernel serves an accelerator call;
    the warning points to the dispatch report, which counts every fallback of the process."""
    device = selection.call.device_type
    # Once per op, device type and cause: which kernels dropped out (not their texts, which
    # carry the call's sizes) and which plugins failed.
    key = (selection.call.op, selection.interface, device, tuple(c.impl for c in _dropped_specialised(selection)),
           selection.failures)
    with registry.lock:
        if key in registry.caches.warned:
            return
        registry.caches.warned.add(key)
    chosen = selection.chosen
    assert chosen is not None  # only a chosen general kernel falls back
    warnings.warn(f"{selection.call.op}: falling back to the general {chosen.qualname()} on {device} ({why}); "
                  "tileops_core.dispatch_report() counts every fallback of this process "
                  "(TILEOPS_DISPATCH_REPORT=1 prints it at exit)", RuntimeWarning, stacklevel=5)
