"""``tileops_cuda.all_dependent`` on the CPU: which keys it changes, and that it leaves the registered
classes and the linear's builder exactly as it found them."""

from __future__ import annotations

from tileops_cuda import registered
from tileops_cuda.all_dependent import all_dependent, dependent_key
from tileops_cuda.kernels import linear
from tileops_cuda.kernels.gemm import GemmBuildKey
from tileops_cuda.kernels.moe_grouped_experts import MoEGroupedExpertsBuildKey
from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling
from tileops_cuda.kernels.sigmoid_gate_mul import SigmoidGateMulBuildKey


def test_a_key_with_the_field_is_made_dependent_and_others_are_left_alone():
    assert dependent_key(SigmoidGateMulBuildKey("bfloat16", 4096)).dependent_launch
    routed = dependent_key(MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256,
                                                     skinny_tiling=MoESkinnyTiling(weights_first=True)))
    assert routed.dependent_launch and routed.skinny_tiling == MoESkinnyTiling(weights_first=True, dependent_launch=True)
    gemm = GemmBuildKey("bfloat16", 64, 64)
    assert dependent_key(gemm) is gemm and dependent_key(("float16", "float16", "sm_90")) == ("float16", "float16",
                                                                                            "sm_90")


def test_the_patch_is_undone_exactly_when_the_block_ends():
    before = {impl: dict(impl.__dict__).get("key") for impl in registered.KERNELS}
    builder = linear.build_skinny_linear
    with all_dependent() as patched:
        assert len(patched) == len(registered.KERNELS)
        assert all(dict(impl.__dict__).get("key") is not before[impl] for impl in registered.KERNELS)
        assert linear.build_skinny_linear is not builder
    assert {impl: dict(impl.__dict__).get("key") for impl in registered.KERNELS} == before
    assert linear.build_skinny_linear is builder
