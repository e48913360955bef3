"""The entry point of the reference backend: registers every reference kernel as ``cpu_ref``.

The entry point targets this light module; the kernel module (torch, the core's op
interfaces) is imported only when the hook runs, i.e. when TileOPs loads its plugins.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from tileops_core.plugins import Registrar, hookimpl

from . import BUILT_FOR_CORE_MAJOR, __version__

__all__ = ["tileops_register", "detect"]


def detect() -> list[dict[str, Any]]:
    """The one device this backend targets first: the host CPU."""
    name = platform.processor() or platform.machine() or "cpu"
    return [{"device": "cpu", "arch": "cpu", "name": name, "cores": os.cpu_count()}]


@hookimpl
def tileops_register(registrar: Registrar) -> None:
    """Describe ``cpu_ref`` and register every reference kernel.

    The kernels declare ``devices = ("*",)``: they also serve other device types as the
    general fallback (a fallback on an accelerator warns once); "cpu" is where this backend
    is the intended implementation.
    """
    from .kernels import KERNELS

    registrar.backend("cpu_ref", device_types=("cpu",), core_major=BUILT_FOR_CORE_MAJOR, version=__version__,
                      description="PyTorch reference kernels (float32 accumulation); the general fallback",
                      detect=detect)
    registrar.kernels(*KERNELS)
