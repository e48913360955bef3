"""Finding and loading plugins: our own loop over entry points, one isolated plugin at a time.

We do not use ``PluginManager.load_setuptools_entrypoints``: it stops at the first plugin
that fails. Here each plugin is imported, registered with pluggy, asked to declare what it
provides, and applied as one unit inside its own ``try``; a plugin that fails anywhere is
rolled back whole, recorded (name, distribution and version, reason), warned about once,
and the others load as if it were not installed. Plugins are visited sorted by name, and
nothing selection reads depends on that order anyway.

Environment (read at each load, so tests can set them):

``TILEOPS_PLUGINS=a,b``
    load only these plugins (entry-point or distribution names); others are "disabled".
``TILEOPS_DISABLE_PLUGINS=a,b``
    never load these (wins over ``TILEOPS_PLUGINS``).
``TILEOPS_DISABLE_PLUGIN_AUTOLOAD=1``
    first use does not load entry points (tests register fakes instead); an explicit
    :func:`load_plugins` still does.

Loading is idempotent and thread-safe (one re-entrant lock; a second thread waits for the
first load to finish). A plugin's own imports may trigger :func:`ensure_plugins_loaded`
again on the loading thread (an op module whose class definitions read the manifest); that
call returns at once instead of recursing.
"""

from __future__ import annotations

import importlib
import os
import threading
import traceback
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pluggy

from .._version import CORE_MAJOR, __version__
from ..errors import PluginError
from ..kernels import registry
from ..spec.manifest import ManifestSource, load_manifest
from .hookspecs import ENTRY_POINT_GROUP, HOOK_NAME, PROJECT_NAME, TileOpsHookSpec
from .registrar import Contribution, Registrar, is_op_class
from .store import STORE, PluginRecord

__all__ = [
    "ENV_ONLY", "ENV_DISABLE", "ENV_NO_AUTOLOAD", "load_plugins", "ensure_plugins_loaded", "register_plugin",
    "unregister_plugin", "plugin_records", "reset_plugins", "snapshot", "restore", "PluginsSnapshot",
]

ENV_ONLY = "TILEOPS_PLUGINS"
ENV_DISABLE = "TILEOPS_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "TILEOPS_DISABLE_PLUGIN_AUTOLOAD"

#: Frames in these places are ours (or pluggy's, or the import machinery's), never the plugin's line.
_NOT_PLUGIN_CODE = (str(Path(__file__).resolve().parents[1]), str(Path(pluggy.__file__).resolve().parent), "<frozen ")


