"""Where a kernel's warps wait, instruction by instruction: Nsight Compute's warp-stall samples per SASS line.

Counters say that a row is latency-bound; they do not say where. Issue 21's two widest gaps are fixed costs of
that kind: the attention decode at B=1 (a split program's chain of about 7 k cycles for two 32-position tiles,
NOTES "ncudec") and the paged prefill (about 27 k cycles a program besides its key-tile steps, NOTES "ncupre").
Nsight Compute samples each warp's program counter and stall reason every 2**(5 + interval) cycles
(``--section SourceCounters``); ``ncu --import REP --page source --print-source sass --csv`` writes, for every
profiled kernel, a line naming it, a header, and one row a SASS instruction: ``Address``, ``Source``, ``Warp Stall
Sampling (All Samples)``, ``Warp Stall Sampling (Not-issued Samples)``, ``Instructions Executed`` and one
``stall_*`` column a reason. This script reads that file and prints, per kernel, the total samples and reasons,
the code in twenty stretches of equal instruction count (the share of samples each holds, its first
instruction), and the hottest instructions with their leading reasons: enough to tell a prologue's wait from
a main loop's.

    python3 ncu_sass_hotspots.py SOURCE.csv [--top 30] [--bins 20]

``benchmarks/gpu/s_ncusrc.sh`` records the rows and runs it; it needs no GPU itself.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass, field
from pathlib import Path

#: The columns this reads (Nsight Compute's names); a block without the first three is not a SASS table.
ADDRESS, SOURCE, SAMPLES = "Address", "Source", "Warp Stall Sampling (All Samples)"
NOT_ISSUED, EXECUTED = "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed"


@dataclass
class KernelTable:
    """One kernel's SASS rows as Nsight Compute wrote them (cells as text), under the line naming it."""

    name: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def column(self, row: list[str], name: str) -> float:
        """A numeric cell (0 where the column is absent or the cell empty)."""
        if name not in self.header:
            return 0.0
        cell = row[self.header.index(name)].replace(",", "").strip()
        try:
            return float(cell) if cell else 0.0
        except ValueError:
            return 0.0

    def text(self, row: list[str], name: str) -> str:
        return row[self.header.index(name)].strip() if name in self.header else ""

    def reasons(self) -> list[str]:
        return [c for c in self.header if c.startswith("stall_")]


def read_tables(path: Path) -> list[KernelTable]:
    """Every kernel's table in ``path``: a header is a line holding ``Address``, ``Source`` and the samples
    column; the non-empty line before it names the kernel; the rows up to the next name or header are its."""
    lines = list(csv.reader(path.read_text(errors="replace").splitlines()))
    tables: list[KernelTable] = []
    previous: list[str] = []
    current: KernelTable | None = None
    for cells in lines:
        if not any(c.strip() for c in cells):
            continue
        if ADDRESS in cells and SOURCE in cells and SAMPLES in cells:
            name = " ".join(c.strip() for c in previous if c.strip()) or f"kernel {len(tables)}"
            current = KernelTable(name=name, header=[c.strip() for c in cells])
            tables.append(current)
        elif current is not None and len(cells) >= len(current.header):
            current.rows.append(cells)
        else:
            current = None
        previous = cells
    return tables


def leading_reasons(table: KernelTable, row: list[str], count: int = 3) -> str:
    """The row's ``count`` largest stall reasons as ``name share%`` of its samples."""
    total = table.column(row, SAMPLES)
    if total <= 0:
        return ""
    shares = sorted(((table.column(row, r), r) for r in table.reasons()), reverse=True)[:count]
    return ", ".join(f"{r.removeprefix('stall_')} {100 * v / total:.0f}%" for v, r in shares if v > 0)


def summarise(table: KernelTable, top: int, bins: int) -> list[str]:
    """The printed lines for one kernel (see the module docstring)."""
    rows = table.rows
    total = sum(table.column(r, SAMPLES) for r in rows)
    out = [f"== {table.name}: {len(rows)} SASS instructions, {total:.0f} samples "
           f"({sum(table.column(r, NOT_ISSUED) for r in rows):.0f} not issued), "
           f"{sum(table.column(r, EXECUTED) for r in rows):.0f} warp instructions executed"]
    if not rows or total <= 0:
        return [*out, "   no samples (was SourceCounters collected?)"]
    reasons = sorted(((sum(table.column(r, name) for r in rows), name) for name in table.reasons()), reverse=True)
    out.append("   reasons: " + ", ".join(f"{n.removeprefix('stall_')} {100 * v / total:.1f}%"
                                          for v, n in reasons if v >= 0.005 * total))
    out.append(f"   along the code ({bins} stretches of equal instruction count): share of samples, first address"
               " and instruction")
    size = max(1, -(-len(rows) // bins))
    for start in range(0, len(rows), size):
        stretch = rows[start:start + size]
        share = sum(table.column(r, SAMPLES) for r in stretch) / total
        first = stretch[0]
        out.append(f"   {100 * share:5.1f}%  {table.text(first, ADDRESS):>8s}  {table.text(first, SOURCE)[:70]}")
    out.append(f"   hottest {top}: share, samples, executed, address, instruction, leading reasons")
    for r in sorted(rows, key=lambda r: table.column(r, SAMPLES), reverse=True)[:top]:
        samples = table.column(r, SAMPLES)
        if samples <= 0:
            break
        out.append(f"   {100 * samples / total:5.1f}% {samples:7.0f} {table.column(r, EXECUTED):9.0f}  "
                   f"{table.text(r, ADDRESS):>8s}  {table.text(r, SOURCE)[:60]:60s}  {leading_reasons(table, r)}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--bins", type=int, default=20)
    args = ap.parse_args()
    tables = read_tables(args.csv)
    if not tables:
        raise SystemExit(f"{args.csv}: no SASS table (a header with {ADDRESS!r}, {SOURCE!r} and {SAMPLES!r})")
    for table in tables:
        print("\n".join(summarise(table, args.top, args.bins)))


if __name__ == "__main__":
    main()
