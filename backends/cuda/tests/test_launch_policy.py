"""``tileops_cuda.launch_policy`` on the CPU: the registered keys launch as programmatic dependents where the
key has the field and the arch has the launch, ``dependent_launches`` switches that for a block and restores
it exactly, and the linear's field reaches its skinny program only (the GEMM's programs build without it)."""

from __future__ import annotations

import dataclasses

from tileops_core.kernels import CallSpec
from tileops_cuda import launch_policy
from tileops_cuda.kernels.gemm import GemmBuildKey
from tileops_cuda.kernels.moe_grouped_experts import MoEGroupedExpertsBuildKey
from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling
from tileops_cuda.kernels.sigmoid_gate_mul import SigmoidGateMulBuildKey
from tileops_cuda.launch_policy import dependent_launches, registered_key, with_dependent_launch
from tileops_cuda.registered import TileLangLinear
from tileops_cuda.registered_model import TileLangMoEGroupedExperts


def _linear_call(arch: str = "sm_90a") -> CallSpec:
    return CallSpec("LinearFwdOp", "linear", "cuda", arch, {"input": "bfloat16", "weight": "bfloat16"},
                    {"out_features": 4096, "in_features": 2048}, {})


def _experts_call(arch: str = "sm_90a") -> CallSpec:
    return CallSpec("MoEGroupedExpertsFwdOp", "moe_grouped_experts", "cuda", arch,
                    {"hidden_states": "bfloat16", "expert_offsets": "int32"},
                    {"E": 512, "H": 2048, "I": 512, "T": 10}, {})


def test_a_key_with_the_field_gets_it_and_its_skinny_tiling_too_and_others_are_left_alone():
    assert with_dependent_launch(SigmoidGateMulBuildKey("bfloat16", 4096), True).dependent_launch
    routed = with_dependent_launch(MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256,
                                                             skinny_tiling=MoESkinnyTiling(weights_first=True)), True)
    assert routed.dependent_launch and routed.skinny_tiling == MoESkinnyTiling(weights_first=True, dependent_launch=True)
    assert with_dependent_launch(routed, False) == dataclasses.replace(
        routed, dependent_launch=False, skinny_tiling=MoESkinnyTiling(weights_first=True))
    assert with_dependent_launch(("float16", "float16", "sm_90"), True) == ("float16", "float16", "sm_90")


def test_registered_keys_are_dependent_on_hopper_and_plain_where_the_arch_has_no_such_launch():
    assert launch_policy.DEPENDENT_LAUNCH
    hopper = TileLangMoEGroupedExperts.key(_experts_call())
    assert hopper.dependent_launch and hopper.skinny_tiling.dependent_launch
    ampere = TileLangMoEGroupedExperts.key(_experts_call("sm_80"))
    assert not ampere.dependent_launch and not ampere.skinny_tiling.dependent_launch
    assert registered_key(GemmBuildKey("bfloat16", 64, 64, arch="sm_80")) == GemmBuildKey("bfloat16", 64, 64,
                                                                                         arch="sm_80")
    assert TileLangLinear.key(_linear_call()).dependent_launch


def test_dependent_launches_switches_the_registered_keys_for_a_block_and_restores_them():
    before = TileLangLinear.key(_linear_call())
    with dependent_launches(False):
        assert TileLangLinear.key(_linear_call()) == dataclasses.replace(before, dependent_launch=False)
        assert not TileLangMoEGroupedExperts.key(_experts_call()).skinny_tiling.dependent_launch
    assert TileLangLinear.key(_linear_call()) == before and launch_policy.DEPENDENT_LAUNCH
    try:
        with dependent_launches(False):
            raise KeyError("inside")
    except KeyError:
        pass
    assert launch_policy.DEPENDENT_LAUNCH


def test_the_gemm_builds_its_programs_without_the_linears_field(monkeypatch):
    from tileops_cuda.kernels import gemm

    seen = []
    monkeypatch.setattr(gemm, "compile_once", lambda identity, *rest: seen.append(identity))
    gemm.build_gemm(GemmBuildKey("bfloat16", 64, 64, dependent_launch=True))
    gemm.build_gemm(GemmBuildKey("bfloat16", 64, 64))
    assert seen[0] == seen[1] and not seen[0][1].dependent_launch


def _conv_call(op: str, interface: str, arch: str = "sm_90a") -> CallSpec:
    flags = {"activation": "silu", "has_bias": False, "seq_lens_style": "cu_seqlens"}
    flags.update({"has_has_initial_state": True} if "varlen" in interface else {"has_num_accepted_tokens": False})
    return CallSpec(op, interface, "cuda", arch,
                    {"x": "bfloat16", "actual_seq_lengths": "int32", "conv_state_indices": "int32"},
                    {"D": 8192, "W": 4}, flags)


def test_a_class_that_opts_out_launches_plainly_on_hopper_while_its_decode_sibling_is_a_dependent():
    """The varlen conv (prefill) measured slower as a dependent and says so (``launches_as_dependent``);
    the conv update, in the decode step the policy was measured on, stays one."""
    from tileops_cuda.registered import TileLangCausalConv1dUpdate, TileLangCausalConv1dVarlen

    assert not TileLangCausalConv1dVarlen.launches_as_dependent and TileLangCausalConv1dUpdate.launches_as_dependent
    varlen_call = _conv_call("CausalConv1dVarlenFwdOp", "causal_conv1d_varlen")
    varlen = TileLangCausalConv1dVarlen.key(varlen_call)
    update = TileLangCausalConv1dUpdate.key(_conv_call("CausalConv1dUpdateFwdOp", "causal_conv1d_update"))
    assert not varlen.dependent_launch and update.dependent_launch
    assert varlen == TileLangCausalConv1dVarlen.program_key(varlen_call)
