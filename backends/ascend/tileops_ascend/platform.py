"""Platform facts of the Ascend NPUs this backend targets, and how to detect them.

The 310P host code of seed 003 hard-codes its limits as ``constexpr`` values and reads
two more (UB bytes, core count) from ``platform_ascendc``. Here they are one frozen
dataclass so that the tiling is a pure function of ``(shapes, flags, platform)``: tests
craft budgets with ``dataclasses.replace(ASCEND_310P, ub_bytes=...)`` instead of needing
hardware, and a detected device can override the defaults without touching the tiling.

Importing this module never imports ``torch_npu``: installing ``torch_npu`` without the
CANN toolkit breaks ``import torch`` itself (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``),
so only :func:`detect`, called explicitly, loads it. :func:`arch_of_device` and
:func:`visible_devices` (what the plugin hands the core: the arch detector and the
``tileops backends`` listing) only look at a ``torch_npu`` that is already loaded: an
``npu`` tensor cannot exist without it, and where torch's device-backend autoload is
on, ``import torch`` has loaded it already.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARCH_ASCEND310P",
    "ASCEND_310P",
    "AscendPlatform",
    "NpuDetection",
    "arch_from_soc_name",
    "arch_of_device",
    "detect",
    "platform_for_arch",
    "visible_devices",
]

#: The arch string of the only chip the RGDR kernel of seed 003 is compiled for.
ARCH_ASCEND310P = "ascend310p"


@dataclass(frozen=True)
class AscendPlatform:
    """The numbers the 310P tiling of seed 003 depends on; defaults are the 310P's.

    ``ub_bytes`` and ``core_count`` are what ``GetPlatformResources`` reads from
    ``platform_ascendc`` (UB size; AIV core count, else AI core count, else 1).
    The rest are the ``constexpr`` constants of ``recurrent_gated_delta_rule_tiling.cpp``
    (seed 003 §5.1); they are fields, not module constants, only so that tests can
    vary one of them and watch the selection react.
    """

    arch: str = ARCH_ASCEND310P
    #: Unified Buffer bytes per core (``GetCoreMemSize(UB)``); 256 KiB on 310P.
    ub_bytes: int = 262144
    #: Cores the runtime reports (``GetCoreNumAiv()``, else ``GetCoreNum()``); 0 means unknown.
    core_count: int = 8
    #: Most tokens one sequence may bring to one call (speculative decode depth).
    max_mtp: int = 8
    #: fp16 elements per 32-byte block: the alignment unit of every UB row.
    fp16_num_per_block: int = 16
    #: Most ``TQue`` buffers the 310P pipe can hold.
    max_tque_buffer_num: int = 8
    #: Cores the kernel may be scheduled on (seed 003 §5.1, ``MAX_SCHEDULABLE_AICORE_310P``).
    max_schedulable_aicore: int = 8
    #: System workspace the tiling function requests (``16ULL << 20``).
    system_workspace_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        for name in (
            "ub_bytes",
            "core_count",
            "max_mtp",
            "fp16_num_per_block",
            "max_tque_buffer_num",
            "max_schedulable_aicore",
            "system_workspace_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"AscendPlatform.{name} must be a non-negative int, got {value!r}")
        if self.fp16_num_per_block == 0 or self.max_mtp == 0:
            raise ValueError("AscendPlatform.fp16_num_per_block and max_mtp must be positive")

    @property
    def schedulable_cores(self) -> int:
        """The core count after the clamps of ``GetPlatformResources``: 0 → 1, capped at 8."""
        cores = self.core_count if self.core_count > 0 else 1
        return min(cores, self.max_schedulable_aicore)


#: The 310P as seed 003 describes it.
ASCEND_310P = AscendPlatform()

# SoC names as CANN reports them (``aclrtGetSocName``), longest prefix first so that
# "Ascend910B3" is not taken for "Ascend910" and "Ascend910_9391" not for "Ascend910".
_SOC_PREFIX_TO_ARCH: tuple[tuple[str, str], ...] = (
    ("Ascend910_93", "ascend910_93"),
    ("Ascend910B", "ascend910b"),
    ("Ascend910", "ascend910"),
    ("Ascend310P", ARCH_ASCEND310P),
    ("Ascend310B", "ascend310b"),
    ("Ascend310", "ascend310"),
)


def arch_from_soc_name(soc_name: str) -> str | None:
    """Map a SoC name (``"Ascend310P3"``, ``"Ascend910B2"``, ...) to an arch string.

    Returns None for a name this backend does not know, so an unknown chip is never
    mistaken for a supported one. The vllm-ascend 310P binding makes the same call by
    substring (``soc_name.find("310P")``); a prefix table keeps 910B and 910_93 apart.
    """
    name = soc_name.strip()
    for prefix, arch in _SOC_PREFIX_TO_ARCH:
        if name.startswith(prefix):
            return arch
    return None


def platform_for_arch(arch: str | None, *, core_count: int | None = None) -> AscendPlatform | None:
    """Platform facts for ``arch``, or None where the RGDR kernel has no build.

    Only ``ascend310p`` has one (seed 003 registers ``AddConfig("ascend310p", ...)`` only).
    A detected core count replaces the default; the tiling still clamps it to 8.
    """
    if arch != ARCH_ASCEND310P:
        return None
    if core_count is None:
        return ASCEND_310P
    return AscendPlatform(core_count=core_count)


@dataclass(frozen=True)
class NpuDetection:
    """What :func:`detect` found: a device and its arch, or why there is none.

    ``available`` says an NPU is present; ``arch`` is None when its SoC name is unknown.
    """

    available: bool
    reason: str
    soc_name: str | None = None
    arch: str | None = None
    core_count: int = 0

    @property
    def platform(self) -> AscendPlatform | None:
        """Platform facts for the detected arch (None if not 310P or nothing found)."""
        if not self.available:
            return None
        return platform_for_arch(self.arch, core_count=self.core_count)


def detect(device_index: int = 0) -> NpuDetection:
    """Look for an NPU through ``torch_npu``; imports ``torch_npu`` here and only here.

    Never raises for a missing or broken ``torch_npu``: a machine without the Ascend
    stack is the normal case, reported through ``reason``. The core count follows
    ``GetPlatformResources``: vector cores first, then AI (cube) cores, else 0
    (the tiling turns 0 into 1).
    """
    try:
        torch_npu = importlib.import_module("torch_npu")
    except ImportError as exc:
        return NpuDetection(False, f"torch_npu is not importable ({exc}); install torch_npu with the CANN toolkit")
    except OSError as exc:  # a torch_npu wheel without CANN fails while loading its shared libraries
        return NpuDetection(False, f"torch_npu failed to load its native libraries ({exc}); is CANN installed and sourced?")
    return _inspect(torch_npu, device_index)


def _inspect(torch_npu: Any, device_index: int) -> NpuDetection:
    """What a loaded ``torch_npu`` says of the NPU at ``device_index``."""
    npu = torch_npu.npu
    if not npu.is_available() or npu.device_count() <= device_index:
        return NpuDetection(False, f"torch_npu reports no NPU at index {device_index}")
    soc_name = str(npu.get_device_name(device_index))
    props = npu.get_device_properties(device_index)
    cores = int(getattr(props, "vector_core_num", 0) or 0) or int(getattr(props, "cube_core_num", 0) or 0)
    arch = arch_from_soc_name(soc_name)
    if arch is None:
        # A device is there, but no arch string we could match a kernel build against.
        reason = f"found {soc_name!r}, a SoC name this backend does not map to an arch"
        return NpuDetection(True, reason, soc_name=soc_name, core_count=cores)
    return NpuDetection(True, f"found {soc_name} ({arch})", soc_name=soc_name, arch=arch, core_count=cores)


def _loaded_torch_npu() -> Any | None:
    """``torch_npu`` if something already imported it, else None; never imports it."""
    return sys.modules.get("torch_npu")


def arch_of_device(device: Any) -> str:
    """The arch of an ``npu`` ``torch.device`` (the core's arch detector); ``"unknown"`` if not known.

    Runs while a call is planned, before any build, so it must not import ``torch_npu``:
    a tensor on an NPU means it is loaded already. A device without an index is the
    current device.
    """
    torch_npu = _loaded_torch_npu()
    if torch_npu is None:
        return "unknown"
    index = device.index if device.index is not None else int(torch_npu.npu.current_device())
    found = _inspect(torch_npu, index)
    return found.arch if found.arch is not None else "unknown"


def visible_devices() -> list[dict[str, Any]]:
    """The NPUs a loaded ``torch_npu`` reports, for ``tileops backends``; empty when it is not loaded."""
    torch_npu = _loaded_torch_npu()
    if torch_npu is None or not torch_npu.npu.is_available():
        return []
    devices = []
    for index in range(int(torch_npu.npu.device_count())):
        found = _inspect(torch_npu, index)
        devices.append({
            "device": f"npu:{index}", "arch": found.arch or "unknown", "name": found.soc_name,
            "cores": found.core_count,
            "rgdr": "ascend310p kernel" if found.arch == ARCH_ASCEND310P else "no kernel for this arch",
        })
    return devices
