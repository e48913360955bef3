"""The error types of TileOPs, each carrying where the failing declaration was written.

Every failure a user can meet names the declaration that failed. A spec problem is located
by ``file:line``, op and field; a call-time check failure names the op, the declaration as
written in the YAML and the actual values. Callers catch :class:`TileOpsError` for all of
them, or the narrower classes below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

__all__ = [
    "Location",
    "TileOpsError",
    "ExprError",
    "SpecError",
    "CheckError",
    "SelectionError",
    "PluginError",
    "KernelError",
    "UsageError",
    "fail",
]


@dataclass(frozen=True, slots=True)
class Location:
    """Where a declaration was written: a manifest file, a line, the op and the field path."""

    file: str | None = None
    line: int | None = None
    op: str | None = None
    field: str | None = None

    def where(self) -> str:
        """``file:line`` (or as much of it as is known)."""
        if self.file is None:
            return "<unknown>"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def child(self, field: str, line: int | None = None) -> "Location":
        """The location of a sub-field, keeping file and op."""
        path = f"{self.field}.{field}" if self.field else field
        return Location(self.file, line if line is not None else self.line, self.op, path)


class TileOpsError(Exception):
    """Base class of every error TileOPs raises on purpose."""


class UsageError(TileOpsError):
    """What the user asked a command for cannot be done as asked: a bad value, or a name (an op, a
    workload, a device, a path) that does not exist. The ``tileops`` CLI exits 2 on it, as argparse
    does on a bad flag; 1 stays for findings and failures."""


class ExprError(TileOpsError, ValueError):
    """A string of the spec language that does not parse or uses something outside the language.

    ``rule`` names a rejected legacy form (seed 000 table 3, e.g. ``"T3.6"``) when the text is
    one; ``rewrite`` then holds the canonical form to write instead, where one is mechanical.
    """

    def __init__(self, message: str, text: str = "", *, col: int | None = None, rule: str | None = None,
                 rewrite: str | None = None) -> None:
        self.message = message
        self.text = text
        self.col = col
        self.rule = rule
        self.rewrite = rewrite
        super().__init__(f"{message} (in {text!r})" if text else message)


class SpecError(TileOpsError, ValueError):
    """A manifest entry that is invalid, located by file, line, op and field."""

    def __init__(self, message: str, location: Location, text: str | None = None, *, rule: str = "L0",
                 fix: str | None = None) -> None:
        super().__init__(_located(message, location, text, fix))
        self.message = message
        self.location = location
        self.text = text
        self.rule = rule
        self.fix = fix


def _located(message: str, location: Location, text: str | None, fix: str | None) -> str:
    """``file:line: Op.field: message (in 'text'); write instead: fix``, leaving out what is absent."""
    parts = [f"{location.where()}: "]
    if location.op:
        parts.append(f"{location.op}")
        parts.append(f".{location.field}: " if location.field else ": ")
    parts.append(message)
    if text is not None:
        parts.append(f" (in {text!r})")
    if fix:
        parts.append(f"; write instead: {fix}")
    return "".join(parts)


class CheckError(TileOpsError, ValueError):
    """A call or construction that violates its op's spec; the message names the declaration."""


class SelectionError(TileOpsError, RuntimeError):
    """No kernel (or more than one) can serve a call; the message lists every candidate and why."""


class PluginError(TileOpsError, RuntimeError):
    """A plugin that could not be loaded or whose declarations contradict each other."""


class KernelError(TileOpsError, RuntimeError):
    """A kernel raised while it ran; names the kernel, its backend and the call spec.

    The kernel's own exception is kept as ``__cause__``: the message says where the fault
    is, the cause says what it was.
    """


def fail(op: str, message: str, loc: Location | None) -> NoReturn:
    """Raise the one error type of a failed check: ``Op: message (file:line)``."""
    where = f" ({loc.where()})" if loc is not None and loc.file else ""
    raise CheckError(f"{op}: {message}{where}")
