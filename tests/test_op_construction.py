"""The construction phase: param values by type, Maybe, enums, dtype params, ADT invariants,
required params and construction-time tensors, static dims, and the checks decidable now.

The six seed-001 examples cover bool, int, float, list/tuple and Maybe params and the
rules on params alone; a test-only spec adds an enum, a dtype param, an ADT, a required
param without default, static dims and a construction-time tensor.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from example_ops import (REFERENCE_KERNELS, GemmFwdOp, GroupNormKernel, RMSNormFwdOp, RMSNormKernel, at, failure,
                         probe_specs)
from tileops_core.kernels import KernelInterface
from tileops_core.op import Op


class GroupNormFwdOp(Op):  # not example_ops.GroupNormFwdOp: its __init__ takes no named params
    interfaces = (GroupNormKernel,)

    def __init__(self, **params):  # passes whatever it is given, so the base's checks see it all
        super().__init__(**params)

    def forward(self, x, weight=None, bias=None):
        return self.launch(GroupNormKernel, x, weight, bias, self.num_groups, self.eps)


@pytest.fixture
def kernels(fake_backend):
    fake_backend.kernel(GroupNormKernel, REFERENCE_KERNELS[GroupNormKernel])
    fake_backend.kernel(RMSNormKernel, REFERENCE_KERNELS[RMSNormKernel])


def spec_of(cls):
    return cls.op_spec()


# -- params by type ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_bool_param_rejects_anything_but_a_bool(value):
    assert failure(lambda: GemmFwdOp(trans_a=value)) == (
        f"GemmFwdOp: param trans_a={value!r} is not a bool" + at(spec_of(GemmFwdOp).params["trans_a"]))


def test_bool_params_become_attributes():
    op = GemmFwdOp(trans_a=True, trans_b=False)
    assert (op.trans_a, op.trans_b) == (True, False)
    assert op.params == {"trans_a": True, "trans_b": False}
    assert repr(op) == "GemmFwdOp(trans_a=True, trans_b=False)"


@pytest.mark.parametrize("value", [2.0, True, "2"])
def test_int_param_rejects_floats_bools_and_strings(value):
    assert failure(lambda: GroupNormFwdOp(num_groups=value)) == (
        f"GroupNormFwdOp: param num_groups={value!r} is not a int" + at(spec_of(GroupNormFwdOp).params["num_groups"]))


def test_float_param_accepts_an_int_and_stores_a_float():
    op = GroupNormFwdOp(num_groups=2, eps=1)
    assert op.eps == 1.0 and type(op.eps) is float


def test_default_of_a_param_applies_when_it_is_omitted():
    assert GroupNormFwdOp(num_groups=4).eps == 1e-05


def test_list_or_tuple_param_is_stored_as_a_tuple():
    n = random.randint(1, 64)
    assert RMSNormFwdOp([n]).normalized_shape == (n,) == RMSNormFwdOp((n,)).normalized_shape


@pytest.mark.parametrize("value", [4096, [4096.0], "4096", None])
def test_list_param_rejects_other_values(value):
    assert failure(lambda: RMSNormFwdOp(value)) == (
        f"RMSNormFwdOp: param normalized_shape={value!r} is not a list[int] | tuple[int, ...]"
        + at(spec_of(RMSNormFwdOp).params["normalized_shape"]))


def test_maybe_param_accepts_none_and_a_value():
    assert RMSNormFwdOp([8]).eps is None and RMSNormFwdOp([8], eps=1e-6).eps == 1e-6


def test_maybe_param_rejects_other_types():
    assert failure(lambda: RMSNormFwdOp([8], eps="small")) == (
        "RMSNormFwdOp: param eps='small' is not a float | None" + at(spec_of(RMSNormFwdOp).params["eps"]))


def test_param_without_default_is_required():
    assert failure(lambda: GroupNormFwdOp(eps=1e-6)) == (
        "GroupNormFwdOp: param num_groups (int) is required" + at(spec_of(GroupNormFwdOp).params["num_groups"]))


def test_argument_the_spec_does_not_declare_is_rejected():
    assert failure(lambda: GroupNormFwdOp(num_groups=2, affine=True)) == (
        "GroupNormFwdOp: unexpected argument 'affine' (the spec declares: eps, num_groups) "
        f"({spec_of(GroupNormFwdOp).location.where()})")


# -- checks decidable at construction run at construction ---------------------------------------------

def test_rule_on_params_alone_fails_at_construction():
    assert failure(lambda: GroupNormFwdOp(num_groups=0)) == (
        "GroupNormFwdOp: num_groups > 0 does not hold with num_groups=0" + at(spec_of(GroupNormFwdOp).shape_rules[0]))


def test_rule_on_a_let_of_params_fails_at_construction():
    assert failure(lambda: RMSNormFwdOp([])) == (
        "RMSNormFwdOp: len(N) > 0 does not hold with N=()" + at(spec_of(RMSNormFwdOp).shape_rules[0]))


def test_guarded_rule_on_a_maybe_param_fails_at_construction_when_given():
    assert failure(lambda: RMSNormFwdOp([8], eps=-1.0)) == (
        "RMSNormFwdOp: not present(eps) or eps >= 0 does not hold with eps=-1.0"
        + at(spec_of(RMSNormFwdOp).shape_rules[1]))


def test_rule_needing_a_call_is_deferred_to_the_call(kernels):
    op = GroupNormFwdOp(num_groups=3)  # C % num_groups cannot be decided yet
    assert op(torch.randn(2, 6, 4)).shape == (2, 6, 4)
    assert failure(lambda: op(torch.randn(2, 4, 4))) == (
        "GroupNormFwdOp: C % num_groups == 0 does not hold with C=4, num_groups=3"
        + at(spec_of(GroupNormFwdOp).shape_rules[1]))


# -- a test-only spec: enum, dtype param, ADT, static dims, construction-time tensor -------------------

PROBES = probe_specs(
    ProbeParamsFwdOp="""
    inputs:
      x: {dtype: "float16 | bfloat16 | float32", shape: "[*S, N]"}
    outputs:
      y: {dtype: "out_dtype if present(out_dtype) else same_as(x)", shape: "[*S]"}
    params:
      scale: {type: float}
      mode: {type: '"sum" | "mean"', default: sum}
      out_dtype: {type: "dtype[float16 | bfloat16] | None", default: null}
      pad: {type: "Pad | None", default: null}
    types:
      Pad:
        variants:
          same: {}
          explicit: {fields: {left: int, right: int}, invariant: ["left >= 0", "right >= left"]}
