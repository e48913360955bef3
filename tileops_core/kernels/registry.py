"""The one registry: all registration state of a process, behind one lock.

A :class:`Registry` owns the backends and the kernel implementations of each interface
(which backend registered a kernel is recorded here, never written onto the class), the
arch detectors and the archs they answered, the manifest directories and hardware
profiles plugins contributed, the plugins met and the failures recorded, and the
selection and build caches of :mod:`.select`. One re-entrant lock guards all of it,
loading the plugins included.

Registering a backend returns a :class:`Registration` handle. Everything of that backend
is registered through it and lives in it, so :meth:`Registration.undo` removes exactly
that and nothing another backend added (a plugin that fails half way, ``unregister_plugin``,
``reset_plugins``), the way a ``torch.library.Library`` owns its registrations.

One registry is active (:func:`active`); a test swaps in a fresh one with
:func:`use_registry`, and the previous one comes back untouched afterwards. The functions
at the bottom of this module are the facade over the active registry.

A kernel is checked against its interface's launch signature as it is registered
(:mod:`.contract`); a kernel that does not conform is a :class:`PluginError`.

Registration order is recorded nowhere that selection reads: candidates are sorted by name
before the rule runs. Contradictory declarations (a ``preferred_over`` cycle, two general
implementations of one interface on one device type) are found by
:meth:`Registry.check_consistency` when a backend's registration completes, and that
backend is rolled back whole.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator

from ..errors import PluginError
from ..spec import manifest
from ..spec.manifest import ManifestSource
from .archs import check_supported_archs, patterns_overlap
from .contract import check_registered
from .interface import KernelInterface
from .records import ArchDetector, BackendInfo, LoadFailure, PluginRecord, ProfileSource

__all__ = [
    "GENERATION", "BackendInfo", "LoadFailure", "PluginState", "Registration", "Registry", "SelectionCaches",
    "active", "backend_of", "backends", "check_consistency", "device_arch", "failures", "generation",
    "implementations", "record_failure", "register_arch_detector", "register_backend", "register_kernel",
    "resolve_preferred", "unregister_backend", "use_registry",
]

#: Bumped at every change of any registry and whenever another registry becomes active, so
#: selection caches and op plans made before know to forget. A one-element list, read on
#: every op call (process-wide, so that the hot path never looks the active registry up).
GENERATION = [0]


def _bump() -> None:
    GENERATION[0] += 1


Impl = type[KernelInterface]
BuildKey = tuple[Impl, Hashable]


@dataclass
class SelectionCaches:
    """What selection remembers: read and written by :mod:`.select` under the registry's lock.

    ``selections`` holds answers of one registry generation only (a process that registers
    and unregisters plugins many times must not keep every old answer); built kernels are
    kept per build identity, and a build that raised is never tried again.
    """

    generation: int = -1
    #: (interface, call, target) -> (implementation, built kernel, fallback reason or None)
    selections: dict[tuple[Any, ...], tuple[Impl, Callable[..., Any], str | None]] = field(default_factory=dict)
    builds: dict[BuildKey, Callable[..., Any]] = field(default_factory=dict)
    build_locks: dict[BuildKey, threading.Lock] = field(default_factory=dict)
    failed_builds: dict[BuildKey, str] = field(default_factory=dict)
    warned: set[tuple[Any, ...]] = field(default_factory=set)
    built: int = 0

    def clear(self) -> None:
        """Forget selections, built kernels and warnings given (the count of builds stays)."""
        self.generation = -1
        self.selections.clear()
        self.builds.clear()
        self.build_locks.clear()
        self.failed_builds.clear()
        self.warned.clear()


@dataclass
class PluginState:
    """Where loading plugins into this registry stands (kept by :mod:`tileops_core.plugins.loader`)."""

    loaded: bool = False
    loading_thread: int | None = None
    #: plugin name -> the plugin object, and -> the handle of what it registered.
    objects: dict[str, Any] = field(default_factory=dict)
    handles: dict[str, "Registration"] = field(default_factory=dict)
    records: dict[str, PluginRecord] = field(default_factory=dict)
    #: Failures the loader recorded (``reset_plugins`` forgets them, not a kernel's build failure).
    failures: list[LoadFailure] = field(default_factory=list)
    warned: set[str] = field(default_factory=set)
    #: What loading found wrong that is no plugin's failure (an allow-list naming nothing installed,
    #: a plugin spec that does not load, a ``preferred_over`` naming no kernel): warned once each,
    #: listed by ``tileops backends`` (exit 1) and by every selection error.
    notices: list[str] = field(default_factory=list)
    #: Set when a first use skipped loading because autoload is off: the text says which variable.
    autoload_skipped: str | None = None
    #: The pluggy manager the loader made for this registry (None until the first plugin).
    manager: Any = None


class Registration:
    """Everything one backend registered, and the undo of exactly that.

    Made by :meth:`Registry.add_backend`; kernels, arch detectors, manifest directories and
    hardware profiles are added through it and kept in it. :meth:`undo` removes precisely
    those (the registry's index of kernels per interface included) and bumps the generation.
    """

    def __init__(self, registry: "Registry", info: BackendInfo) -> None:
        self.registry = registry
        self.info = info
        self.kernels: list[Impl] = []
        self.arch_detectors: dict[str, ArchDetector] = {}
        self.manifest_sources: tuple[ManifestSource, ...] = ()
        self.hardware_profiles: tuple[Path, ...] = ()
        self.live = True

    def __repr__(self) -> str:
        return f"Registration({self.backend!r}, {len(self.kernels)} kernels{'' if self.live else ', undone'})"

    @property
    def backend(self) -> str:
        return self.info.name

    def kernel(self, impl: Impl) -> None:
        """Register one implementation class for its interface, as part of this backend."""
        self.registry._add_kernel(self, impl)

    def arch_detector(self, device_type: str, detector: ArchDetector) -> None:
        """How this backend names the arch of a ``device_type`` device (``sm_90``, ``ascend310p``)."""
        with self.registry.lock:
            self._check_live()
            self.arch_detectors[device_type] = detector
            self.registry._changed(archs=True)

    def manifest_dirs(self, dirs: tuple[Path, ...]) -> None:
        """Directories of YAML specs this backend ships (live for ``load_manifest`` from now on)."""
        with self.registry.lock:
            self._check_live()
            self.manifest_sources = tuple(ManifestSource(source_label(self.backend, d), d) for d in dirs)
            self.registry._changed()

    def profiles(self, paths: tuple[Path, ...]) -> None:
        """Hardware profiles this backend ships (read by the roofline and the bench)."""
        with self.registry.lock:
            self._check_live()
            self.hardware_profiles = tuple(paths)
            self.registry._changed()

    def undo(self) -> None:
        """Remove everything registered through this handle (a second undo does nothing)."""
        self.registry._undo(self)

    def _check_live(self) -> None:
        if not self.live:
            raise PluginError(f"backend {self.backend!r} was unregistered; its registration is closed")


def source_label(backend: str, directory: Path) -> str:
    """How a plugin's spec files are shown in messages: ``example:manifest/x.yaml``."""
    return f"{backend}:{directory.name}"


class Registry:
    """Backends, kernels, detectors, plugin contributions, records, failures and selection caches."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._registrations: dict[str, Registration] = {}
        self._impls: dict[Impl, list[Impl]] = {}
        self._backend_of: dict[Impl, str] = {}
        self._failures: list[LoadFailure] = []
        self._arch_cache: dict[Any, str] = {}
        #: Interfaces without a launch signature already warned about (once per interface).
        self._contract_warned: set[Impl] = set()
        self.plugins = PluginState()
        self.caches = SelectionCaches()

    def _changed(self, archs: bool = False) -> None:
        if archs:
            self._arch_cache.clear()
        _bump()

    # -- registration -------------------------------------------------------------------------

    def add_backend(self, info: BackendInfo) -> Registration:
        """Record a backend (before its kernels); the handle registers the rest and undoes it all."""
        with self.lock:
            if info.name in self._registrations:
                raise PluginError(f"backend {info.name!r} is registered twice")
            registration = Registration(self, info)
            self._registrations[info.name] = registration
            self._changed()
            return registration

    def registration(self, backend: str) -> Registration:
        """The handle of a registered backend."""
        with self.lock:
            found = self._registrations.get(backend)
        if found is None:
            raise PluginError(f"backend {backend!r} must be registered before its kernels")
        return found

    def _add_kernel(self, registration: Registration, impl: Impl) -> None:
        if not isinstance(impl, type) or not issubclass(impl, KernelInterface) or impl.is_interface():
            raise PluginError(f"{impl!r} is not a kernel implementation (a subclass of a kernel interface)")
        if not impl.devices:
            raise PluginError(f"{impl.qualname()} declares no devices")
        check_supported_archs(impl.qualname(), impl.supported_archs)
        with self.lock:
            registration._check_live()
            existing = self._impls.setdefault(impl.interface(), [])
            if impl in existing:
                raise PluginError(f"{impl.qualname()} is registered twice")
            if any(other.qualname() == impl.qualname() for other in existing):
                # Pins, locks and preferred_over name kernels by module:QualName: two classes of one name
                # (a class factory) could not be told apart, and every call would see two (found in review).
                raise PluginError(f"{impl.qualname()}: another kernel of {impl.interface().qualname()} already has "
                                  "this name; give each kernel class its own name")
            # The launch contract (kernels.contract); its PluginError rolls the plugin back.
            check_registered(impl, self._contract_warned)
            existing.append(impl)
            self._backend_of[impl] = registration.backend
            registration.kernels.append(impl)
            registration.info.kernels.append(impl)
            self._changed()

    def _undo(self, registration: Registration) -> None:
        with self.lock:
            if not registration.live or self._registrations.get(registration.backend) is not registration:
                return
            registration.live = False
            del self._registrations[registration.backend]
            for impl in registration.kernels:
                lst = self._impls.get(impl.interface(), [])
                if impl in lst:
                    lst.remove(impl)
                self._backend_of.pop(impl, None)
            self._changed(archs=bool(registration.arch_detectors))
        if registration.manifest_sources:
            manifest.clear_cache()  # files of a removed plugin must not linger in the parse cache

    # -- what selection and the CLI read ----------------------------------------------------------

    def backends(self) -> dict[str, BackendInfo]:
        with self.lock:
            return {name: r.info for name, r in self._registrations.items()}

    def implementations(self, interface: Impl) -> list[Impl]:
        """Registered implementations of ``interface``, sorted by name (never by registration order)."""
        with self.lock:
            return sorted(self._impls.get(interface, []), key=lambda c: c.qualname())

    def interfaces(self) -> list[Impl]:
        """Interfaces with at least one registered implementation, sorted by name."""
        with self.lock:
            return sorted((i for i, impls in self._impls.items() if impls), key=lambda c: c.qualname())

    def backend_of(self, impl: Impl) -> str:
        """The backend that registered ``impl`` (``""`` when it is not registered here)."""
        return self._backend_of.get(impl, "")

    def manifest_sources(self) -> list[ManifestSource]:
        """Plugin spec directories, by backend name (what ``load_manifest`` reads after the core's)."""
        with self.lock:
            return [s for name in sorted(self._registrations) for s in self._registrations[name].manifest_sources]

    def hardware_profiles(self) -> list[ProfileSource]:
        """Hardware profiles contributed by backends, by backend name."""
        with self.lock:
            return [ProfileSource(name, p) for name in sorted(self._registrations)
                    for p in self._registrations[name].hardware_profiles]

    def failures(self) -> list[LoadFailure]:
        with self.lock:
            return list(self._failures)

    def record_failure(self, failure: LoadFailure) -> None:
        with self.lock:
            self._failures.append(failure)
            self._changed()

    def forget_failures(self, which: list[LoadFailure]) -> None:
        """Drop exactly these recorded failures (the loader's, when plugins are reset)."""
        with self.lock:
            self._failures = [f for f in self._failures if not any(f is w for w in which)]
            self._changed()

    # -- archs ------------------------------------------------------------------------------------

    def device_arch(self, device: Any) -> str:
        """The arch string of a ``torch.device`` (cached; ``cpu`` is ``"cpu"``; unknown is ``"unknown"``).

        Several backends may name the arch of one device type (two CUDA backends). They are
        asked in backend-name order and the first answer other than ``"unknown"`` wins, so
        install order never changes the arch a device is given. A detector that raises does
        not break calls: if no other backend knows, the arch is unknown and the failure recorded.
        """
        arch = self._arch_cache.get(device)
        if arch is not None:
            return arch
        if device.type == "cpu":
            arch = "cpu"
        else:
            try:
                arch = self._detect(device)
            except Exception as exc:  # a broken detector must not break calls: the arch is unknown
                arch = "unknown"
                self.record_failure(LoadFailure(f"arch detector for {device.type}", None, None, repr(exc)))
        with self.lock:
            self._arch_cache[device] = arch
        return arch

    def _detect(self, device: Any) -> str:
        with self.lock:
            detectors = [self._registrations[name].arch_detectors[device.type] for name in sorted(self._registrations)
                         if device.type in self._registrations[name].arch_detectors]
        first_error: Exception | None = None
        for fn in detectors:
            try:
                arch = fn(device)
            except Exception as exc:  # another backend may still know; re-raised below if none does
                first_error = first_error or exc
                continue
            if arch and arch != "unknown":
                return str(arch)
        if first_error is not None:
            raise first_error
        return "unknown"

    # -- consistency --------------------------------------------------------------------------------

    def resolve_preferred(self, impl: Impl) -> list[Impl]:
        """The registered classes ``impl.preferred_over`` names (strings are ``module:qualname``)."""
        out: list[Impl] = []
        candidates = self.implementations(impl.interface())
        for target in impl.preferred_over:
            if isinstance(target, str):
                out.extend(c for c in candidates if c.qualname() == target)
            elif target in candidates:
                out.append(target)
        return out

    def unresolved_overlaps(self, backend: str) -> list[str]:
        """Specialised kernels of ``backend`` that another backend's specialised kernel of the same
        interface may meet (devices and archs overlap) with no ``preferred_over`` between them:
        every call both accept fails as ambiguous. Not a contradiction (their refusals may keep
        them apart), so loading reports it instead of rolling anything back."""
        found: list[str] = []
        mine = [i for i in self.backends()[backend].kernels if not i.general]
        for impl in sorted(mine, key=lambda c: c.qualname()):
            for other in self.implementations(impl.interface()):
                if (other.general or self.backend_of(other) == backend or not _devices_meet(impl, other)
                        or not patterns_overlap(impl.supported_archs, other.supported_archs)
                        or other in self.resolve_preferred(impl) or impl in self.resolve_preferred(other)):
                    continue
                devices = sorted((set(impl.devices) & set(other.devices)) or set(impl.devices) | set(other.devices))
                found.append(f"{impl.qualname()} [{backend}] and {other.qualname()} [{self.backend_of(other)}] both "
                             f"specialise {impl.interface().qualname()} on {', '.join(devices)} (archs "
                             f"{' '.join(impl.supported_archs)} / {' '.join(other.supported_archs)}), and neither is "
                             "preferred_over the other: a call both accept fails as ambiguous (declare "
                             "preferred_over, or refuse the calls the other serves)")
        return found

    def check_consistency(self, backend: str | None = None) -> list[str]:
        """Contradictions among registered declarations (those involving ``backend`` if given)."""
        problems: list[str] = []
        with self.lock:
            interfaces = list(self._impls)
        involved = (lambda impls: True) if backend is None else (
            lambda impls: any(self.backend_of(i) == backend for i in impls))
        for interface in sorted(interfaces, key=lambda c: c.qualname()):
            impls = self.implementations(interface)
            for device, generals in sorted(_generals_by_device(impls).items()):
                clashing = _overlapping_archs(generals)
                if len(clashing) > 1 and involved(clashing):
                    names = ", ".join(f"{g.qualname()} ({self.backend_of(g)})" for g in clashing)
                    archs = "" if all(g.supported_archs == ("*",) for g in clashing) else " on overlapping archs " + (
                        ", ".join(f"{' '.join(g.supported_archs)}" for g in clashing))
                    problems.append(f"{interface.qualname()}: two general implementations for device {device!r}"
                                    f"{archs}: {names}")
            cycle = _preference_cycle({impl: self.resolve_preferred(impl) for impl in impls})
            if cycle and involved(cycle):
                problems.append(f"{interface.qualname()}: preferred_over cycle: "
                                + " -> ".join(c.qualname() for c in cycle + [cycle[0]]))
        return problems


def _devices_meet(a: Impl, b: Impl) -> bool:
    return "*" in a.devices or "*" in b.devices or bool(set(a.devices) & set(b.devices))


def _generals_by_device(impls: list[Impl]) -> dict[str, list[Impl]]:
    """General implementations per device type; one declaring ``"*"`` serves every device too."""
    by_device: dict[str, list[Impl]] = {}
    for impl in impls:
        if impl.general:
            for device in impl.devices:
                by_device.setdefault(device, []).append(impl)
    wildcard = by_device.pop("*", [])
    for device in list(by_device):
        by_device[device] = by_device[device] + wildcard
    if wildcard:
        by_device["*"] = wildcard
    return by_device


def _overlapping_archs(generals: list[Impl]) -> list[Impl]:
    """The general implementations whose ``supported_archs`` meet another's (ranges included):
    general kernels for disjoint arch ranges of one device type do not contradict each other."""
    return [g for g in generals if any(h is not g and patterns_overlap(g.supported_archs, h.supported_archs)
                                       for h in generals)]


def _preference_cycle(graph: dict[Impl, list[Impl]]) -> list[Impl] | None:
    state: dict[Impl, int] = {}
    path: list[Impl] = []

    def visit(node: Impl) -> list[Impl] | None:
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

    for impl in graph:
        if impl not in state:
            found = visit(impl)
            if found:
                return list(found)
    return None


# -- the active registry ------------------------------------------------------------------------

_active: list[Registry] = [Registry()]
_swap_lock = threading.Lock()


def active() -> Registry:
    """The registry selection, planning and the CLI read now."""
    return _active[0]


@contextlib.contextmanager
def use_registry(registry: Registry) -> Iterator[Registry]:
    """Make ``registry`` the active one within the block; the previous one comes back after.

    The test seam: a fresh :class:`Registry` per test isolates everything a test registers,
    loads or caches, with nothing to snapshot or restore.
    """
    with _swap_lock:
        previous = _active[0]
        _active[0] = registry
        _bump()
    try:
        yield registry
    finally:
        with _swap_lock:
            _active[0] = previous
            _bump()


# The manifest reads plugin spec directories from whichever registry is active.
manifest.set_source_provider(lambda: _active[0].manifest_sources())


# -- the facade over the active registry ---------------------------------------------------------

def generation() -> int:
    """Bumped at every change, so selection caches and plans know to forget."""
    return GENERATION[0]


def register_backend(info: BackendInfo) -> Registration:
    """Record a backend (before its kernels); returns the handle that undoes all it registers."""
    return active().add_backend(info)


def register_kernel(impl: Impl, backend: str) -> None:
    """Register one implementation class for its interface, as part of ``backend``."""
    active().registration(backend).kernel(impl)


def register_arch_detector(device_type: str, detector: ArchDetector, backend: str) -> None:
    """``backend`` tells the core how to name the arch of its devices (``sm_90``, ``ascend310p``)."""
    active().registration(backend).arch_detector(device_type, detector)


def unregister_backend(name: str) -> None:
    """Remove a backend and everything it registered (nothing when it is not registered)."""
    registry = active()
    with registry.lock:
        found = registry._registrations.get(name)
    if found is not None:
        found.undo()


def implementations(interface: Impl) -> list[Impl]:
    """Registered implementations of ``interface``, sorted by name."""
    return active().implementations(interface)


def backend_of(impl: Impl) -> str:
    """The backend that registered ``impl`` in the active registry."""
    return active().backend_of(impl)


def backends() -> dict[str, BackendInfo]:
    return active().backends()


def failures() -> list[LoadFailure]:
    return active().failures()


def record_failure(failure: LoadFailure) -> None:
    active().record_failure(failure)


def resolve_preferred(impl: Impl) -> list[Impl]:
    return active().resolve_preferred(impl)


def check_consistency(backend: str | None = None) -> list[str]:
    return active().check_consistency(backend)


def device_arch(device: Any) -> str:
    return active().device_arch(device)
