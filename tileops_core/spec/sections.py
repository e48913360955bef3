"""The sections of a manifest entry, each compiled on its own into spec nodes.

``types``, ``params``, ``inputs``/``outputs``, ``families`` (declared and inline), ``let``,
``shape_rules``/``requires``, ``static_dims``, ``dtype_combos``, ``workloads``, ``roofline``
and ``source``: each is validated against its pydantic model (:mod:`.model`) and its strings
are parsed into the IR. A section that does not parse is recorded and marked broken; the
others still compile (field isolation).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..lang import ir
from ..lang.dtypes import DTypeSet, parse_dtype
from ..lang.shapes import parse_shape
from ..lang.types import ParamType, parse_type
from .compile_state import is_identifier
from .model import NO_DEFAULT, FamilyModel, OutputModel, ParamModel, RooflineModel, TensorModel, TypeModel
from .nodes import (
    REQUIRED, ADTSpec, Expr, FamilyRef, FamilySpec, ParamSpec, RooflineSpec, StaticDim, TensorSpec, VariantSpec,
    WorkloadRow,
)
from .resolve import NameResolver
from .yamlload import line_of

__all__ = ["RESERVED_PARAMS", "SectionCompiler"]

#: Keyword arguments of Op.__init__ and the compile boundary that no spec param may shadow.
RESERVED_PARAMS = frozenset({"target", "check_contents", "tileops_target", "tileops_check_contents"})


class SectionCompiler(NameResolver):
    """Compiles each section of an entry (a layer of the entry compiler)."""

    def _section_items(self, raw: Any, line: int | None, field: str) -> Iterable[tuple[str, Any, int | None]]:
        if raw is None:
            return ()
        if not isinstance(raw, dict):
            self.problem(f"{field} must be a mapping", field, line, str(raw)[:60])
            return ()
        return [(k, v, line_of(raw, k, line)) for k, v in raw.items()]

    def _types(self, raw: Any, line: int | None) -> dict[str, ADTSpec]:
        out: dict[str, ADTSpec] = {}
        for name, value, ln in self._section_items(raw, line, "signature.types"):
            field = f"signature.types.{name}"
            model = self.validated(TypeModel, value, field, ln)
            if model is None:
                continue
            variants: dict[str, VariantSpec] = {}
            for tag, variant in model.variants.items():
                vfield = f"{field}.variants.{tag}"
                fields: dict[str, ParamType] = {}
                for fname, ftext in variant.fields.items():
                    t = self.parsed(parse_type, ftext, f"{vfield}.fields.{fname}", ln)
                    if t is not None:
                        fields[fname] = t
                texts = [variant.invariant] if isinstance(variant.invariant, str) else list(variant.invariant or [])
                invariants = []
                for text in texts:
                    e = self.expr(text, f"{vfield}.invariant", ln)
                    if e is None:
                        continue
                    unknown = e.names - set(fields)
                    if unknown:
                        self.problem(f"invariant refers to {', '.join(sorted(unknown))}, which are not fields of "
                                     f"variant {tag!r}", f"{vfield}.invariant", ln, text, rule="C1")
                        continue
                    invariants.append(e)
                variants[tag] = VariantSpec(tag, fields, tuple(invariants))
            out[name] = ADTSpec(name, variants, self.loc(field, ln))
        return out

    def _params(self, raw: Any, line: int | None, adts: frozenset[str]) -> dict[str, ParamSpec]:
        out: dict[str, ParamSpec] = {}
        for name, value, ln in self._section_items(raw, line, "signature.params"):
            field = f"signature.params.{name}"
            if not is_identifier(name):
                self.problem(f"{name!r} is not a valid param name", field, ln)
                continue
            if name in RESERVED_PARAMS:
                self.problem(f"{name!r} is reserved for the Op base class's own keyword arguments "
                             f"({', '.join(sorted(RESERVED_PARAMS))}); choose another name", field, ln, name, rule="C1")
                continue
            self.unparsed[name] = "param"  # until it compiles
            model = self.validated(ParamModel, value, field, ln)
            if model is None:
                continue
            ptype = self.parsed(lambda t: parse_type(t, adts), model.type, f"{field}.type", ln)
            if ptype is None:
                continue
            default = REQUIRED
            if model.default is not NO_DEFAULT:
                if not ptype.accepts(model.default):
                    self.problem(f"default {model.default!r} is not a {ptype}", f"{field}.default", ln,
                                 str(model.default))
                    continue
                default = ptype.normalise(model.default)
            del self.unparsed[name]
            out[name] = ParamSpec(name, ptype, model.type, default, model.kw_only, self.loc(field, ln),
                                  model.description)
        return out

    def _tensors(self, raw: Any, line: int | None, role: str) -> dict[str, TensorSpec]:
        out: dict[str, TensorSpec] = {}
        section = "signature.inputs" if role == "input" else "signature.outputs"
        model_cls = TensorModel if role == "input" else OutputModel
        for name, value, ln in self._section_items(raw, line, section):
            field = f"{section}.{name}"
            if not is_identifier(name):
                self.problem(f"{name!r} is not a valid tensor name", field, ln)
                continue
            self.unparsed[name] = "tensor"  # until it compiles
            model = self.validated(model_cls, value, field, ln)
            if model is None:
                continue
            dtype, dtype_text = self._dtype_field(model.dtype, f"{field}.dtype", ln)
            shape, shape_text = self._shape_field(model.shape, f"{field}.shape", ln)
            if role == "output":
                if model.alias is None and model.shape is None:
                    self.problem("an output must declare its shape", f"{field}.shape", ln, rule="L2.output-shape")
                if model.alias is None and model.dtype is None:
                    self.problem("an output must declare its dtype", f"{field}.dtype", ln, rule="L3.output-dtype")
            if (dtype is None and model.dtype is not None) or (shape is None and model.shape is not None):
                continue
            del self.unparsed[name]
            out[name] = TensorSpec(
                name=name, role=role, dtype=dtype, shape=shape, loc=self.loc(field, ln), dtype_text=dtype_text,
                shape_text=shape_text, optional=getattr(model, "optional", False),
                mutated=getattr(model, "mutated", False), construction=getattr(model, "construction", False),
                device=model.device, contiguous=model.contiguous, alias=getattr(model, "alias", None),
                buffer=getattr(model, "buffer", None), description=model.description,
            )
        return out

    def _dtype_field(self, value: Any, field: str, line: int | None) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        if isinstance(value, FamilyModel):
            return self._inline_family(value, "dtype", field, line), f"match {value.match}"
        if is_identifier(value) and value in self._declared_families():
            return FamilyRef(value), value
        return self.parsed(parse_dtype, value, field, line), value

    def _shape_field(self, value: Any, field: str, line: int | None) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        if isinstance(value, FamilyModel):
            return self._inline_family(value, "shape", field, line), f"match {value.match}"
        if is_identifier(value):
            return FamilyRef(value), value
        return self.parsed(parse_shape, value, field, line), value

    def _inline_family(self, model: FamilyModel, kind: str, field: str, line: int | None) -> FamilyRef | None:
        name = field.replace("signature.", "", 1)
        spec = self._family(name, model, kind, field, line)
        if spec is None:
            return None
        self._pending_inline.append(spec)
        return FamilyRef(name)

    def _declared_families(self) -> Mapping[str, Any]:
        sig = self.raw.get("signature")
        families = sig.get("families") if isinstance(sig, dict) else None
        return families if isinstance(families, dict) else {}

    def _family(self, name: str, model: FamilyModel, kind: str | None, field: str,
                line: int | None) -> FamilySpec | None:
        match = self.expr(model.match, f"{field}.match", line)
        if match is None:
            return None
        if kind is None:  # a case naming another family says nothing about the kind
            shapes = [v.lstrip().startswith("[") for v in model.cases.values()
                      if not (is_identifier(v) and v in self._declared_families())]
            kind = "shape" if shapes and all(shapes) else "dtype"
        cases = []
        for key, text in model.cases.items():
            if is_identifier(text) and text in self._declared_families():
                cases.append((key, FamilyRef(text)))
                continue
            case = self.parsed(parse_shape if kind == "shape" else parse_dtype, text, f"{field}.cases.{key}", line)
            if case is None:
                return None
            cases.append((key, case))
        return FamilySpec(name, kind, match, tuple(cases), self.loc(field, line))

    def _families(self, raw: Any, line: int | None) -> dict[str, FamilySpec]:
        out: dict[str, FamilySpec] = {}
        for name, value, ln in self._section_items(raw, line, "signature.families"):
            field = f"signature.families.{name}"
            model = self.validated(FamilyModel, value, field, ln)
            spec = None if model is None else self._family(name, model, None, field, ln)
            if spec is not None:
                out[name] = spec
            else:
                self.unparsed[name] = "family"
        return out

    def _anonymous_families(self, inputs: Mapping[str, TensorSpec], outputs: Mapping[str, TensorSpec],
                            families: dict[str, FamilySpec]) -> None:
        for spec in self._pending_inline:
            families[spec.name] = spec
        for tensor in list(inputs.values()) + list(outputs.values()):
            for ref, what in ((tensor.shape, "shape"), (tensor.dtype, "dtype")):
                if isinstance(ref, FamilyRef) and ref.name not in families and ref.name not in self.unparsed:
                    self.problem(f"{ref.name!r} is neither a {what} declaration nor a declared family",
                                 f"{tensor.loc.field}.{what}", tensor.loc.line, ref.name, rule="C1")

    def _mapping_of_exprs(self, raw: Any, line: int | None, field: str, kind: str) -> dict[str, Expr]:
        out: dict[str, Expr] = {}
        for name, text, ln in self._section_items(raw, line, field):
            if not isinstance(text, str):
                self.problem("expected an expression string", f"{field}.{name}", ln, str(text))
                self.unparsed[name] = kind
                continue
            e = self.expr(text, f"{field}.{name}", ln)
            if e is not None:
                out[name] = e
            else:
                self.unparsed[name] = kind
        return out

    def _expr_list(self, raw: Any, line: int | None, field: str) -> list[Expr]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.problem(f"{field} must be a list of expression strings", field, line, str(raw)[:60])
            return []
        out = []
        for i, text in enumerate(raw):
            ln = line_of(raw, i, line)
            if not isinstance(text, str):
                self.problem("expected an expression string", f"{field}[{i}]", ln, str(text))
                continue
            e = self.expr(text, f"{field}[{i}]", ln)
            if e is not None:
                out.append(e)
        return out

    def _static_dims(self, raw: Any, line: int | None) -> dict[str, StaticDim]:
        out: dict[str, StaticDim] = {}
        for name, e in self._mapping_of_exprs(raw, line, "signature.static_dims", "static_dim").items():
            node = e.node
            if not (isinstance(node, ir.Index) and isinstance(node.value, ir.Attr) and node.value.attr == "shape"
                    and isinstance(node.value.value, ir.Name)
                    and (isinstance(node.index, (ir.Const, ir.Name)) or
                         (isinstance(node.index, ir.Unary) and isinstance(node.index.operand, ir.Const)))):
                self.problem("a static dim is one axis of one input: <tensor>.shape[<int or param>]",
                             e.loc.field or "signature.static_dims", e.loc.line, e.text, rule="L2.static-dims")
                self.unparsed[name] = "static_dim"
                continue
            out[name] = StaticDim(name, node.value.value.id, node.index, e)
        return out

    def _dtype_combos(self, raw: Any, line: int | None) -> list[dict[str, str]]:
        if raw is None:
            return []
        if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
            self.problem("dtype_combos must be a list of {tensor: dtype} mappings", "signature.dtype_combos", line)
            return []
        combos = []
        for i, row in enumerate(raw):
            ln = line_of(raw, i, line)
            combo = {}
            for tensor, dtype in row.items():
                parsed = self.parsed(parse_dtype, str(dtype), f"signature.dtype_combos[{i}].{tensor}", ln)
                if isinstance(parsed, DTypeSet) and len(parsed.names) == 1:
                    combo[str(tensor)] = parsed.names[0]
                elif parsed is not None:
                    self.problem("a dtype_combos entry names one dtype per tensor",
                                 f"signature.dtype_combos[{i}].{tensor}", ln, str(dtype))
            combos.append(combo)
        return combos

    def _workloads(self, raw: Any, line: int | None) -> tuple[WorkloadRow, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.problem("workloads must be a list of mappings", "workloads", line)
            return ()
        rows = []
        for i, row in enumerate(raw):
            ln = line_of(raw, i, line)
            if not isinstance(row, dict):
                self.problem("a workload row must be a mapping", f"workloads[{i}]", ln, str(row)[:60])
                continue
            rows.append(WorkloadRow(i, row, self.loc(f"workloads[{i}]", ln)))
        return tuple(rows)

    def _roofline(self, raw: Any, line: int | None, parts: Mapping[str, Any]) -> RooflineSpec | None:
        if raw is None:
            return None
        model = self.validated(RooflineModel, raw, "roofline", line)
        if model is None:
            return None
        inline = model.flops is not None or model.bytes is not None
        if model.func is not None and (inline or model.vars):
            self.problem("roofline is either inline (vars/flops/bytes) or a func, not both", "roofline", line)
        if model.func is None and (model.flops is None or model.bytes is None):
            self.problem("an inline roofline needs both flops and bytes", "roofline", line)
        variables = self._mapping_of_exprs(raw.get("vars"), line_of(raw, "vars", line), "roofline.vars", "var")
        kinds: dict[str, str] = {n: "tensor" for n in [*parts["inputs"], *parts["outputs"]]}
        kinds.update({n: "param" for n in parts["params"]})
        kinds.update({n: "let" for n in parts["lets"]})
        kinds.update({n: "static_dim" for n in parts["static_dims"]})
        kinds.update({n: "index" for n in parts["indices"]})
        for n, k in self.unparsed.items():
            kinds.setdefault(n, k)
        tensors = {**parts["inputs"], **parts["outputs"]}
        for e in variables.values():
            self._check_names(e, kinds, {"tensor", "param", "let", "static_dim", "index"}, parts["params"], tensors,
                              parts["types"])
        formula_kinds = {k: v for k, v in kinds.items() if v != "tensor"}
        formula_kinds.update({n: "var" for n in variables})
        formulas: dict[str, Expr | None] = {}
        for key in ("flops", "bytes"):
            text = getattr(model, key)
            if text is None:
                formulas[key] = None
                continue
            formula = self.expr(text, f"roofline.{key}", line_of(raw, key, line))
            if formula is not None:
                self._check_names(formula, formula_kinds, {"var", "param", "let", "static_dim", "index"},
                                  parts["params"], tensors, parts["types"])
            formulas[key] = formula
        return RooflineSpec(variables, formulas["flops"], formulas["bytes"], model.func,
                            None if model.reads is None else tuple(model.reads),
                            None if model.writes is None else tuple(model.writes), self.loc("roofline", line))

    def _source(self, raw: Any, line: int | None) -> dict[str, str]:
        if raw is None:
            return {}
        allowed = ("kernel", "op", "test", "bench", "reference")
        if not isinstance(raw, dict):
            self.problem("source must be a mapping", "source", line)
            return {}
        out = {}
        for key, value in raw.items():
            if key not in allowed:
                self.problem(f"unknown source role {key!r} (known: {', '.join(allowed)})", f"source.{key}",
                             line_of(raw, key, line))
            elif not isinstance(value, str):
                self.problem("a source entry is a module path string", f"source.{key}", line_of(raw, key, line))
            else:
                out[key] = value
        return out
