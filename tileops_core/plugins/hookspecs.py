"""The pluggy hook specification of TileOPs: one collecting hook.

A plugin implements exactly one hook, ``tileops_register(registrar)``, and declares
everything it provides by calling typed methods on the :class:`~.registrar.Registrar` it
receives. One collecting hook (rather than one hook per kind of contribution, each
answered by whichever plugin returns first) keeps a plugin's contribution one unit: it is
applied whole or rolled back whole, and no result depends on which plugin was asked first.

Plugins are found through the entry-point group :data:`ENTRY_POINT_GROUP`; the value of an
entry point is a module (or object) holding the hook implementation. The implementation
may be marked with :data:`hookimpl`, or simply be a function named ``tileops_register``
(so a backend need not import pluggy to be discovered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .registrar import Registrar

__all__ = ["PROJECT_NAME", "ENTRY_POINT_GROUP", "HOOK_NAME", "hookspec", "hookimpl", "TileOpsHookSpec"]

#: The pluggy project name (the attribute pluggy marks hook functions with).
PROJECT_NAME = "tileops"
#: The ``importlib.metadata`` entry-point group every backend declares.
ENTRY_POINT_GROUP = "tileops"
#: The one hook a plugin implements.
HOOK_NAME = "tileops_register"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class TileOpsHookSpec:
    """The hooks a TileOPs plugin may implement."""

    @hookspec
    def tileops_register(self, registrar: "Registrar") -> None:
        """Declare this plugin's backend and contribute what it provides.

        Call ``registrar.backend(...)`` exactly once (name, device types, core major,
        hardware detection), then any of ``registrar.kernels(...)``,
        ``registrar.arch_detector(...)``, ``registrar.manifest_dir(...)``,
        ``registrar.ops(...)`` and ``registrar.hardware_profile(...)``. Nothing is applied
        until the hook returns; if it raises, nothing of this plugin is applied at all.
        """
