"""What a user may get wrong at an op's public surface, and the clear error each gets (found in review).

Each case was a bare IndexError / AttributeError, a silently wrong value or an unhelpful message.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tileops_core.cli.main import main
from tileops_core.errors import CheckError, TileOpsError
from tileops_core.op.checks import contents_checking_default
from tileops_core.ops.normalization import RMSNormFwdOp
from tileops_core.ops.reduction import SoftmaxFwdOp


def test_a_static_dim_of_a_0d_input_is_its_one_axis_and_the_shape_rule_refuses_it():
    with pytest.raises(CheckError, match=r"len\(S\) > 0 does not hold with S=\(\)"):
        SoftmaxFwdOp(dim=0, N=1)(torch.tensor(1.0))


def test_a_torch_device_is_a_target_and_anything_else_not_a_string_is_refused():
    x, w = torch.randn(2, 8), torch.randn(8)
    op = RMSNormFwdOp(normalized_shape=[8], target=torch.device("cpu"))
    torch.testing.assert_close(op(x, w), torch.nn.functional.rms_norm(x, [8], w))
    with pytest.raises(TileOpsError, match="expected 'device\\[:arch\\]\\[@backend\\]' or a torch.device, not int"):
        RMSNormFwdOp(normalized_shape=[8], target=0)


def test_a_param_is_set_at_construction_only():
    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-6)
    with pytest.raises(AttributeError, match=r"RMSNormFwdOp.eps is set at construction only"):
        op.eps = -1e-4
    assert op.eps == 1e-6 and op.params["eps"] == 1e-6


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_a_call_inside_a_torch_func_transform_is_refused_by_name(transform):
    op, w = RMSNormFwdOp(normalized_shape=[8]), torch.randn(8)
    f = torch.func.vmap(lambda x: op(x, w)) if transform == "vmap" else torch.func.grad(lambda x: op(x, w).sum())
    with pytest.raises(TileOpsError, match="torch.func transforms"):
        f(torch.randn(3, 8))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_torch_jit_trace_records_the_custom_op_not_what_its_kernel_runs(warm):
    """The tracer sees dispatcher calls only: a TileLang launch would be dropped from the trace, leaving the
    output's allocation (found in review; on the CPU the trace recorded the reference kernel's torch ops at the
    traced shape). A warm op's matcher misses under the trace, so cold and warm calls both take the custom op."""
    op, w = RMSNormFwdOp(normalized_shape=[8]), torch.randn(8)
    x = torch.randn(3, 8)
    if warm:
        op(x, w)
    traced = torch.jit.trace(lambda a, b: op(a, b) * 2, (x, w))
    nodes = [n.kind() for n in traced.graph.nodes()]
    assert "tileops::rms_norm_fwd_op" in nodes and not any(k.startswith("aten::rms_norm") for k in nodes)
    y = torch.randn(3, 8)
    torch.testing.assert_close(traced(y, w), 2 * torch.nn.functional.rms_norm(y, [8], w))
    assert op(y, w) is not None and op.last_plan is not None  # eager calls after the trace keep their path


def test_constructing_an_op_inside_a_compiled_function_says_where_to_construct_it():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: RMSNormFwdOp(normalized_shape=[8])(a), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="construct ops outside torch.compile"):
        compiled(torch.randn(3, 8))


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("False", False), (" OFF ", False), ("0", False),
                                       ("", False)])
def test_the_contents_switch_reads_off_in_any_case_and_spacing(monkeypatch, value, on):
    monkeypatch.setenv("TILEOPS_CHECK_CONTENTS", value)
    assert contents_checking_default() is on


def test_check_contents_takes_a_bool_or_none():
    with pytest.raises(TileOpsError, match="check_contents= takes True, False or None, not 'no'"):
        RMSNormFwdOp(normalized_shape=[8], check_contents="no")


def test_explain_of_a_shape_no_memory_holds_is_a_cli_error(capsys):
    assert main(["explain", "RMSNormFwdOp", "--shape", "x=99999999999,4096"]) != 0
    assert "cannot be allocated here" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the device is there")
def test_explain_under_a_target_whose_device_is_absent_is_a_cli_error(capsys):
    """As --device cuda is (found in review: an AssertionError from torch's lazy CUDA init)."""
    assert main(["explain", "RMSNormFwdOp", "--target", "cuda"]) != 0
    assert "is not available on this machine" in capsys.readouterr().err


@pytest.mark.parametrize("eps", [-1.0, float("nan")])
def test_a_group_norm_eps_below_zero_or_nan_is_refused_by_its_rule(eps):
    from tileops_core.ops.normalization import GroupNormFwdOp

    with pytest.raises(CheckError, match=r"GroupNormFwdOp: eps >= 0 does not hold .*\(manifest/normalization.yaml:\d+"):
        GroupNormFwdOp(num_groups=2, eps=eps)(torch.randn(2, 4, 3))


def test_a_recurrent_delta_rule_over_keys_of_no_channels_is_refused_by_its_rule():
    """The default scale is DK ** -0.5 (found in review: DK = 0 passed every rule and the kernel divided by 0)."""
    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

    T, NK, NV, DV = 2, 1, 2, 4
    args = (torch.randn(T, NK, 0), torch.randn(T, NK, 0), torch.randn(T, NV, DV), torch.rand(T, NV),
            torch.randn(3, NV, DV, 0), torch.tensor([1, 1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32))
    with pytest.raises(CheckError, match=r"DK > 0 does not hold with DK=0 \(manifest/linear_attention.yaml:\d+"):
        RecurrentGatedDeltaRuleFwdOp()(*args)
