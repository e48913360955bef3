"""The chunked prefill's metadata program lowers to CUDA for sm_90 without a GPU (skips without
tilelang), for both index dtypes: it clips cu_seqlens in their own dtype, max-scans them (the
spec's ``cummax(clip(cu_seqlens))``) and zeroes the rows of uncovered tokens."""

from __future__ import annotations

import re

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
    assert ">> 6" in source  # ceil(n / 64) of a clipped length n >= 0 as an arithmetic shift


def _meta_body(index_dtype: str) -> str:
    key = ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128, cu_dtype=index_dtype, slot_dtype=index_dtype)
    with tilelang.tvm.target.Target(_TARGET):
        source = tilelang.lower(chunk_gdr_meta_program(key), target=_TARGET).kernel_source
    return source[source.index("__launch_bounds__"):]


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_every_cu_seqlens_entry_is_clipped_into_0_t_in_its_own_dtype_before_it_is_made_int32(index_dtype):
    """Entry b (the scan), entry b + 1 (the length) and entry 0 (the uncovered head): each read inside
    ``min(max(., 0), T)`` in the entry's dtype (an int64 entry past int32 made int32 first would wrap
    into ``[0, T]``: ``2**32 + 5`` would end a sequence at token 5), none cast bare."""
    body = _meta_body(index_dtype)
    loads = re.findall(r"cu_seqlens\[", body)
    wide = index_dtype == "int64"
    clipped = re.findall(r"\(\(int\)min\(max\(cu_seqlens\[[^;]*?, \(int64_t\)0\), \(\(int64_t\)T\)\)\)" if wide
                         else r"min\(max\(cu_seqlens\[[^;]*?, 0\), T\)", body)
    assert len(loads) == len(clipped) == 3, (loads, clipped)
    assert "(int)cu_seqlens[" not in body


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_the_clipped_entries_are_max_scanned_and_the_lengths_read_from_the_scan(index_dtype):
    """A warp-shuffle max-scan of the clipped entries (its block maximum carried to the next block,
    ``high``), before the chunk counts' sum-scan; the chunk count of sequence b is ``ceil((max(clip(cu[b +
    1]), cu[b]) - cu[b]) / 64)`` of the scanned start, never negative."""
    body = _meta_body(index_dtype)
    scans = re.findall(r"__shfl_up_sync\([^;]*\);\s*if \([^\n]*\) \{\s*(\w+)\[0\] = (max\(|\()\1\[0\]", body)
    assert scans == [("start", "max("), ("part", "(")], scans  # the max-scan, then the sum-scan
    assert "high = max(high, " in body and "start[0] = max(start[0], high);" in body
    assert re.search(r"part\[0\] = \(\(max\(\(.*- start\[0\]\), 0\) \+ 63\) >> 6\);", body)


def test_the_rows_of_uncovered_tokens_are_zeroed_in_16_byte_vectors():
    """``[0, clip(cu[0]))`` then ``[high, T)``: a loop of ``head + T - high`` rows (no iteration for valid
    metadata), each row's bf16 zeros stored as 16-byte vectors."""
    body = _meta_body("int32")
    assert re.search(r"int tail = high;\s*for \(int i = 0; i < [^;]*head[^;]*T[^;]*tail[^;]*; \+\+i\)", body)
    assert "*(uint4*)(out + " in body


def test_a_64_bit_slot_past_int32_becomes_padding_not_the_slot_it_wraps_to():
    """The metadata program tests a 64-bit slot against int32's range in its own dtype (made int32 first,
    2**32 + k would be slot k, whose state the sequence would read and overwrite); -1 past it, which the state
    program's ``0 <= slot < S`` reads as padding. An int32 slot is copied as before."""
    from lowered_source import index_casts

    def source(dtype: str) -> str:
        key = ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128, cu_dtype=dtype, slot_dtype=dtype)
        with tilelang.tvm.target.Target(_TARGET):
            return tilelang.lower(chunk_gdr_meta_program(key), target=_TARGET).kernel_source

    assert index_casts(source("int64"), "slots", "(int64_t)2147483647") == (1, [])
    narrow = source("int32")
    assert "2147483647" not in narrow and "(int)slots[" not in narrow
