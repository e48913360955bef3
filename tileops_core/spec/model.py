"""The structure of a manifest entry, as typed pydantic models (``extra="forbid"``).

These models check structure only (seed 001's fields plus seed 000's additions): which
keys exist, their YAML types and literal values. The strings inside are parsed into the IR
by :mod:`tileops_core.spec.compile`, field by field.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

__all__ = [
    "FamilyModel", "TensorModel", "OutputModel", "ParamModel", "VariantModel", "TypeModel",
    "SignatureModel", "RooflineModel", "OpModel", "NO_DEFAULT",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _NoDefault:
    """Marks a param declared without ``default`` (a required argument)."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


class FamilyModel(_Strict):
    """A type family: ``match`` over a discriminant, one shape or dtype per case."""

    match: StrictStr
    cases: dict[Union[StrictBool, StrictStr, None, int], StrictStr]


ShapeField = Union[StrictStr, FamilyModel]


class TensorModel(_Strict):
    """An input tensor."""

    dtype: Union[StrictStr, FamilyModel]
    shape: ShapeField | None = None
    optional: StrictBool = False
    mutated: StrictBool = False
    construction: StrictBool = False
    device: Literal["cpu"] | None = None
    contiguous: StrictBool = False
    layout: Literal["strided"] = "strided"
    description: StrictStr | None = None


class OutputModel(_Strict):
    """An output tensor; its shape must be written (or it is an alias of an input)."""

    dtype: Union[StrictStr, FamilyModel, None] = None
    shape: ShapeField | None = None
    alias: StrictStr | None = None
    buffer: StrictStr | None = None
    device: Literal["cpu"] | None = None
    contiguous: StrictBool = False
    layout: Literal["strided"] = "strided"
    description: StrictStr | None = None


class ParamModel(_Strict):
    """A non-tensor argument."""

    type: StrictStr
    default: Any = NO_DEFAULT
    kw_only: StrictBool = False
    description: StrictStr | None = None


class VariantModel(_Strict):
    """One case of an ADT: its fields (name -> type) and invariants."""

    fields: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    invariant: Union[StrictStr, list[StrictStr], None] = None


class TypeModel(_Strict):
    """A declared ADT (tagged union)."""

    variants: dict[StrictStr, VariantModel]
    description: StrictStr | None = None


class SignatureModel(_Strict):
    """``signature``: seed 001's six sub-fields and seed 000's additions."""

    inputs: dict[StrictStr, TensorModel]
    outputs: dict[StrictStr, OutputModel]
    params: dict[StrictStr, ParamModel] = Field(default_factory=dict)
    types: dict[StrictStr, TypeModel] = Field(default_factory=dict)
    families: dict[StrictStr, FamilyModel] = Field(default_factory=dict)
    let: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    static_dims: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    shape_rules: list[StrictStr] = Field(default_factory=list)
    requires: list[StrictStr] = Field(default_factory=list)
    dtype_combos: list[dict[StrictStr, StrictStr]] = Field(default_factory=list)


class RooflineModel(_Strict):
    """``roofline``: inline ``vars``/``flops``/``bytes``, or a registered ``func``."""

    vars: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    flops: StrictStr | None = None
    bytes: StrictStr | None = None
    func: StrictStr | None = None
    reads: list[StrictStr] | None = None
    writes: list[StrictStr] | None = None


class OpModel(_Strict):
    """One manifest entry (the key is the op's Python class name)."""

    family: StrictStr
    ref_api: StrictStr
    status: Literal["spec-only", "implemented"]
    torch_compile_fullgraph: Literal[True] | None = None
    description: StrictStr | None = None
    signature: SignatureModel
    workloads: list[dict[StrictStr, Any]]
    roofline: RooflineModel
    source: dict[Literal["kernel", "op", "test", "bench", "reference"], StrictStr]
