"""tileops_cuda: TileLang kernels for NVIDIA GPUs (the CUDA backend of TileOPs).

Importing this package needs neither tilelang nor a GPU: every kernel module imports
tilelang inside its build function. ``registered`` maps the kernels onto the core's
interfaces; ``plugin`` is the entry point that registers them.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__", "BUILT_FOR_CORE_MAJOR", "kernels"]

try:
    __version__ = metadata.version("tileops-cuda")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: One VERSION file for every distribution: this major is the core major it was built for.
BUILT_FOR_CORE_MAJOR = int(__version__.split(".")[0].split("+")[0])

from . import kernels  # noqa: E402  (light: no tilelang, no torch)
