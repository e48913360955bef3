"""Check 1 (dynamic half): on every combination, expressions read only what exists.

Seed 001's optional-input rule 6: a rule that reads an optional input guards itself,
``not present(x) or <use of x>``; the ``and`` form is false on every legal call without
``x`` and so rejects them. The same holds for Maybe params and for indices that only an
optional input binds. Here each ``shape_rules`` entry, ``let`` and roofline formula is
evaluated on each allowed combination's environment (absent things are None, present
ones unknown): an evaluation that trips over an absent value, or a rule that is plainly
false there, is reported. A ``requires`` entry must be decidable from the discriminants
alone (``C1.requires``); if it excludes every combination the spec describes no call.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..spec.discriminants import Combination
from ..spec.nodes import Expr
from ..spec.symbolic import UNKNOWN, attempt
from .context import Branch, SpecContext
from .diagnostics import Diagnostic

__all__ = ["GuardCheck"]


class GuardCheck:
    """Guards of refinements, lets and roofline formulas; decidability of requires."""

    def __init__(self, ctx: SpecContext) -> None:
        self.ctx = ctx
        self.allowed = 0
        self.seen = 0

    def visit(self, combo: Combination, branch: Branch | None) -> list[Diagnostic]:
        ctx, spec = self.ctx, self.ctx.spec
        out: list[Diagnostic] = []
        self.seen += 1
        for i, e in enumerate(spec.requires):
            if ctx.flagged(e.loc):
                continue
            res = attempt(e.fn, combo.env)
            if not res.decided and res.absent is None:
                what = res.unbound or "an axis length or a param value"
                out.append(ctx.diag("C1.requires", f"requires {e.text!r} cannot be decided from the discriminants "
                                    f"(it reads {what}); a domain restriction reads only present(...) and bool, enum, "
                                    "Maybe or ADT params", loc=e.loc, text=e.text, key=f"requires:{i}",
                                    fix="move it to shape_rules"))
        if branch is None:
            return out
        self.allowed += 1
        if branch.incomplete:
            return out  # the family check reports why the branch has no declarations
        absent = self._absent(combo)
        for e in spec.shape_rules:
            if not ctx.flagged(e.loc) and e not in ctx.disc.domain_rules:
                out.extend(self._rule(combo, branch, e, absent))
        env = dict(branch.env)
        for name, e in spec.lets.items():
            if all(n in env for n in e.names) and not ctx.flagged(e.loc):
                out.extend(self._value(combo, branch, e, f"let {name}", env, absent))
        if spec.roofline is not None:
            renv = dict(env)
            for name, e in spec.roofline.vars.items():
                res = attempt(e.fn, renv)
                if not ctx.flagged(e.loc):
                    out.extend(self._report(combo, branch, e, f"roofline var {name}", res, absent))
                if res.decided:
                    renv[name] = res.value
                elif res.absent is None and res.unbound is None:
                    renv[name] = UNKNOWN
            for formula in (spec.roofline.flops, spec.roofline.bytes):
                if formula is not None and not ctx.flagged(formula.loc) and all(
                        n in renv or n not in spec.roofline.vars for n in formula.names):
                    out.extend(self._value(combo, branch, formula, formula.loc.field or "roofline", renv, absent))
        return out

    def finish(self) -> list[Diagnostic]:
        ctx, spec = self.ctx, self.ctx.spec
        out = [ctx.diag("L2.domain-rule", f"shape rule {e.text!r} reads only discriminants: it restricts which calls "
                        "exist (a domain restriction), which requires states", loc=e.loc, text=e.text,
                        fix=f'requires: ["{e.text}"]') for e in ctx.disc.domain_rules if not ctx.flagged(e.loc)]
        restrictions = (*spec.requires, *ctx.disc.domain_rules)
        if self.seen and not self.allowed and restrictions:
            first = restrictions[0]
            out.append(ctx.diag("C2.empty-domain", "requires excludes every discriminant combination: the spec "
                                "describes no call", loc=first.loc, text=first.text))
        return out

    # -- helpers ----------------------------------------------------------------------------

    def _absent(self, combo: Combination) -> list[str]:
        """Names that are absent (None) on ``combo``: optional inputs and Maybe params."""
        spec = self.ctx.spec
        return [n for n in (*spec.inputs, *spec.params) if n in combo.env and combo.env[n] is None]

    def _rule(self, combo: Combination, branch: Branch, e: Expr, absent: list[str]) -> Iterable[Diagnostic]:
        res = attempt(e.fn, branch.env)
        if res.decided and not res.value:
            mentioned = [n for n in absent if n in e.names]
            if mentioned:
                names = ", ".join(mentioned)
                return [self.ctx.diag("C1.guard", f"shape rule {e.text!r} is false on every call where {names} "
                                      f"{'is' if len(mentioned) == 1 else 'are'} absent ({combo.describe()}); a "
                                      "rule on an optional value guards itself", loc=e.loc, text=e.text,
                                      fix=f"not present({mentioned[0]}) or <the check>", key=f"false:{e.text}")]
            return [self.ctx.diag("L2.rule-false", f"shape rule {e.text!r} is false on every call of "
                                  f"{combo.describe()}", loc=e.loc, text=e.text, key=f"false:{e.text}")]
        return self._report(combo, branch, e, "shape rule", res, absent)

    def _value(self, combo: Combination, branch: Branch, e: Expr, what: str, env: Mapping[str, Any],
               absent: list[str]) -> Iterable[Diagnostic]:
        return self._report(combo, branch, e, what, attempt(e.fn, env), absent)

    def _report(self, combo: Combination, branch: Branch, e: Expr, what: str, res: Any,
                absent: list[str]) -> list[Diagnostic]:
        spec = self.ctx.spec
        if res.absent is not None:
            mentioned = [n for n in absent if n in e.names] or absent
            names = ", ".join(mentioned)
            return [self.ctx.diag("C1.guard", f"{what} {e.text!r} reads {names}, absent on {combo.describe()}, "
                                  "without a present() guard", loc=e.loc, text=e.text,
                                  fix=f"guard it: not present({mentioned[0]}) or ..." if what == "shape rule" else
                                  f"guard it: ... if present({mentioned[0]}) else ...", key=f"absent:{e.text}")]
        name = res.unbound
        if name is not None and name not in branch.plan.unsolved and (name in spec.indices or name in spec.lets):
            binders = [t.name for t in spec.inputs.values() if t.optional and t.name not in branch.present]
            why = f"only {', '.join(binders)} would bind it" if binders else "nothing binds it on this branch"
            return [self.ctx.diag("C1.guard", f"{what} {e.text!r} reads {name}, which has no value on "
                                  f"{combo.describe()} ({why}), without a present() guard", loc=e.loc, text=e.text,
                                  fix=f"guard it with present({binders[0]})" if binders else None,
                                  key=f"unbound:{e.text}:{name}")]
        return []
