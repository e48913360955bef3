"""Compile one raw manifest entry into an :class:`OpSpec`, field by field.

Every field is checked and parsed on its own: a field that does not parse is recorded
(with ``file:line``, op, field and text) and marked broken, and only what depends on it is
skipped. Names are resolved against their kinds (tensor, param, index, let, static dim,
roofline var); an unknown name, attribute or primitive is an error at load. The legacy
``shape_rules`` forms that seed 000 rejects are recognised here and reported with their
rewrite (rule ids ``T3.1``..``T3.7``); they still evaluate, so a lenient load keeps working.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from pydantic import BaseModel, ValidationError

from ..errors import ExprError, Location, SpecError
from ..lang import ir
from ..lang.dtypes import DTypeExpr, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, parse_dtype
from ..lang.parse import parse_expr
from ..lang.shapes import ShapePattern, Variadic, parse_shape
from ..lang.types import ParamType, parse_type
from .model import (
    NO_DEFAULT, FamilyModel, OpModel, OutputModel, ParamModel, RooflineModel, TensorModel, TypeModel,
)
from .nodes import (
    REQUIRED, ADTSpec, Expr, FamilyRef, FamilySpec, OpSpec, ParamSpec, RooflineSpec, StaticDim, TensorSpec,
    VariantSpec, WorkloadRow,
)
from .yamlload import LineDict, line_of

__all__ = ["compile_op", "TENSOR_ATTRS", "RESERVED_PARAMS"]

#: Keyword arguments of Op.__init__ and the compile boundary that no spec param may shadow.
RESERVED_PARAMS = frozenset({"target", "check_contents", "tileops_target"})
#: Attributes an expression may read from a tensor.
TENSOR_ATTRS = frozenset({"shape", "ndim", "itemsize"})

_TOP_FIELDS = tuple(OpModel.model_fields)
_REQUIRED_TOP = tuple(n for n, f in OpModel.model_fields.items() if f.is_required())
_SIG_FIELDS = ("inputs", "outputs", "params", "types", "families", "let", "static_dims", "shape_rules",
               "requires", "dtype_combos")


class _Compiler:
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
            return Expr(parse_expr(text), text, self.loc(field, line))
        except ExprError as exc:
            self.problem(exc.message, field, line, text, rule=exc.rule or "L0.expr", fix=exc.rewrite)
            return None

    def parsed(self, parse: Callable[[str], Any], text: str, field: str, line: int | None) -> Any:
        try:
            return parse(text)
        except ExprError as exc:
            self.problem(exc.message, field, line, text, rule=exc.rule or "L0.expr", fix=exc.rewrite)
            return None

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

    def _signature(self, sig: LineDict, sig_line: int | None) -> dict[str, Any]:
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
            if not _is_identifier(name):
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
            if not _is_identifier(name):
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
        if _is_identifier(value) and value in self._declared_families():
            return FamilyRef(value), value
        return self.parsed(parse_dtype, value, field, line), value

    def _shape_field(self, value: Any, field: str, line: int | None) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        if isinstance(value, FamilyModel):
            return self._inline_family(value, "shape", field, line), f"match {value.match}"
        if _is_identifier(value):
            return FamilyRef(value), value
        return self.parsed(parse_shape, value, field, line), value

    def _inline_family(self, model: FamilyModel, kind: str, field: str, line: int | None) -> FamilyRef | None:
        name = field.replace("signature.", "", 1)
        spec = self._family(name, model, kind, field, line)
        if spec is None:
            return None
        self._pending_inline.append(spec)
        return FamilyRef(name)

    _pending_inline: list[FamilySpec]

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
                      if not (_is_identifier(v) and v in self._declared_families())]
            kind = "shape" if shapes and all(shapes) else "dtype"
        cases = []
        for key, text in model.cases.items():
            if _is_identifier(text) and text in self._declared_families():
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

    # -- names ------------------------------------------------------------------------------

    def _resolve(self, types: Mapping[str, ADTSpec], params: Mapping[str, ParamSpec],
                 inputs: Mapping[str, TensorSpec], outputs: Mapping[str, TensorSpec],
                 families: Mapping[str, FamilySpec], lets: Mapping[str, Expr], static_dims: Mapping[str, StaticDim],
                 shape_rules: list[Expr], requires: list[Expr], combos: list[dict[str, str]]) -> dict[str, str]:
        """Give every name its kind, find the indices, and check every reference."""
        tensors = {**inputs, **outputs}
        kinds: dict[str, str] = {}

        def claim(name: str, kind: str, field: str, line: int | None) -> None:
            other = kinds.get(name)
            if other is not None and other != kind:
                self.problem(f"name {name!r} is declared as both {other} and {kind}", field, line, name, rule="C1")
            kinds.setdefault(name, kind)

        for n, t in tensors.items():
            claim(n, "tensor", t.loc.field or "", t.loc.line)
        for n, p in params.items():
            claim(n, "param", p.loc.field or "", p.loc.line)
        for n, e in lets.items():
            claim(n, "let", e.loc.field or "", e.loc.line)
        for n, s in static_dims.items():
            claim(n, "static_dim", s.expr.loc.field or "", s.expr.loc.line)
        for n, k in self.unparsed.items():
            kinds.setdefault(n, k)  # declared, but its declaration is reported already

        indices: dict[str, str] = {}
        patterns = self._all_patterns(tensors, families)
        for pattern, field, line in patterns:
            for item in pattern.items:
                if isinstance(item, Variadic):
                    if item.name not in kinds:
                        indices.setdefault(item.name, "shape")
                    elif kinds[item.name] not in ("let", "param"):
                        self.problem(f"*{item.name} is a {kinds[item.name]}, not a Shape index, let or param",
                                     field, line, pattern.text, rule="C1")
                else:
                    for n in ir.free_names(item.node):
                        if n not in kinds:
                            indices.setdefault(n, "dim")
                        elif kinds[n] == "tensor":
                            self.problem(f"{n!r} is a tensor and cannot be an axis length", field, line,
                                         pattern.text, rule="C1")
        for tensor in tensors.values():
            for dexpr in self._dtype_exprs(tensor.dtype, families):
                self._check_dtype_refs(dexpr, tensor, kinds, params, tensors, indices)
        for k, v in indices.items():
            kinds.setdefault(k, "index")

        value_kinds = {"param", "index", "let", "static_dim"}
        for n, e in lets.items():
            self._check_names(e, kinds, value_kinds, params, tensors, types)
        for s in static_dims.values():
            if s.tensor not in inputs:
                self.problem(f"static dim {s.name} refers to {s.tensor!r}, which is not an input",
                             s.expr.loc.field or "", s.expr.loc.line, s.expr.text, rule="L2.static-dims")
            if isinstance(s.axis, ir.Name) and s.axis.id not in params:
                self.problem(f"static dim axis {s.axis.id!r} must be an integer or a param name",
                             s.expr.loc.field or "", s.expr.loc.line, s.expr.text, rule="L2.static-dims")
        for e in requires:
            self._check_names(e, kinds, {"param", "let", "tensor"}, params, tensors, types)
        for fam in families.values():
            self._check_names(fam.match, kinds, {"param", "let", "tensor"}, params, tensors, types)
        for e in shape_rules:
            self._check_rule(e, kinds, params, tensors, types)
        for i, combo in enumerate(combos):
            for tname in combo:
                if tname not in tensors:
                    self.problem(f"dtype_combos names {tname!r}, which is not a tensor",
                                 f"signature.dtype_combos[{i}]", None, tname, rule="L3.dtype-combos")
                elif tname in outputs:
                    self.problem(f"dtype_combos names output {tname!r}; combos constrain inputs (an output's dtype "
                                 "is derived)", f"signature.dtype_combos[{i}]", None, tname, rule="L3.dtype-combos")
        return indices

    def _all_patterns(self, tensors: Mapping[str, TensorSpec],
                      families: Mapping[str, FamilySpec]) -> list[tuple[ShapePattern, str, int | None]]:
        out = []
        for t in tensors.values():
            if isinstance(t.shape, ShapePattern):
                out.append((t.shape, f"{t.loc.field}.shape", t.loc.line))
        for fam in families.values():
            for _, case in fam.cases:
                if isinstance(case, ShapePattern):
                    out.append((case, fam.loc.field or "", fam.loc.line))
        return out

    def _dtype_exprs(self, dtype: Any, families: Mapping[str, FamilySpec]) -> list[DTypeExpr]:
        if dtype is None:
            return []
        if isinstance(dtype, FamilyRef):
            fam = families.get(dtype.name)
            if fam is None:
                return []
            out: list[DTypeExpr] = []
            for _, case in fam.cases:
                if not isinstance(case, (FamilyRef, ShapePattern)):
                    out.append(case)
            return out
        return [dtype]

    def _check_dtype_refs(self, dexpr: DTypeExpr, tensor: TensorSpec, kinds: Mapping[str, str],
                          params: Mapping[str, ParamSpec], tensors: Mapping[str, TensorSpec],
                          indices: dict[str, str]) -> None:
        field, line = f"{tensor.loc.field}.dtype", tensor.loc.line
        if isinstance(dexpr, (SameAs, PromoteIntToFloat)):
            ref = tensors.get(dexpr.tensor)
            if ref is None and self.unparsed.get(dexpr.tensor) == "tensor":
                return
            if ref is None or ref.role != "input":
                self.problem(f"{dexpr} refers to {dexpr.tensor!r}, which is not an input", field, line,
                             tensor.dtype_text, rule="L3.same-as")
            elif ref.optional:
                self.problem(f"{dexpr} refers to optional input {dexpr.tensor!r}, which may be absent; refer to a "
                             "required input instead", field, line, tensor.dtype_text, rule="L3.same-as-optional",
                             fatal=False)
            if isinstance(dexpr, PromoteIntToFloat) and tensor.role != "output":
                self.problem("promote_int_to_float is only allowed in outputs", field, line, tensor.dtype_text,
                             rule="L3.promote")
        elif isinstance(dexpr, DTypeRef):
            kind = kinds.get(dexpr.name)
            if kind == "param":
                from ..lang.types import DTypeParam, UnionT
                if dexpr.name not in params:
                    return  # its declaration did not compile (reported there)
                ptype = params[dexpr.name].type
                opts = ptype.options if isinstance(ptype, UnionT) else (ptype,)
                if not any(isinstance(o, DTypeParam) for o in opts):
                    self.problem(f"param {dexpr.name!r} is not of type dtype", field, line, tensor.dtype_text,
                                 rule="C1")
            elif kind is None or kind == "index":
                if dexpr.name in indices and indices[dexpr.name] != "dtype":
                    self.problem(f"{dexpr.name!r} is a {indices[dexpr.name]} index, not a dtype", field, line,
                                 tensor.dtype_text, rule="C1")
                indices[dexpr.name] = "dtype"
            else:
                self.problem(f"{dexpr.name!r} is a {kind}, not a dtype", field, line, tensor.dtype_text, rule="C1")
        elif isinstance(dexpr, DTypeIf):
            for n in ir.free_names(dexpr.test):
                if kinds.get(n) not in ("param", "tensor", "let"):
                    self.problem(f"dtype condition refers to unknown name {n!r}", field, line, tensor.dtype_text,
                                 rule="C5")
            self._check_dtype_refs(dexpr.body, tensor, kinds, params, tensors, indices)
            self._check_dtype_refs(dexpr.orelse, tensor, kinds, params, tensors, indices)

    def _check_names(self, e: Expr, kinds: Mapping[str, str], allowed: set[str], params: Mapping[str, ParamSpec],
                     tensors: Mapping[str, TensorSpec], types: Mapping[str, ADTSpec],
                     extra: Mapping[str, str] | None = None) -> bool:
        """Report names of the wrong kind, unknown names and illegal attributes in ``e``."""
        ok = True
        field, line = e.loc.field or "", e.loc.line
        present_args = {n.args[0].id for n in ir.walk(e.node) if isinstance(n, ir.Call) and n.func == "present"}
        attr_targets = {n.value.id for n in ir.walk(e.node) if isinstance(n, ir.Attr) and isinstance(n.value, ir.Name)}
        isnone_targets = {n.operand.id for n in ir.walk(e.node)
                          if isinstance(n, ir.IsNone) and isinstance(n.operand, ir.Name)}
        for name in sorted(e.names):
            kind = (extra or {}).get(name) or kinds.get(name)
            if kind is None:
                self.problem(f"unknown name {name!r}", field, line, e.text, rule="C5")
                ok = False
            elif kind == "tensor" and "tensor" not in allowed:
                self.problem(f"tensor {name!r} cannot be used here", field, line, e.text, rule="C1")
                ok = False
            elif kind == "tensor" and name not in present_args | attr_targets | isnone_targets:
                self.problem(f"tensor {name!r} can only be used through present({name}) or its metadata", field,
                             line, e.text, rule="C1")
                ok = False
            elif kind not in allowed and kind != "tensor":
                self.problem(f"{kind} {name!r} cannot be used here", field, line, e.text, rule="C1")
                ok = False
        for node in ir.walk(e.node):
            if isinstance(node, ir.Attr):
                ok &= self._check_attr(node, e, kinds, params, types)
        return ok

    def _check_attr(self, node: ir.Attr, e: Expr, kinds: Mapping[str, str], params: Mapping[str, ParamSpec],
                    types: Mapping[str, ADTSpec]) -> bool:
        field, line = e.loc.field or "", e.loc.line
        target = node.value
        if isinstance(target, ir.Name) and kinds.get(target.id) == "tensor":
            if node.attr in TENSOR_ATTRS:
                return True
            self.problem(f"tensor attribute {node.attr!r} is not in the language (known: "
                         f"{', '.join(sorted(TENSOR_ATTRS))})", field, line, e.text, rule="C5")
            return False
        if isinstance(target, ir.Name) and target.id in self.unparsed:
            return True  # its declaration did not compile (reported there)
        if isinstance(target, ir.Name) and kinds.get(target.id) == "param":
            from ..lang.types import ADTRef, UnionT
            ptype = params[target.id].type
            opts = ptype.options if isinstance(ptype, UnionT) else (ptype,)
            adts = [types[o.name] for o in opts if isinstance(o, ADTRef) and o.name in types]
            fields = {"tag"} | {f for adt in adts for v in adt.variants.values() for f in v.fields}
            if adts and node.attr in fields:
                return True
        self.problem(f"attribute {node.attr!r} cannot be read here", field, line, e.text, rule="C5")
        return False

    def _check_rule(self, e: Expr, kinds: Mapping[str, str], params: Mapping[str, ParamSpec],
                    tensors: Mapping[str, TensorSpec], types: Mapping[str, ADTSpec]) -> None:
        """A ``shape_rules`` entry: a refinement only, never a declaration (seed 000 table 3)."""
        node, field, line = e.node, e.loc.field or "", e.loc.line
        if isinstance(node, ir.Compare) and node.ops == ("==",) and isinstance(node.left, ir.Name) \
                and node.left.id not in kinds:
            self.problem(f"'==' cannot define the new name {node.left.id!r}", field, line, e.text, rule="T3.3",
                         fix=f'let: {{{node.left.id}: "{ir.unparse(node.comparators[0])}"}}')
            return
        for sub in ir.walk(node):
            if isinstance(sub, ir.Compare) and sub.ops == ("==",):
                sides = (sub.left, sub.comparators[0])
                shapes = [s for s in sides if _is_shape_read(s, kinds)]
                if len(shapes) == 2:
                    self.problem("two tensors' shapes are compared; give both tensors the same shape items instead",
                                 field, line, e.text, rule="T3.2",
                                 fix="declare one shape for both, e.g. [*S] on each tensor", fatal=False)
                    return
                if len(shapes) == 1:
                    other = sides[1] if shapes[0] is sides[0] else sides[0]
                    tname = shapes[0].value.id  # type: ignore[union-attr]
                    fix = f'{tname}: {{shape: "{_tuple_as_shape(other)}"}}' if isinstance(other, ir.Tuple) else \
                        f"declare the shape of {tname} and use its index names"
                    self.problem(f"a shape rule reads {tname}.shape", field, line, e.text, rule="T3.1", fix=fix,
                                 fatal=False)
                    return
        if any(isinstance(s, ir.Attr) and s.attr in ("shape", "ndim") and isinstance(s.value, ir.Name)
               and kinds.get(s.value.id) == "tensor" for s in ir.walk(node)):
            self.problem("a shape rule reads a tensor's shape", field, line, e.text, rule="T3.1",
                         fix="declare the tensor's shape and refer to its index names", fatal=False)
            return
        for sub in ir.walk(node):
            if isinstance(sub, ir.IsNone) and isinstance(sub.operand, ir.Name):
                kind = kinds.get(sub.operand.id)
                rule = "T3.4" if kind == "tensor" else "T3.5"
                self.problem(f"'{ir.unparse(sub)}' tests presence with 'is None'", field, line, e.text, rule=rule,
                             fix=ir.unparse(rewrite_is_none(node)), fatal=False)
                return
        self._check_names(e, kinds, {"param", "index", "let", "static_dim", "tensor"}, params, tensors, types)

    # -- workloads, roofline, source --------------------------------------------------------

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
        formulas = {}
        for key in ("flops", "bytes"):
            text = getattr(model, key)
            if text is None:
                formulas[key] = None
                continue
            e = self.expr(text, f"roofline.{key}", line_of(raw, key, line))
            if e is not None:
                self._check_names(e, formula_kinds, {"var", "param", "let", "static_dim", "index"},
                                  parts["params"], tensors, parts["types"])
            formulas[key] = e
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


def rewrite_is_none(node: ir.Node) -> ir.Node:
    """Replace every ``x is None`` / ``x is not None`` with ``not present(x)`` / ``present(x)``."""
    if isinstance(node, ir.IsNone) and isinstance(node.operand, ir.Name):
        call = ir.Call("present", (node.operand,))
        return call if node.negated else ir.Unary("not", call)
    if isinstance(node, ir.BoolOp):
        return ir.BoolOp(node.op, tuple(rewrite_is_none(v) for v in node.values))
    if isinstance(node, ir.Unary):
        return ir.Unary(node.op, rewrite_is_none(node.operand))
    if isinstance(node, ir.Compare):
        return ir.Compare(rewrite_is_none(node.left), node.ops, tuple(rewrite_is_none(c) for c in node.comparators))
    if isinstance(node, ir.IfExp):
        return ir.IfExp(rewrite_is_none(node.test), rewrite_is_none(node.body), rewrite_is_none(node.orelse))
    return node


def _is_shape_read(node: ir.Node, kinds: Mapping[str, str]) -> bool:
    return isinstance(node, ir.Attr) and node.attr == "shape" and isinstance(node.value, ir.Name) \
        and kinds.get(node.value.id) == "tensor"


def _tuple_as_shape(node: ir.Tuple) -> str:
    return "[" + ", ".join(ir.unparse(i) for i in node.items) + "]"


def _is_identifier(text: Any) -> bool:
    return isinstance(text, str) and text.isidentifier() and not text.startswith("_")


def compile_op(name: str, raw: Any, file: str, line: int | None) -> OpSpec:
    """Compile one manifest entry; never raises for a bad entry (problems are collected)."""
    compiler = _Compiler(name, raw, file, line)
    compiler._pending_inline = []
    if not _is_identifier(name):
        compiler.problem(f"op name {name!r} is not a valid Python class name", "", line, str(name), rule="L1.name")
    return compiler.run()
