"""Instantiate one workload row: the one place that turns a row into shapes, dtypes and indices.

What the row leaves out is derived exactly as a call derives it: construction values from
the row and the params' defaults; the branch from the discriminants (type families resolved
by :class:`~tileops_core.spec.discriminants.Discriminants`); indices by the runtime's own
solve plan (:func:`~tileops_core.lang.unify.run_solve`) over the shapes the row (or its
generator) gives; the remaining shapes from the declarations; dtypes per ``dtypes`` entry
(:mod:`.dtypes`). Nothing is allocated and torch is not imported.

Two callers, two modes. The validator instantiates *strictly* (:func:`check_row`): every
finding is returned, and ``requires``, ``shape_rules``, ``dtype_combos`` and the roofline are
evaluated on the result (:mod:`.checks`). The benchmarks, tests and ``tileops explain``
instantiate *leniently* (:func:`instantiate_case`): a value the spec does not accept is
passed on as written (so a benchmark can watch the op refuse it), refinements are left to
the op, and only what leaves nothing to run raises.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Mapping, NoReturn

from ..errors import ExprError, SpecError
from ..lang.dtypes import DTypeExpr
from ..lang.evaluate import Unbound, compile_node
from ..lang.parse import parse_expr
from ..lang.shapes import Axis, ShapePattern
from ..lang.unify import UnifyError, run_solve
from ..spec.analysis import SpecAnalysis
from ..spec.discriminants import Combination, Missing
from ..spec.nodes import REQUIRED, OpSpec, WorkloadRow
from ..spec.symbolic import UNKNOWN, attempt
from .checks import EVAL_ERRORS, check_roofline, check_shape_rules, show
from .dtypes import case_dtypes
from .instance import DTypeCase, GeneratedMeta, RowFinding, RowInstance
from .keys import row_presence

__all__ = ["analysis_of", "check_row", "instantiate_case"]

_analyses: "weakref.WeakKeyDictionary[OpSpec, SpecAnalysis]" = weakref.WeakKeyDictionary()
_analyses_lock = threading.Lock()


def analysis_of(spec: OpSpec) -> SpecAnalysis:
    """The spec's :class:`SpecAnalysis`, made once per spec (its discriminants and plans are reused
    by every row the benchmarks and tests instantiate)."""
    with _analyses_lock:
        analysis = _analyses.get(spec)
        if analysis is None:
            analysis = _analyses[spec] = SpecAnalysis(spec)
        return analysis


class _Stop(Exception):
    """Stops instantiating a row after a finding that leaves nothing sound to go on with."""


class _Row:
    """The state of instantiating one row."""

    def __init__(self, analysis: SpecAnalysis, row: WorkloadRow, generated: GeneratedMeta | None,
                 strict: bool) -> None:
        self.analysis = analysis
        self.spec = analysis.spec
        self.row = row
        self.values = row.values
        self.generated = generated or GeneratedMeta()
        self.strict = strict
        self.findings: list[RowFinding] = []

    def note(self, finding: RowFinding) -> None:
        """A finding that does not stop the row (only the strict mode keeps it)."""
        if self.strict:
            self.findings.append(finding)

    def fail(self, rule: str, message: str, fix: str | None = None) -> NoReturn:
        self.findings.append(RowFinding(rule, message, fix, message))
        raise _Stop()

    # -- construction values and the branch --------------------------------------------------

    def construction(self) -> dict[str, Any]:
        spec, values = self.spec, self.values
        out: dict[str, Any] = {}
        for name, p in spec.params.items():
            if name in values:
                v = values[name]
                if not p.type.accepts(v):
                    if self.strict:
                        self.fail("L4.value", f"{name} = {v!r} is not a {p.type_text}")
                    out[name] = v  # passed on as written: the op's own check refuses it
                    continue
                out[name] = p.type.normalise(v)
            elif p.default is not REQUIRED:
                out[name] = p.default
            elif self.strict:
                self.fail("L4.value", f"param {name} ({p.type_text}) has no default and the row does not give it",
                          fix=f"add {name}: <value> to the row")
        for name in spec.static_dims:
            if name in values:
                v = values[name]
                if self.strict and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                    self.fail("L4.value", f"static dim {name} = {v!r} is not a non-negative int")
                out[name] = v
        return out

    def combination(self, construct: Mapping[str, Any], present: frozenset[str]) -> Combination:
        spec = self.spec
        env: dict[str, Any] = {n: (UNKNOWN if n in present else None) for n in spec.inputs}
        env.update({n: UNKNOWN for n in spec.outputs})
        env.update({n: UNKNOWN for n in spec.static_dims})
        env.update(construct)
        self.analysis.disc.settle_lets(env)
        excluded_by = None
        for e in spec.requires:
            res = attempt(e.fn, env)
            if res.decided and not res.value:
                excluded_by = e
                break
        return Combination(-1, (), (), env, {}, excluded_by)

    def declarations(self, combo: Combination, present: frozenset[str]) -> tuple[
            dict[str, ShapePattern], dict[str, ShapePattern], dict[str, DTypeExpr | None]]:
        """Input shape patterns, output shape patterns and dtype declarations of the row's branch."""
        spec = self.spec
        patterns: dict[str, ShapePattern] = {}
        out_patterns: dict[str, ShapePattern] = {}
        decls: dict[str, DTypeExpr | None] = {}
        for t in [*spec.inputs.values(), *spec.outputs.values()]:
            if t.role == "input" and t.name not in present:
                continue
            for what, decl in (("shape", t.shape), ("dtype", t.dtype)):
                res = self.analysis.disc.resolve(decl, combo) if decl is not None else None
                target = None if res is None else res.decl
                if isinstance(target, Missing):
                    self.fail("C7.instantiate", f"{t.name}'s {what}: type family {target.family.name} has no case for "
                              f"{target.value!r}")
                if what == "dtype":
                    decls[t.name] = None if isinstance(target, ShapePattern) else target
                elif isinstance(target, ShapePattern):
                    (patterns if t.role == "input" else out_patterns)[t.name] = target
        return patterns, out_patterns, decls

    # -- shapes -----------------------------------------------------------------------------

    def given_indices(self) -> dict[str, Any]:
        spec = self.spec
        given: dict[str, Any] = {}
        for name, kind in spec.indices.items():
            if name in self.values:
                v = self.values[name]
                if kind == "shape":
                    if not (isinstance(v, list) and all(_is_size(i) for i in v)):
                        self.fail("L4.value", f"Shape index {name} = {v!r} is not a list of non-negative ints")
                    v = tuple(v)
                elif kind == "dim" and not _is_size(v):
                    self.fail("L4.value", f"index {name} = {v!r} is not a non-negative int")
                given[name] = v
        for name, v in self.generated.indices.items():
            given.setdefault(name, tuple(v) if isinstance(v, list) else v)
        return given

    def input_shape(self, name: str, pattern: ShapePattern | None, env: Mapping[str, Any]) -> tuple[int, ...]:
        if name in self.generated.shapes:
            return tuple(self.generated.shapes[name])
        key = f"{name}_shape"
        if key in self.values:
            raw = self.values[key]
            if not isinstance(raw, list):
                self.fail("L4.value", f"{key} = {raw!r} is not a list")
            return tuple(self.shape_item(key, item, env) for item in raw)
        if pattern is None:
            self.fail("C7.instantiate", f"input {name} declares no shape, so the row must give {key}",
                      fix=f"add {key}: [...] to the row")
        return self.instantiate(pattern, env, f"input {name}", f"or {key}: [...]")

    def shape_item(self, key: str, item: Any, env: Mapping[str, Any]) -> int:
        """One item of ``<input>_shape``: an int, or an expression over the row's values (``T``)."""
        if _is_size(item):
            return int(item)
        if not isinstance(item, str):
            self.fail("L4.value", f"{key} item {item!r} is neither a non-negative int nor an index name")
        try:
            value = compile_node(parse_expr(item))(env)
        except Unbound as exc:
            self.fail("C7.instantiate", f"{key} item {item!r} needs {exc.name}, which the row does not give",
                      fix=f"add {exc.name}: <value> to the row")
        except (ExprError, TypeError, ValueError, ZeroDivisionError) as exc:
            self.fail("C7.instantiate", f"{key} item {item!r} cannot be evaluated: {exc}")
        if not _is_size(value):
            self.fail("C7.instantiate", f"{key} item {item!r} = {value!r} is not a non-negative int")
        return int(value)

    def instantiate(self, pattern: ShapePattern, env: Mapping[str, Any], what: str, alt: str = "") -> tuple[int, ...]:
        dims: list[Any] = []
        for item in pattern.items:
            try:
                if isinstance(item, Axis):
                    dims.append(compile_node(item.node)(env))
                else:
                    part = env[item.name]
                    if not isinstance(part, (tuple, list)):
                        self.fail("C7.instantiate", f"{what} {pattern.text}: *{item.name} = {part!r} is not a list")
                    dims.extend(part)
            except (Unbound, KeyError) as exc:
                name = exc.name if isinstance(exc, Unbound) else exc.args[0]
                self.fail("C7.instantiate", f"cannot instantiate {what} {pattern.text}: {name} is given neither by "
                          "the row nor by its generator", fix=f"add {name}: <value> {alt}".strip())
            except EVAL_ERRORS as exc:
                self.fail("C7.instantiate", f"cannot instantiate {what} {pattern.text}: {exc}")
        for d in dims:
            if not _is_size(d):
                self.fail("C7.instantiate", f"{what} {pattern.text} instantiates to {dims}, which has an axis that is "
                          "not a non-negative int")
        return tuple(dims)

    def static_dims(self, construct: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
        """The construction values plus each static dim read from its tensor's shape (and checked
        against the value the row gives)."""
        env: dict[str, Any] = dict(construct)
        for name, sd in self.spec.static_dims.items():
            if sd.tensor not in shapes:
                continue
            try:
                axis = compile_node(sd.axis)(env)
                actual = shapes[sd.tensor][axis]
            except EVAL_ERRORS as exc:
                self.fail("C6.unify", f"static dim {name} = {sd.expr.text} cannot be read from {sd.tensor} shape "
                          f"{list(shapes[sd.tensor])}: {exc}")
            if name in env and env[name] != actual:
                self.fail("C6.unify", f"static dim {name} = {env[name]}, but {sd.expr.text} is {actual} "
                          f"({sd.tensor} shape {list(shapes[sd.tensor])})")
            env[name] = actual
        return env

    def solve(self, env: dict[str, Any], patterns: Mapping[str, ShapePattern], shapes: Mapping[str, tuple[int, ...]],
              given: Mapping[str, Any]) -> dict[str, Any]:
        """Unify the inputs' shapes with their declarations; the row's index values must agree."""
        solve_patterns = {n: p for n, p in patterns.items() if n in shapes}
        origin: dict[str, str] = {}
        try:
            run_solve(self.analysis.plan(solve_patterns), solve_patterns, shapes, env, origin)
        except UnifyError as exc:
            self.fail("C6.unify", exc.message)
        except Unbound as exc:
            self.fail("C7.instantiate", f"unifying the inputs needs {exc.name}, which has no value")
        except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError) as exc:  # (found in review:
            # an axis `N // M` on a row with M = 0 ended the validator in a traceback)
            self.fail("C7.instantiate", f"unifying the inputs fails: {type(exc).__name__}: {exc}")
        for name, value in given.items():
            if name in env and _norm(env[name]) != _norm(value):
                source = origin.get(name, "the inputs")
                self.fail("C6.unify", f"the row gives {name} = {show(value)}, but {source} gives {name} = "
                          f"{show(env[name])}")
            env.setdefault(name, value)
        self.analysis.disc.settle_lets(env)
        return {k: v for k, v in env.items() if v is not UNKNOWN}

    # -- dtypes -----------------------------------------------------------------------------

    def dtype_entries(self) -> list[Any]:
        """The row's ``dtypes``: dtype names (taken by the inputs whose set has them) or ``{tensor: dtype}``."""
        raw = self.values.get("dtypes")
        if raw is None:
            return [None]
        if not isinstance(raw, list) or not raw or not all(
                isinstance(d, str) or (isinstance(d, dict) and all(isinstance(v, str) for v in d.values()))
                for d in raw):
            self.fail("L4.value", f"dtypes = {raw!r} is not a non-empty list of dtype names or {{tensor: dtype}} "
                      "mappings")
        for d in raw:
            for name in d if isinstance(d, dict) else ():
                if name not in self.spec.inputs:
                    self.fail("L4.value", f"dtypes entry {d!r} names {name!r}, which is not an input")
        return list(raw)

    # -- the whole row ----------------------------------------------------------------------

    def run(self, entries: list[Any] | None) -> RowInstance:
        spec = self.spec
        construct = self.construction()
        present = row_presence(spec, self.row) | {n for n in self.generated.shapes if n in spec.inputs}
        combo = self.combination(construct, present)
        if combo.excluded_by is not None and self.strict:
            passed = ", ".join(f"{t.name} {'present' if t.name in present else 'absent'}"
                               for t in spec.inputs.values() if t.optional)
            self.fail("C6.requires", f"its discriminants ({passed or 'its params'}) are excluded by requires "
                      f"{combo.excluded_by.text!r}")
        patterns, out_patterns, decls = self.declarations(combo, present)
        given = self.given_indices()
        ienv: dict[str, Any] = {**construct, **given}
        self.analysis.disc.settle_lets(ienv)
        ienv = {k: v for k, v in ienv.items() if v is not UNKNOWN}
        shapes = {t.name: self.input_shape(t.name, patterns.get(t.name), ienv)
                  for t in spec.inputs.values() if t.name in present}
        env = self.solve(self.static_dims(construct, shapes), patterns, shapes, given)
        outputs: dict[str, tuple[int, ...]] = {}
        for o in spec.outputs.values():
            if o.alias:
                if o.alias in shapes:
                    outputs[o.name] = shapes[o.alias]
                continue
            pattern = out_patterns.get(o.name)
            if pattern is not None:
                outputs[o.name] = self.instantiate(pattern, env, f"output {o.name}")
        if self.strict:
            for finding in check_shape_rules(spec, env, shapes, outputs):
                self.note(finding)
        cases: list[DTypeCase] = []
        for entry in self.dtype_entries() if entries is None else entries:
            got, found = case_dtypes(spec, self.row, entry, present, decls, construct, combo.env, strict=self.strict)
            if got is None and not self.strict:
                self.fail(found[0].rule, found[0].message)
            for finding in found:
                self.note(finding)
            if got is not None:
                cases.append(DTypeCase(entry, got))
        instance = RowInstance(self.row, construct, present, shapes, outputs, cases, env)
        if self.strict and cases and not self.analysis.broken("roofline"):
            for finding in check_roofline(spec, instance, cases[0]):
                self.note(finding)
        return instance


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _norm(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def check_row(analysis: SpecAnalysis, row: WorkloadRow,
              generated: GeneratedMeta | None = None) -> tuple[RowInstance | None, list[RowFinding]]:
    """Instantiate ``row`` strictly (the validator): the instance is None when a finding stopped it."""
    state = _Row(analysis, row, generated, strict=True)
    try:
        instance: RowInstance | None = state.run(None)
    except _Stop:
        instance = None
    return instance, state.findings


def instantiate_case(spec: OpSpec, row: WorkloadRow, entry: Any = None,
                     generated: GeneratedMeta | None = None) -> tuple[RowInstance, DTypeCase]:
    """Instantiate ``row`` leniently for one ``dtypes`` entry (the benchmarks, tests, ``tileops explain``).

    ``entry`` may be any dtype name or ``{tensor: dtype}`` mapping, not only one of the row's.
    Raises :class:`SpecError` (rule C7) when the row leaves a shape or an input's dtype undetermined.
    """
    state = _Row(analysis_of(spec), row, generated, strict=False)
    try:
        instance = state.run([entry])
    except _Stop:
        finding = state.findings[-1]
        raise SpecError(f"workload row {row.label!r}: {finding.message}", row.loc, rule="C7",
                        fix=finding.fix) from None
    return instance, instance.cases[0]
