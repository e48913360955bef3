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

Plugins are loaded into the active :class:`~tileops_core.kernels.registry.Registry`, and
everything a plugin contributes is registered through the :class:`Registration` handle of its
backend: a failure undoes that handle, and so does :func:`unregister_plugin`. Loading is
idempotent and thread-safe (under the registry's one lock; a second thread waits for the
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
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pluggy

from .._version import CORE_MAJOR, __version__
from ..errors import PluginError
from ..kernels.records import BackendInfo, LoadFailure, PluginRecord
from ..kernels.registry import PluginState, Registration, Registry, active, source_label
from ..spec import manifest
from ..spec.manifest import ManifestSource, load_manifest
from .hookspecs import ENTRY_POINT_GROUP, HOOK_NAME, PROJECT_NAME, TileOpsHookSpec
from .registrar import Contribution, Registrar, is_op_class

__all__ = [
    "ENV_ONLY", "ENV_DISABLE", "ENV_NO_AUTOLOAD", "load_plugins", "ensure_plugins_loaded", "loaded_registry",
    "register_plugin", "unregister_plugin", "plugin_records", "reset_plugins",
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


def _manager(state: PluginState) -> _Manager:
    """The pluggy manager of a registry's plugins (made with its first plugin)."""
    if state.manager is None:
        state.manager = _new_manager()
    manager: _Manager = state.manager
    return manager


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


def _fail(registry: Registry, candidate: _Candidate, stage: str, exc: BaseException) -> PluginRecord:
    reason = f"{stage}: {_why(exc)}"
    record = PluginRecord(candidate.name, candidate.distribution, candidate.version, candidate.origin, "failed",
                          reason)
    state = registry.plugins
    state.records[record.name] = record
    failure = LoadFailure(candidate.name, candidate.distribution, candidate.version, reason)
    state.failures.append(failure)
    registry.record_failure(failure)  # selection errors list it
    if str(failure) not in state.warned:
        state.warned.add(str(failure))
        warnings.warn(f"TileOPs {failure}. It was rolled back; other backends are unaffected "
                      "(`tileops backends` lists load failures).", RuntimeWarning, stacklevel=4)
    return record


def _notice(state: PluginState, text: str) -> None:
    """Record (and warn once about) something loading found wrong that rolls nothing back."""
    if text not in state.notices:
        state.notices.append(text)
        warnings.warn(f"TileOPs: {text}. `tileops backends` lists it.", RuntimeWarning, stacklevel=5)


def _check_loaded(registry: Registry, backend: str, dirs: tuple[Path, ...]) -> None:
    """What a loaded plugin declares that cannot work, though nothing had to be rolled back:
    a spec of its own that does not load (only ``tileops validate`` would have said so), a kernel of
    an op no manifest defines, a
    specialised kernel overlapping another backend's with no ``preferred_over`` between them, and
    a ``preferred_over`` naming no registered kernel (a typo, or a backend that is not installed)."""
    labels = tuple(source_label(backend, d) + "/" for d in dirs)
    if labels:
        for problem in load_manifest().problems:
            if (problem.location.file or "").startswith(labels):
                _notice(registry.plugins, f"backend {backend!r} ships a spec that does not load: {problem}")
    for overlap in registry.unresolved_overlaps(backend):
        _notice(registry.plugins, overlap)
    known = load_manifest()
    for name in registry.backends()[backend].ops:  # loads, yet cannot make an op (found in review)
        spec = known.get(name)
        if spec is not None and not spec.usable:
            problems = "; ".join(str(p) for p in spec.problems)
            _notice(registry.plugins, f"backend {backend!r} ships op {name}, whose spec cannot be used: {problems}")
    for impl in registry.backends()[backend].kernels:  # (found in review: such a kernel was silently inert)
        if impl.interface().op not in known:
            _notice(registry.plugins, f"{impl.qualname()} [{backend}] serves op {impl.interface().op!r}, which no "
                    "manifest defines, so no call can select it (a typo in its interface's op, or a spec the plugin "
                    "does not ship)")
    for impl in registry.backends()[backend].kernels:
        found = registry.resolve_preferred(impl)
        for named in impl.preferred_over:
            text = named if isinstance(named, str) else getattr(named, "qualname", lambda: repr(named))()
            if not any(f is named or f.qualname() == text for f in found):
                _notice(registry.plugins, f"{impl.qualname()} [{backend}] is preferred_over {text}, which is no "
                        f"registered kernel of {impl.interface().qualname()} (a typo, or its backend is not "
                        "installed)")


def _check_allow_list(state: PluginState, candidates: list[_Candidate]) -> None:
    """An allow-list entry that matches no installed plugin is a typo the user must hear about."""
    allow = _env_names(ENV_ONLY)
    if allow is None:
        return
    known = {_norm(c.name) for c in candidates} | {_norm(c.distribution) for c in candidates if c.distribution}
    unknown = sorted(allow - known)
    if unknown:
        installed = ", ".join(sorted({c.name for c in candidates})) or "none"
        _notice(state, f"{ENV_ONLY} names {', '.join(repr(n) for n in unknown)}, which no installed plugin is "
                f"(installed plugins: {installed})")


def _load_candidate(registry: Registry, candidate: _Candidate) -> PluginRecord:
    """Import, register, ask and apply one plugin; any failure rolls it back whole.

    Called under the registry's lock."""
    state = registry.plugins
    previous = state.records.get(candidate.name)
    if previous is not None and previous.status == "loaded":
        # Recorded under its own key, so the loaded plugin's record stays as it is.
        shadowed = _Candidate(f"{candidate.name} ({candidate.origin})", candidate.distribution, candidate.version,
                              candidate.origin, candidate.load)
        return _fail(registry, shadowed, "not loaded", PluginError(
            f"a plugin named {candidate.name!r} is already loaded (from {previous.origin}"
            f"{', ' + previous.distribution if previous.distribution else ''})"))
    excluded = _excluded(candidate)
    if excluded:
        record = PluginRecord(candidate.name, candidate.distribution, candidate.version, candidate.origin, "disabled",
                              excluded)
        state.records[record.name] = record
        return record
    try:
        plugin = candidate.load()
    except (Exception, SystemExit) as exc:
        return _fail(registry, candidate, "import failed", exc)
    pm = _manager(state)
    try:
        pm.register(plugin, name=candidate.name)
    except (Exception, SystemExit) as exc:
        return _fail(registry, candidate, "not a valid plugin", exc)
    try:
        pm.check_pending()
        if not any(impl.plugin is plugin for impl in pm.hook.tileops_register.get_hookimpls()):
            raise PluginError(f"{candidate.origin} defines no {HOOK_NAME}(registrar) hook")
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(registry, candidate, "not a valid plugin", exc)
    registrar = Registrar(candidate.name)
    try:
        others = [p for p in pm.get_plugins() if p is not plugin]
        pm.subset_hook_caller(HOOK_NAME, remove_plugins=others)(registrar=registrar)
        contribution = registrar.contribution()
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(registry, candidate, f"{HOOK_NAME} raised", exc)
    try:
        handle, ops = _apply(registry, candidate, contribution)
    except (Exception, SystemExit) as exc:
        pm.unregister(plugin)
        return _fail(registry, candidate, f"backend {contribution.backend.name!r} rolled back", exc)
    state.objects[candidate.name] = plugin
    state.handles[candidate.name] = handle
    backend = contribution.backend
    _check_loaded(registry, backend.name, contribution.manifest_dirs)
    record = PluginRecord(candidate.name, candidate.distribution, backend.version or candidate.version,
                          candidate.origin, "loaded", "", backend.name, backend.core_major, contribution.manifest_dirs,
                          tuple(ops), contribution.hardware_profiles)
    state.records[record.name] = record
    return record


def _apply(registry: Registry, candidate: _Candidate, contribution: Contribution) -> tuple[Registration, list[str]]:
    """Register everything ``contribution`` declares through one handle; on any failure the handle
    is undone, which removes exactly what was registered so far."""
    backend = contribution.backend
    if backend.core_major != CORE_MAJOR:
        who = candidate.distribution or f"the {backend.name} backend"
        raise PluginError(f"backend {backend.name!r} was built for tileops core major {backend.core_major}, but the "
                          f"installed core is tileops {__version__} (major {CORE_MAJOR}); install a release of {who} "
                          f"built for core {CORE_MAJOR}.x, or a tileops {backend.core_major}.x core")
    holder = registry.backends().get(backend.name)
    if holder is not None:  # (found in review: the registry's own error named neither plugin)
        raise PluginError(f"backend {backend.name!r} is registered twice: {_holder(registry.plugins, holder)} holds "
                          f"it, and {_plugin(candidate.name, candidate.distribution, candidate.version)} declares it "
                          f"too; uninstall one, or keep one out with {ENV_DISABLE}={candidate.name}")
    info = BackendInfo(backend.name, candidate.distribution, backend.version or candidate.version,
                       backend.device_types, backend.description, detect=backend.detect)
    handle = registry.add_backend(info)  # nothing registered yet: a failure here needs no undoing
    try:
        for impl in contribution.kernels:
            handle.kernel(impl)
        _check_new_ops(backend.name, contribution.manifest_dirs)
        handle.manifest_dirs(contribution.manifest_dirs)  # live before op modules import
        ops = _import_ops(backend.name, contribution)
        info.ops.extend(ops)
        handle.profiles(contribution.hardware_profiles)
        problems = registry.check_consistency(backend.name)
        if problems:
            raise PluginError("contradictory declarations: " + "; ".join(problems))
        for device_type, detector in contribution.arch_detectors:
            handle.arch_detector(device_type, detector)
    except BaseException:
        handle.undo()
        raise
    return handle, ops


def _release(distribution: str | None, version: str | None) -> str:
    """``distribution version`` (empty when the distribution is unknown)."""
    return " ".join(part for part in (distribution, version) if part) if distribution else ""


def _plugin(name: str, distribution: str | None, version: str | None) -> str:
    """``plugin NAME (distribution version)``, as much of it as is known."""
    release = _release(distribution, version)
    return f"plugin {name} ({release})" if release else f"plugin {name}"


def _holder(state: PluginState, info: BackendInfo) -> str:
    """Who registered backend ``info``: the loaded plugin that declared it, else code in this process."""
    for record in state.records.values():
        if record.status == "loaded" and record.backend == info.name:
            return _plugin(record.name, record.distribution, record.version)
    release = _release(info.distribution, info.version)
    return f"code in this process (register_backend(){', ' + release if release else ''}; not a plugin)"


def _check_new_ops(backend: str, dirs: tuple[Path, ...]) -> None:
    """A plugin ships new ops only: none of its specs may redefine an op already known."""
    if not dirs:
        return
    own = load_manifest(sources=[ManifestSource(source_label(backend, d), d) for d in dirs])
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
    labels = tuple(source_label(backend, d) + "/" for d in contribution.manifest_dirs)
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


def _already_loaded(state: PluginState, candidate: _Candidate) -> bool:
    """Loaded by an earlier, interrupted round of :func:`load_plugins` (then it is not met again)."""
    record = state.records.get(candidate.name)
    return record is not None and record.status == "loaded" and record.origin == candidate.origin


def _forget_unapplied(state: PluginState) -> None:
    """After an interrupted load: drop pluggy registrations of plugins that were never applied, so
    that the next round can register them again."""
    pm = _manager(state)
    for plugin in list(pm.get_plugins()):
        name = pm.get_name(plugin)
        if name not in state.objects:
            pm.unregister(plugin)


def _records(state: PluginState) -> list[PluginRecord]:
    return [state.records[k] for k in sorted(state.records)]


def load_plugins() -> list[PluginRecord]:
    """Load every installed plugin into the active registry once (later calls return the records)."""
    registry = active()
    state = registry.plugins
    with registry.lock:
        if state.loaded or state.loading_thread == threading.get_ident():
            return _records(state)
        state.loading_thread = threading.get_ident()
        try:
            candidates = _entry_point_candidates()
            current = None
            for current in candidates:
                if not _already_loaded(state, current):
                    _load_candidate(registry, current)
            _check_allow_list(state, candidates)
            state.loaded = True  # only a round that finished: an interrupted one is retried on next use
            state.autoload_skipped = None
        except BaseException as exc:
            _forget_unapplied(state)
            if current is not None:  # the culprit, for `tileops backends` (the next use loads again)
                _notice(state, f"loading plugins was interrupted by {type(exc).__name__} while plugin "
                               f"{current.name} ({current.distribution or current.origin}) loaded; the next use "
                               "loads the plugins again")
            raise
        finally:
            state.loading_thread = None
        return _records(state)


def loaded_registry() -> Registry:
    """The active registry, with the installed plugins loaded into it: what planning reads.

    Planning obtains the registry (the arch of a device, the generation a plan is made
    under) only through this function, so no call spec is ever built before the plugins are
    loaded. Loads nothing when ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD`` is set, and returns at
    once on the loading thread itself (a plugin's op module being imported).
    """
    registry = active()
    state = registry.plugins
    if state.loaded or state.loading_thread == threading.get_ident():
        return registry
    if _autoload_disabled():
        state.autoload_skipped = (f"{ENV_NO_AUTOLOAD} is set, so no installed plugin was loaded on first use "
                                  "(tileops_core.plugins.load_plugins() loads them)")
    else:
        load_plugins()
    return registry


def ensure_plugins_loaded() -> None:
    """Load plugins on first use (a selection, the CLI); a no-op once loaded or while loading.

    Does nothing when ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD`` is set.
    """
    loaded_registry()


def register_plugin(plugin: Any, name: str | None = None, *, distribution: str | None = None,
                    version: str | None = None) -> PluginRecord:
    """Load a plugin object in-process (tests, notebooks), isolated exactly like an entry point.

    The allow/deny environment variables apply to it too. A failure is recorded and warned
    about, never raised; the returned record says what happened.
    """
    label = str(name or getattr(plugin, "__name__", type(plugin).__name__))
    registry = active()
    with registry.lock:
        return _load_candidate(registry, _Candidate(label, distribution, version, f"registered in-process ({label})",
                                                    lambda: plugin))


def unregister_plugin(name: str) -> None:
    """Remove a loaded plugin: its handle undoes exactly what it registered."""
    registry = active()
    state = registry.plugins
    with registry.lock:
        record = state.records.get(name)
        if record is None or record.status != "loaded":
            raise PluginError(f"no loaded plugin named {name!r}")
        state.handles.pop(name).undo()
        plugin = state.objects.pop(name, None)
        if plugin is not None and _manager(state).is_registered(plugin):
            _manager(state).unregister(plugin)
        state.records[name] = replace(record, status="disabled", reason="unregistered in-process")


def plugin_records() -> list[PluginRecord]:
    """Every plugin met so far (loaded, failed or disabled), sorted by name."""
    registry = active()
    with registry.lock:
        return _records(registry.plugins)


def reset_plugins() -> None:
    """Forget every plugin of the active registry: each handle is undone, their records and the
    failures the loader recorded are dropped (backends registered directly stay).

    The next :func:`ensure_plugins_loaded` loads entry points again (warnings too).
    """
    registry = active()
    with registry.lock:
        state = registry.plugins
        for name in sorted(state.handles):
            state.handles[name].undo()
        registry.forget_failures(state.failures)
        registry.plugins = PluginState()
    manifest.clear_cache()
