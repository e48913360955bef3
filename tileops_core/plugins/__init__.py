"""Plugins: backends and third-party ops discovered through pluggy and entry points.

A backend is a distribution declaring an entry point in the group ``tileops`` whose value
is a module with one hook, ``tileops_register(registrar)`` (see :mod:`.hookspecs`). The
hook describes the backend and contributes kernel classes, arch detectors, manifest
directories, op classes and hardware profiles through the typed :class:`Registrar`.

Loading happens on first use: the first kernel selection, ``tileops backends``/``explain``,
or an explicit :func:`load_plugins`. ``import tileops_core`` loads nothing. Each plugin is
isolated: a failure rolls it back whole and is recorded (:func:`plugin_records`,
``tileops backends``, every selection error). Environment variables: ``TILEOPS_PLUGINS``
(allow list), ``TILEOPS_DISABLE_PLUGINS`` (deny list), ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD``
(tests). :func:`snapshot`/:func:`restore` and :func:`reset_plugins` are the test seams.
"""

from .hookspecs import ENTRY_POINT_GROUP, HOOK_NAME, PROJECT_NAME, hookimpl, hookspec
from .loader import (ENV_DISABLE, ENV_NO_AUTOLOAD, ENV_ONLY, PluginsSnapshot, ensure_plugins_loaded, load_plugins,
                     plugin_records, register_plugin, reset_plugins, restore, snapshot, unregister_plugin)
from .registrar import BackendDecl, Contribution, Registrar
from .store import STORE, PluginRecord, ProfileSource

__all__ = [
    "BackendDecl", "Contribution", "ENTRY_POINT_GROUP", "ENV_DISABLE", "ENV_NO_AUTOLOAD", "ENV_ONLY", "HOOK_NAME",
    "PROJECT_NAME", "PluginRecord", "PluginsSnapshot", "ProfileSource", "Registrar", "STORE", "ensure_plugins_loaded",
    "hardware_profiles", "hookimpl", "hookspec", "load_plugins", "plugin_records", "register_plugin",
    "reset_plugins", "restore", "snapshot", "unregister_plugin",
]


def hardware_profiles() -> list[ProfileSource]:
    """Hardware profiles contributed by loaded plugins (read by the roofline and bench)."""
    ensure_plugins_loaded()
    return STORE.hardware_profiles()
