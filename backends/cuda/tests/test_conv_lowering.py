"""The causal conv1d programs lower to CUDA for sm_90 without a GPU (skips without tilelang): the
decode step and the varlen program in both metadata styles, so a TileLang script error shows
before a GPU run."""

from __future__ import annotations

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey  # noqa: E402
from tileops_cuda.kernels.conv1d_program import conv_update_program, conv_varlen_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


def _source(program) -> str:
    with tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(program, target=_TARGET).kernel_source


@pytest.mark.parametrize("meta_lengths", [False, True], ids=["cu", "lengths"])
def test_the_varlen_program_lowers_for_sm_90(meta_lengths):
    key = ConvVarlenBuildKey("bfloat16", 1088, 4, True, True, True, "int64", "int32", meta_lengths, "sm_90")
    source = _source(conv_varlen_program(key))
    assert ("__shfl_up_sync" in source) == meta_lengths


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_the_update_program_lowers_for_sm_90(style):
    key = ConvUpdateBuildKey("bfloat16", 8200, 4, True, True, style, "int32", "int32", "int32", "sm_90")
    assert "conv_update" in _source(conv_update_program(key))
