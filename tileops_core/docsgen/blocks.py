"""A tiny document model and its two renderings, Markdown and HTML.

Pages are built once as a list of blocks (headings, paragraphs, tables, code, lists)
and rendered twice, so the Markdown and the HTML of a page can never say different
things, and no page text is ever pasted into markup unescaped: the HTML renderer escapes
every string it is given; the Markdown renderer escapes every ``<`` (no tag of a spec's or a
plugin's text reaches a Markdown viewer's HTML), and a table cell's ``|`` and a cell's or
list item's line breaks.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Sequence, Union

__all__ = ["Heading", "Para", "Table", "Code", "Bullets", "Link", "Block", "Page", "to_markdown", "to_html"]


@dataclass(frozen=True)
class Link:
    """Inline link text -> target (a relative path without extension: ``ops/RMSNormFwdOp``)."""

    text: str
    target: str


#: Inline content: plain text and links, concatenated.
Inline = Union[str, Link, Sequence[Union[str, Link]]]


@dataclass(frozen=True)
class Heading:
    """A section heading; level 1 is a page's section (the page title is above it)."""

    level: int
    text: str


@dataclass(frozen=True)
class Para:
    """A paragraph of inline content."""

    content: Inline


@dataclass(frozen=True)
class Table:
    """A table: header texts and rows of inline cells."""

    headers: Sequence[str]
    rows: Sequence[Sequence[Inline]]


@dataclass(frozen=True)
class Code:
    """A preformatted block (a signature, a formula)."""

    text: str
    language: str = ""


@dataclass(frozen=True)
class Bullets:
    """An unordered list of inline items."""

    items: Sequence[Inline]


Block = Union[Heading, Para, Table, Code, Bullets]


@dataclass
class Page:
    """One page: a title, a path without extension (``index``, ``ops/GemmFwdOp``) and blocks."""

    title: str
    path: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> "Page":
        """Append blocks (returns the page, so pages read as one expression)."""
        self.blocks.extend(blocks)
        return self


def _parts(content: Inline) -> list[str | Link]:
    if isinstance(content, (str, Link)):
        return [content]
    return list(content)


def _relative(page: Page, target: str, ext: str) -> str:
    depth = page.path.count("/")
    return "../" * depth + target + ext


# -- Markdown -------------------------------------------------------------------------------

def _md_inline(page: Page, content: Inline, cell: bool = False, one_line: bool = False) -> str:
    out = []
    for part in _parts(content):
        if isinstance(part, Link):
            out.append(f"[{part.text}]({_relative(page, part.target, '.md')})")
        else:
            text = str(part).replace("<", "\\<")  # (found in review: a plugin's <script> reached the page)
            if cell:
                text = text.replace("|", "\\|")
            if cell or one_line:
                text = text.replace("\n", " ")
            out.append(text)
    return "".join(out)


def to_markdown(page: Page) -> str:
    """The page as GitHub-flavoured Markdown."""
    lines = [f"# {_md_inline(page, page.title, one_line=True)}", ""]
    for block in page.blocks:
        if isinstance(block, Heading):
            lines += ["#" * (block.level + 1) + " " + _md_inline(page, block.text, one_line=True), ""]
        elif isinstance(block, Para):
            lines += [_md_inline(page, block.content), ""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(h.replace("|", "\\|") for h in block.headers) + " |")
            lines.append("|" + "|".join(" --- " for _ in block.headers) + "|")
            for row in block.rows:
                lines.append("| " + " | ".join(_md_inline(page, c, cell=True) or " " for c in row) + " |")
            lines.append("")
        elif isinstance(block, Code):
            fence = "````" if "```" in block.text else "```"
            lines += [fence + block.language, block.text.rstrip("\n"), fence, ""]
        elif isinstance(block, Bullets):
            lines += [f"- {_md_inline(page, item, one_line=True)}" for item in block.items]
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# -- HTML -----------------------------------------------------------------------------------

_STYLE = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:0.5rem 0 1.2rem}th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;
text-align:left;vertical-align:top;font-size:0.9rem}th{background:#f3f3f3}code,pre{font-family:ui-monospace,monospace}
pre{background:#f6f6f6;padding:0.6rem;overflow-x:auto}h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:1.6rem}"""


def _html_inline(page: Page, content: Inline) -> str:
    out = []
    for part in _parts(content):
        if isinstance(part, Link):
            href = html.escape(_relative(page, part.target, ".html"), quote=True)
            out.append(f'<a href="{href}">{html.escape(part.text)}</a>')
        else:
            out.append(html.escape(str(part)))
    return "".join(out)


def to_html(page: Page) -> str:
    """The page as a standalone HTML document (inline CSS, no scripts)."""
    body = [f"<h1>{html.escape(page.title)}</h1>"]
    for block in page.blocks:
        if isinstance(block, Heading):
            level = min(block.level + 1, 6)
            body.append(f"<h{level}>{html.escape(block.text)}</h{level}>")
        elif isinstance(block, Para):
            body.append(f"<p>{_html_inline(page, block.content)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            rows = "".join("<tr>" + "".join(f"<td>{_html_inline(page, c)}</td>" for c in row) + "</tr>"
                           for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Code):
            body.append(f"<pre><code>{html.escape(block.text)}</code></pre>")
        elif isinstance(block, Bullets):
            body.append("<ul>" + "".join(f"<li>{_html_inline(page, i)}</li>" for i in block.items) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(page.title)}</title><style>{_STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
