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
from typing import Any, Callable, Hashable

from ..errors import SelectionError
from . import registry
from .interface import CallSpec, KernelInterface
from .targets import Target

__all__ = ["Candidate", "Selection", "select_kernel", "kernel_for", "choose_kernel", "clear_caches", "build_count"]


@dataclass(frozen=True)
class Candidate:
    """One implementation considered for a call, and its fate."""

    impl: type[KernelInterface]
    kept: bool
    reason: str

    def line(self) -> str:
        mark = "kept   " if self.kept else "dropped"
        return f"{mark} {self.impl.qualname()} [{self.impl.backend}]: {self.reason}"


@dataclass(frozen=True)
class Selection:
    """The chosen implementation and every candidate's story (for errors and ``explain``)."""

    interface: type[KernelInterface]
    call: CallSpec
    target: Target | None
    chosen: type[KernelInterface] | None
    candidates: tuple[Candidate, ...]

    def report(self) -> str:
        lines = [f"{self.interface.qualname()} for {self.call!r}"]
        lines.append(f"target: {self.target if self.target is not None else 'automatic'}")
        lines.extend("  " + c.line() for c in self.candidates)
        failures = registry.failures()
        if failures:
            lines.append("plugins that failed to load:")
            lines.extend(f"  {f}" for f in failures)
        return "\n".join(lines)


def _available(impl: type[KernelInterface], call: CallSpec, target: Target | None) -> str | None:
    if "*" not in impl.devices and call.device_type not in impl.devices:
        return f"runs on {', '.join(impl.devices)}, the call is on {call.device_type}"
    if "*" not in impl.supported_archs and call.arch not in impl.supported_archs:
        return f"supports archs {', '.join(impl.supported_archs)}, the device is {call.arch}"
    if target is not None:
        why = target.allows(call.device_type, call.arch, impl.backend)
        if why:
            return why
    return None


def select_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None,
                  broken: dict[type[KernelInterface], str] | None = None) -> Selection:
    """Apply the selection rule (no caching; ``kernel_for`` caches). ``broken``: implementations
    whose build failed for this call, with why; they drop out like a refusal."""
    candidates: dict[type[KernelInterface], Candidate] = {}
    survivors: list[type[KernelInterface]] = []
    for impl in registry.implementations(interface):
        why = _available(impl, call, target)
        if why is None and broken and impl in broken:
            why = broken[impl]
        if why is None:
            try:
                refusal = impl.refusal(call)
            except Exception as exc:  # a refusal that crashes is reported as such, not swallowed
                refusal = f"refusal() raised {type(exc).__name__}: {exc}"
            why = None if refusal is None else f"refused: {refusal}"
        if why is not None:
            candidates[impl] = Candidate(impl, False, why)
        else:
            survivors.append(impl)
    specialised = [s for s in survivors if not s.general]
    if specialised:
        for s in survivors:
            if s.general:
                candidates[s] = Candidate(s, False, "general; a specialised implementation applies")
        survivors = specialised
    removed: set[type[KernelInterface]] = set()
    for s in survivors:
        for loser in registry.resolve_preferred(s):
            if loser in survivors and loser is not s:
                removed.add(loser)
                candidates[loser] = Candidate(loser, False, f"{s.qualname()} is preferred over it")
    survivors = [s for s in survivors if s not in removed]
    if len(survivors) == 1:
        candidates[survivors[0]] = Candidate(survivors[0], True, "general" if survivors[0].general
                                             else "specialised and applicable")
    else:
        for s in survivors:
            candidates[s] = Candidate(s, False, "ambiguous: another applicable implementation has the same priority")
    ordered = tuple(candidates[c] for c in sorted(candidates, key=lambda c: c.qualname()))
    return Selection(interface, call, target, survivors[0] if len(survivors) == 1 else None, ordered)


#: Selections of the current registry generation only: a new generation empties it (a process
#: that registers and unregisters plugins many times must not keep every old answer).
_select_cache: dict[tuple[Any, ...], tuple[type[KernelInterface], Callable[..., Any]]] = {}
_select_generation = [-1]
_build_cache: dict[tuple[type[KernelInterface], Hashable], Callable[..., Any]] = {}
_build_locks: dict[tuple[type[KernelInterface], Hashable], threading.Lock] = {}
_locks_guard = threading.Lock()
_builds = [0]
#: Build identities whose build raised, with why: never built again in this process.
_failed_builds: dict[tuple[type[KernelInterface], Hashable], str] = {}
_warned: set[tuple[Any, ...]] = set()


def build_count() -> int:
    """How many kernels were built in this process (tests of build-once)."""
    return _builds[0]


