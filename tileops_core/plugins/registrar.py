"""What a plugin declares: the typed :class:`Registrar` its hook receives, and the frozen result.

The registrar only *collects*. Every method checks its arguments at once (so an error
points at the plugin's own line), but nothing reaches the kernel registry, the manifest or
the device detectors until the hook has returned and the loader applies the whole
:class:`Contribution`; a hook that raises half-way therefore leaves no trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from ..errors import PluginError
from ..kernels.interface import KernelInterface
from ..kernels.records import ArchDetector, Detector

__all__ = ["BackendDecl", "Contribution", "Registrar", "Detector", "ArchDetector"]


def _is_name(text: object) -> bool:
    return isinstance(text, str) and bool(text) and all(c.isalnum() or c in "_-." for c in text)


@dataclass(frozen=True)
class BackendDecl:
    """A backend's description of itself."""

    name: str
    device_types: tuple[str, ...]
    core_major: int
    version: str | None
    description: str
    detect: Detector | None


@dataclass(frozen=True)
class Contribution:
    """Everything one plugin declared, applied (or rolled back) as one unit."""

    backend: BackendDecl
    kernels: tuple[type[KernelInterface], ...]
    arch_detectors: tuple[tuple[str, ArchDetector], ...]
    manifest_dirs: tuple[Path, ...]
    ops: tuple[str | type, ...]
    hardware_profiles: tuple[Path, ...]


class Registrar:
    """The object ``tileops_register(registrar)`` receives; one per plugin.

    Typical use in a backend's hook::

        @hookimpl
        def tileops_register(registrar):
            registrar.backend("mybackend", device_types=("cuda",), core_major=0, detect=_detect)
            registrar.arch_detector("cuda", _cuda_arch)
            registrar.kernels(*MY_KERNELS)
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self._backend: BackendDecl | None = None
        self._kernels: list[type[KernelInterface]] = []
        self._detectors: list[tuple[str, ArchDetector]] = []
        self._manifest_dirs: list[Path] = []
        self._ops: list[str | type] = []
        self._profiles: list[Path] = []

    def _fail(self, message: str) -> PluginError:
        return PluginError(f"plugin {self.plugin}: {message}")

    def backend(self, name: str, *, device_types: Iterable[str], core_major: int, version: str | None = None,
                description: str = "", detect: Detector | None = None) -> None:
        """Describe the backend this plugin provides (exactly once per plugin).

        ``device_types``: the torch device types its kernels target (``"cpu"``, ``"cuda"``,
        ``"npu"``). ``core_major``: the major version of ``tileops`` the backend was built
        for; another major is refused at load. ``version``: defaults to the version of the
        distribution that declared the entry point. ``detect``: lists the devices the
        backend can see (``tileops backends`` shows them); it must not compile anything.
        """
        if self._backend is not None:
            raise self._fail(f"registrar.backend() was called twice ({self._backend.name!r}, then {name!r}); "
                             "a plugin provides one backend")
        if not _is_name(name):
            raise self._fail(f"backend name {name!r} must be a non-empty word (letters, digits, '_', '-', '.')")
        types = tuple(device_types) if not isinstance(device_types, str) else (device_types,)
        if not types or not all(_is_name(t) or t == "*" for t in types):
            raise self._fail(f"backend {name!r}: device_types must list device types such as ('cuda',), "
                             f"got {device_types!r}")
        if not isinstance(core_major, int) or isinstance(core_major, bool) or core_major < 0:
            raise self._fail(f"backend {name!r}: core_major must be the tileops major version it was built for "
                             f"(an int), got {core_major!r}")
        if detect is not None and not callable(detect):
            raise self._fail(f"backend {name!r}: detect must be callable, got {detect!r}")
        self._backend = BackendDecl(name, types, core_major, version, description, detect)

    def kernels(self, *impls: type[KernelInterface]) -> None:
        """Contribute kernel implementation classes (subclasses of a kernel interface)."""
        for impl in impls:
            if not (isinstance(impl, type) and issubclass(impl, KernelInterface)) or impl is KernelInterface \
                    or impl.is_interface():
                raise self._fail(f"registrar.kernels() takes kernel implementation classes (subclasses of a "
                                 f"kernel interface), got {impl!r}")
            if impl in self._kernels:
                raise self._fail(f"{impl.qualname()} is passed to registrar.kernels() twice")
            self._kernels.append(impl)

    def arch_detector(self, device_type: str, detector: ArchDetector) -> None:
        """Tell the core how to name the arch of a ``device_type`` device (``"sm_90"``)."""
        if not _is_name(device_type) or not callable(detector):
            raise self._fail(f"registrar.arch_detector(device_type, detector) takes a device type and a callable, "
                             f"got {device_type!r}, {detector!r}")
        if device_type == "cpu":
            raise self._fail("registrar.arch_detector('cpu', ...): the core names the arch of a cpu device itself "
                             "('cpu') and would never ask this detector; detect accelerator device types only")
        self._detectors.append((device_type, detector))

    def manifest_dir(self, directory: str | Path | ModuleType) -> None:
        """Contribute a directory of YAML specs (new ops; a package module means its folder)."""
        if isinstance(directory, ModuleType):
            files = getattr(directory, "__file__", None)
            if files is None:
                raise self._fail(f"module {directory.__name__} has no folder to read specs from")
            path = Path(files).parent
        else:
            path = Path(directory)
        if not path.is_dir():
            raise self._fail(f"manifest directory {path} does not exist")
        self._manifest_dirs.append(path.resolve())

    def ops(self, *items: str | type) -> None:
        """Contribute op classes: module names (imported after the manifest dirs are live) or classes.

        Prefer module names: the module's ``Op`` subclasses then bind to their specs at class
        definition, because this plugin's manifest directories are already visible.
        """
        for item in items:
            if isinstance(item, str):
                if not all(part.isidentifier() for part in item.split(".")):
                    raise self._fail(f"registrar.ops(): {item!r} is not a module name")
            elif not is_op_class(item):
                raise self._fail(f"registrar.ops() takes module names or Op subclasses, got {item!r}")
            self._ops.append(item)

    def hardware_profile(self, path: str | Path) -> None:
        """Contribute a hardware profile (a YAML file of peak rates, read by the roofline/bench)."""
        p = Path(path)
        if p.suffix not in (".yaml", ".yml") or not p.is_file():
            raise self._fail(f"hardware profile {p} must be an existing .yaml file")
        self._profiles.append(p.resolve())

    def contribution(self) -> Contribution:
        """The frozen declaration, after the hook returned."""
        if self._backend is None:
            raise self._fail("tileops_register() did not call registrar.backend(...); every plugin describes its "
                             "backend (name, device_types, core_major)")
        return Contribution(self._backend, tuple(self._kernels), tuple(self._detectors),
                            tuple(self._manifest_dirs), tuple(self._ops), tuple(self._profiles))


def is_op_class(item: Any) -> bool:
    """An ``Op`` subclass, recognised by the marker the base class carries (the plugin layer sits
    below the op layer and does not import it)."""
    return isinstance(item, type) and getattr(item, "__tileops_op__", False) and "__tileops_op__" not in vars(item)
