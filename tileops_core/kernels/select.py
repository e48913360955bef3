"""The one selection rule, and building each chosen kernel exactly once.

For an interface and a call spec, among the registered implementations:

1. availability: the call's device type is in ``devices`` (or ``devices`` has ``"*"``) and its
   arch is in ``supported_archs`` (or that has ``"*"``); an explicit target narrows further;
2. applicability: ``refusal(call)`` is None;
3. priority: specialised (non-general) implementations beat general ones; among those
   left, one ``preferred_over`` another removes it; more than one left is an ambiguity
   error; none left is an error listing every candidate and why it dropped out.

Candidates are considered sorted by name, so registration and install order decide
nothing. A repeated (interface, call spec, target) costs one dict lookup; a new build
identity is built once, under a per-identity lock, however many threads race for it.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SelectionError
from .interface import CallSpec, KernelInterface
from .records import LoadFailure
from .registry import GENERATION, BuildKey, Registry, active
from .targets import Target

__all__ = ["Candidate", "Selection", "select_kernel", "kernel_for", "choose_kernel", "clear_caches", "build_count",
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

    @property
    def chosen_backend(self) -> str | None:
        """The backend of the chosen implementation (None when none was chosen)."""
        return next((c.backend for c in self.candidates if c.kept), None)

    def report(self) -> str:
        lines = [f"{self.interface.qualname()} for {self.call!r}"]
        lines.append(f"target: {self.target if self.target is not None else 'automatic'}")
        lines.extend("  " + c.line() for c in self.candidates)
        failures = self.failures
        if failures:
            lines.append("plugins that failed to load:")
            lines.extend(f"  {f}" for f in failures)
        return "\n".join(lines)


def _available(impl: type[KernelInterface], backend: str, call: CallSpec, target: Target | None) -> str | None:
    if "*" not in impl.devices and call.device_type not in impl.devices:
        return f"runs on {', '.join(impl.devices)}, the call is on {call.device_type}"
    if "*" not in impl.supported_archs and call.arch not in impl.supported_archs:
        return f"supports archs {', '.join(impl.supported_archs)}, the device is {call.arch}"
    if target is not None:
        why = target.allows(call.device_type, call.arch, backend)
        if why:
            return why
    return None


def select_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None,
                  broken: dict[type[KernelInterface], str] | None = None,
                  registry: Registry | None = None) -> Selection:
    """Apply the selection rule (no caching; ``kernel_for`` caches). ``broken``: implementations
    whose build failed for this call, with why; they drop out like a refusal. ``registry``:
    the one to read (the active one by default)."""
    registry = active() if registry is None else registry
    backend_of = registry.backend_of
    candidates: dict[type[KernelInterface], Candidate] = {}

    def drop(impl: type[KernelInterface], why: str) -> None:
        candidates[impl] = Candidate(impl, backend_of(impl), False, why)

    survivors: list[type[KernelInterface]] = []
    for impl in registry.implementations(interface):
        why = _available(impl, backend_of(impl), call, target)
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
                     tuple(registry.failures()))


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


def choose_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None
                  ) -> tuple[type[KernelInterface], Callable[..., Any]]:
    """The implementation chosen for ``call`` and its built kernel (cached per registry generation).

    Selection reads the active registry as it is: loading plugins is the caller's job, done
    before any call spec is built (:meth:`OpDef.plan <tileops_core.op.definition.OpDef.plan>`).
    """
    registry = active()
    caches = registry.caches
    key = (interface, call, target)
    if caches.generation == GENERATION[0]:
        chosen_kernel = caches.selections.get(key)
        if chosen_kernel is not None:
            return chosen_kernel
    broken: dict[type[KernelInterface], str] = {}
    while True:  # a kernel whose build fails drops out, and the rule runs again without it
        generation = GENERATION[0]
        selection = select_kernel(interface, call, target, broken, registry)
        if selection.chosen is None:
            ambiguous = [c for c in selection.candidates if c.reason.startswith("ambiguous")]
            what = "more than one implementation applies" if ambiguous else "no implementation can serve this call"
            if target is not None:
                what += f" within the explicit target {target}"
            raise SelectionError(f"{call.op}: {what}\n{selection.report()}")
        chosen = selection.chosen
        entry = chosen.entry_for(call)
        build_key = (chosen, entry.build_key)
        kernel = caches.builds.get(build_key)
        if kernel is None:
            kernel = _build_once(registry, build_key, entry.build, call)
        if kernel is not None:
            break
        broken[chosen] = caches.failed_builds[build_key]
    if chosen.general and call.device_type != "cpu" and target is None:
        _warn_fallback(registry, selection)
    chosen_kernel = (chosen, kernel)
    with registry.lock:
        if generation == GENERATION[0]:  # an answer made while the registry changed is not kept
            if caches.generation != generation or len(caches.selections) >= MAX_SELECTIONS:
                # nor are those of an older generation; and an op called on ever-new shapes
                # (call specs with new dims) does not grow the cache without bound
                caches.selections.clear()
                caches.generation = generation
            caches.selections[key] = chosen_kernel
    return chosen_kernel


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


def _warn_fallback(registry: Registry, selection: Selection) -> None:
    """Warn once per op, device type and reason that the general kernel serves an accelerator call.

    The reason is the real one: each specialised kernel for this device type that dropped
    out and why (a refusal, an arch it was not written for, a target), and the plugins
    that failed to load; only when there is none of those is no specialised kernel installed.
    """
    device = selection.call.device_type
    dropped = [c for c in selection.candidates if not c.kept and not c.impl.general
               and ("*" in c.impl.devices or device in c.impl.devices)]
    failures = selection.failures
    reasons = [f"{c.impl.qualname()}: {c.reason}" for c in dropped]
    reasons += [str(f) for f in failures]
    # Once per op, device type and cause: which kernels dropped out (not their texts, which
    # carry the call's sizes) and which plugins failed.
    key = (selection.call.op, selection.interface, device, tuple(c.impl for c in dropped), tuple(failures))
    with registry.lock:
        if key in registry.caches.warned:
            return
        registry.caches.warned.add(key)
    why = "; ".join(reasons) or f"no specialised implementation for {device} is installed"
    chosen = selection.chosen
    assert chosen is not None  # only a chosen general kernel falls back
    warnings.warn(f"{selection.call.op}: falling back to the general {chosen.qualname()} on {device} ({why})",
                  RuntimeWarning, stacklevel=5)
