"""The state of compiling one manifest entry: where it is, and the problems found so far.

The compiler never raises for a bad entry. Each problem is recorded with ``file:line``, the
op, the field and the text, and marks its field (and section) broken so that only the checks
that depend on it are skipped. The section compiler, the name resolver and the legacy-form
detector all report through :meth:`CompileState.problem`.
"""

from __future__ import annotations

import keyword

from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..errors import ExprError, Location, SpecError
from ..lang import ir
from ..lang.dtypes import DTypeIf
from ..lang.parse import parse_expr
from .legacy import presence_form
from .nodes import Expr, FamilySpec
from .yamlload import line_of

__all__ = ["CompileState", "is_identifier"]


class CompileState:
    """State of compiling one entry; collects problems instead of raising."""

    def __init__(self, name: str, raw: Any, file: str, line: int | None) -> None:
        self.name = name
        self.raw = raw
        self.file = file
        self.line = line
        self.problems: list[SpecError] = []
        self.broken: set[str] = set()
        #: Declared names whose declaration did not compile, with their kind: checks that
        #: only depend on them are skipped (field isolation) instead of reporting the name
        #: as unknown a second time.
        self.unparsed: dict[str, str] = {}
        #: Families declared inline in a tensor's shape or dtype, named once all are known.
        self._pending_inline: list[FamilySpec] = []

    # -- locations and problems -------------------------------------------------------------

    def loc(self, field: str, line: int | None = None) -> Location:
        return Location(self.file, line if line is not None else self.line, self.name, field)

    def problem(self, message: str, field: str, line: int | None, text: str | None = None, *, rule: str = "L0",
                fix: str | None = None, fatal: bool = True) -> None:
        self.problems.append(SpecError(message, self.loc(field, line), text, rule=rule, fix=fix))
        if fatal:
            self.broken.add(field)
            parts = field.split(".")
            section = ".".join(parts[:2]) if parts[0] == "signature" and len(parts) > 1 else parts[0]
            self.broken.add(section.split("[")[0])

    def validated(self, model: type[BaseModel], raw: Any, field: str, line: int | None) -> Any:
        """Validate ``raw`` against ``model``; on failure record each error at its own line."""
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors():
                where, where_line = field, line
                node: Any = raw
                for part in err["loc"]:
                    where_line = line_of(node, part, where_line)
                    where = f"{where}.{part}" if isinstance(part, str) else f"{where}[{part}]"
                    node = node.get(part) if isinstance(node, dict) else (
                        node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None)
                self.problem(err["msg"], where, where_line, None if node is None else str(node)[:80])
            self.broken.add(field)
            return None

    def expr(self, text: str, field: str, line: int | None) -> Expr | None:
        try:
            e = Expr(parse_expr(text), text, self.loc(field, line))
        except ExprError as exc:
            self.problem(exc.message, field, line, text, rule=exc.rule or "L0.expr", fix=exc.rewrite)
            return None
        if not field.startswith("signature.shape_rules"):  # shape rules get all of table 3 (NameResolver)
            self.presence(e.node, text, field, line)
        return e

    def parsed(self, parse: Callable[[str], Any], text: str, field: str, line: int | None) -> Any:
        try:
            value = parse(text)
        except ExprError as exc:
            self.problem(exc.message, field, line, text, rule=exc.rule or "L0.expr", fix=exc.rewrite)
            return None
        for condition in _conditions(value):
            self.presence(condition, text, field, line)
        return value

    def presence(self, node: ir.Node, text: str, field: str, line: int | None) -> None:
        """Report ``x is None`` in any expression (table 3 rows 4-5); it still evaluates, so not fatal."""
        found = presence_form(node, self._tensor_names())
        if found is not None:
            self.problem(found.message, field, line, text, rule=found.rule, fix=found.fix, fatal=False)

    def _tensor_names(self) -> frozenset[str]:
        sig = self.raw.get("signature") if isinstance(self.raw, dict) else None
        if not isinstance(sig, dict):
            return frozenset()
        return frozenset(n for key in ("inputs", "outputs") if isinstance(sig.get(key), dict) for n in sig[key])


def _conditions(value: Any) -> list[ir.Node]:
    """The conditions of a parsed conditional dtype (``T if cond else U``), outermost first."""
    out: list[ir.Node] = []
    while isinstance(value, DTypeIf):
        out.append(value.test)
        out.extend(_conditions(value.body))
        value = value.orelse
    return out


def is_identifier(text: Any) -> bool:
    """A name a spec may declare: a Python identifier, not a keyword (it becomes a parameter name of the
    op's forward and its torch.library schema: found in review), not starting with ``_``."""
    return (isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)
            and not text.startswith("_"))
