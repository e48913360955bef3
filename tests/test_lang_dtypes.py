"""Dtype declarations: every form of seed 001 / seed 000, dtype params, and the spec-level rules.

Forms: a set (``float16 | bfloat16``), ``same_as(x)``, ``promote_int_to_float(x)`` (outputs
only), a DType index or ``dtype`` param by name, and a conditional over discriminants.
What each form gives on an actual call is tested on ops in ``test_op_call_steps``.
"""

from __future__ import annotations

import random

import pytest
import torch

from tileops_core.errors import ExprError
from tileops_core.lang import ir
from tileops_core.lang.dtypes import (
    DTYPE_NAMES, FLOAT_DTYPES, INT_DTYPES, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, dtype_refs,
    parse_dtype, parse_dtype_set, promote_int_to_float,
)
from tileops_core.lang.types import DTypeParam, parse_type
from tileops_core.spec.compile import compile_op


def dtype_error(text: str) -> ExprError:
    with pytest.raises(ExprError) as info:
        parse_dtype(text)
    return info.value


def test_set_keeps_its_declaration_order():
    assert parse_dtype("float16 | bfloat16 | float32") == DTypeSet(("float16", "bfloat16", "float32"))


def test_single_dtype_is_a_set_of_one():
    assert parse_dtype("float32") == DTypeSet(("float32",))


def test_every_known_dtype_name_is_a_set_member():
    names = sorted(DTYPE_NAMES)
    random.shuffle(names)
    assert parse_dtype(" | ".join(names)).names == tuple(names)


def test_dtype_listed_twice_is_rejected():
    assert dtype_error("float16 | bfloat16 | float16").message == "a dtype is listed twice"


def test_set_member_that_is_not_a_dtype_is_rejected_with_the_known_names():
    assert dtype_error("float16 | half").message == (
        "every item of a dtype set must be a dtype name (known: " + ", ".join(sorted(DTYPE_NAMES)) + ")")


def test_parse_dtype_set_refuses_other_forms():
    assert parse_dtype_set("int8 | uint8") == DTypeSet(("int8", "uint8"))
    with pytest.raises(ExprError) as info:
        parse_dtype_set("same_as(x)")
    assert info.value.message == 'expected a set of dtype names such as "float16 | bfloat16"'


def test_same_as_names_an_input():
    assert parse_dtype("same_as(x)") == SameAs("x")


def test_promote_int_to_float_names_an_input():
    assert parse_dtype("promote_int_to_float(input)") == PromoteIntToFloat("input")


@pytest.mark.parametrize("text", ["same_as(x, y)", "same_as()", "same_as(x.dtype)", "same_as(t=x)",
                                  "promote_int_to_float(1)"])
def test_dtype_function_takes_one_input_name(text):
    func = text.split("(")[0]
    assert dtype_error(text).message == f"{func}() takes the name of one input"


def test_unknown_dtype_function_is_rejected():
    assert dtype_error("widest(x, y)").message == "unknown dtype function 'widest' (known: same_as, promote_int_to_float)"


@pytest.mark.parametrize("name", INT_DTYPES)
def test_promotion_of_an_integer_dtype_is_float32(name):
    assert promote_int_to_float(name) == "float32"


@pytest.mark.parametrize("name", FLOAT_DTYPES)
def test_promotion_of_a_float_dtype_is_that_dtype(name):
    assert promote_int_to_float(name) == name


def test_bare_name_that_is_not_a_dtype_is_a_dtype_index_or_param():
    assert parse_dtype("T") == DTypeRef("T")
    assert parse_dtype("out_dtype") == DTypeRef("out_dtype")


def test_private_name_is_rejected():
    assert dtype_error("_T").message == "name '_T' is not allowed"


def test_conditional_dtype_keeps_its_test_as_ir():
    expr = parse_dtype("dtype if present(dtype) else same_as(x)")
    assert expr == DTypeIf(ir.Call("present", (ir.Name("dtype"),)), DTypeRef("dtype"), SameAs("x"))
    assert str(expr) == "dtype if present(dtype) else same_as(x)"


def test_nested_conditional_dtype():
    expr = parse_dtype("float32 if acc else (bfloat16 if low else same_as(x))")
    assert isinstance(expr, DTypeIf) and isinstance(expr.orelse, DTypeIf)
    assert dtype_refs(expr) == {"acc", "low", "x"}


@pytest.mark.parametrize("text, message", [
    ("x.dtype", "Attribute is not a dtype declaration"),
    ("[float16]", "List is not a dtype declaration"),
    ("1", "Constant is not a dtype declaration"),
])
def test_other_expressions_are_not_dtype_declarations(text, message):
    assert dtype_error(text).message == message


def test_dtype_refs_lists_the_names_a_declaration_reads():
    assert dtype_refs(parse_dtype("float16 | bfloat16")) == frozenset()
    assert dtype_refs(parse_dtype("same_as(a)")) == {"a"}
    assert dtype_refs(parse_dtype("promote_int_to_float(input)")) == {"input"}
    assert dtype_refs(parse_dtype("T")) == {"T"}


# -- dtype params -------------------------------------------------------------------------------

