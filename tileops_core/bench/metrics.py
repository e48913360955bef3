"""From a time and a roofline to what a reader wants: achieved rates, the bound, the efficiency.

The roofline model: a call of arithmetic intensity ``I = flops / bytes`` can at best run
at ``min(peak_flops, I * bandwidth)``. It is *memory-bound* when ``I`` is below the
profile's ridge point ``peak_flops / bandwidth`` and *compute-bound* above it; its
efficiency is the achieved FLOP/s over that attainable ceiling (for a call that does no
arithmetic, the achieved bandwidth over the bandwidth). The compute ceiling is the one of
the dtype the call computes in (its first output's dtype; a dtype the profile does not
list uses float32's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..roofline import Roofline
from .profiles import Basis, HardwareProfile

__all__ = ["Analysis", "analyse"]


@dataclass(frozen=True)
class Analysis:
    """Achieved rates, and where they sit under the profile's roofline (None without a profile)."""

    flops_per_s: float
    bytes_per_s: float
    intensity: float
    bound: str | None = None  # "memory" | "compute"
    ridge: float | None = None
    attainable_flops_per_s: float | None = None
    efficiency: float | None = None
    compute_dtype: str | None = None  # the profile's dtype whose ceiling was used


def analyse(roofline: Roofline, seconds: float, profile: HardwareProfile | None, dtype: str,
            basis: Basis = "measured") -> Analysis:
    """Place one measured call under ``profile``'s roofline."""
    flops_rate = roofline.flops / seconds
    bytes_rate = roofline.bytes / seconds
    intensity = roofline.intensity
    if profile is None:
        return Analysis(flops_rate, bytes_rate, intensity)
    bandwidth, _ = profile.bandwidth(basis)
    compute = profile.compute_rate(dtype, basis)
    if compute is None:
        return Analysis(flops_rate, bytes_rate, intensity, "memory", None, None, bytes_rate / bandwidth)
    peak, _, used = compute
    ridge = peak / bandwidth
    bound = "memory" if intensity < ridge else "compute"
    if roofline.flops == 0 or math.isinf(intensity):
        attainable = peak if roofline.flops else None
        efficiency = flops_rate / peak if roofline.flops else bytes_rate / bandwidth
    else:
        attainable = min(peak, intensity * bandwidth)
        efficiency = flops_rate / attainable
    return Analysis(flops_rate, bytes_rate, intensity, bound, ridge, attainable, efficiency, used)
