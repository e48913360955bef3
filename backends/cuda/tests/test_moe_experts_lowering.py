"""The MoE expert programs lower to CUDA for sm_90a without a GPU (skips without tilelang): the
shared expert's (with and without its sigmoid gate, both tilings, bf16 and fp16, Qwen3.5's
H=2048 I=512 and a tiny row) stream their operands with bulk copies into wgmma, its gate-logit
program reduces a row across the block, and the routed experts' programs, whose gate/up and down
bodies the shared expert inlines too, still lower for both tilings. The routed experts' tile map reads
``expert_offsets`` as the spec does with contents checks off (clipped in their own dtype, max-scanned,
the uncovered rows zeroed), and the programs after it bound a tile's rows by the map alone."""

from __future__ import annotations

import re

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.moe_grouped_experts import (  # noqa: E402
    DECODE_TILING, PREFILL_TILING, MoEGroupedExpertsBuildKey, _routed_programs, _tiles_program,
)
from tileops_cuda.kernels.moe_shared_expert import (  # noqa: E402
    SHARED_DECODE_TILING, MoESharedExpertBuildKey, shared_programs,
)

_TARGET = {"kind": "cuda", "arch": "sm_90a"}
_TILINGS = pytest.mark.parametrize("tiling", [SHARED_DECODE_TILING, PREFILL_TILING], ids=["decode", "prefill"])


def _source(func) -> str:
    with tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(func, target=_TARGET).kernel_source


@_TILINGS
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "ungated"])
@pytest.mark.parametrize("hidden,intermediate", [(2048, 512), (32, 16)], ids=["qwen3.5", "tiny"])
def test_the_shared_expert_gemms_lower_to_bulk_copies_into_wgmma(tiling, dtype, gated, hidden, intermediate):
    programs = shared_programs(MoESharedExpertBuildKey(dtype, hidden, intermediate, gated), tiling)
    for name, func in zip(("moe_shared_gate_up", "moe_shared_down"), programs):
        source = _source(func)
        assert name in source and "tma_load" in source and "wgmma" in source, name
    with_logit = gated and tiling == SHARED_DECODE_TILING
    assert len(programs) == (3 if with_logit else 2)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("hidden", [2048, 24])
def test_the_gate_logit_program_reduces_each_row_across_the_block(dtype, hidden):
    logit = shared_programs(MoESharedExpertBuildKey(dtype, hidden, 16, True), SHARED_DECODE_TILING)[2]
    source = _source(logit)
    assert "moe_shared_gate_logit" in source and "AllReduce" in source


@pytest.mark.parametrize("tiling", [DECODE_TILING, PREFILL_TILING], ids=["decode", "prefill"])
def test_the_routed_expert_programs_still_lower_for_both_tilings(tiling):
    for func in _routed_programs(MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512), tiling):
        assert "__global__" in _source(func)


def _tiles_body(experts: int, offsets_dtype: str) -> str:
    key = MoEGroupedExpertsBuildKey("bfloat16", experts, 2048, 512, offsets_dtype)
    source = _source(_tiles_program(key, DECODE_TILING.block_m))
    return source[source.index("__launch_bounds__"):]


@pytest.mark.parametrize("experts", [512, 8])  # a thread an expert, and a warp past the experts
@pytest.mark.parametrize("offsets_dtype", ["int32", "int64"])
def test_the_tile_map_clips_every_offset_into_0_n_in_its_own_dtype_before_it_is_made_int32(offsets_dtype, experts):
    """Entry e (the scan), e + 1 (the expert's end), E (the uncovered tail) and 0 (the uncovered head):
    each read inside ``min(max(., 0), N)`` in the offsets' dtype (an int64 entry past int32 made int32
    first would wrap into ``[0, N]``: ``2**32 + 5`` would end an expert at row 5), none cast bare."""
    body = _tiles_body(experts, offsets_dtype)
    loads = re.findall(r"expert_offsets\[", body)
    clipped = re.findall(r"\(\(int\)min\(max\(expert_offsets\[[^;]*?, \(int64_t\)0\), \(\(int64_t\)N\)\)\)"
                         if offsets_dtype == "int64" else r"min\(max\(expert_offsets\[[^;]*?, 0\), N\)", body)
    assert len(loads) == len(clipped) == 4, (loads, clipped)
    assert "(int)expert_offsets[" not in body


