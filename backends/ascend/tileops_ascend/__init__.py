"""TileOPs backend for Ascend NPUs: RecurrentGatedDeltaRule on Ascend 310P.

Importing this package loads only pure-Python host code (platform facts, the tiling
port of seed 003, the packed tiling struct, refusal rules). It never imports
``torch_npu``: a ``torch_npu`` installed without the CANN toolkit breaks
``import torch`` itself unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, so ``torch_npu``
is loaded only by :func:`tileops_ascend.platform.detect` and by
:func:`tileops_ascend.launch.launch`, when a build or a launch is asked for.

Modules, one job each: :mod:`.platform`, :mod:`.tiling`, :mod:`.tiling_struct`,
:mod:`.refusal`, :mod:`.launch` (needs torch), :mod:`.schedule_model` (needs torch).
"""

from .platform import ARCH_ASCEND310P, ASCEND_310P, AscendPlatform, arch_from_soc_name, detect
from .tiling import RgdrTiling, TilingError, compute_tiling
from .tiling_struct import RecurrentGatedDeltaRuleTilingData

__all__ = [
    "ARCH_ASCEND310P",
    "ASCEND_310P",
    "AscendPlatform",
    "RecurrentGatedDeltaRuleTilingData",
    "RgdrTiling",
    "TilingError",
    "arch_from_soc_name",
    "compute_tiling",
    "detect",
]
