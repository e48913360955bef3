"""Write the documentation site: ``index`` and ``ops/<Op>``, as Markdown and/or HTML.

The pages are regenerated whole on every run (a page of an op that no longer exists is
not left behind: files this generator wrote before, in a format it writes now, and did not
write now are removed, and only those, found through the list it keeps in ``.tileops-docs``;
an entry of that list that would lead outside the folder is never followed). Every page is
rendered before the first file is written, and a target path blocked by a file is refused
before any is, so a failed run leaves the folder as it was.
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
    rendered = [(root / f"{page.path}{FORMATS[fmt][0]}", FORMATS[fmt][1](page))
                for page in build_pages(matrix) for fmt in formats]
    for path, _ in rendered:  # (found in review: an `ops` file failed the run half-way, "File exists")
        blocked = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocked is not None and blocked != path:
            raise NotADirectoryError(f"{blocked} is a file where the pages need a folder")
        if path.is_dir():  # (found in review: pages before it were rewritten, then "Is a directory")
            raise IsADirectoryError(f"{path} is a folder where a page goes")
    root.mkdir(parents=True, exist_ok=True)
    for path, text in rendered:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    written = [path for path, _ in rendered]
    ledger = root / _LEDGER
    now = {p.relative_to(root).as_posix() for p in written}
    extensions = tuple(FORMATS[fmt][0] for fmt in formats)
    kept = set()
    for entry in ledger.read_text().splitlines() if ledger.is_file() else []:
        target = _inside(root, entry)
        if target is None or entry in now or not target.is_file():
            continue
        if entry.endswith(extensions):
            target.unlink()  # a page of this format that this run did not write
        else:
            kept.add(entry)  # a page of a format not written now stays, and stays listed
    ledger.write_text("\n".join(sorted(now | kept)) + "\n")
    return written


def _inside(root: Path, entry: str) -> Path | None:
    """``root / entry`` where ``entry`` is a page this generator could have written (``index.*`` or
    ``ops/<name>.*``, no ``..``, not absolute); None otherwise (found in review: a tampered list
    deleted files outside the folder)."""
    parts = Path(entry).parts
    if Path(entry).is_absolute() or ".." in parts or not (len(parts) == 1 or (len(parts) == 2 and parts[0] == "ops")):
        return None
    return root / entry