""",
    ProbeStaticFwdOp="""
    inputs:
      x: {dtype: float32}
    outputs:
      y: {dtype: float32, shape: "[D]"}
    params:
      dim: {type: int, default: -1}
    static_dims:
      D: "x.shape[dim]"
""",
    ProbeTableFwdOp="""
    inputs:
      table: {dtype: "float32 | float64", shape: "[V, D]", construction: true}
      x: {dtype: "float32", shape: "[K, D]"}
    outputs:
      y: {dtype: float32, shape: "[K, D]"}
""")


class ProbeParamsKernel(KernelInterface):
    op = "ProbeParamsFwdOp"


class ProbeParamsFwdOp(Op):
    interfaces = (ProbeParamsKernel,)

    def __init__(self, scale, mode="sum", out_dtype=None, pad=None):
        super().__init__(scale=scale, mode=mode, out_dtype=out_dtype, pad=pad)

    def forward(self, x):
        return self.launch(ProbeParamsKernel, x, self.mode, self.out_dtype)


class ProbeStaticKernel(KernelInterface):
    op = "ProbeStaticFwdOp"


class ProbeStaticFwdOp(Op):
    interfaces = (ProbeStaticKernel,)

    def __init__(self, *, D, dim=-1):
        super().__init__(D=D, dim=dim)

    def forward(self, x):
        return self.launch(ProbeStaticKernel, x, self.dim)


class ProbeTableKernel(KernelInterface):
    op = "ProbeTableFwdOp"


class ProbeTableFwdOp(Op):
    interfaces = (ProbeTableKernel,)

    def __init__(self, table=None):
        super().__init__(table=table)

    def forward(self, x):
        return self.launch(ProbeTableKernel, self.construction_tensor("table"), x)


def _reduce(x, mode, out_dtype):
    y = x.sum(-1) if mode == "sum" else x.mean(-1)
    return y if out_dtype is None else y.to(getattr(torch, out_dtype))


@pytest.fixture
def probes(extra_manifest, fake_backend):
    extra_manifest(PROBES)
    fake_backend.kernel(ProbeParamsKernel, _reduce)
    fake_backend.kernel(ProbeStaticKernel, lambda x, dim: x.movedim(dim, -1).reshape(-1, x.shape[dim]).sum(0))
    fake_backend.kernel(ProbeTableKernel, lambda table, x: table[: x.shape[0]] + x)


def test_enum_param_rejects_a_value_outside_it(probes):
    assert failure(lambda: ProbeParamsFwdOp(1.0, mode="max")) == (
        "ProbeParamsFwdOp: param mode='max' is not a \"sum\" | \"mean\"" + at(spec_of(ProbeParamsFwdOp).params["mode"]))


def test_enum_value_reaches_the_kernel_and_the_call_spec(probes):
    x = torch.randn(3, 4)
    op = ProbeParamsFwdOp(1.0, mode="mean")
    torch.testing.assert_close(op(x), x.mean(-1))
    assert op.last_plan.call_specs[ProbeParamsKernel].flags["mode"] == "mean"


def test_required_param_without_default_is_a_required_argument(probes):
    class ProbeParamsFwdOp(Op):  # noqa: F811  (the spec's name, constructed without its required param)
        interfaces = (ProbeParamsKernel,)

        def forward(self, x):
            raise AssertionError("not called")

    assert failure(lambda: ProbeParamsFwdOp()) == (
        "ProbeParamsFwdOp: param scale (float) is required" + at(spec_of(ProbeParamsFwdOp).params["scale"]))


def test_dtype_param_outside_its_set_is_rejected(probes):
    assert failure(lambda: ProbeParamsFwdOp(1.0, out_dtype=torch.float32)) == (
        "ProbeParamsFwdOp: param out_dtype=torch.float32 is not a dtype[float16 | bfloat16] | None"
        + at(spec_of(ProbeParamsFwdOp).params["out_dtype"]))


def test_dtype_param_is_stored_by_name_and_sets_the_output_dtype(probes):
    op = ProbeParamsFwdOp(1.0, out_dtype=torch.bfloat16)
    assert op.out_dtype == "bfloat16"
    assert op(torch.randn(3, 4)).dtype == torch.bfloat16


def test_absent_dtype_param_leaves_the_output_dtype_to_the_input(probes):
    assert ProbeParamsFwdOp(1.0)(torch.randn(3, 4, dtype=torch.float16)).dtype == torch.float16


def test_adt_value_whose_invariant_fails(probes):
    pad = SimpleNamespace(adt="Pad", tag="explicit", left=3, right=1)
    variant = spec_of(ProbeParamsFwdOp).types["Pad"].variants["explicit"]
    assert failure(lambda: ProbeParamsFwdOp(1.0, pad=pad)) == (
        "ProbeParamsFwdOp: param pad: invariant right >= left of Pad.explicit does not hold with left=3, right=1"
        + at(variant.invariants[1]))


def test_adt_value_with_an_unknown_variant(probes):
    pad = SimpleNamespace(adt="Pad", tag="mirror")
    assert failure(lambda: ProbeParamsFwdOp(1.0, pad=pad)) == (
        "ProbeParamsFwdOp: param pad: Pad has no variant 'mirror'" + at(spec_of(ProbeParamsFwdOp).types["Pad"]))


def test_adt_field_of_the_wrong_type(probes):
    pad = SimpleNamespace(adt="Pad", tag="explicit", left=1.5, right=2)
    assert failure(lambda: ProbeParamsFwdOp(1.0, pad=pad)) == (
        "ProbeParamsFwdOp: param pad: field left=1.5 of Pad.explicit is not a int"
        + at(spec_of(ProbeParamsFwdOp).types["Pad"]))


def test_valid_adt_value_is_accepted_and_its_tag_enters_the_call_spec(probes):
    op = ProbeParamsFwdOp(1.0, pad=SimpleNamespace(adt="Pad", tag="explicit", left=0, right=2))
    op(torch.randn(2, 3))
    assert op.last_plan.call_specs[ProbeParamsKernel].flags["pad.tag"] == "explicit"


def test_static_dim_is_a_required_keyword_argument(probes):
    class ProbeStaticFwdOp(Op):  # noqa: F811  (constructed without its promise)
        interfaces = (ProbeStaticKernel,)

        def forward(self, x):
            raise AssertionError("not called")

    sd = spec_of(ProbeStaticFwdOp).static_dims["D"]
    assert failure(lambda: ProbeStaticFwdOp()) == (
        f"ProbeStaticFwdOp: static dim D (promised x.shape[dim]) is a required keyword argument ({sd.expr.loc.where()})")


@pytest.mark.parametrize("value", [-1, 2.0, True, "8"])
def test_static_dim_must_be_a_non_negative_int(probes, value):
    sd = spec_of(ProbeStaticFwdOp).static_dims["D"]
    assert failure(lambda: ProbeStaticFwdOp(D=value)) == (
        f"ProbeStaticFwdOp: static dim D={value!r} must be a non-negative int ({sd.expr.loc.where()})")


def test_static_dim_promise_is_checked_at_forward(probes):
    op = ProbeStaticFwdOp(D=8, dim=1)
    sd = spec_of(ProbeStaticFwdOp).static_dims["D"]
    assert op(torch.randn(2, 8, 3)).shape == (8,)
    assert failure(lambda: op(torch.randn(2, 6, 3))) == (
        f"ProbeStaticFwdOp: static dim D was promised as 8 at construction, but x.shape[dim] is 6 "
        f"({sd.expr.loc.where()})")


def test_static_dim_axis_out_of_range(probes):
    sd = spec_of(ProbeStaticFwdOp).static_dims["D"]
    assert failure(lambda: ProbeStaticFwdOp(D=4, dim=5)(torch.randn(4, 4))) == (
        f"ProbeStaticFwdOp: static dim D: x.shape[dim] with axis 5 is out of range for x of rank 2 "
        f"({sd.expr.loc.where()})")


def test_static_dim_is_stored_as_an_attribute(probes):
    op = ProbeStaticFwdOp(D=16)
    assert op.D == 16 and op.params == {"dim": -1, "D": 16}


def test_required_construction_time_tensor(probes):
    assert failure(lambda: ProbeTableFwdOp()) == (
        "ProbeTableFwdOp: construction-time input table is required" + at(spec_of(ProbeTableFwdOp).inputs["table"]))


def test_construction_time_input_must_be_a_tensor(probes):
    assert failure(lambda: ProbeTableFwdOp([[1.0]])) == (
        "ProbeTableFwdOp: construction-time input table must be a tensor, got list"
        + at(spec_of(ProbeTableFwdOp).inputs["table"]))


def test_construction_time_tensor_shape_binds_indices_for_the_call(probes):
    op = ProbeTableFwdOp(torch.randn(5, 3))
    assert op(torch.randn(2, 3)).shape == (2, 3)
    assert failure(lambda: op(torch.randn(2, 4))).startswith("ProbeTableFwdOp: x shape [K, D]")
