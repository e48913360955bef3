"""The chunked prefill's metadata program lowers to CUDA for sm_90 without a GPU (skips without
tilelang), for both index dtypes, with the chunk count a floor division as torch's was."""

from __future__ import annotations

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.chunk_gdr import ChunkGDRBuildKey  # noqa: E402
from tileops_cuda.kernels.chunk_gdr_program import chunk_gdr_meta_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_the_metadata_program_lowers_for_sm_90(index_dtype):
    key = ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128, cu_dtype=index_dtype, slot_dtype=index_dtype)
    with tilelang.tvm.target.Target(_TARGET):
        source = tilelang.lower(chunk_gdr_meta_program(key), target=_TARGET).kernel_source
    assert f"const {'int64_t' if index_dtype == 'int64' else 'int'}* __restrict__ cu_seqlens" in source
    assert ">> 6" in source  # floor((n + 63) / 64) as an arithmetic shift: a floor for negative n too
