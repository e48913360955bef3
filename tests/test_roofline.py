"""The roofline of a call is the spec's formula, evaluated for a workload row or an op's last call.

Expected values are computed here by hand from the row's numbers (not by evaluating the
spec's text again), so a wrong formula, a wrong binding of vars or a wrong itemsize fails.
"""

from __future__ import annotations

import os
import textwrap

import pytest
import torch
import yaml

from tileops_core import TileOpsError, get_spec
from tileops_core.bench.catalog import op_class
from tileops_core.bench.roofline import roofline_of_row, row_env
from tileops_core.bench.workloads import instantiate
from tileops_core.errors import SpecError
from tileops_core.lang.tensor_meta import TensorMeta
from tileops_core.roofline import evaluate_roofline, register_roofline, roofline_of_call
from tileops_core.spec.compile import compile_op
from tileops_core.workloads import dtype_cases


def _row(op: str, label: str):
    spec = get_spec(op)
    return spec, next(r for r in spec.workloads if r.label == label)


def _fresh() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def test_rmsnorm_row_with_weight_counts_the_weight_once():
    spec, row = _row("RMSNormFwdOp", "small-fp32-weight")  # x [8, 4096] fp32, weight [4096]
    roof = roofline_of_row(spec, row, "float32")
    elems, rows = 8 * 4096, 8
    assert roof.flops == 4 * elems + rows == 131080
    assert roof.bytes == (2 * elems + 4096) * 4 == 278528


def test_rmsnorm_row_without_weight_moves_only_x_and_output():
    spec, row = _row("RMSNormFwdOp", "llama3-70b-prefill-16k")  # x [16384, 8192] bf16, no weight
    roof = roofline_of_row(spec, row, "bfloat16")
    assert roof.bytes == 2 * 16384 * 8192 * 2
    assert roof.flops == 4 * 16384 * 8192 + 16384


@pytest.mark.parametrize("label,m,n,k", [("tiny-nt", 64, 128, 96), ("tiny-tn", 128, 64, 32)])
def test_gemm_flops_and_bytes_follow_m_n_k_whichever_operand_is_transposed(label, m, n, k):
    spec, row = _row("GemmFwdOp", label)
    roof = roofline_of_row(spec, row, "float32")
    assert roof.flops == 2 * m * n * k
    assert roof.bytes == (m * k + k * n + m * n) * 4
    assert roof.intensity == pytest.approx(2 * m * n * k / ((m * k + k * n + m * n) * 4))


@pytest.mark.parametrize("label", ["tiny-fp32", "qwen3.5-b1-t1-fp32state", "qwen3.5-b8-t2-bf16state"])
def test_rgdr_bytes_are_slots_read_and_written_plus_token_vectors(label):
    spec, row = _row("RecurrentGatedDeltaRuleFwdOp", label)
    v = row.values
    B, NK, NV, DK, DV = v["B"], v["NK"], v["NV"], v["DK"], v["DV"]
    T = B * v["generator"]["tokens_per_seq"]
    elem = torch.empty((), dtype=getattr(torch, dtype_cases(row)[0])).element_size()
    slot_bytes = NV * DV * DK * torch.empty((), dtype=getattr(torch, v["state_dtype"])).element_size()
    roof = roofline_of_row(spec, row, dtype_cases(row)[0])
    assert roof.bytes == (B + T) * slot_bytes + T * (2 * NK * DK + 2 * NV * DV + NV) * elem
    assert roof.flops == T * NV * DV * DK * 6


def test_rgdr_tiny_fp32_bytes_by_hand():
    spec, row = _row("RecurrentGatedDeltaRuleFwdOp", "tiny-fp32")  # B=3, T=6, NK=2, NV=4, DK=16, DV=32
    assert roofline_of_row(spec, row, "float32").bytes == 9 * (4 * 32 * 16 * 4) + 6 * (64 + 256 + 4) * 4 == 81504


def test_optional_bias_adds_exactly_its_bytes():
    spec = get_spec("LinearFwdOp")
    rows = {r.label: r for r in spec.workloads}
    without = roofline_of_row(spec, rows["small"], "float32")
    with_bias = roofline_of_row(spec, rows["small-bias"], "float32")
    assert with_bias.bytes - without.bytes == 512 * 4
    assert with_bias.flops == without.flops == 2 * 8 * 256 * 512


def test_output_dtype_param_changes_the_bytes_written():
    spec, row = _row("SumFwdOp", "small-two-axes")  # input [8, 16, 32] fp32 summed to [16] in float64
    roof = roofline_of_row(spec, row, "float32")
    assert roof.bytes == 8 * 16 * 32 * 4 + 16 * 8
    assert roof.vars["out_elem"] == 8


@pytest.mark.parametrize("op,label", [("RMSNormFwdOp", "small-fp32-weight"), ("GemmFwdOp", "tiny-tn"),
                                      ("SoftmaxFwdOp", "small-upcast"), ("RecurrentGatedDeltaRuleFwdOp",
                                                                         "tiny-gates-mtp"),
                                      ("GroupNormFwdOp", "small-g8-affine")])