def test_dtype_param_with_a_set_accepts_members_by_name_or_torch_dtype():
    ptype = parse_type("dtype[float16 | bfloat16]")
    assert ptype == DTypeParam(DTypeSet(("float16", "bfloat16")))
    assert ptype.accepts(torch.float16) and ptype.accepts("bfloat16")
    assert not ptype.accepts(torch.float32) and not ptype.accepts("float32") and not ptype.accepts(16)


def test_dtype_param_normalises_to_the_name():
    assert parse_type("dtype[float16 | bfloat16]").normalise(torch.bfloat16) == "bfloat16"


def test_plain_dtype_param_accepts_any_torch_dtype():
    ptype = parse_type("dtype")
    assert all(ptype.accepts(d) for d in (torch.float64, torch.int8, torch.bool, torch.complex64))
    assert not ptype.accepts(None)


def test_maybe_dtype_param_accepts_none():
    ptype = parse_type("dtype[float16 | bfloat16] | None")
    assert ptype.accepts(None) and ptype.accepts(torch.float16) and not ptype.accepts(torch.float32)


# -- the dtype rules of a spec (seed 001 rules 9, the promote rule, kinds) --------------------------

def compile_entry(inputs: dict, outputs: dict, params: dict | None = None):
    raw = {"family": "t", "ref_api": "none", "status": "spec-only",
           "signature": {"inputs": inputs, "outputs": outputs, "params": params or {}},
           "workloads": [], "roofline": {"flops": "1", "bytes": "1"}, "source": {}}
    return compile_op("ProbeFwdOp", raw, "probe.yaml", 1)


def problems(spec) -> list[tuple[str, str, str]]:
    return [(p.rule, p.location.field, p.message) for p in spec.problems]


def test_promote_int_to_float_in_an_input_is_rejected():
    spec = compile_entry({"x": {"dtype": "int32"}, "y": {"dtype": "promote_int_to_float(x)"}},
                         {"z": {"dtype": "same_as(x)", "shape": "[]"}})
    assert problems(spec) == [("L3.promote", "signature.inputs.y.dtype",
                               "promote_int_to_float is only allowed in outputs")]


def test_same_as_an_optional_input_is_reported_but_still_usable():
    spec = compile_entry({"x": {"dtype": "float32"}, "w": {"dtype": "float32", "optional": True},
                          "b": {"dtype": "same_as(w)", "optional": True}},
                         {"y": {"dtype": "same_as(x)", "shape": "[]"}})
    assert problems(spec) == [("L3.same-as-optional", "signature.inputs.b.dtype",
                               "same_as(w) refers to optional input 'w', which may be absent; refer to a required "
                               "input instead")]
    assert spec.usable


def test_same_as_a_name_that_is_not_an_input_is_rejected():
    spec = compile_entry({"x": {"dtype": "float32"}}, {"y": {"dtype": "same_as(z)", "shape": "[]"}})
    assert problems(spec) == [("L3.same-as", "signature.outputs.y.dtype",
                               "same_as(z) refers to 'z', which is not an input")]


def test_bare_dtype_name_is_a_dtype_index():
    spec = compile_entry({"x": {"dtype": "T"}, "y": {"dtype": "T"}}, {"z": {"dtype": "T", "shape": "[]"}})
    assert spec.problems == () and spec.indices == {"T": "dtype"}


def test_dtype_name_used_as_an_axis_too_is_a_kind_error():
    spec = compile_entry({"x": {"dtype": "T", "shape": "[T]"}}, {"z": {"dtype": "T", "shape": "[T]"}})
    assert problems(spec)[0] == ("C1", "signature.inputs.x.dtype", "'T' is a dim index, not a dtype")


def test_dtype_param_by_name_must_be_of_type_dtype():
    spec = compile_entry({"x": {"dtype": "float32"}}, {"z": {"dtype": "n", "shape": "[]"}},
                         {"n": {"type": "int", "default": 1}})
    assert problems(spec) == [("C1", "signature.outputs.z.dtype", "param 'n' is not of type dtype")]


def test_dtype_param_by_name_is_not_an_index():
    spec = compile_entry({"x": {"dtype": "float32"}}, {"z": {"dtype": "out_dtype if present(out_dtype) else "
                                                                       "same_as(x)", "shape": "[]"}},
                         {"out_dtype": {"type": "dtype[float16 | bfloat16] | None", "default": None}})
    assert spec.problems == () and spec.indices == {}


def test_dtype_param_default_outside_its_set_is_rejected():
    spec = compile_entry({"x": {"dtype": "float32"}}, {"z": {"dtype": "same_as(x)", "shape": "[]"}},
                         {"d": {"type": "dtype[float16 | bfloat16]", "default": "float32"}})
    assert problems(spec) == [("L0", "signature.params.d.default", "default 'float32' is not a dtype[float16 | bfloat16]")]


def test_tensor_name_as_a_dtype_is_a_kind_error():
    spec = compile_entry({"x": {"dtype": "float32"}, "y": {"dtype": "x"}}, {"z": {"dtype": "same_as(x)", "shape": "[]"}})
    assert problems(spec) == [("C1", "signature.inputs.y.dtype", "'x' is a tensor, not a dtype")]
