"""The entry point of the CUDA backend: the TileLang kernels, registered as ``cuda``.

This module imports neither tilelang nor torch.cuda state at import: kernel classes load
when the hook runs (plugin discovery), and tilelang when a kernel is first built. It
registers on machines without a GPU too; there its kernels are simply not available
(selection skips them: no call is on a ``cuda`` device).
"""

from __future__ import annotations

from typing import Any

from tileops_core.plugins import Registrar, hookimpl

from . import BUILT_FOR_CORE_MAJOR, __version__

__all__ = ["tileops_register", "detect", "cuda_arch"]


def cuda_arch(device: Any) -> str:
    """``sm_XY`` from the device's compute capability (what ``supported_archs`` lists)."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def detect() -> list[dict[str, Any]]:
    """The visible CUDA devices and their archs (none on a machine without a GPU)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [{"device": f"cuda:{i}", "arch": cuda_arch(torch.device("cuda", i)),
             "name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())]


@hookimpl
def tileops_register(registrar: Registrar) -> None:
    """Describe ``cuda`` and register every TileLang kernel."""
    from .registered import KERNELS

    registrar.backend("cuda", device_types=("cuda",), core_major=BUILT_FOR_CORE_MAJOR, version=__version__,
                      description="TileLang kernels for NVIDIA GPUs (tilelang loads on the first build)",
                      detect=detect)
    registrar.arch_detector("cuda", cuda_arch)
    registrar.kernels(*KERNELS)