def test_the_tile_map_max_scans_the_clipped_starts_and_sum_scans_the_tile_counts():
    """A warp-shuffle max-scan of the clipped entries (``b_e``), then a sum-scan of the tile counts, each
    warp total in a buffer of its own (no fence between the scans); expert e ends at ``b_{e+1} =
    max(clip(expert_offsets[e + 1]), b_e)``, so its count ``ceil((b_{e+1} - b_e) / 64)`` is never negative,
    and every tile's slot records that bound."""
    body = _tiles_body(512, "int32")
    scans = re.findall(r"__shfl_up_sync\([^;]*\);\s*if \([^\n]*\) \{\s*(\w+)\[0\] = (max\(|\()\1\[0\]", body)
    assert scans == [("start", "max("), ("slots", "(")], scans
    assert "((int*)wmax)[" in body and "((int*)wsum)[" in body
    assert re.search(r"end = max\(min\(max\(expert_offsets\[\(\(\(int\)threadIdx.x\) \+ 1\)\], 0\), N\), start\[0\]\);",
                     body)
    assert "count = (((end + 63) - start[0]) >> 6);" in body
    assert re.search(r"tile_end\[[^;]*\] = end;", body)
    # b_E, where the uncovered tail starts: the block's maximum, then the last entry's
    assert re.search(r"tail = max\(tail, \(\(int\*\)wmax\)\[w\w*\]\);", body)
    assert "tail = max(tail, min(max(expert_offsets[512]" in body


def test_the_rows_no_expert_covers_are_zeroed_in_16_byte_vectors():
    """``[0, clip(expert_offsets[0]))`` then ``[b_E, N)``: a loop of ``head + N - tail`` rows' vectors (no
    iteration for valid offsets), each row's bf16 zeros stored as 16-byte vectors."""
    body = _tiles_body(512, "int32")
    assert re.search(r"for \(int i = 0; i < [^;]*head[^;]*N[^;]*tail[^;]*; \+\+i\)", body)
    assert "*(uint4*)(out + " in body


@pytest.mark.parametrize("tiling", [DECODE_TILING, PREFILL_TILING], ids=["decode", "prefill"])
def test_the_programs_after_the_map_bound_a_tiles_rows_by_its_slot_not_by_the_offsets(tiling):
    """gate/up and down (and the skinny programs, with the decode tiling) take no ``expert_offsets``:
    a tile's rows stop at ``tile_end[slot]``, which the map's program clipped into ``[0, N]``."""
    key = MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, "int64", skinny_max_rows=256)
    programs = _routed_programs(key, tiling)
    for func in (*programs[1:3], *programs[4:]):
        body = _source(func)
        body = body[body.index("__launch_bounds__"):]
        assert "expert_offsets" not in body and "tile_end[" in body, func.attrs["global_symbol"]
        assert re.search(r"< \(?tile_end\[", body), func.attrs["global_symbol"]


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "ungated"])
@pytest.mark.parametrize("hidden,intermediate", [(2048, 512), (32, 16)], ids=["qwen3.5", "tiny"])
def test_the_skinny_shared_programs_lower_to_a_warp_a_feature(gated, hidden, intermediate):
    from tileops_cuda.kernels.moe_skinny import skinny_shared_programs

    key = MoESharedExpertBuildKey("bfloat16", hidden, intermediate, gated, skinny_rows=4)
    gate_up, down = (_source(f) for f in skinny_shared_programs(key))
    assert "moe_shared_skinny_gate_up" in gate_up and gate_up.count("tl::warp_reduce_sum") == 2
    assert "moe_shared_skinny_down" in down and down.count("tl::warp_reduce_sum") == 1
    assert ("logit[" in down) == gated
    assert len(shared_programs(key, SHARED_DECODE_TILING)) == (5 if gated else 4)


@pytest.mark.parametrize("experts,hidden,intermediate", [(512, 2048, 512), (256, 2048, 512), (8, 32, 16)],
                         ids=["qwen3-next", "qwen3.5", "tiny"])
def test_the_skinny_routed_programs_lower_over_their_own_tile_map(experts, hidden, intermediate):
    key = MoEGroupedExpertsBuildKey("bfloat16", experts, hidden, intermediate, skinny_max_rows=experts // 2)
    programs = _routed_programs(key, DECODE_TILING)
    assert len(programs) == 6 and len(_routed_programs(key, PREFILL_TILING)) == 3
    tiles, gate_up, down = (_source(f) for f in programs[3:])
    assert "moe_expert_tiles" in tiles
    assert "moe_skinny_gate_up" in gate_up and gate_up.count("tl::warp_reduce_sum") == 2
    assert "moe_skinny_down" in down and down.count("tl::warp_reduce_sum") == 1


@pytest.mark.parametrize("weights_first", [True, False])
def test_skinny_weights_first_issues_every_programs_first_weight_loads_before_the_staging_barrier(weights_first):
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, skinny_routed_programs, skinny_shared_programs

    tiling = MoESkinnyTiling(weights_first=weights_first)
    shared = MoESharedExpertBuildKey("bfloat16", 2048, 512, True, skinny_rows=4, skinny_tiling=tiling)
    routed = MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256, skinny_tiling=tiling)
    for func in (*skinny_shared_programs(shared), *skinny_routed_programs(routed)):
        body = _source(func)
        body = body[body.index("__global__"):]
        weights = min(body.find(f"*(uint4*)({w} + ") for w in ("g_w", "wv") if f"*(uint4*)({w} + " in body)
        assert (weights < body.index("__syncthreads")) == weights_first


