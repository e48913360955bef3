"""tileops_cuda: TileLang kernels for NVIDIA GPUs (the CUDA backend of TileOPs).

Importing this package needs neither tilelang nor a GPU: every kernel module imports
tilelang inside its build function. Kernels are plain functions for now; registration
with the core framework comes later.
"""

__all__ = ["kernels"]

from . import kernels  # noqa: E402  (light: no tilelang, no torch)