def test_eval_roofline_of_the_last_call_equals_the_rows(op, label):
    spec, row = _row(op, label)
    case = dtype_cases(row)[0]
    inst = instantiate(spec, row, case, rng=_fresh())
    instance = op_class(spec)(**inst.op_kwargs)
    instance(*inst.call_args(spec))
    from_call = instance.eval_roofline()
    from_row = roofline_of_row(spec, row, case)
    assert (from_call.flops, from_call.bytes) == (from_row.flops, from_row.bytes)
    assert from_call == roofline_of_call(instance)


def test_eval_roofline_follows_the_shapes_of_the_last_call():
    cls = op_class(get_spec("RMSNormFwdOp"))
    op = cls(normalized_shape=[64])
    op(torch.randn(4, 64, generator=_fresh()))
    assert op.eval_roofline().bytes == 2 * 4 * 64 * 4
    op(torch.randn(10, 64, generator=_fresh(), dtype=torch.float32).to(torch.bfloat16), None)
    assert op.eval_roofline().bytes == 2 * 10 * 64 * 2


def test_eval_roofline_before_any_call_says_it_needs_one():
    op = op_class(get_spec("RMSNormFwdOp"))(normalized_shape=[64])
    with pytest.raises(TileOpsError, match=r"RMSNormFwdOp: eval_roofline\(\) needs a call first"):
        op.eval_roofline()


def test_row_env_allocates_nothing():
    spec, row = _row("GemmFwdOp", "llama3-8b-down-prefill")  # 8192 x 14336 x 4096 bf16: GBs if allocated
    env = row_env(spec, row, "bfloat16")
    assert isinstance(env["a"], TensorMeta) and env["a"].shape == (8192, 14336)
    assert env["d"].shape == (8192, 4096) and env["d"].itemsize == 2


def _spec_from_yaml(text: str, name: str):
    raw = yaml.safe_load(textwrap.dedent(text))
    return compile_op(name, raw[name], "test.yaml", 1)


_SCALE_SPEC = """
ScaleRoofTestOp:
  family: test
  ref_api: "none"
  status: spec-only
  signature:
    inputs:
      x: {dtype: "float32 | float16", shape: "[M, N]"}
      w: {dtype: "same_as(x)", shape: "[N]", optional: true}
    outputs:
      y: {dtype: "same_as(x)", shape: "[M, N]"}
  workloads:
    - {x_shape: [3, 5], dtypes: [float16], label: "plain"}
  roofline: %s
  source: {}
"""


def test_a_func_roofline_is_looked_up_by_name_and_gets_the_call_environment():
    seen = {}

    @register_roofline("test_scale_roofline")
    def scale(env):
        seen.update(env)
        n = env["x"].shape[0] * env["x"].shape[1]
        return 3 * n, n * env["x"].itemsize + (env["w"].shape[0] * 2 if env["w"] is not None else 0)

    spec = _spec_from_yaml(_SCALE_SPEC % "{func: test_scale_roofline}", "ScaleRoofTestOp")
    roof = roofline_of_row(spec, spec.workloads[0], "float16")
    assert (roof.flops, roof.bytes) == (45, 30)
    assert seen["M"] == 3 and seen["N"] == 5 and seen["w"] is None


def test_an_unregistered_func_roofline_names_itself():
    spec = _spec_from_yaml(_SCALE_SPEC % "{func: no_such_roofline_fn}", "ScaleRoofTestOp")
    with pytest.raises(TileOpsError, match="no roofline function named 'no_such_roofline_fn'"):
        roofline_of_row(spec, spec.workloads[0], "float16")


def test_registering_two_functions_under_one_name_is_refused():
    register_roofline("test_twice_roofline")(lambda env: (1, 1))
    with pytest.raises(TileOpsError, match="registered twice"):
        register_roofline("test_twice_roofline")(lambda env: (2, 2))


def test_a_var_that_reads_an_absent_input_fails_with_its_location():
    inline = '{vars: {wn: "w.shape[0]"}, flops: "M * N", bytes: "wn * 2"}'
    spec = _spec_from_yaml(_SCALE_SPEC % inline, "ScaleRoofTestOp")
    with pytest.raises(SpecError) as caught:
        roofline_of_row(spec, spec.workloads[0], "float16")
    assert "roofline var wn cannot be evaluated" in str(caught.value)
    assert str(caught.value).startswith("test.yaml:")


def test_evaluate_roofline_rejects_a_negative_result():
    inline = '{flops: "M - 2 * N", bytes: "M * N"}'
    spec = _spec_from_yaml(_SCALE_SPEC % inline, "ScaleRoofTestOp")
    env = {"M": 3, "N": 5, "x": TensorMeta((3, 5), torch.float16), "w": None,
           "y": TensorMeta((3, 5), torch.float16)}
    with pytest.raises(TileOpsError, match="roofline flops evaluated to -7"):
        evaluate_roofline(spec, env)