@pytest.mark.parametrize("features", [2, 4])
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "ungated"])
def test_skinny_down_features_load_every_features_rows_before_the_staging_barrier(features, gated):
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, skinny_routed_programs, skinny_shared_programs

    tiling = MoESkinnyTiling(down_features=features)
    shared = MoESharedExpertBuildKey("bfloat16", 2048, 512, gated, skinny_rows=4, skinny_tiling=tiling)
    routed = MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256, skinny_tiling=tiling)
    for down, has_logit in ((skinny_shared_programs(shared)[1], gated), (skinny_routed_programs(routed)[1], False)):
        body = _source(down)
        body = body[body.index("__global__"):]
        head = body[:body.index("__syncthreads")]
        # every feature's row vectors load before the barrier, into registers; a sum a feature and staged row
        assert f"for (int f = 0; f < {features}; ++f)" in head and "*(uint4*)(d_w + " in head
        assert f"float acc[{4 * features}];" in body and f"bfloat16_t d_w[{16 * features}];" in body
        assert ("logit[" in body) == has_logit


def test_dependent_skinny_programs_wait_for_the_previous_kernel_before_any_load():
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, skinny_routed_programs, skinny_shared_programs

    tiling = MoESkinnyTiling(weights_first=True, down_features=2, dependent_launch=True)
    shared = MoESharedExpertBuildKey("bfloat16", 2048, 512, True, skinny_rows=4, skinny_tiling=tiling)
    routed = MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256, skinny_tiling=tiling)
    for func in (*skinny_shared_programs(shared), *skinny_routed_programs(routed)):
        body = _source(func)
        body = body[body.index("__global__"):]
        wait = body.index("cudaGridDependencySynchronize();")
        first_load = min(i for i in (body.find("*(uint4*)"), body.find("tile_expert[")) if i >= 0)
        assert wait < first_load and wait < body.index("cudaTriggerProgrammaticLaunchCompletion();")


def test_the_fused_logit_gate_up_gives_its_last_program_the_gate_logit():
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, skinny_shared_programs

    tiling = MoESkinnyTiling(fused_logit=True)
    gate_up, down = skinny_shared_programs(MoESharedExpertBuildKey("bfloat16", 2048, 512, True, skinny_rows=4,
                                                                   skinny_tiling=tiling))
    body = _source(gate_up)
    assert "moe_shared_skinny_gate_up_logit" in body and "logit[" in body and "expert_gate" in body
    assert body.count("tl::warp_reduce_sum") == 3  # gate and up, and the logit's
    assert "logit[" in _source(down)
    ungated, _ = skinny_shared_programs(MoESharedExpertBuildKey("bfloat16", 2048, 512, False, skinny_rows=4,
                                                                skinny_tiling=tiling))
    assert "logit" not in _source(ungated)  # no gate, nothing to fuse



@pytest.mark.parametrize("fused_logit", [False, True], ids=["plain", "fused-logit"])
def test_the_split_gate_up_gives_a_warp_one_row_and_meets_the_pair_in_shared_memory(fused_logit):
    """``gate_up_split``: one row's vectors a lane (8 uint4 loads into one buffer, not two), a single warp sum
    (and the logit's), the pair's sums through shared memory after a second barrier, and a grid of twice the
    programs (I / 4 gate/up programs at 8 warps)."""
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, skinny_routed_programs, skinny_shared_programs

    tiling = MoESkinnyTiling(gate_up_split=True, fused_logit=fused_logit)
    assert tiling.gate_up_features == 4
    shared = MoESharedExpertBuildKey("bfloat16", 2048, 512, True, skinny_rows=4, skinny_tiling=tiling)
    routed = MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512, skinny_max_rows=256, skinny_tiling=tiling)
    for func, logit in ((skinny_shared_programs(shared)[0], fused_logit), (skinny_routed_programs(routed)[0], False)):
        body = _source(func)
        body = body[body.index("__global__"):]
        assert "bfloat16_t wv[64];" in body and "g_w[" not in body and "u_w[" not in body
        assert body.count("tl::warp_reduce_sum") == 1 + logit
        assert "gu_s" in body and body.count("__syncthreads") >= 2
        # a program's rows: 4 features of 2048 (x for the shared expert, y the routed map's features)
        assert ("((int)blockIdx.x) * 8192)" in body) if func.attrs["global_symbol"].startswith("moe_shared") else (
            "((int)blockIdx.y)) * (int64_t)8192)" in body)
        assert ("((int)blockIdx.x) < 128)" in body) == logit  # the logit's program follows I / 4 = 128
