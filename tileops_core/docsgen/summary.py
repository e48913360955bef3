"""The support matrix of one op as a table and a list of refusal regions, for any renderer.

``tileops ops`` prints these as text; ``tileops docs`` puts the same rows into Markdown and
HTML tables, so the terminal and the documentation always agree. A cell reads
``served/probed`` (``5/5``: every probed call of that dtype is served; ``-`` when no row
was probed in that dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from .matrix import OpSupport, SupportCell

__all__ = ["KernelRow", "kernel_rows", "refusal_regions", "RegionLine"]


@dataclass(frozen=True)
class KernelRow:
    """One kernel on one device/arch group, with a cell per dtype."""

    kernel: str
    backend: str
    general: bool
    device: str
    archs: tuple[str, ...]
    cells: tuple[str, ...]

    def texts(self) -> list[str]:
        kind = " (general)" if self.general else ""
        return [self.kernel.split(":")[-1] + kind, self.backend, self.device, ",".join(self.archs), *self.cells]


@dataclass(frozen=True)
class RegionLine:
    """A refusal region: a kernel's reason and the calls (by dtype) it refused with it."""

    kernel: str
    device: str
    archs: tuple[str, ...]
    reason: str
    calls: tuple[str, ...]  # "row[case]"


def _cell(cell: SupportCell | None) -> str:
    if cell is None or cell.total == 0:
        return "-"
    return f"{len(cell.served)}/{cell.total}"


def kernel_rows(support: OpSupport) -> tuple[list[str], list[KernelRow]]:
    """Headers and one row per (kernel, device, arch group)."""
    headers = ["kernel", "backend", "device", "arch", *support.dtypes]
    groups: dict[tuple[str, str, str, tuple[str, ...]], dict[str, SupportCell]] = {}
    general: dict[str, bool] = {}
    for cell in support.cells:
        groups.setdefault((cell.kernel, cell.backend, cell.device, cell.archs), {})[cell.dtype] = cell
        general[cell.kernel] = cell.general
    rows = [KernelRow(kernel, backend, general[kernel], device, archs,
                      tuple(_cell(by_dtype.get(d)) for d in support.dtypes))
            for (kernel, backend, device, archs), by_dtype in groups.items()]
    return headers, rows


def refusal_regions(support: OpSupport) -> list[RegionLine]:
    """Every distinct (kernel, device, reason), with the calls refused for it across dtypes and the
    archs that refused exactly those calls."""
    regions: dict[tuple[str, str, tuple[str, ...], str], list[str]] = {}
    for cell in support.cells:
        for region in cell.refused:
            key = (cell.kernel, cell.device, cell.archs, region.reason)
            regions.setdefault(key, []).extend(region.calls)
    merged: dict[tuple[str, str, str, tuple[str, ...]], list[str]] = {}
    for (kernel, device, archs, reason), calls in regions.items():  # archs refusing alike: one region
        merged.setdefault((kernel, device, reason, tuple(dict.fromkeys(calls))), []).extend(archs)
    return [RegionLine(k, d, tuple(dict.fromkeys(a)), r, c) for (k, d, r, c), a in merged.items()]
