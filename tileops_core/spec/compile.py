"""Compile one raw manifest entry into an :class:`OpSpec`, field by field.

Every field is checked and parsed on its own: a field that does not parse is recorded
(with ``file:line``, op, field and text) and marked broken, and only what depends on it is
skipped. The work is layered, one module each: the state and its problems
(:mod:`.compile_state`), the legacy ``shape_rules`` forms of seed 000's table 3 with their
rewrites (:mod:`.legacy`), name resolution (:mod:`.resolve`), the sections
(:mod:`.sections`); this module compiles the entry's top level and its signature.
"""

from __future__ import annotations

from typing import Any, Mapping

from .compile_state import is_identifier
from .model import OpModel
from .nodes import OpSpec
from .sections import SectionCompiler
from .yamlload import LineDict, line_of

__all__ = ["compile_op"]

_TOP_FIELDS = tuple(OpModel.model_fields)
_REQUIRED_TOP = tuple(n for n, f in OpModel.model_fields.items() if f.is_required())
_SIG_FIELDS = ("inputs", "outputs", "params", "types", "families", "let", "static_dims", "shape_rules",
               "requires", "dtype_combos")


class _Compiler(SectionCompiler):
    """Compiles one entry: its top-level fields, then its signature section by section."""

    # -- the entry --------------------------------------------------------------------------

    def run(self) -> OpSpec:
        raw = self.raw
        if not isinstance(raw, dict):
            self.problem("a manifest entry must be a mapping", "", self.line, str(raw)[:60])
            return self._empty()
        for key in raw:
            if key not in _TOP_FIELDS:
                self.problem(f"unknown field {key!r} (known: {', '.join(_TOP_FIELDS)})", str(key),
                             line_of(raw, key), rule="L0.unknown-field")
        for key in _REQUIRED_TOP:
            if key not in raw:
                self.problem(f"required field {key!r} is missing", key, self.line, rule="L0.missing-field")
        scalars = self._scalars(raw)
        sig = raw.get("signature")
        sig_line = line_of(raw, "signature")
        parts = self._signature(sig, sig_line) if isinstance(sig, dict) else None
        if sig is not None and not isinstance(sig, dict):
            self.problem("signature must be a mapping", "signature", sig_line)
        if parts is None:
            parts = self._empty_parts()
        workloads = self._workloads(raw.get("workloads"), line_of(raw, "workloads"))
        roofline = self._roofline(raw.get("roofline"), line_of(raw, "roofline"), parts)
        source = self._source(raw.get("source"), line_of(raw, "source"))
        return OpSpec(
            name=self.name, file=self.file, line=self.line, **scalars, **parts, workloads=workloads,
            roofline=roofline, source=source, problems=tuple(self.problems), broken=frozenset(self.broken),
            field_lines=dict(raw.key_lines) if isinstance(raw, LineDict) else {},
        )

    def _empty_parts(self) -> dict[str, Any]:
        return dict(inputs={}, outputs={}, params={}, types={}, families={}, lets={}, static_dims={},
                    shape_rules=(), requires=(), dtype_combos=(), indices={})

    def _empty(self) -> OpSpec:
        return OpSpec(name=self.name, file=self.file, line=self.line, family=None, ref_api=None, status=None,
                      torch_compile_fullgraph=False, description=None, **self._empty_parts(), workloads=(),
                      roofline=None, source={}, problems=tuple(self.problems),
                      broken=frozenset(self.broken | {"signature"}))

    def _scalars(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"family": None, "ref_api": None, "status": None, "torch_compile_fullgraph": False,
                               "description": None}
        for key in ("family", "ref_api", "description"):
            if key in raw:
                if isinstance(raw[key], str) and raw[key]:
                    out[key] = raw[key]
                else:
                    self.problem(f"{key} must be a non-empty string", key, line_of(raw, key), str(raw[key]))
        if "status" in raw:
            if raw["status"] in ("spec-only", "implemented"):
                out["status"] = raw["status"]
            else:
                self.problem("status must be 'spec-only' or 'implemented'", "status", line_of(raw, "status"),
                             str(raw["status"]))
        if "torch_compile_fullgraph" in raw:
            if raw["torch_compile_fullgraph"] is True:
                out["torch_compile_fullgraph"] = True
            else:
                self.problem("torch_compile_fullgraph can only be the literal true (omit it to promise nothing)",
                             "torch_compile_fullgraph", line_of(raw, "torch_compile_fullgraph"),
                             str(raw["torch_compile_fullgraph"]))
        return out

    # -- signature --------------------------------------------------------------------------

    def _signature(self, sig: dict[str, Any], sig_line: int | None) -> dict[str, Any]:
        for key in sig:
            if key not in _SIG_FIELDS:
                self.problem(f"unknown field {key!r} (known: {', '.join(_SIG_FIELDS)})", f"signature.{key}",
                             line_of(sig, key, sig_line), rule="L0.unknown-field")
        for key in ("inputs", "outputs"):
            if key not in sig:
                self.problem(f"required field {key!r} is missing", f"signature.{key}", sig_line,
                             rule="L0.missing-field")

        def section(key: str) -> tuple[Any, int | None]:
            value = sig.get(key)
            return value, line_of(sig, key, sig_line)

        types = self._types(*section("types"))
        params = self._params(*section("params"), frozenset(types))
        inputs = self._tensors(*section("inputs"), "input")
        outputs = self._tensors(*section("outputs"), "output")
        families = self._families(*section("families"))
        lets = self._mapping_of_exprs(*section("let"), "signature.let", "let")
        static_dims = self._static_dims(*section("static_dims"))
        shape_rules = self._expr_list(*section("shape_rules"), "signature.shape_rules")
        requires = self._expr_list(*section("requires"), "signature.requires")
        combos = self._dtype_combos(*section("dtype_combos"))
        self._anonymous_families(inputs, outputs, families)
        indices = self._resolve(types, params, inputs, outputs, families, lets, static_dims, shape_rules, requires,
                                combos)
        return dict(inputs=inputs, outputs=outputs, params=params, types=types, families=families, lets=lets,
                    static_dims=static_dims, shape_rules=tuple(shape_rules), requires=tuple(requires),
                    dtype_combos=tuple(combos), indices=indices)


def compile_op(name: str, raw: Any, file: str, line: int | None) -> OpSpec:
    """Compile one manifest entry; never raises for a bad entry (problems are collected)."""
    compiler = _Compiler(name, raw, file, line)
    if not is_identifier(name):
        compiler.problem(f"op name {name!r} is not a valid Python class name", "", line, str(name), rule="L1.name")
    return compiler.run()
