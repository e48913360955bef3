"""Check 2: type families are exhaustive, non-overlapping and acyclic.

Exhaustive and non-overlapping are judged on the values a match actually takes: on every
combination that ``requires`` does not exclude, the family must have a case for its
match's value (a missing case is ``C2.missing``). A case no such combination selects is
dead: an explicit key that the match can never equal is ``C2.unreachable`` (a typo in an
enum value, ``"true"`` written for ``true``), and a ``_`` case that never fires because the
explicit cases already cover every value overlaps them (``C2.overlap``). Cycles between
families and families of the wrong kind (shapes where a dtype is declared) are checked
once, without combinations.
"""

from __future__ import annotations

from typing import Any

from ..spec.discriminants import Combination
from ..spec.nodes import FamilyRef, FamilySpec
from ..spec.symbolic import OTHER
from .context import Branch, SpecContext
from .cycles import find_cycles
from .diagnostics import Diagnostic

__all__ = ["FamilyCheck"]


def _show(value: Any, fam: FamilySpec) -> str:
    if value is OTHER:
        named = [repr(k) for k, _ in fam.cases if k != "_"]
        return "values other than " + ", ".join(named) if named else "any value"
    return repr(value)


class FamilyCheck:
    """Coverage per combination (visit), then dead cases, cycles and kinds (finish)."""

    def __init__(self, ctx: SpecContext) -> None:
        self.ctx = ctx
        self.selected: dict[str, set[Any]] = {}

    def visit(self, combo: Combination, branch: Branch | None) -> list[Diagnostic]:
        if branch is None:
            return []
        out = []
        for fam, key in branch.cases:
            self.selected.setdefault(fam.name, set()).add(key)
        for tensor, what, missing in branch.missing:
            fam = missing.family
            self.selected.setdefault(fam.name, set())
            shown = _show(missing.value, fam)
            keys = ", ".join(repr(k) for k, _ in fam.cases)
            out.append(self.ctx.diag(
                "C2.missing", f"type family {fam.name} (match {fam.match.text}, cases {keys}) has no case for "
                f"{shown}, which {tensor.name}'s {what} needs on: {combo.describe()}", loc=fam.loc,
                fix=f"add a case for {shown}" + (" or a '_' case" if missing.value is not OTHER else " ('_')"),
                key=f"{fam.name}:{missing.value!r}"))
        return out

    def finish(self) -> list[Diagnostic]:
        ctx = self.ctx
        out = self._cycles() + self._kinds()
        for name, keys in self.selected.items():
            fam = ctx.spec.families[name]
            for key, _ in fam.cases:
                if key in keys and any(type(k) is type(key) for k in keys if k == key):
                    continue
                if key == "_":
                    out.append(ctx.diag("C2.overlap", f"the '_' case of type family {name} never applies: the "
                                        f"explicit cases already cover every value of {fam.match.text}", loc=fam.loc,
                                        fix="remove the '_' case", key=f"{name}:_"))
                else:
                    out.append(ctx.diag("C2.unreachable", f"case {key!r} of type family {name} is never selected: "
                                        f"{fam.match.text} does not take that value on any combination requires "
                                        "allows", loc=fam.loc, key=f"{name}:{key!r}"))
        return out

    def _cycles(self) -> list[Diagnostic]:
        families = self.ctx.spec.families
        edges = {n: [c.name for _, c in f.cases if isinstance(c, FamilyRef) and c.name in families]
                 for n, f in families.items()}
        return [self.ctx.diag("C2.cycle", "type families refer to each other in a cycle: " + " -> ".join(cycle),
                              loc=families[cycle[0]].loc) for cycle in find_cycles(edges)]

    def _kinds(self) -> list[Diagnostic]:
        spec = self.ctx.spec
        out: list[Diagnostic] = []
        for t in [*spec.inputs.values(), *spec.outputs.values()]:
            for what, decl in (("shape", t.shape), ("dtype", t.dtype)):
                seen: set[str] = set()
                todo = [decl.name] if isinstance(decl, FamilyRef) else []
                while todo:
                    name = todo.pop()
                    fam = spec.families.get(name)
                    if fam is None or name in seen:
                        continue
                    seen.add(name)
                    if fam.kind != what:
                        out.append(self.ctx.diag("C2.kind", f"{t.name}'s {what} uses type family {name}, whose "
                                                 f"cases are {fam.kind}s", loc=t.loc, key=f"{t.name}:{what}:{name}"))
                    todo.extend(c.name for _, c in fam.cases if isinstance(c, FamilyRef))
        return out
