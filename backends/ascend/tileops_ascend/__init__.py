"""TileOPs backend for Ascend NPUs: RecurrentGatedDeltaRule on Ascend 310P.

Importing this package loads only pure-Python host code (platform facts, the tiling
port of seed 003, the packed tiling struct, refusal rules). It never imports
``torch_npu``: a ``torch_npu`` installed without the CANN toolkit breaks
``import torch`` itself unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, so ``torch_npu``
is loaded only by :func:`tileops_ascend.platform.detect` and by
:func:`tileops_ascend.launch.launch`, when a build or a launch is asked for.

Modules, one job each: :mod:`.platform`, :mod:`.tiling`, :mod:`.tiling_struct`,
:mod:`.refusal`, :mod:`.launch` (needs torch), :mod:`.schedule_model` (needs torch),
and the TileOPs side: :mod:`.plugin` (the entry point), :mod:`.kernel` (the kernel
class selection sees), :mod:`.launcher` (what a build returns).
"""

from importlib import metadata

from .platform import ARCH_ASCEND310P, ASCEND_310P, AscendPlatform, arch_from_soc_name, detect
from .tiling import RgdrTiling, TilingError, compute_tiling
from .tiling_struct import RecurrentGatedDeltaRuleTilingData

__all__ = [
    "ARCH_ASCEND310P",
    "BUILT_FOR_CORE_MAJOR",
    "ASCEND_310P",
    "AscendPlatform",
    "RecurrentGatedDeltaRuleTilingData",
    "RgdrTiling",
    "TilingError",
    "arch_from_soc_name",
    "compute_tiling",
    "detect",
    "__version__",
]

try:
    __version__ = metadata.version("tileops-ascend")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: This distribution shares the core's version (one VERSION file), so its major is the core
#: major it was built for; the plugin loader refuses it under a core of another major.
BUILT_FOR_CORE_MAJOR = int(__version__.split(".")[0].split("+")[0])
