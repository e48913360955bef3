"""The skinny linear program's refusals and row budget on the CPU, and its lowering (its candidates', and
the GEMM's decode tiling the linear's 5-64-row calls run: ``kernels.linear``) for sm_90a where tilelang is
installed (the H200 tests are in test_kernels_gpu.py)."""

from __future__ import annotations

import pytest

from tileops_cuda.kernels.gemm import GemmBuildKey
from tileops_cuda.kernels.skinny_linear import SkinnyLinearTiling, _program, rows_for, skinny_linear_refusal


def _key(n: int = 2048, k: int = 4096, **flags: bool) -> GemmBuildKey:
    return GemmBuildKey("bfloat16", n, k, flags.get("trans_a", False), flags.get("trans_b", True),
                        flags.get("batched", False), "sm_90")


@pytest.mark.parametrize("flags", [{"trans_a": True}, {"trans_b": False}, {"batched": True}],
                         ids=["trans_a", "not-trans_b", "batched"])
def test_a_layout_other_than_f_linears_is_refused_with_the_fix(flags):
    reason = skinny_linear_refusal(_key(**flags))
    assert reason is not None and "F.linear's layout" in reason and "use the GEMM" in reason


def test_the_gemms_own_refusal_comes_first_under_this_programs_name():
    reason = skinny_linear_refusal(_key(k=2050))
    assert reason is not None and reason.startswith("Skinny linear TileLang kernel") and "multiples of 8" in reason


@pytest.mark.parametrize("k,rows", [(40, 4), (4096, 4), (8200, 3), (16384, 2), (32768, 1), (40000, 0)])
def test_the_rows_a_program_holds_keep_its_shared_memory_under_64_kib(k, rows):
    assert rows_for(_key(k=k)) == rows
    assert (skinny_linear_refusal(_key(k=k)) is None) == (rows > 0)


@pytest.mark.parametrize("n,k", [(12288, 2048), (2048, 4096), (136, 40), (512, 8200)])
def test_the_program_lowers_to_one_16_byte_weight_load_a_vector(n, k):
    from lowered_source import lowered_source

    source = lowered_source(lambda key: _program(key, SkinnyLinearTiling()), _key(n, k))
    assert "skinny_linear_kernel" in source and "__syncthreads" in source
    assert "*(uint4*)(wv + " in source  # the weight: 16-byte vectors into registers
    assert "tl::warp_reduce_sum" in source


@pytest.mark.parametrize("weights_first", [True, False])
@pytest.mark.parametrize("n,k", [(2048, 2048), (2048, 4096), (136, 40)])
def test_weights_first_issues_the_first_weight_loads_before_the_staging_barrier(n, k, weights_first):
    from lowered_source import lowered_source

    source = lowered_source(lambda key: _program(key, SkinnyLinearTiling(weights_first=weights_first)), _key(n, k))
    body = source[source.index("skinny_linear_kernel"):]
    assert (body.index("*(uint4*)(wv + ") < body.index("__syncthreads")) == weights_first
    if k == 4096:  # two chunks: the first's loads hoisted, the loop's for the second
        assert body.count("*(uint4*)(wv + ") == (2 if weights_first else 1)


@pytest.mark.parametrize("dependent", [True, False])
def test_a_dependent_skinny_program_waits_for_the_previous_kernel_before_any_load(dependent):
    from lowered_source import lowered_source

    tiling = SkinnyLinearTiling(weights_first=True, dependent_launch=dependent)
    body = lowered_source(lambda key: _program(key, tiling), _key(2048, 2048))
    body = body[body.index("__global__"):]
    assert ("cudaGridDependencySynchronize();" in body) == dependent
    if dependent:
        wait = body.index("cudaGridDependencySynchronize();")
        assert wait < body.index("*(uint4*)") and wait < body.index("cudaTriggerProgrammaticLaunchCompletion();")


@pytest.mark.parametrize("n,k", [(12288, 2048), (2048, 4096), (256, 2048), (136, 40), (512, 8200)])
def test_the_gemms_decode_tiling_lowers_to_wgmma_for_every_shape_the_gpu_test_runs(n, k):
    from lowered_source import lowered_source

    from tileops_cuda.kernels.gemm import _program as gemm_program
    from tileops_cuda.kernels.linear import decode_gemm_tiling

    key = _key(n, k)
    tiling = decode_gemm_tiling(key)
    source = lowered_source(lambda key: gemm_program(key, tiling), key)
    assert "gemm_fwd_kernel" in source and "wgmma" in source.lower()
    assert tiling.block_n == (16 if n <= 512 else 64) and tiling.threads == 128
