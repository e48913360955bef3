"""Name resolution: every name an expression reads has a declared kind, and is read as that kind.

After the sections are compiled, each index is collected from the shapes (``Dim`` like ``M``,
``Shape`` like ``*S``, ``DType`` like ``T``), and each expression (``let``, ``shape_rules``,
``requires``, conditional dtypes, ``static_dims``, the roofline) is checked against the
kinds: an unknown name, an attribute a tensor or ADT does not have, or a primitive outside
the whitelist is an error at load. Shape rules go through the legacy-form detector first
(:mod:`.legacy`).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..lang import ir
from ..lang.dtypes import DTypeExpr, DTypeIf, DTypeRef, PromoteIntToFloat, SameAs
from ..lang.shapes import ShapePattern, Variadic
from .compile_state import CompileState
from .legacy import legacy_form
from .nodes import ADTSpec, Expr, FamilyRef, FamilySpec, ParamSpec, StaticDim, TensorSpec

__all__ = ["NameResolver", "TENSOR_ATTRS"]

#: Attributes an expression may read from a tensor.
TENSOR_ATTRS = frozenset({"shape", "ndim", "itemsize"})


class NameResolver(CompileState):
    """Resolves and checks the names of a compiled signature (a layer of the entry compiler)."""

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
        present_args = {n.id for n in ir.presence_tests(e.node)}
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
        """A ``shape_rules`` entry: a refinement only, never a declaration (seed 000 table 3), and a condition:
        a tuple (``"N > 2, M > 2"``) or a constant string or number holds always (found in review)."""
        if isinstance(e.node, ir.Tuple) or (isinstance(e.node, ir.Const) and not isinstance(e.node.value, bool)):
            what = "tuple" if isinstance(e.node, ir.Tuple) else type(e.node.value).__name__
            self.problem(f"a shape rule is a condition, and {e.text!r} is a {what} (always true); write one comparison "
                         "a rule, or join them with 'and'", e.loc.field or "", e.loc.line, e.text, rule="C5")
            return
        found = legacy_form(e, kinds)
        if found is not None:
            self.problem(found.message, e.loc.field or "", e.loc.line, e.text, rule=found.rule, fix=found.fix,
                         fatal=found.fatal)
            return
        self._check_names(e, kinds, {"param", "index", "let", "static_dim", "tensor"}, params, tensors, types)
