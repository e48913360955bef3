"""What the registry records: backends, plugins met, load failures, contributed profiles.

Plain data, so that ``tileops backends``, selection errors and the plugin loader all read
the same records; the :class:`~.registry.Registry` holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .interface import KernelInterface

__all__ = ["ArchDetector", "BackendInfo", "Detector", "LoadFailure", "PluginRecord", "ProfileSource"]

#: ``detect()`` lists the devices a backend sees: ``[{"device": "cuda:0", "arch": "sm_90", "name": ...}]``.
Detector = Callable[[], list[dict[str, Any]]]
#: ``detector(torch.device) -> arch string`` (``"sm_90"``, ``"ascend310p"``).
ArchDetector = Callable[[Any], str]


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
    detect: Detector | None = None


@dataclass(frozen=True)
class LoadFailure:
    """A plugin (or a kernel's build, or an arch detector) that failed, with the reason."""

    name: str
    distribution: str | None
    version: str | None
    reason: str

    def __str__(self) -> str:
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"plugin {self.name}{dist} failed: {self.reason}"


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