def clear_caches() -> None:
    """Forget selections and built kernels."""
    with _locks_guard:
        _select_cache.clear()
        _build_cache.clear()
        _failed_builds.clear()
        _build_locks.clear()
        _warned.clear()


def kernel_for(interface: type[KernelInterface], call: CallSpec, target: Target | None = None) -> Callable[..., Any]:
    """The launchable kernel for ``call``: selected once, built once per build identity."""
    return choose_kernel(interface, call, target)[1]


def choose_kernel(interface: type[KernelInterface], call: CallSpec, target: Target | None = None
                  ) -> tuple[type[KernelInterface], Callable[..., Any]]:
    """The implementation chosen for ``call`` and its built kernel (cached per registry generation).

    Selection reads the registry as it is: loading plugins is the caller's job, done before
    any call spec is built (:meth:`OpDef.plan <tileops_core.op.definition.OpDef.plan>`).
    """
    generation = registry.generation()
    if _select_generation[0] != generation:
        _select_cache.clear()
        _select_generation[0] = generation
    key = (interface, call, target)
    chosen_kernel = _select_cache.get(key)
    if chosen_kernel is not None:
        return chosen_kernel
    broken: dict[type[KernelInterface], str] = {}
    while True:  # a kernel whose build fails drops out, and the rule runs again without it
        selection = select_kernel(interface, call, target, broken)
        if selection.chosen is None:
            ambiguous = [c for c in selection.candidates if c.reason.startswith("ambiguous")]
            what = "more than one implementation applies" if ambiguous else "no implementation can serve this call"
            if target is not None:
                what += f" within the explicit target {target}"
            raise SelectionError(f"{call.op}: {what}\n{selection.report()}")
        chosen = selection.chosen
        entry = chosen.entry_for(call)
        build_key = (chosen, entry.build_key)
        kernel = _build_cache.get(build_key)
        if kernel is None:
            kernel = _build_once(build_key, entry.build, call)
        if kernel is not None:
            break
        broken[chosen] = _failed_builds[build_key]
    if chosen.general and call.device_type != "cpu" and target is None:
        _warn_fallback(selection)
    chosen_kernel = (chosen, kernel)
    _select_cache[key] = chosen_kernel
    return chosen_kernel


def _build_once(build_key: tuple[type[KernelInterface], Hashable], build: Callable[[], Callable[..., Any]],
                call: CallSpec) -> Callable[..., Any] | None:
    """Build one identity once, under its own lock; None when its build raised (then it is marked
    failed for that identity, recorded as a failure naming kernel and backend, warned about once,
    and selection falls back)."""
    with _locks_guard:
        lock = _build_locks.setdefault(build_key, threading.Lock())
    with lock:
        kernel = _build_cache.get(build_key)
        if kernel is not None or build_key in _failed_builds:
            return kernel
        impl = build_key[0]
        try:
            kernel = build()
        except Exception as exc:  # contained: this kernel is out for this build identity, the rest serve
            reason = f"build failed for {build_key[1]!r}: {type(exc).__name__}: {exc}"
            _failed_builds[build_key] = reason
            registry.record_failure(registry.LoadFailure(f"kernel {impl.qualname()} [{impl.backend}]", None, None,
                                                         reason))
            warnings.warn(f"{call.op}: kernel {impl.qualname()} [{impl.backend}] {reason}; selection falls back to "
                          "the next implementation", RuntimeWarning, stacklevel=6)
            return None
        _builds[0] += 1
        _build_cache[build_key] = kernel
        return kernel


def _warn_fallback(selection: Selection) -> None:
    """Warn once per op, device type and reason that the general kernel serves an accelerator call.

    The reason is the real one: each specialised kernel for this device type that dropped
    out and why (a refusal, an arch it was not written for, a target), and the plugins
    that failed to load; only when there is none of those is no specialised kernel installed.
    """
    device = selection.call.device_type
    dropped = [c for c in selection.candidates if not c.kept and not c.impl.general
               and ("*" in c.impl.devices or device in c.impl.devices)]
    failures = registry.failures()
    reasons = [f"{c.impl.qualname()}: {c.reason}" for c in dropped]
    reasons += [str(f) for f in failures]
    # Once per op, device type and cause: which kernels dropped out (not their texts, which
    # carry the call's sizes) and which plugins failed.
    key = (selection.call.op, selection.interface, device, tuple(c.impl for c in dropped), tuple(failures))
    if key in _warned:
        return
    _warned.add(key)
    why = "; ".join(reasons) or f"no specialised implementation for {device} is installed"
    chosen = selection.chosen
    assert chosen is not None  # only a chosen general kernel falls back
    warnings.warn(f"{selection.call.op}: falling back to the general {chosen.qualname()} on {device} ({why})",
                  RuntimeWarning, stacklevel=5)
