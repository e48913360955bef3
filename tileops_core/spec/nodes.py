"""The parsed form of a spec: what every consumer (op base, validator, bench, docs) reads.

Each object keeps the text it was parsed from and where it was written, so that any
later message can quote the declaration exactly as the YAML says it, with ``file:line``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import Location, SpecError
from ..lang import ir
from ..lang.dtypes import DTypeExpr
from ..lang.evaluate import compile_node
from ..lang.shapes import ShapePattern
from ..lang.types import ParamType

__all__ = [
    "Expr", "FamilySpec", "FamilyRef", "TensorSpec", "ParamSpec", "VariantSpec", "ADTSpec", "StaticDim",
    "RooflineSpec", "WorkloadRow", "OpSpec", "REQUIRED",
]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a param that has none.
REQUIRED: Any = _Required()


@dataclass(frozen=True, eq=False)
class Expr:
    """A parsed expression with its source text, location and compiled closure."""

    node: ir.Node
    text: str
    loc: Location
    fn: Callable[[Mapping[str, Any]], Any] = field(init=False, repr=False)  # compiled from ``node``, once

    def __post_init__(self) -> None:
        object.__setattr__(self, "fn", compile_node(self.node))

    @property
    def names(self) -> frozenset[str]:
        return ir.free_names(self.node)


@dataclass(frozen=True, eq=False)
class FamilyRef:
    """A reference from a shape/dtype field to a type family, by name."""

    name: str


@dataclass(frozen=True, eq=False)
class FamilySpec:
    """A type family: ``match`` selects one case; a case is a shape, a dtype or another family."""

    name: str
    kind: str  # "shape" or "dtype"
    match: Expr
    cases: tuple[tuple[Any, Any], ...]
    loc: Location

    def case_for(self, value: Any) -> Any:
        """The case matching ``value`` (``_`` matches what no explicit case does), or KeyError."""
        for key, case in self.cases:
            if key == value and type(key) is type(value):
                return case
        for key, case in self.cases:
            if key == "_":
                return case
        raise KeyError(value)


@dataclass(frozen=True, eq=False)
class TensorSpec:
    """An input or output tensor declaration."""

    name: str
    role: str  # "input" | "output"
    dtype: DTypeExpr | FamilyRef | None
    shape: ShapePattern | FamilyRef | None
    loc: Location
    dtype_text: str | None = None
    shape_text: str | None = None
    optional: bool = False
    mutated: bool = False
    construction: bool = False
    device: str | None = None
    contiguous: bool = False
    alias: str | None = None
    buffer: str | None = None
    description: str | None = None


@dataclass(frozen=True, eq=False)
class ParamSpec:
    """A param: its type, default (``REQUIRED`` when none) and whether it is keyword-only."""

    name: str
    type: ParamType
    type_text: str
    default: Any
    kw_only: bool
    loc: Location
    description: str | None = None


@dataclass(frozen=True, eq=False)
class VariantSpec:
    """One case of an ADT."""

    tag: str
    fields: Mapping[str, ParamType]
    invariants: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class ADTSpec:
    """A declared tagged union."""

    name: str
    variants: Mapping[str, VariantSpec]
    loc: Location


@dataclass(frozen=True, eq=False)
class StaticDim:
    """A dimension promised at construction: ``N: "x.shape[dim]"``."""

    name: str
    tensor: str
    axis: ir.Node
    expr: Expr


@dataclass(frozen=True, eq=False)
class RooflineSpec:
    """The performance model: inline vars/flops/bytes, or a registered function."""

    vars: Mapping[str, Expr]
    flops: Expr | None
    bytes: Expr | None
    func: str | None
    reads: tuple[str, ...] | None
    writes: tuple[str, ...] | None
    loc: Location


@dataclass(frozen=True, eq=False)
class WorkloadRow:
    """One workload row as written (values are plain YAML data)."""

    index: int
    values: Mapping[str, Any]
    loc: Location

    @property
    def label(self) -> str:
        return str(self.values.get("label", f"row{self.index}"))


@dataclass(frozen=True, eq=False)
class OpSpec:
    """A compiled manifest entry. ``problems`` lists every finding of the load."""

    name: str
    file: str
    line: int | None
    family: str | None
    ref_api: str | None
    status: str | None
    torch_compile_fullgraph: bool
    description: str | None
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    params: Mapping[str, ParamSpec]
    types: Mapping[str, ADTSpec]
    families: Mapping[str, FamilySpec]
    lets: Mapping[str, Expr]
    static_dims: Mapping[str, StaticDim]
    shape_rules: tuple[Expr, ...]
    requires: tuple[Expr, ...]
    dtype_combos: tuple[Mapping[str, str], ...]
    workloads: tuple[WorkloadRow, ...]
    roofline: RooflineSpec | None
    source: Mapping[str, str]
    indices: Mapping[str, str]  # name -> "dim" | "shape" | "dtype"
    problems: tuple[SpecError, ...]
    broken: frozenset[str]  # fields that did not parse
    field_lines: Mapping[str, int] = field(default_factory=dict)  # top-level field -> line (source, status, ...)

    @property
    def location(self) -> Location:
        return Location(self.file, self.line, self.name)

    @property
    def usable(self) -> bool:
        """True when every field an op call needs parsed (legacy forms still evaluate)."""
        return not (self.broken & {"signature", "signature.inputs", "signature.outputs", "signature.params",
                                   "signature.families", "signature.let", "signature.static_dims",
                                   "signature.shape_rules", "signature.requires", "signature.types",
                                   "signature.dtype_combos"})

    @property
    def errors(self) -> tuple[SpecError, ...]:
        return self.problems

    def tensor(self, name: str) -> TensorSpec:
        return self.inputs[name] if name in self.inputs else self.outputs[name]

    @property
    def call_inputs(self) -> tuple[TensorSpec, ...]:
        """Inputs passed to ``forward`` (in declaration order)."""
        return tuple(t for t in self.inputs.values() if not t.construction)

    @property
    def construction_inputs(self) -> tuple[TensorSpec, ...]:
        """Inputs passed to ``__init__``."""
        return tuple(t for t in self.inputs.values() if t.construction)
