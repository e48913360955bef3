"""Check 3 (and L2's "outputs fully determined"): every index used on a branch is solvable.

On each combination that ``requires`` allows, the present inputs' shapes are unified in the
order :func:`~tileops_core.lang.unify.plan_solve` fixes (the same plan the runtime follows).
Then:

* a Dim or Shape index named by a present input that the plan cannot bind (it only appears
  where it is not a lone name, an affine ``a * M + e`` or the one unknown variadic part; or
  next to another unknown, so it has several solutions) is ``C3.unsolved``;
* an output shape needs names the inputs, params, static dims and lets determine; an index
  that only an absent optional input would bind is ``C3.unsolved`` on that combination, one
  that appears in no input at all is ``C3.output-only`` (it must be a param or a let);
* a DType index in an output's dtype must be bound by a present input's dtype.
"""

from __future__ import annotations

from typing import Mapping

from ..lang.dtypes import DTypeExpr, DTypeIf, DTypeRef
from ..lang.shapes import ShapePattern
from ..spec.discriminants import Combination
from ..spec.nodes import FamilyRef, FamilySpec, TensorSpec
from .context import Branch, SpecContext
from .diagnostics import Diagnostic

__all__ = ["SolveCheck", "dtype_index_refs"]


def dtype_index_refs(expr: DTypeExpr | None, indices: set[str]) -> set[str]:
    """DType indices a (resolved) dtype declaration names."""
    if isinstance(expr, DTypeRef):
        return {expr.name} & indices
    if isinstance(expr, DTypeIf):
        return dtype_index_refs(expr.body, indices) | dtype_index_refs(expr.orelse, indices)
    return set()


class SolveCheck:
    """Solvability of every index used on each branch."""

    def __init__(self, ctx: SpecContext) -> None:
        self.ctx = ctx
        spec = ctx.spec
        self.dtype_indices = {n for n, k in spec.indices.items() if k == "dtype"}
        self.shape_indices = {n for n, k in spec.indices.items() if k != "dtype"}

    def visit(self, combo: Combination, branch: Branch | None) -> list[Diagnostic]:
        if branch is None or branch.incomplete:
            return []
        ctx, spec = self.ctx, self.ctx.spec
        out: list[Diagnostic] = []
        patterns = branch.input_patterns(spec)
        for name in sorted(branch.plan.unsolved):
            if name in spec.lets:
                continue  # reported below, where an output needs it
            where = next((spec.inputs[t] for t, p in patterns.items() if name in p.names()), None)
            reason = branch.plan.reasons.get(name, "")
            several = self._several(name, patterns)
            out.append(ctx.diag("C3.unsolved", f"index {name} cannot be solved from the inputs on {combo.describe()}: "
                                f"{reason}" + (f" ({several})" if several else ""),
                                loc=where.loc if where else None, key=f"unsolved:{name}",
                                fix=f"give {name} its own axis as a lone name, or compute it with a let"))
        for o in spec.outputs.values():
            pattern = branch.shapes.get(o.name)
            if pattern is None or o.alias:
                continue
            for name in sorted(pattern.names() - branch.determined):
                out.extend(self._undetermined(combo, branch, o, pattern, name))
        bound = set()
        for t in spec.inputs.values():
            if t.name in branch.present:
                bound |= dtype_index_refs(branch.dtypes.get(t.name), self.dtype_indices)
        for o in spec.outputs.values():
            for name in sorted(dtype_index_refs(branch.dtypes.get(o.name), self.dtype_indices) - bound):
                absent = self._absent_binders(branch, name, dtype=True)
                if absent:
                    out.append(ctx.diag("C3.unsolved", f"output {o.name}'s dtype {o.dtype_text} needs the DType index "
                                        f"{name}, which only {', '.join(absent)} binds, absent on {combo.describe()}",
                                        loc=o.loc.child("dtype"), key=f"dtype:{o.name}:{name}"))
                else:
                    out.append(ctx.diag("C3.output-only", f"DType index {name} appears only in output {o.name}'s dtype; "
                                        "no input binds it", loc=o.loc.child("dtype"), key=f"dtype:{o.name}:{name}",
                                        fix="use same_as(<input>) or a dtype param"))
        return out

    def finish(self) -> list[Diagnostic]:
        return []

    def _several(self, name: str, patterns: dict[str, ShapePattern]) -> str:
        for p in patterns.values():
            variadics = [v for v in p.variadics if v in self.shape_indices or v == name]
            if name in variadics and len(variadics) > 1:
                return f"{p.text} has two unknown variadic parts, so the split of its axes has several solutions"
        return ""

    def _absent_binders(self, branch: Branch, name: str, dtype: bool = False) -> list[str]:
        """Absent inputs whose declaration would bind ``name``."""
        spec = self.ctx.spec
        out = []
        for t in spec.inputs.values():
            if t.name in branch.present:
                continue
            decls = _declarations(t, spec.families, "dtype" if dtype else "shape")
            if dtype:
                hit = any(name in dtype_index_refs(d, self.dtype_indices) for d in decls
                          if not isinstance(d, ShapePattern))
            else:
                hit = any(isinstance(d, ShapePattern) and name in d.names() for d in decls)
            if hit:
                out.append(t.name)
        return out

    def _undetermined(self, combo: Combination, branch: Branch, o: TensorSpec, pattern: ShapePattern,
                      name: str) -> list[Diagnostic]:
        ctx, spec = self.ctx, self.ctx.spec
        loc = o.loc.child("shape")
        if name in branch.plan.unsolved and name not in spec.lets:
            return []  # reported where the input declares it
        if name in spec.lets:
            let = spec.lets[name]
            needs = sorted(let.names - branch.determined - set(spec.lets))
            if any(n in branch.plan.unsolved for n in needs):
                return []
            return [ctx.diag("C3.unsolved", f"output {o.name} {pattern.text} needs let {name} = {let.text}, which "
                             f"cannot be computed on {combo.describe()}: {', '.join(needs) or 'its lets'} have no value",
                             loc=loc, key=f"let:{o.name}:{name}")]
        absent = self._absent_binders(branch, name)
        if absent:
            return [ctx.diag("C3.unsolved", f"output {o.name} {pattern.text} needs {name}, which only "
                             f"{', '.join(absent)} determines, absent on {combo.describe()}", loc=loc,
                             key=f"absent:{o.name}:{name}")]
        return [ctx.diag("C3.output-only", f"index {name} appears only in outputs ({o.name} {pattern.text}): no input "
                         "determines it", loc=loc, key=f"output-only:{name}",
                         fix=f"declare {name} as a param or a let, or name it in an input's shape")]


def _declarations(t: TensorSpec, families: Mapping[str, FamilySpec], what: str) -> list[ShapePattern | DTypeExpr]:
    """Every declaration a tensor's shape/dtype field can lead to, through all family cases."""
    decl = t.shape if what == "shape" else t.dtype
    out: list[ShapePattern | DTypeExpr] = []
    todo, seen = [decl], set()
    while todo:
        d = todo.pop()
        if isinstance(d, FamilyRef):
            fam = families.get(d.name)
            if fam is None or d.name in seen:
                continue
            seen.add(d.name)
            todo.extend(c for _, c in fam.cases)
        elif d is not None:
            out.append(d)
    return out
