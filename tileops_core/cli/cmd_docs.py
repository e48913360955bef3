"""``tileops docs``: generate the support matrix and one reference page per op, as static
Markdown and HTML, from the manifest and the installed backends.

Exit codes: 0 written; 1 when an implemented op has an interface no installed kernel
implements or a workload row could not be planned (the pages are written anyway and
say so); 2 for a bad ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..docsgen.matrix import support_matrix
from ..docsgen.site import FORMATS, write_docs
from ..bench.catalog import benchable_specs
from .main import EXIT_FINDINGS, EXIT_OK
from .usage import usage_error

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "docs"
HELP = "write the support matrix and per-op reference pages (Markdown and HTML) from the manifest and backends"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default="docs/generated", help="output folder (default: docs/generated)")
    parser.add_argument("--format", action="append", choices=sorted(FORMATS), metavar="FMT",
                        help="md and/or html, repeatable (default: both)")


def run(args: argparse.Namespace) -> int:
    from ..plugins import ensure_plugins_loaded

    ensure_plugins_loaded()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return usage_error(NAME, f"--out {out} exists and is not a folder")
    formats = tuple(dict.fromkeys(args.format or ("md", "html")))
    matrix = support_matrix(benchable_specs().values())
    try:
        written = write_docs(out, formats, matrix)
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return usage_error(NAME, f"cannot write under --out {out}: {exc.strerror or exc}{where}")
    pages = len(written) // len(formats)
    print(f"wrote {pages} page(s) x {', '.join(formats)} under {out}/ (start at {out / ('index' + FORMATS[formats[0]][0])})")
    gaps = [s.spec.name for s in matrix if s.unserved or s.problems]
    if gaps:
        print(f"incomplete support for: {', '.join(gaps)} (see their pages)")
        return EXIT_FINDINGS
    return EXIT_OK
