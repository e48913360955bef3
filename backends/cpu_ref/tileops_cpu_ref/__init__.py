"""tileops_cpu_ref: the general reference kernels of TileOPs, written with PyTorch ops.

Every op of the core catalogue has one reference kernel here (``kernels.KERNELS``): it is
``general`` (any specialised kernel that applies beats it) and runs wherever PyTorch
runs, so a plain ``pip install tileops`` gives working ops on the CPU. Importing this
package is light: the kernels (and torch) load when the plugin registers them.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__", "BUILT_FOR_CORE_MAJOR"]

try:
    __version__ = metadata.version("tileops-cpu-ref")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: This distribution shares the core's version (one VERSION file), so its major is the core
#: major it was built for; the plugin loader refuses it under a core of another major.
BUILT_FOR_CORE_MAJOR = int(__version__.split(".")[0].split("+")[0])