class _Manager(pluggy.PluginManager):
    """pluggy's manager, also accepting an unmarked function named ``tileops_register``."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name == HOOK_NAME and callable(getattr(plugin, name, None)):
            return {}  # pluggy fills in the defaults
        return opts


def _new_manager() -> _Manager:
    pm = _Manager(PROJECT_NAME)
    pm.add_hookspecs(TileOpsHookSpec)
    return pm


@dataclass(frozen=True)
class _Candidate:
    """A plugin about to be loaded: its name, provenance and how to obtain the plugin object."""

    name: str
    distribution: str | None
    version: str | None
    origin: str
    load: Callable[[], Any]


class _Status:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.loaded = False
        self.loading_thread: int | None = None
        self.pm = _new_manager()
        self.objects: dict[str, Any] = {}
        self.warned: set[str] = set()


_status = _Status()


# -- environment --------------------------------------------------------------------------------

def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _env_names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None or not value.strip():
        return None
    return {_norm(n) for n in value.split(",") if n.strip()}


def _excluded(candidate: _Candidate) -> str | None:
    """Why the environment keeps ``candidate`` from loading (None: it may load)."""
    names = {_norm(candidate.name)} | ({_norm(candidate.distribution)} if candidate.distribution else set())
    deny = _env_names(ENV_DISABLE)
    if deny and names & deny:
        return f"disabled by {ENV_DISABLE}"
    allow = _env_names(ENV_ONLY)
    if allow is not None and not names & allow:
        return f"not listed in {ENV_ONLY}"
    return None


def _autoload_disabled() -> bool:
    return os.environ.get(ENV_NO_AUTOLOAD, "").strip().lower() not in ("", "0", "false", "no")


# -- one plugin -----------------------------------------------------------------------------------

def _why(exc: BaseException) -> str:
    """The exception and the plugin-side line that raised it, if any (the core's own checks need none)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_NOT_PLUGIN_CODE)]
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    text = str(exc) if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
    return text + where


def _fail(candidate: _Candidate, stage: str, exc: BaseException) -> PluginRecord:
    reason = f"{stage}: {_why(exc)}"
    record = PluginRecord(candidate.name, candidate.distribution, candidate.version, candidate.origin, "failed",
                          reason)
    STORE.set_record(record)
    failure = registry.LoadFailure(candidate.name, candidate.distribution, candidate.version, reason)
    STORE.add_failure(failure)
    if str(failure) not in _status.warned:
        _status.warned.add(str(failure))
        warnings.warn(f"TileOPs {failure}. It was rolled back; other backends are unaffected "
                      "(`tileops backends` lists load failures).", RuntimeWarning, stacklevel=4)
    return record


def _load_candidate(candidate: _Candidate) -> PluginRecord:
    """Import, register, ask and apply one plugin; any failure rolls it back whole."""
    previous = STORE.record(candidate.name)
    if previous is not None and previous.status == "loaded":
        # Recorded under its own key, so the loaded plugin's record stays as it is.
        shadowed = _Candidate(f"{candidate.name} ({candidate.origin})", candidate.distribution, candidate.version,
                              candidate.origin, candidate.load)
        return _fail(shadowed, "not loaded", PluginError(
            f"a plugin named {candidate.name!r} is already loaded (from {previous.origin}"
            f"{', ' + previous.distribution if previous.distribution else ''})"))
    excluded = _excluded(candidate)
    if excluded:
        record = PluginRecord(candidate.name, candidate.distribution, candidate.version, candidate.origin, "disabled",
                              excluded)
        STORE.set_record(record)
        return record
    try:
        plugin = candidate.load()
    except (Exception, SystemExit) as exc:
        return _fail(candidate, "import failed", exc)
    pm = _status.pm
    try:
        pm.register(plugin, name=candidate.name)
    except (Exception, SystemExit) as exc:
        return _fail(candidate, "not a valid plugin", exc)
    try:
        pm.check_pending()
        if not any(impl.plugin is plugin for impl in pm.hook.tileops_register.get_hookimpls()):
            raise PluginError(f"{candidate.origin} defines no {HOOK_NAME}(registrar) hook")
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(candidate, "not a valid plugin", exc)
    registrar = Registrar(candidate.name)
    try:
        others = [p for p in pm.get_plugins() if p is not plugin]
        pm.subset_hook_caller(HOOK_NAME, remove_plugins=others)(registrar=registrar)
        contribution = registrar.contribution()
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(candidate, f"{HOOK_NAME} raised", exc)
    try:
        ops = _apply(candidate, contribution)
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(candidate, f"backend {contribution.backend.name!r} rolled back", exc)
    _status.objects[candidate.name] = plugin
    backend = contribution.backend
    record = PluginRecord(candidate.name, candidate.distribution, backend.version or candidate.version,
                          candidate.origin, "loaded", "", backend.name, backend.core_major, contribution.manifest_dirs,
                          tuple(ops), contribution.hardware_profiles)
    STORE.set_record(record)
    return record


def _apply(candidate: _Candidate, contribution: Contribution) -> list[str]:
    """Register everything ``contribution`` declares, in an order that keeps roll-back exact."""
    backend = contribution.backend
    if backend.core_major != CORE_MAJOR:
        who = candidate.distribution or f"the {backend.name} backend"
        raise PluginError(f"backend {backend.name!r} was built for tileops core major {backend.core_major}, but the "
                          f"installed core is tileops {__version__} (major {CORE_MAJOR}); install a release of {who} "
                          f"built for core {CORE_MAJOR}.x, or a tileops {backend.core_major}.x core")
    info = registry.BackendInfo(backend.name, candidate.distribution, backend.version or candidate.version,
                                backend.device_types, backend.description, detect=backend.detect)
    registry.register_backend(info)  # a duplicate backend name raises here, before anything needs undoing
    try:
        for impl in contribution.kernels:
            registry.register_kernel(impl, backend.name)
        _check_new_ops(backend.name, contribution.manifest_dirs)
        STORE.add_manifest_dirs(backend.name, contribution.manifest_dirs)  # live before op modules import
        ops = _import_ops(backend.name, contribution)
        info.ops.extend(ops)
        STORE.add_profiles(backend.name, contribution.hardware_profiles)
        problems = registry.check_consistency(backend.name)
        if problems:
            raise PluginError("contradictory declarations: " + "; ".join(problems))
        STORE.add_detectors(backend.name, contribution.arch_detectors)
    except BaseException:
        registry.unregister_backend(backend.name)
        STORE.remove_backend(backend.name)
        raise
    return ops


def _check_new_ops(backend: str, dirs: tuple[Path, ...]) -> None:
    """A plugin ships new ops only: none of its specs may redefine an op already known."""
    if not dirs:
        return
    own = load_manifest(sources=[ManifestSource(STORE.source_label(backend, d), d) for d in dirs])
    current = load_manifest()
    clashes = sorted(set(own) & set(current))
    if clashes:
        listed = "; ".join(f"{n} at {own[n].file}:{own[n].line} is already defined at {current[n].file}:"
                           f"{current[n].line}" for n in clashes)
        raise PluginError(f"its manifest redefines existing ops ({listed}); a plugin adds kernels to existing ops "
                          "and ships only new ops of its own")


def _import_ops(backend: str, contribution: Contribution) -> list[str]:
    """Import op modules (after the manifest dirs are live) and check each class has its own spec."""
    if not contribution.ops:
        return []
    classes: list[type] = []
    for item in contribution.ops:
        if isinstance(item, str):
            module = importlib.import_module(item)
            found = [v for v in vars(module).values() if is_op_class(v)
                     and v.__module__ == module.__name__ and not v.__dict__.get("abstract", False)]
            if not found:
                raise PluginError(f"op module {item} defines no Op subclass")
            classes.extend(sorted(found, key=lambda c: c.__name__))
        else:
            classes.append(item)
    current = load_manifest()
    labels = tuple(STORE.source_label(backend, d) + "/" for d in contribution.manifest_dirs)
    names = []
    for cls in classes:
        spec = current.get(cls.__name__)
        where = f"{cls.__module__}.{cls.__qualname__}"
        if spec is None:
            own = [str(p) for p in current.problems if (p.location.file or "").startswith(labels)]
            if own:  # the directory was passed, but a file in it could not be read: that is the cause
                raise PluginError(f"op class {where} has no manifest entry named {cls.__name__}, because this "
                                  f"plugin's manifest could not be read: {'; '.join(own)}")
            raise PluginError(f"op class {where} has no manifest entry named {cls.__name__}; ship its spec in a "
                              "directory passed to registrar.manifest_dir()")
        if not spec.file.startswith(labels):
            raise PluginError(f"op class {where}: {cls.__name__} is defined by {spec.file}, not by this plugin's "
                              "manifest; a plugin contributes kernels to existing ops, not op classes")
        names.append(cls.__name__)
    return names


# -- the public loop ------------------------------------------------------------------------------

def _entry_point_candidates() -> list[_Candidate]:
    seen: set[tuple[str, str, str | None]] = set()
    out: list[_Candidate] = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else None
        key = (ep.name, ep.value, dist_name)
        if key in seen:  # the same distribution seen twice on sys.path
            continue
        seen.add(key)
        out.append(_Candidate(ep.name, dist_name, dist.version if dist is not None else None,
                              f"entry point {ep.name} = {ep.value}", ep.load))
    # The project's own backends first, then the rest by name: in a conflict (a backend name
    # taken twice, a second general kernel) the one applied later is rolled back, so a
    # newcomer can never displace a core backend whatever its name sorts like.
    return sorted(out, key=lambda c: (not _is_own(c), c.name, c.distribution or ""))


#: The distributions of the project's own backends (their plugins load before any other).
OWN_DISTRIBUTIONS = frozenset({"tileops-cpu-ref", "tileops-cuda", "tileops-ascend"})


def _is_own(candidate: _Candidate) -> bool:
    return candidate.distribution is not None and _norm(candidate.distribution) in OWN_DISTRIBUTIONS


def _already_loaded(candidate: _Candidate) -> bool:
    """Loaded by an earlier, interrupted round of :func:`load_plugins` (then it is not met again)."""
    record = STORE.record(candidate.name)
    return record is not None and record.status == "loaded" and record.origin == candidate.origin


def _forget_unapplied() -> None:
    """After an interrupted load: drop pluggy registrations of plugins that were never applied, so
    that the next round can register them again."""
    pm = _status.pm
    for plugin in list(pm.get_plugins()):
        name = pm.get_name(plugin)
        if name not in _status.objects:
            pm.unregister(plugin)


def load_plugins() -> list[PluginRecord]:
    """Load every installed plugin once (later calls return the records); thread-safe."""
    with _status.lock:
        if _status.loaded or _status.loading_thread == threading.get_ident():
            return STORE.records()
        _status.loading_thread = threading.get_ident()
        try:
            for candidate in _entry_point_candidates():
                if not _already_loaded(candidate):
                    _load_candidate(candidate)
            _status.loaded = True  # only a round that finished: an interrupted one is retried on next use
        except BaseException:
            _forget_unapplied()
            raise
        finally:
            _status.loading_thread = None
    return STORE.records()


def ensure_plugins_loaded() -> None:
    """Load plugins on first use (a selection, the CLI); a no-op once loaded or while loading.

    Does nothing when ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD`` is set.
    """
    if _status.loaded or _status.loading_thread == threading.get_ident():
        return
    if _autoload_disabled():
        return
    load_plugins()


def register_plugin(plugin: Any, name: str | None = None, *, distribution: str | None = None,
                    version: str | None = None) -> PluginRecord:
    """Load a plugin object in-process (tests, notebooks), isolated exactly like an entry point.

    The allow/deny environment variables apply to it too. A failure is recorded and warned
    about, never raised; the returned record says what happened.
    """
    label = str(name or getattr(plugin, "__name__", type(plugin).__name__))
    with _status.lock:
        return _load_candidate(_Candidate(label, distribution, version, f"registered in-process ({label})",
                                          lambda: plugin))


def unregister_plugin(name: str) -> None:
    """Remove a loaded plugin and everything it registered."""
    with _status.lock:
        record = STORE.record(name)
        if record is None or record.status != "loaded":
            raise PluginError(f"no loaded plugin named {name!r}")
        if record.backend:
            registry.unregister_backend(record.backend)
            STORE.remove_backend(record.backend)
        plugin = _status.objects.pop(name, None)
        if plugin is not None and _status.pm.is_registered(plugin):
            _status.pm.unregister(plugin)
        STORE.with_status(name, status="disabled", reason="unregistered in-process")


def plugin_records() -> list[PluginRecord]:
    """Every plugin met so far (loaded, failed or disabled), sorted by name."""
    return STORE.records()


@dataclass(frozen=True)
class PluginsSnapshot:
    """The whole plugin and kernel-registry state, for tests to restore."""

    registry: Any
    store: Any
    loaded: bool
    objects: dict[str, Any]


def snapshot() -> PluginsSnapshot:
    """Capture the plugin state and the kernel registry (restore with :func:`restore`)."""
    with _status.lock:
        return PluginsSnapshot(registry.snapshot(), STORE.snapshot(), _status.loaded, dict(_status.objects))


def restore(snap: PluginsSnapshot) -> None:
    """Put back what :func:`snapshot` captured (kernels, backends, failures, plugin contributions)."""
    with _status.lock:
        registry.restore(snap.registry)
        STORE.restore(snap.store)
        _status.loaded = snap.loaded
        _status.objects = dict(snap.objects)
        _status.pm = _new_manager()
        for name, plugin in sorted(snap.objects.items()):
            _status.pm.register(plugin, name=name)


def reset_plugins() -> None:
    """Forget every plugin: their backends, kernels, contributions and recorded failures.

    The next :func:`ensure_plugins_loaded` loads entry points again (warnings too).
    """
    with _status.lock:
        for backend in STORE.loaded_backends():
            registry.unregister_backend(backend)
            STORE.remove_backend(backend)
        ours = STORE.clear()
        snap = registry.snapshot()
        snap.failures = [f for f in snap.failures if f not in ours]
        registry.restore(snap)
        _status.loaded = False
        _status.objects = {}
        _status.pm = _new_manager()
        _status.warned.clear()
