"""The RGDR programs lower to CUDA for sm_90 without a GPU (skips without tilelang): both
layouts, both metadata styles with 64-bit metadata and accepted counts, their speculative
twins (one with per-column decays), and the streamed layout's state rings, so a TileLang
script error in the shared pieces shows before a GPU run."""

from __future__ import annotations

import math
import re

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.rgdr import RING_PASS_CONFIGS, RGDRBuildKey, RGDRTiling, rgdr_refusal  # noqa: E402
from tileops_cuda.kernels.rgdr_program import rgdr_program, stream_shared_buffers  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}
_SHARED_OFFSET = re.compile(r"void\* (\w+) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ (\d+)\)\);\n")


def _key(state: str, style: str, gk: str | None) -> RGDRBuildKey:
    return RGDRBuildKey("bfloat16", state, 2, 4, 128, 32, style, "int64", "int64", "int64", True, gk)


def _source(key: RGDRBuildKey, tiling: RGDRTiling, configs: dict | None = None) -> str:
    with tilelang.tvm.transform.PassContext(config=configs or {}), tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(rgdr_program(key, tiling), target=_TARGET).kernel_source


@pytest.mark.parametrize("style,tiling,gk", [
    ("cu_seqlens", RGDRTiling(128, 16, 2, 8), None),
    ("lengths", RGDRTiling(128, 16, 4, 4, True), None),
    ("cu_seqlens", RGDRTiling(128, 16, 2, 8, speculate=True), "vector"),
    ("lengths", RGDRTiling(128, 16, 4, 4, True, speculate=True), "scalar"),
], ids=["tiled-cu", "stream-lengths", "speculative-tiled-cu-vector-gk",
        "speculative-stream-lengths-scalar-gk"])  # fmt: skip
def test_the_rgdr_program_lowers_for_sm_90(style, tiling, gk):
    assert "rgdr_kernel" in _source(_key("float32", style, gk), tiling)


@pytest.mark.parametrize("state,style,gk", [("float32", "lengths", None), ("bfloat16", "cu_seqlens", "vector")])
def test_the_streamed_program_needs_no_barrier_beyond_the_ones_it_writes(state, style, gk):
    """What lets a ring program compile without TileLang's inferred barriers (RING_PASS_CONFIGS):
    the plain streamed program lowers to the same code with the inference on and off, but for
    where its shared buffers lie (reuse is off with it)."""
    key, tiling = _key(state, style, gk), RGDRTiling(128, 16, 4, 4, True)
    inferred, written = _source(key, tiling), _source(key, tiling, RING_PASS_CONFIGS)
    assert _SHARED_OFFSET.sub("", inferred) == _SHARED_OFFSET.sub("", written)


@pytest.mark.parametrize("state,style,gk,tiling", [
    ("bfloat16", "lengths", None, RGDRTiling(128, 16, 4, 6, True, ring=2)),
    ("float32", "cu_seqlens", "vector", RGDRTiling(128, 16, 4, 3, True, ring=3)),
    ("bfloat16", "cu_seqlens", "scalar", RGDRTiling(128, 16, 2, 7, True, ring=3)),
], ids=["bf16-ring2-lengths", "fp32-ring3-cu-vector-gk", "bf16-ring3-cu-scalar-gk"])  # fmt: skip
def test_a_ring_program_lowers_with_its_written_barriers_and_disjoint_shared_buffers(state, style, gk, tiling):
    key = _key(state, style, gk)
    assert rgdr_refusal(key, tiling) is None
    source = _source(key, tiling, RING_PASS_CONFIGS)
    assert "cp_async_gs_conditional<16>" in source and f"cp_async_wait<{tiling.ring - 1}>" in source
    # only the written barriers: the span's warp sums, and before and after each token chunk's staging
    assert source.count("__syncthreads") == 3
    # ... so no two shared buffers may share bytes (RING_PASS_CONFIGS turns TileLang's reuse off)
    sizes = {name: _nbytes(shape, dtype) for name, (shape, dtype) in stream_shared_buffers(key, tiling).items()}
    placed = sorted((int(offset), name) for name, offset in _SHARED_OFFSET.findall(source))
    assert sorted(name for _, name in placed) == sorted(sizes)
    for (offset, name), (next_offset, _) in zip(placed, placed[1:]):
        assert offset + sizes[name] <= next_offset, placed


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * {"float32": 4, "int32": 4, "bfloat16": 2}[dtype]
