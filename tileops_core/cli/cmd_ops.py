"""``tileops ops``: the support matrix in the terminal (op x kernel x device x dtype, refusals).

The same matrix as ``tileops docs`` writes (:mod:`tileops_core.docsgen.matrix`): each
kernel of each installed backend is asked ``refusal()`` on the call specs of every
workload row in every dtype, and a cell reads served/probed. Refusal regions (each
reason and the calls it was given for) follow each op's table.

Exit codes: 0; 1 when an op has an interface no installed kernel implements, or a
workload row could not be planned; 2 for an unknown op name.
"""

from __future__ import annotations

import argparse
import json

from ..bench.catalog import UsageError, resolve_specs
from ..docsgen.matrix import OpSupport, support_matrix
from ..docsgen.summary import kernel_rows, refusal_regions
from .main import EXIT_FINDINGS, EXIT_OK
from .usage import usage_error

__all__ = ["NAME", "HELP", "add_arguments", "run", "format_matrix"]

NAME = "ops"
HELP = "list the ops and the support matrix: which kernel serves which device and dtype, and what each refuses"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ops", nargs="*", metavar="OP", help="op class names (default: every implemented op)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    out.extend(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return out


def format_matrix(matrix: list[OpSupport]) -> str:
    """The text form: per op, a header line, the kernel table and the refusal regions."""
    lines: list[str] = []
    for support in matrix:
        spec = support.spec
        lines.append(f"{spec.name}  ({spec.file}:{spec.line}; ref {spec.ref_api})")
        headers, rows = kernel_rows(support)
        if rows:
            lines.extend(_table(headers, [r.texts() for r in rows]))
        for interface in support.unserved:
            lines.append(f"  no kernel is registered for {interface}")
        for region in refusal_regions(support):
            lines.append(f"  refused by {region.kernel.split(':')[-1]} on {region.device} [{','.join(region.archs)}]: "
                         f"{region.reason}")
            lines.append(f"    calls: {', '.join(region.calls)}")
        for problem in support.problems:
            lines.append(f"  not probed: {problem}")
        lines.append("")
    # An op some installed kernel serves a probed call of (found in review: one whose kernels refused every
    # call counted as served).
    served = sum(1 for s in matrix if not s.unserved and any(c.served for c in s.cells))
    lines.append(f"{len(matrix)} op(s), {served} served by an installed kernel; cells are served/probed calls "
                 "(workload rows x dtypes)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..plugins import ensure_plugins_loaded

    ensure_plugins_loaded()
    try:
        specs = resolve_specs(args.ops)
    except UsageError as exc:
        return usage_error(NAME, str(exc))
    matrix = support_matrix(specs)
    if args.format == "json":
        print(json.dumps({"ops": [s.as_dict() for s in matrix]}, indent=2))
    else:
        print(format_matrix(matrix))
    return EXIT_FINDINGS if any(s.unserved or s.problems for s in matrix) else EXIT_OK
