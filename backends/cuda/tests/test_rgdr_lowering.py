"""The RGDR programs lower to CUDA for sm_90 without a GPU (skips without tilelang): both
layouts, both metadata styles with 64-bit metadata and accepted counts, their speculative
twins (one with per-column decays), so a TileLang script error in the shared pieces shows
before a GPU run."""

from __future__ import annotations

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.rgdr import RGDRBuildKey, RGDRTiling  # noqa: E402
from tileops_cuda.kernels.rgdr_program import rgdr_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


@pytest.mark.parametrize("style,tiling,gk", [
    ("cu_seqlens", RGDRTiling(128, 16, 2, 8), None),
    ("lengths", RGDRTiling(128, 16, 4, 4, True), None),
    ("cu_seqlens", RGDRTiling(128, 16, 2, 8, speculate=True), "vector"),
    ("lengths", RGDRTiling(128, 16, 4, 4, True, speculate=True), "scalar"),
], ids=["tiled-cu", "stream-lengths", "speculative-tiled-cu-vector-gk",
        "speculative-stream-lengths-scalar-gk"])  # fmt: skip
def test_the_rgdr_program_lowers_for_sm_90(style, tiling, gk):
    key = RGDRBuildKey("bfloat16", "float32", 2, 4, 128, 32, style, "int64", "int64", "int64", True, gk)
    with tilelang.tvm.target.Target(_TARGET):
        source = tilelang.lower(rgdr_program(key, tiling), target=_TARGET).kernel_source
    assert "rgdr_kernel" in source
