"""Structured findings of the validator: one :class:`Diagnostic` per problem.

A diagnostic is data, not text, so that the same finding can be printed for a person
(grouped by file), emitted as JSON for tools, counted by CI and matched exactly by the
tests: rule id, severity, ``file:line``, op, field, message and the suggested fix.
Findings that several discriminant combinations (or the lint and the conformance pass)
both produce are merged by :func:`merge`, keeping how many combinations hit them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from ..errors import SpecError
from .rules import severity_of

__all__ = [
    "ERROR", "WARNING", "ADVISORY", "SEVERITIES", "Diagnostic", "make", "from_spec_error", "merge", "sort_key",
]

ERROR, WARNING, ADVISORY = "error", "warning", "advisory"
#: Most severe first.
SEVERITIES = (ERROR, WARNING, ADVISORY)


@dataclass(frozen=True)
class Diagnostic:
    """One finding: which rule, how bad, where (file, line, op, field), what and how to fix it.

    ``key`` identifies the finding independently of the combination that exposed it (two
    combinations finding the same unsolvable index give one diagnostic); ``hits`` counts them.
    """

    rule: str
    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    op: str | None = None
    field: str | None = None
    fix: str | None = None
    text: str | None = None
    key: str = ""
    hits: int = 1

    @property
    def where(self) -> str:
        if self.file is None:
            return "<unknown>"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def identity(self) -> tuple[Any, ...]:
        return (self.rule, self.file, self.line, self.op, self.field, self.key or self.message)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (stable keys; absent values are null)."""
        return {
            "rule": self.rule, "severity": self.severity, "file": self.file, "line": self.line, "op": self.op,
            "field": self.field, "message": self.message, "fix": self.fix, "text": self.text, "hits": self.hits,
        }

    def __str__(self) -> str:
        head = f"{self.where}: {self.severity} {self.rule}"
        if self.op:
            head += f" {self.op}" + (f".{self.field}" if self.field else "")
        text = f"{head}: {self.message}"
        if self.fix:
            text += f"; fix: {self.fix}"
        return text


def make(rule: str, message: str, *, file: str | None, line: int | None, op: str | None = None,
         field: str | None = None, fix: str | None = None, text: str | None = None, key: str = "",
         severity: str | None = None) -> Diagnostic:
    """A diagnostic whose severity defaults to the rule's (see :mod:`tileops_core.validate.rules`)."""
    return Diagnostic(rule, severity or severity_of(rule), message, file, line, op, field, fix, text, key)


def from_spec_error(err: SpecError) -> Diagnostic:
    """A load-time problem recorded by the spec compiler, as a diagnostic."""
    loc = err.location
    return make(err.rule, err.message, file=loc.file, line=loc.line, op=loc.op, field=loc.field, fix=err.fix,
                text=err.text)


def merge(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Merge findings with the same identity (first message kept, ``hits`` summed), in first-seen order."""
    out: dict[tuple[Any, ...], Diagnostic] = {}
    for d in diagnostics:
        ident = d.identity()
        seen = out.get(ident)
        out[ident] = d if seen is None else replace(seen, hits=seen.hits + d.hits)
    return list(out.values())


def sort_key(d: Diagnostic) -> tuple[Any, ...]:
    """File, then line, then severity, then rule: the order a reader walks a file in."""
    return (d.file or "", d.line or 0, SEVERITIES.index(d.severity), d.rule, d.op or "", d.field or "", d.message)

