"""TileOPs core: specs, generated checks, kernel selection and plugins. No kernel code lives here.

Importing this package compiles nothing and loads no backend; plugins are discovered on
first use (a call, ``tileops backends``) or explicitly with :func:`load_plugins`, into the
one registry (:mod:`tileops_core.kernels.registry`), which is also where the manifest reads
plugin spec directories from.
"""

from typing import TYPE_CHECKING

from ._version import __version__
from .errors import CheckError, ExprError, PluginError, SelectionError, SpecError, TileOpsError
from .kernels.targets import Target, current_target, set_target, use_target
from .spec import OpSpec, get_spec, load_manifest, load_workloads

if TYPE_CHECKING:
    from .kernels.dispatch_stats import DispatchReport
    from .plugins import PluginRecord

__all__ = [
    "__version__", "CheckError", "ExprError", "OpSpec", "PluginError", "SelectionError", "SpecError", "Target",
    "TileOpsError", "current_target", "dispatch_report", "get_spec", "load_manifest", "load_plugins", "load_workloads", "set_target",
    "use_target",
]


def dispatch_report() -> "DispatchReport":
    """Which kernels served this process, how often, and every fallback with its reason
    (:mod:`tileops_core.kernels.dispatch_stats`)."""
    from .kernels.dispatch_stats import dispatch_report as _report

    return _report()


def load_plugins() -> list["PluginRecord"]:
    """Load every installed backend now (normally done on first use); returns their records."""
    from .plugins import load_plugins as _load

    return _load()
