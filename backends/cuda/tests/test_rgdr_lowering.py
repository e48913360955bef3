"""The RGDR programs lower to CUDA for sm_90 without a GPU (skips without tilelang): both
layouts, both metadata styles with 64-bit metadata and accepted counts, their speculative
twins (one with per-column decays), so a TileLang script error in the shared pieces shows
before a GPU run."""

from __future__ import annotations

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.rgdr import STREAM_CUTS, TILED_CUTS, RGDRBuildKey, RGDRTiling  # noqa: E402
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
_LEAN = RGDRTiling(128, 16, 4, 6, True, **STREAM_CUTS)


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


# Round 2 (RGDRTiling's unpack_bits, row_deltas, stage_live_warps; NOTES.md "RGDR: instructions a state element,
# round 2"): each field's mark in the CUDA of a registered bf16 program (the speculative tiled small program,
# which also holds the general path's staging, and the streamed short role), beside the same program without them.
_ROUND2 = dict(unpack_bits=True, row_deltas=True, stage_live_warps=True)
_SMALL_SPEC = RGDRTiling(128, 16, 2, 8, False, True, **TILED_CUTS)
_SHORT = RGDRTiling(128, 16, 8, 4, True, **STREAM_CUTS)


@pytest.fixture(scope="module")
def round2_sources():
    """{(layout, with round 2's fields): CUDA} of the two registered bf16 programs, lowered as a build lowers them."""
    from dataclasses import replace

    from lowered_source import lowered_source

    return {(name, on): lowered_source(lambda k, t=(replace(t, **_ROUND2) if on else t): rgdr_program(k, t), _QWEN_BF16)
            for name, t in (("tiled", _SMALL_SPEC), ("stream", _SHORT)) for on in (False, True)}  # fmt: skip


@pytest.mark.parametrize("layout", ["tiled", "stream"])
def test_unpack_bits_reads_and_writes_a_bf16_state_a_pair_a_word(round2_sources, layout):
    plain, lean = round2_sources[layout, False], round2_sources[layout, True]
    assert "& (uint)4294901760;" not in plain and "__pack_nv_bfloat162(((bfloat16_t)lo)" not in plain
    assert "& (uint)4294901760;" in lean  # the high element: the word with its low half cleared
    assert "__pack_nv_bfloat162(((bfloat16_t)lo), ((bfloat16_t)hi))" in lean  # the pair written whole


@pytest.mark.parametrize("layout", ["tiled", "stream"])
def test_row_deltas_hands_back_deltas_computed_where_a_rows_total_ends(round2_sources, layout):
    plain, lean = round2_sources[layout, False], round2_sources[layout, True]
    assert "float dl = (bt * (" in plain
    assert "own = (bt * (" in lean and "float dl = acc[r_4];" in lean


def test_stage_live_warps_branches_round_the_q_and_k_staging_of_dead_warps(round2_sources):
    plain, lean = round2_sources["tiled", False], round2_sources["tiled", True]
    dead_warp = "if (((ch * 8) + ((((int)threadIdx.x) >> 5) * 2)) < L_1) {"  # the general path's staging
    assert dead_warp not in plain and "if (((int)threadIdx.x) < 32) {" not in plain
    assert dead_warp in lean
    assert lean.count("if (((int)threadIdx.x) < 32) {") == 2  # the guess's q/k loads, then their l2 norm
    assert "if (((tc * 8) + ((((int)threadIdx.x) >> 5) * 2)) < L_1) {" in round2_sources["stream", True]


@pytest.mark.parametrize("state,tiling,fix", [
    ("float32", RGDRTiling(128, 16, 2, 8, unpack_bits=True), "drop unpack_bits"),
    ("float16", RGDRTiling(128, 16, 2, 8, unpack_bits=True), "drop unpack_bits"),
    ("bfloat16", RGDRTiling(128, 16, 2, 8, row_deltas=True), "set reduce_rows='transpose' or drop row_deltas"),
], ids=["unpack-bits-fp32-state", "unpack-bits-fp16-state", "row-deltas-butterfly"])  # fmt: skip
def test_a_round2_field_that_does_not_apply_is_refused_with_its_fix(state, tiling, fix):
    from tileops_cuda.kernels.rgdr import rgdr_refusal

    reason = rgdr_refusal(RGDRBuildKey("bfloat16", state, 16, 32, 128, 128), tiling)
    assert reason is not None and reason.endswith(fix)


def test_unpack_bits_is_refused_where_a_lane_holds_one_state_column():
    from tileops_cuda.kernels.rgdr import rgdr_refusal

    key = RGDRBuildKey("bfloat16", "bfloat16", 1, 2, 16, 32)
    reason = rgdr_refusal(key, RGDRTiling(128, 16, 2, 8, unpack_bits=True))
    assert reason is not None and reason.endswith("halve threads_per_row or drop unpack_bits")
    assert rgdr_refusal(key, RGDRTiling(128, 8, 2, 8, unpack_bits=True)) is None


# Round 4 (``RGDRTiling.dependent_launch``): the program waits for the stream's previous kernel before
# its first memory access, and TileLang marks it for a programmatic dependent launch.
@pytest.mark.parametrize("tiling", [RGDRTiling(128, 16, 2, 8, speculate=True, **TILED_CUTS),
                                    RGDRTiling(128, 16, 8, 4, True, **STREAM_CUTS)], ids=["tiled-speculative", "stream"])
def test_a_dependent_launch_program_waits_before_its_first_memory_access(tiling):
    from dataclasses import replace

    key = RGDRBuildKey("bfloat16", "bfloat16", 16, 32, 128, 128, use_qk_l2norm=True)
    with tilelang.tvm.target.Target(_TARGET):
        plain = tilelang.lower(rgdr_program(key, tiling), target=_TARGET)
        dependent = tilelang.lower(rgdr_program(key, replace(tiling, dependent_launch=True)), target=_TARGET)
    from lowered_source import waits_before_its_first_memory_access

    assert waits_before_its_first_memory_access(dependent.kernel_source, "seq_meta|slots|query|key|value|beta|g|state|out")
    assert "cudaGridDependency" not in plain.kernel_source


def test_dependent_launch_is_refused_where_the_arch_has_no_programmatic_dependent_launch():
    from tileops_cuda.kernels.rgdr import rgdr_refusal

    key = RGDRBuildKey("bfloat16", "bfloat16", 16, 32, 128, 128, arch="sm_80")
    assert "drop dependent_launch" in rgdr_refusal(key, RGDRTiling(128, 16, 2, 8, dependent_launch=True))
    assert rgdr_refusal(key, RGDRTiling(128, 16, 2, 8)) is None
