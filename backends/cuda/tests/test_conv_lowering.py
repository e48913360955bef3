"""The causal conv1d programs lower to CUDA for sm_90 without a GPU (skips without tilelang): the
decode step and the varlen program in both metadata styles, its rows through registers and
through the ring of asynchronous copies, so a TileLang script error shows before a GPU run."""

from __future__ import annotations

import re

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.conv1d import (RING_PASS_CONFIGS, ConvUpdateBuildKey, ConvVarlenBuildKey,  # noqa: E402
                                        pass_configs)
from tileops_cuda.kernels.conv1d_program import conv_update_program, conv_varlen_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


def _source(program, configs=None) -> str:
    with tilelang.tvm.transform.PassContext(config=configs or {}), tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(program, target=_TARGET).kernel_source


@pytest.mark.parametrize("stages,meta_lengths", [(0, False), (0, True), (3, True), (2, False)],
                         ids=["registers-cu", "registers-lengths", "ring-lengths", "ring-cu"])
def test_the_varlen_program_lowers_for_sm_90(stages, meta_lengths):
    key = ConvVarlenBuildKey("bfloat16", 1088, 4, True, True, True, "int64", "int32", meta_lengths, "sm_90",
                             stages=stages)
    source = _source(conv_varlen_program(key), RING_PASS_CONFIGS if stages else None)
    assert ("cp_async" in source) == (stages > 0)
    assert ("__shfl_up_sync" in source) == meta_lengths
    if stages:  # only the written barriers: after the metadata's shared tables (and the scan's warp sums)
        assert source.count("__syncthreads") == 2 + meta_lengths
        # ... so no two shared buffers may share bytes (RING_PASS_CONFIGS)
        offsets = re.findall(r"void\* \w+ = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ (\d+)\)\)", source)
        assert len(offsets) >= 5 and len(set(offsets)) == len(offsets), offsets


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_the_update_program_lowers_for_sm_90(style):
    key = ConvUpdateBuildKey("bfloat16", 8200, 4, True, False, style, "int32", "int32", "int32", "sm_90")
    assert "conv_update" in _source(conv_update_program(key))


@pytest.mark.parametrize("key", [
    ConvUpdateBuildKey("bfloat16", 8192, 4, True, False, "lengths", "int32", "int32", None, "sm_90", wide_stores=True),
    ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, True, "int32", "int32", False, "sm_90", wide_stores=True),
    ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, True, "int32", "int32", True, "sm_90", stages=2,
                       wide_stores=True),
], ids=["update", "varlen", "varlen-ring"])
def test_wide_stores_lower_every_vector_store_to_explicit_128_bit_ptx(key):
    program = conv_update_program(key) if isinstance(key, ConvUpdateBuildKey) else conv_varlen_program(key)
    source = _source(program, pass_configs(key))
    assert "tl::store_global_128" in source and "*(uint4*)(out" not in source
    if getattr(key, "stages", 0):  # the ring's configs still apply beside the wide accesses
        assert source.count("__syncthreads") == 3
