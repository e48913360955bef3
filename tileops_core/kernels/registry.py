"""The registry of kernel implementations, backends and device detectors.

All mutable global state of selection lives here, behind one lock. Registration order is
recorded nowhere that selection reads: candidates are sorted by name before the rule runs.
Contradictory declarations (a ``preferred_over`` cycle, two general implementations of one
interface on one device type) are found by :func:`check_consistency` when a backend's
registration completes, and that backend is rolled back whole.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PluginError
from .interface import KernelInterface

__all__ = [
    "BackendInfo", "LoadFailure", "register_backend", "register_kernel", "unregister_backend", "implementations",
    "backends", "failures", "record_failure", "check_consistency", "snapshot", "restore", "generation",
    "device_arch", "register_arch_detector", "resolve_preferred", "GENERATION",
]


@dataclass
class BackendInfo:
    """What a backend says of itself, and what it registered."""

    name: str
    distribution: str | None = None
    version: str | None = None
    device_types: tuple[str, ...] = ()
    description: str = ""
    kernels: list[type[KernelInterface]] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    detect: Callable[[], list[dict[str, Any]]] | None = None


@dataclass(frozen=True)
class LoadFailure:
    """A plugin that failed to load or register, with the reason."""

    name: str
    distribution: str | None
    version: str | None
    reason: str

    def __str__(self) -> str:
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"plugin {self.name}{dist} failed: {self.reason}"


_lock = threading.RLock()
_impls: dict[type[KernelInterface], list[type[KernelInterface]]] = {}
_backends: dict[str, BackendInfo] = {}
_failures: list[LoadFailure] = []
_arch_detectors: dict[str, Callable[[Any], str]] = {}
_arch_cache: dict[Any, str] = {}
#: The registry generation, bumped at every change: selection caches and op plans made under
#: another generation are made again. A one-element list, read on every op call.
GENERATION = [0]


def generation() -> int:
    """Bumped at every change, so selection caches and plans know to forget."""
    return GENERATION[0]


def _bump() -> None:
    GENERATION[0] += 1


def register_backend(info: BackendInfo) -> None:
    """Record a backend (before its kernels)."""
    with _lock:
        if info.name in _backends:
            raise PluginError(f"backend {info.name!r} is registered twice")
        _backends[info.name] = info
        _bump()


def register_kernel(impl: type[KernelInterface], backend: str) -> None:
    """Register one implementation class for its interface, as part of ``backend``."""
    if not isinstance(impl, type) or not issubclass(impl, KernelInterface) or impl.is_interface():
        raise PluginError(f"{impl!r} is not a kernel implementation (a subclass of a kernel interface)")
    if not impl.devices:
        raise PluginError(f"{impl.qualname()} declares no devices")
    with _lock:
        info = _backends.get(backend)
        if info is None:
            raise PluginError(f"backend {backend!r} must be registered before its kernels")
        interface = impl.interface()
        existing = _impls.setdefault(interface, [])
        if impl in existing:
            raise PluginError(f"{impl.qualname()} is registered twice")
        impl.backend = backend
        existing.append(impl)
        info.kernels.append(impl)
        _bump()


def unregister_backend(name: str) -> None:
    """Remove a backend and everything it registered (roll-back of a failed plugin)."""
    with _lock:
        info = _backends.pop(name, None)
        if info is None:
            return
        for impl in info.kernels:
            lst = _impls.get(impl.interface(), [])
            if impl in lst:
                lst.remove(impl)
        _bump()


def implementations(interface: type[KernelInterface]) -> list[type[KernelInterface]]:
    """Registered implementations of ``interface``, sorted by name (never by registration order)."""
    with _lock:
        return sorted(_impls.get(interface, []), key=lambda c: c.qualname())


def backends() -> dict[str, BackendInfo]:
    with _lock:
        return dict(_backends)


def failures() -> list[LoadFailure]:
    with _lock:
        return list(_failures)


def record_failure(failure: LoadFailure) -> None:
    with _lock:
        _failures.append(failure)
        _bump()


def resolve_preferred(impl: type[KernelInterface]) -> list[type[KernelInterface]]:
    """The registered classes ``impl.preferred_over`` names (strings are ``module:qualname``)."""
    out: list[type[KernelInterface]] = []
    candidates = implementations(impl.interface())
    for target in impl.preferred_over:
        if isinstance(target, str):
            out.extend(c for c in candidates if c.qualname() == target)
        elif target in candidates:
            out.append(target)
    return out


def check_consistency(backend: str | None = None) -> list[str]:
    """Contradictions among registered declarations (those involving ``backend`` if given)."""
    problems: list[str] = []
    with _lock:
        interfaces = list(_impls)
    for interface in sorted(interfaces, key=lambda c: c.qualname()):
        impls = implementations(interface)
        general_by_device: dict[str, list[type[KernelInterface]]] = {}
        for impl in impls:
            if impl.general:
                for device in impl.devices:
                    general_by_device.setdefault(device, []).append(impl)
        wildcard = general_by_device.pop("*", [])
        for device in list(general_by_device):
            general_by_device[device] = general_by_device[device] + wildcard  # "*" serves every device too
        if wildcard:
            general_by_device["*"] = wildcard
        for device, generals in sorted(general_by_device.items()):
            if len(generals) > 1 and (backend is None or any(g.backend == backend for g in generals)):
                names = ", ".join(f"{g.qualname()} ({g.backend})" for g in generals)
                problems.append(f"{interface.qualname()}: two general implementations for device {device!r}: {names}")
        cycle = _preference_cycle(impls)
        if cycle and (backend is None or any(c.backend == backend for c in cycle)):
            problems.append(f"{interface.qualname()}: preferred_over cycle: "
                            + " -> ".join(c.qualname() for c in cycle + [cycle[0]]))
    return problems


def _preference_cycle(impls: list[type[KernelInterface]]) -> list[type[KernelInterface]] | None:
    graph = {impl: resolve_preferred(impl) for impl in impls}
    state: dict[type[KernelInterface], int] = {}
    path: list[type[KernelInterface]] = []

    def visit(node: type[KernelInterface]) -> list[type[KernelInterface]] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for impl in impls:
        if impl not in state:
            found = visit(impl)
            if found:
                return list(found)
    return None


def register_arch_detector(device_type: str, detector: Callable[[Any], str]) -> None:
    """A backend tells the core how to name the arch of its devices (``sm_90``, ``ascend310p``)."""
    with _lock:
        _arch_detectors[device_type] = detector
        _arch_cache.clear()
        _bump()


def device_arch(device: Any) -> str:
    """The arch string of a ``torch.device`` (cached; ``cpu`` is ``"cpu"``; unknown is ``"unknown"``)."""
    arch = _arch_cache.get(device)
    if arch is not None:
        return arch
    dtype = device.type
    if dtype == "cpu":
        arch = "cpu"
    else:
        detector = _arch_detectors.get(dtype)
        try:
            arch = detector(device) if detector is not None else "unknown"
        except Exception as exc:  # a broken detector must not break calls: the arch is unknown
            arch = "unknown"
            record_failure(LoadFailure(f"arch detector for {dtype}", None, None, repr(exc)))
    _arch_cache[device] = arch
    return arch


@dataclass
class _Snapshot:
    impls: dict[type[KernelInterface], list[type[KernelInterface]]]
    backends: dict[str, BackendInfo]
    failures: list[LoadFailure]
    detectors: dict[str, Callable[[Any], str]]
    backend_of: dict[type[KernelInterface], str]


def snapshot() -> _Snapshot:
    """Copy the registry (tests register fakes, then :func:`restore`)."""
    with _lock:
        backend_of = {impl: impl.backend for lst in _impls.values() for impl in lst}
        return _Snapshot({k: list(v) for k, v in _impls.items()},
                         {k: BackendInfo(**{**v.__dict__, "kernels": list(v.kernels), "ops": list(v.ops)})
                          for k, v in _backends.items()},
                         list(_failures), dict(_arch_detectors), backend_of)


def restore(snap: _Snapshot) -> None:
    with _lock:
        _impls.clear()
        _impls.update({k: list(v) for k, v in snap.impls.items()})
        _backends.clear()
        _backends.update(snap.backends)
        _failures[:] = snap.failures
        _arch_detectors.clear()
        _arch_detectors.update(snap.detectors)
        _arch_cache.clear()
        for impl, name in snap.backend_of.items():
            impl.backend = name
        _bump()
