"""Measure a device's ceilings on the spot: a large copy and a large matmul.

A datasheet says what a device could do; efficiency against what it *does* do on this
machine (this memory configuration, this clock, this driver) is the figure a kernel
author can act on. ``tileops calibrate`` times, with the bench's own timer:

* a device-to-device copy of a buffer far larger than any cache, counting read and write
  (``2 * bytes / time``), as memory bandwidth: the faster of ``Tensor.copy_`` and an elementwise
  copy (``torch.mul(src, 1, out=dst)``). On the H200 ``copy_`` of 1 GiB takes the memcpy path at
  2.71 TB/s while the elementwise kernel moves 4.24 TB/s (``backends/cuda/NOTES.md``, "Copy
  ceiling"): a profile calibrated from ``copy_`` alone scored every kernel 1.57x too high;
* a square matmul per dtype (``2 * n**3 / time``) as the compute ceiling of that dtype.

The result is a :class:`HardwareProfile` whose ``measured`` figures are these and whose
``peak`` figures come from the profile that describes this device by name, if any (a
generic profile's nominal figures are not this device's datasheet, so they are not copied).
"""

from __future__ import annotations

import datetime
import functools
import os
import re
from typing import Any, Sequence

from .catalog import UsageError
from .profiles import HardwareProfile, Rate, device_name, profile_for
from .timing import DEFAULT, Subject, TimingOptions, time_subjects

__all__ = ["CalibrationSizes", "default_sizes", "calibrate"]


class CalibrationSizes:
    """Sizes of the two measurements (big enough to leave caches and launch costs behind)."""

    def __init__(self, copy_bytes: int, matmul_n: int, dtypes: Sequence[str]) -> None:
        import torch

        if copy_bytes < 1 << 20:
            raise UsageError(f"the copy must be at least 1 MiB to measure memory, got {copy_bytes} bytes")
        if matmul_n < 64:
            raise UsageError(f"the matmul size must be at least 64, got {matmul_n}")
        for name in dtypes:
            dtype = getattr(torch, name, None)
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise UsageError(f"cannot calibrate a matmul in {name!r}: give floating dtypes such as bfloat16")
        self.copy_bytes = copy_bytes
        self.matmul_n = matmul_n
        self.dtypes = tuple(dtypes)


def default_sizes(device_type: str) -> CalibrationSizes:
    """A GPU: a 1 GiB copy and n=8192 matmuls in bf16/fp16/fp32; a CPU: 256 MiB and n=1024 fp32."""
    if device_type == "cpu":
        return CalibrationSizes(256 << 20, 1024, ("float32",))
    return CalibrationSizes(1 << 30, 8192, ("bfloat16", "float16", "float32"))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "device"


def calibrate(device: Any, sizes: CalibrationSizes | None = None, options: TimingOptions = DEFAULT,
              base: HardwareProfile | None = None) -> HardwareProfile:
    """Measure ``device`` and return a profile of it (peaks taken from ``base`` or the known profile)."""
    import torch

    device = torch.device(device)
    sizes = sizes or default_sizes(device.type)
    name = device_name(device)
    if base is None:
        known = profile_for(device.type, name)
        base = known.profile if known is not None and known.profile.describes(device.type, name) == 2 else None
    gen = torch.Generator(device="cpu").manual_seed(int.from_bytes(os.urandom(4), "little"))
    elems = sizes.copy_bytes // 4
    try:
        src = torch.randn(elems, generator=gen).to(device)
        dst = torch.empty_like(src)
        subjects = [Subject("copy", [lambda: dst.copy_(src)]),
                    Subject("elementwise copy", [functools.partial(torch.mul, src, 1, out=dst)])]
        matmuls = []
        for dtype_name in sizes.dtypes:
            dtype = getattr(torch, dtype_name)
            n = sizes.matmul_n
            a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
            b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
            matmuls.append((dtype_name, a, b, c))
            subjects.append(Subject(f"matmul-{dtype_name}", [functools.partial(torch.matmul, a, b, out=c)]))
    except (RuntimeError, MemoryError) as exc:  # out of memory is a RuntimeError (found in review: a traceback)
        raise UsageError(f"cannot hold the calibration's buffers on {device} (a copy of {sizes.copy_bytes >> 20} MiB, "
                         f"matmuls of n={sizes.matmul_n}): {str(exc).splitlines()[0]}; give a smaller --copy-mib or "
                         "--matmul-n") from None
    measured = time_subjects(subjects, device, options)
    bandwidth = 2 * elems * 4 / min(m.median_s for m in measured[:2])
    when = datetime.date.today().isoformat()
    # Only the base's datasheet peaks carry over: its measured figures are another run's, perhaps another
    # machine's, and a dtype this run did not measure keeps its peak alone (found in review: an earlier
    # calibration's float32 figure was written again as this run's).
    compute: dict[str, Rate] = ({k: Rate(peak=r.peak) for k, r in base.compute.items() if r.peak is not None}
                                if base is not None else {})
    for (dtype_name, *_), m in zip(matmuls, measured[2:]):
        rate = 2 * sizes.matmul_n ** 3 / m.median_s
        peak = base.compute[dtype_name].peak if base is not None and dtype_name in base.compute else None
        compute[dtype_name] = Rate(peak=peak, measured=rate, note=f"torch.matmul n={sizes.matmul_n}, {when}")
    memory = Rate(peak=base.memory.peak if base is not None else None, measured=bandwidth,
                  note=f"copy of {sizes.copy_bytes >> 20} MiB, read + write counted, {when}")
    l2 = base.l2_bytes if base is not None else None
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None) or l2
    sources = [f"tileops calibrate on {name} ({device}), {when}, torch {torch.__version__}"]
    if base is not None and (base.memory.peak is not None or compute):
        sources.append(f"peaks from profile {base.name}")
    return HardwareProfile(name=f"calibrated-{_slug(name)}", description=f"{name}, measured by tileops calibrate",
                           device_type=device.type, match=[name], memory=memory, compute=compute, l2_bytes=l2,
                           sources=sources)
