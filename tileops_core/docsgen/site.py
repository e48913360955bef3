"""Write the documentation site: ``index`` and ``ops/<Op>``, as Markdown and/or HTML.

The pages are regenerated whole on every run (a page of an op that no longer exists is
not left behind: files this generator wrote before and did not write now are removed,
and only those, found through the list it keeps in ``.tileops-docs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..bench.catalog import benchable_specs
from ..spec.manifest import load_manifest
from .blocks import Page, to_html, to_markdown
from .matrix import OpSupport, support_matrix
from .pages import index_page, op_page

__all__ = ["build_pages", "write_docs", "FORMATS"]

FORMATS = {"md": (".md", to_markdown), "html": (".html", to_html)}
_LEDGER = ".tileops-docs"


def build_pages(matrix: Sequence[OpSupport] | None = None) -> list[Page]:
    """Every page: the index first, then one per spec of the manifest (sorted by name)."""
    specs = [load_manifest()[name] for name in sorted(load_manifest())]
    matrix = support_matrix(benchable_specs().values()) if matrix is None else matrix
    by_name = {s.spec.name: s for s in matrix}
    return [index_page(specs, matrix)] + [op_page(spec, by_name.get(spec.name)) for spec in specs]


def write_docs(out: str | Path, formats: Sequence[str] = ("md", "html"),
               matrix: Sequence[OpSupport] | None = None) -> list[Path]:
    """Write every page in every format under ``out``; returns the files written."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for page in build_pages(matrix):
        for fmt in formats:
            ext, render = FORMATS[fmt]
            path = root / f"{page.path}{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(page), encoding="utf-8")
            written.append(path)
    ledger = root / _LEDGER
    previous = ledger.read_text().splitlines() if ledger.is_file() else []
    now = {str(p.relative_to(root)) for p in written}
    for stale in previous:
        if stale not in now and (root / stale).is_file():
            (root / stale).unlink()
    ledger.write_text("\n".join(sorted(now)) + "\n")
    return written
