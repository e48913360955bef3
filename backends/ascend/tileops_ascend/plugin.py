"""The entry point of the Ascend backend: registers the 310P RGDR kernel as ``ascend``.

The entry point targets this light module. It must import, and the hook must run, on
machines without ``torch_npu`` or CANN (every TileOPs install loads every installed
plugin): the kernel module is imported only inside the hook, and nothing here or there
imports ``torch_npu``. The arch detector and ``detect()`` look only at a ``torch_npu``
that something else already loaded (:mod:`tileops_ascend.platform`); the build imports
it (:mod:`tileops_ascend.launcher`).
"""

from __future__ import annotations

from tileops_core.plugins import Registrar, hookimpl

from . import BUILT_FOR_CORE_MAJOR, __version__
from .platform import arch_of_device, visible_devices

__all__ = ["tileops_register"]


@hookimpl
def tileops_register(registrar: Registrar) -> None:
    """Describe ``ascend``, name the arch of ``npu`` devices, register the 310P RGDR kernel.

    No hardware profile is shipped: see the README ("Hardware profile").
    """
    from .kernel import KERNELS

    registrar.backend(
        "ascend",
        device_types=("npu",),
        core_major=BUILT_FOR_CORE_MAJOR,
        version=__version__,
        description="Ascend NPUs through torch_npu: RecurrentGatedDeltaRule on Ascend 310P (fp16); NPUs are listed "
        "only when torch_npu is already loaded",
        detect=visible_devices,
    )
    registrar.arch_detector("npu", arch_of_device)
    registrar.kernels(*KERNELS)
