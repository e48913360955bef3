"""Rendering a validator report: grouped by file for people, JSON for tools."""

from __future__ import annotations

import json
from itertools import groupby

from .runner import Report

__all__ = ["render_text", "render_json", "summary_line"]


def summary_line(report: Report) -> str:
    """``12 ops, 8 files: 2 errors, 0 warnings, 1 advisory (0.41 s)``."""
    counts = report.as_dict()["counts"]

    def n(count: int, one: str, many: str) -> str:
        return f"{count} {one if count == 1 else many}"

    words = (n(counts["error"], "error", "errors"), n(counts["warning"], "warning", "warnings"),
             n(counts["advisory"], "advisory", "advisories"))
    sampled = sorted(name for name, op in report.ops.items() if op.get("coverage") == "sampled")
    note = f"; SAMPLED, not every combination checked: {', '.join(sampled)}" if sampled else ""
    return (f"{len(report.ops)} op(s), {len(report.files)} file(s): {', '.join(words)}{note} "
            f"({report.seconds:.2f} s)")


def render_text(report: Report) -> str:
    """Findings grouped by file, in line order; then a summary line."""
    lines: list[str] = []
    for file, group in groupby(report.diagnostics, key=lambda d: d.file or "<no file>"):
        lines.append(file)
        for d in group:
            where = f"{d.line}" if d.line is not None else "-"
            target = (d.op or "") + (f".{d.field}" if d.field else "")
            count = f" [x{d.hits}: found on {d.hits} combinations or rows]" if d.hits > 1 else ""
            lines.append(f"  {where}: {d.severity} {d.rule} {target}: {d.message}{count}")
            if d.fix:
                lines.append(f"      fix: {d.fix}")
        lines.append("")
    lines.extend(f"note: {note}" for note in report.notes)
    lines.append(summary_line(report))
    return "\n".join(lines)


def render_json(report: Report) -> str:
    """The report as one JSON document (``Report.as_dict``)."""
    return json.dumps(report.as_dict(), indent=2, sort_keys=False, default=str)
