"""tileops_example: a worked third-party TileOPs plugin (see ``plugins/README.md``).

It contributes (a) ``ExampleRMSNormLastAxis``, an implementation of the core's existing
``RMSNormKernel`` interface that serves a narrow region (float32, one normalised axis, on
the CPU) and is preferred over the reference there, and (b) a brand-new op,
``SquaredReluFwdOp``, with its own spec (``manifest/squared_relu.yaml``), interface, op
class and general reference kernel. Importing this package loads nothing else.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__", "BUILT_FOR_CORE_MAJOR"]

try:
    __version__ = metadata.version("tileops-example")
except metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

#: The tileops major this release is written and tested against; TileOPs refuses the plugin
#: under a core of another major instead of failing somewhere inside a call.
BUILT_FOR_CORE_MAJOR = 0
