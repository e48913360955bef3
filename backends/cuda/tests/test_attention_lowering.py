"""The attention programs lower to CUDA for sm_90 without a GPU (skips without tilelang), and the
layouts meant to stream the cache with bulk copies do (a TMA pipeline), gathered paged tiles
stream with asynchronous copies (cp.async), and the row-by-row paged fallback does neither."""

from __future__ import annotations

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.attention_decode import (  # noqa: E402
    DecodeBuildKey, DecodeSchedule, default_tiling, page_layout, split_tiling,
)
from tileops_cuda.kernels.attention_decode_program import (  # noqa: E402
    decode_combine_program, decode_parallel_combine_program, decode_split_program,
)
from tileops_cuda.kernels.attention_prefill import CACHE_THREADS, CACHE_TOKENS, PrefillBuildKey  # noqa: E402
from tileops_cuda.kernels.attention_prefill import default_tiling as prefill_tiling  # noqa: E402
from tileops_cuda.kernels.attention_prefill_program import (  # noqa: E402
    prefill_attention_program, prefill_cache_program,
)

_TARGET = {"kind": "cuda", "arch": "sm_90"}


def _source(func) -> str:
    with tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(func, target=_TARGET).kernel_source


@pytest.mark.parametrize("block,bulk", [(None, True), (16, True), (128, True), (3, False)],
                         ids=["contiguous", "paged16", "paged128", "paged3-rows"])
def test_the_decode_split_program_lowers_with_bulk_copies_where_tiles_fit_a_block(block, bulk):
    key = DecodeBuildKey("bfloat16", 16, 2, 256, block is not None, "int32", None if block is None else "int32")
    page, tiling = (None, default_tiling(key)) if block is None else page_layout(block)
    assert ("tma_load" in _source(decode_split_program(key, tiling, page))) == bulk


@pytest.mark.parametrize("block", [16, 48, 1])
def test_gathered_paged_tiles_stream_with_asynchronous_copies(block):
    key = DecodeBuildKey("bfloat16", 16, 2, 256, True, "int32", "int64")
    page, tiling = page_layout(block, "gather")
    source = _source(decode_split_program(key, tiling, page))
    assert "cp_async" in source and "tma_load" not in source


def test_the_three_stage_contiguous_pipeline_streams_with_bulk_copies():
    key = DecodeBuildKey("bfloat16", 16, 2, 256)
    page, tiling = split_tiling(key, DecodeSchedule(stages=3), None)
    assert tiling.stages == 3 and "tma_load" in _source(decode_split_program(key, tiling, page))


@pytest.mark.parametrize("D,seqlens", [(256, "int32"), (16, "int64"), (48, "int32")])
def test_the_parallel_combine_lowers_with_warp_shuffles_for_any_head_size(D, seqlens):
    source = _source(decode_parallel_combine_program(DecodeBuildKey("float16", 6, 2, D, seqlens_dtype=seqlens)))
    assert "__shfl_xor_sync" in source


def test_the_decode_combine_program_lowers_for_small_heads_and_int64_lengths():
    key = DecodeBuildKey("float16", 6, 2, 16, seqlens_dtype="int64")
    assert "decode_combine" in _source(decode_combine_program(key, default_tiling(key)))


@pytest.mark.parametrize("paged", [False, True])
def test_the_prefill_programs_lower_and_the_attention_streams_with_bulk_copies(paged):
    key = PrefillBuildKey("bfloat16", 16, 2, 256, paged, "int64", "int32" if paged else None)
    assert "tma_load" in _source(prefill_attention_program(key, prefill_tiling(key)))
    assert "prefill_cache" in _source(prefill_cache_program(key, CACHE_TOKENS, CACHE_THREADS))
