"""What loaded plugins contributed beyond kernels: manifest dirs, profiles, arch detectors, records.

Kernels and backends live in :mod:`tileops_core.kernels.registry`; this module keeps the
rest, per backend, so that rolling a plugin back removes exactly what it added. It is the
manifest's source provider (plugin spec directories become visible to ``load_manifest``
the moment a plugin's manifest dirs are applied, before its op modules are imported) and
the arch detector the registry calls for each device type.

Several backends may name the arch of one device type (two CUDA backends). They are asked
in backend-name order and the first answer other than ``"unknown"`` wins, so install order
never changes the arch a device is given.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..kernels import registry
from ..spec import manifest
from ..spec.manifest import ManifestSource
from .registrar import ArchDetector

__all__ = ["PluginRecord", "ProfileSource", "PluginStore", "STORE"]


@dataclass(frozen=True)
class PluginRecord:
    """One plugin the loader met: where it came from and what became of it.

    ``status`` is ``"loaded"``, ``"failed"`` (``reason`` says why; nothing of it stays
    registered) or ``"disabled"`` (an environment variable excluded it).
    """

    name: str
    distribution: str | None
    version: str | None
    origin: str
    status: str
    reason: str = ""
    backend: str | None = None
    core_major: int | None = None
    manifest_dirs: tuple[Path, ...] = ()
    ops: tuple[str, ...] = ()
    hardware_profiles: tuple[Path, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (``tileops backends --format json``)."""
        return {"name": self.name, "distribution": self.distribution, "version": self.version, "origin": self.origin,
                "status": self.status, "reason": self.reason, "backend": self.backend, "core_major": self.core_major,
                "manifest_dirs": [str(p) for p in self.manifest_dirs], "ops": list(self.ops),
                "hardware_profiles": [str(p) for p in self.hardware_profiles]}


@dataclass(frozen=True)
class ProfileSource:
    """A hardware profile file and the backend that shipped it."""

    backend: str
    path: Path


@dataclass
class _State:
    records: dict[str, PluginRecord] = field(default_factory=dict)
    sources: dict[str, list[ManifestSource]] = field(default_factory=dict)
    profiles: dict[str, list[Path]] = field(default_factory=dict)
    detectors: dict[str, dict[str, ArchDetector]] = field(default_factory=dict)  # device type -> backend -> fn
    failures: list[registry.LoadFailure] = field(default_factory=list)

    def copy(self) -> "_State":
        return _State(dict(self.records), {k: list(v) for k, v in self.sources.items()},
                      {k: list(v) for k, v in self.profiles.items()},
                      {k: dict(v) for k, v in self.detectors.items()}, list(self.failures))


class PluginStore:
    """The plugin side of the global state, behind one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = _State()

    # -- records --------------------------------------------------------------------------

    def set_record(self, record: PluginRecord) -> None:
        with self._lock:
            self._state.records[record.name] = record

    def record(self, name: str) -> PluginRecord | None:
        with self._lock:
            return self._state.records.get(name)

    def records(self) -> list[PluginRecord]:
        """Every plugin met, sorted by name."""
        with self._lock:
            return [self._state.records[k] for k in sorted(self._state.records)]

    def add_failure(self, failure: registry.LoadFailure) -> None:
        """Record a failure in the registry (selection errors list it) and remember it was ours."""
        with self._lock:
            self._state.failures.append(failure)
        registry.record_failure(failure)

    # -- contributions ----------------------------------------------------------------------

    @staticmethod
    def source_label(backend: str, directory: Path) -> str:
        """How a plugin's spec files are shown in messages: ``example:manifest/x.yaml``."""
        return f"{backend}:{directory.name}"

    def add_manifest_dirs(self, backend: str, dirs: tuple[Path, ...]) -> None:
        with self._lock:
            self._state.sources[backend] = [ManifestSource(self.source_label(backend, d), d) for d in dirs]

    def add_profiles(self, backend: str, paths: tuple[Path, ...]) -> None:
        with self._lock:
            self._state.profiles[backend] = list(paths)

    def add_detectors(self, backend: str, detectors: tuple[tuple[str, ArchDetector], ...]) -> None:
        with self._lock:
            for device_type, fn in detectors:
                self._state.detectors.setdefault(device_type, {})[backend] = fn
        for device_type in sorted({d for d, _ in detectors}):
            self._install_detector(device_type)

    def remove_backend(self, backend: str) -> None:
        """Forget every contribution of ``backend`` (its kernels are removed by the registry)."""
        with self._lock:
            self._state.sources.pop(backend, None)
            self._state.profiles.pop(backend, None)
            touched = [d for d, by in self._state.detectors.items() if by.pop(backend, None) is not None]
        for device_type in touched:
            self._install_detector(device_type)  # re-installing also forgets cached archs

    def _install_detector(self, device_type: str) -> None:
        registry.register_arch_detector(device_type, lambda device: self.detect_arch(device_type, device))

    def detect_arch(self, device_type: str, device: Any) -> str:
        """The arch of ``device``: the first backend (by name) that knows it; ``"unknown"`` otherwise."""
        with self._lock:
            detectors = sorted(self._state.detectors.get(device_type, {}).items())
        first_error: Exception | None = None
        for _, fn in detectors:
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

    def manifest_sources(self) -> list[ManifestSource]:
        """Plugin spec directories, by backend name (the manifest's source provider)."""
        with self._lock:
            return [s for name in sorted(self._state.sources) for s in self._state.sources[name]]

    def hardware_profiles(self) -> list[ProfileSource]:
        """Hardware profiles contributed by loaded plugins, by backend name."""
        with self._lock:
            return [ProfileSource(name, p) for name in sorted(self._state.profiles)
                    for p in self._state.profiles[name]]

    # -- test seams -------------------------------------------------------------------------

    def snapshot(self) -> _State:
        with self._lock:
            return self._state.copy()

    def restore(self, state: _State) -> None:
        with self._lock:
            self._state = state.copy()
        manifest.clear_cache()

    def clear(self) -> list[registry.LoadFailure]:
        """Forget everything; returns the failures this store had recorded in the registry."""
        with self._lock:
            failures = self._state.failures
            self._state = _State()
        manifest.clear_cache()
        return failures

    def loaded_backends(self) -> list[str]:
        with self._lock:
            return sorted(r.backend for r in self._state.records.values() if r.status == "loaded" and r.backend)

    def with_status(self, name: str, **changes: Any) -> PluginRecord:
        """Replace fields of a stored record."""
        with self._lock:
            record = replace(self._state.records[name], **changes)
            self._state.records[name] = record
            return record


#: The process-wide store.
STORE = PluginStore()
manifest.set_source_provider(STORE.manifest_sources)
