"""TileOPs core: specs, generated checks, kernel selection and plugins. No kernel code lives here.

Importing this package compiles nothing and loads no backend; plugins are discovered on
first use (a call, ``tileops backends``) or explicitly with :func:`load_plugins`.
"""

from ._version import __version__
from .errors import CheckError, ExprError, PluginError, SelectionError, SpecError, TileOpsError
from .spec import OpSpec, get_spec, load_manifest, load_workloads

__all__ = [
    "__version__", "CheckError", "ExprError", "OpSpec", "PluginError", "SelectionError", "SpecError",
    "TileOpsError", "get_spec", "load_manifest", "load_workloads",
]
