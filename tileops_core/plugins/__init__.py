"""Plugins: backends and third-party ops discovered through pluggy and entry points.

A backend is a distribution declaring an entry point in the group ``tileops`` whose value
is a module with one hook, ``tileops_register(registrar)`` (see :mod:`.hookspecs`). The
hook describes the backend and contributes kernel classes, arch detectors, manifest
directories, op classes and hardware profiles through the typed :class:`Registrar`.

Plugins are loaded into the active :class:`~tileops_core.kernels.registry.Registry` on
first use (the first plan, ``tileops backends``/``explain``) or by an explicit
:func:`load_plugins`; ``import tileops_core`` loads nothing. Each plugin is isolated: its
contributions are registered through one handle, a failure undoes that handle, and the
reason is recorded (:func:`plugin_records`, ``tileops backends``, every selection error).
Environment variables: ``TILEOPS_PLUGINS`` (allow list), ``TILEOPS_DISABLE_PLUGINS`` (deny
list), ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD`` (tests). Tests isolate themselves by making a
fresh registry active (:func:`~tileops_core.kernels.registry.use_registry`).
"""

from ..kernels.records import PluginRecord, ProfileSource
from .hookspecs import ENTRY_POINT_GROUP, HOOK_NAME, PROJECT_NAME, hookimpl, hookspec
from .loader import (ENV_DISABLE, ENV_NO_AUTOLOAD, ENV_ONLY, ensure_plugins_loaded, load_plugins, loaded_registry,
                     plugin_records, register_plugin, reset_plugins, unregister_plugin)
from .registrar import BackendDecl, Contribution, Registrar

__all__ = [
    "BackendDecl", "Contribution", "ENTRY_POINT_GROUP", "ENV_DISABLE", "ENV_NO_AUTOLOAD", "ENV_ONLY", "HOOK_NAME",
    "PROJECT_NAME", "PluginRecord", "ProfileSource", "Registrar", "ensure_plugins_loaded", "hardware_profiles",
    "hookimpl", "hookspec", "load_plugins", "loaded_registry", "plugin_records", "register_plugin", "reset_plugins",
    "unregister_plugin",
]


def hardware_profiles() -> list[ProfileSource]:
    """Hardware profiles contributed by loaded plugins (read by the roofline and bench)."""
    return loaded_registry().hardware_profiles()
