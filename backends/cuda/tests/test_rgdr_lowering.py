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


# The candidates that cut instructions a state element (RGDRTiling's exact_tokens, unchecked_index,
# pingpong, flat_rows, reduce_rows; NOTES.md "RGDR: instructions a state element"), each field's
# mark in the CUDA of the bf16 streamed program, beside the registered tiling without them.
_QWEN_BF16 = RGDRBuildKey("bfloat16", "bfloat16", 16, 32, 128, 128, use_qk_l2norm=True)
_LEAN = RGDRTiling(128, 16, 4, 6, True, exact_tokens=True, unchecked_index=True, pingpong=True, flat_rows=True,
                   reduce_rows="transpose")  # fmt: skip


@pytest.fixture(scope="module")
def streamed_sources():
    """(registered, lean) CUDA of the bf16 streamed program, lowered as a build lowers them."""
    from dataclasses import replace

    from lowered_source import lowered_source

    plain = replace(_LEAN, exact_tokens=False, unchecked_index=False, pingpong=False, flat_rows=False,
                    reduce_rows="butterfly")  # fmt: skip
    return tuple(lowered_source(lambda k, t=t: rgdr_program(k, t), _QWEN_BF16) for t in (plain, _LEAN))


def test_exact_tokens_runs_a_chunks_live_tokens_only(streamed_sources):
    plain, lean = streamed_sources
    assert "for (int c2 = 0; c2 < 8; ++c2)" in plain
    assert "c2 < min(8, (L_1 - (tc * 8)))" in lean


def test_unchecked_index_drops_the_bounds_checks_tilelang_adds(streamed_sources):
    plain, lean = streamed_sources
    assert "if (0 <= " in plain  # e.g. the value head of every state row it stores
    assert "if (0 <= " not in lean


def test_pingpong_swaps_buffers_instead_of_copying_the_prefetched_chunk(streamed_sources):
    plain, lean = streamed_sources
    assert "= Sb[" in plain
    assert "= Sb[" not in lean


def test_flat_rows_addresses_a_chunk_without_head_and_row_divisions(streamed_sources):
    plain, lean = streamed_sources
    assert "(((int64_t)rc) + (int64_t)1) / (int64_t)4)" in plain
    assert "(((int64_t)rc) + (int64_t)1) / (int64_t)4)" not in lean
    assert "(((int64_t)rc) * (int64_t)4096)" in lean


def test_a_transposed_reduction_hands_the_k_dot_back_with_indexed_shuffles(streamed_sources):
    plain, lean = streamed_sources
    assert "__shfl_sync(" not in plain
    assert "__shfl_sync(" in lean
