"""The attention decode kernel's host-side decisions, on the CPU: the split plan, the refusals,
and the build key a call maps to (nothing here compiles or needs a GPU)."""

from __future__ import annotations

import pytest

from tileops_cuda.kernels.attention_decode import MAX_SPLITS, DecodeBuildKey, decode_refusal, split_plan

H200_SMS = 132


@pytest.mark.parametrize("batch", [1, 2, 3, 8, 16, 33, 64, 200])
@pytest.mark.parametrize("capacity", [1, 63, 64, 65, 4096, 32768, 100_000])
def test_the_splits_cover_the_capacity_in_whole_tiles(batch, capacity):
    splits, chunk = split_plan(batch, 2, capacity, 64, H200_SMS)
    assert chunk % 64 == 0 and chunk > 0
    assert 1 <= splits <= MAX_SPLITS
    assert splits * chunk >= capacity > (splits - 1) * chunk  # every split owns some position


def test_one_sequence_at_32k_is_spread_over_the_multiprocessors():
    splits, _ = split_plan(1, 2, 32768, 64, H200_SMS)
    assert 0.9 * H200_SMS <= 2 * splits <= H200_SMS


def test_a_batch_that_fills_the_multiprocessors_alone_is_not_split():
    assert split_plan(64, 2, 32768, 64, H200_SMS)[0] == 1


def test_a_short_context_never_gets_more_splits_than_tiles():
    assert split_plan(1, 2, 200, 64, H200_SMS)[0] == 4


def _key(**changes) -> DecodeBuildKey:
    fields = dict(dtype="bfloat16", num_q_heads=16, num_kv_heads=2, head_dim=256)
    return DecodeBuildKey(**{**fields, **changes})


def test_qwen3_next_shapes_are_served_contiguous_and_paged():
    assert decode_refusal(_key()) is None
    assert decode_refusal(_key(paged=True, table_dtype="int64", seqlens_dtype="int64")) is None


@pytest.mark.parametrize("changes,word", [
    (dict(dtype="float32"), "dtype float32"),
    (dict(head_dim=8), "D=8"),
    (dict(head_dim=272), "D=272"),
    (dict(num_q_heads=128, num_kv_heads=1), "128 query heads"),
    (dict(arch="sm_75"), "sm_75"),
    (dict(paged=True), "inconsistent"),
])
def test_what_the_kernel_was_not_written_for_is_refused_by_name(changes, word):
    reason = decode_refusal(_key(**changes))
    assert reason is not None and word in reason


def test_a_paged_call_maps_to_a_paged_build_key_and_a_contiguous_one_to_a_contiguous_key():
    torch = pytest.importorskip("torch")
    from tileops_core.ops.attention import AttentionDecodeFwdOp
    from tileops_cuda.registered import TileLangAttentionDecode

    op = AttentionDecodeFwdOp()
    q, kv = torch.randn(2, 4, 16), torch.randn(2, 2, 16)
    cache = torch.randn(4, 8, 2, 16)
    lengths = torch.tensor([3, 5], dtype=torch.int32)
    op(q, kv, kv, cache.clone(), cache.clone(), lengths, torch.tensor([[0, 1], [2, 3]]))
    paged = TileLangAttentionDecode.key(next(iter(op.last_plan.call_specs.values())))
    op(q, kv, kv, cache.clone(), cache.clone(), lengths)
    contiguous = TileLangAttentionDecode.key(next(iter(op.last_plan.call_specs.values())))
    assert (paged.paged, paged.table_dtype, paged.head_dim) == (True, "int64", 16)
    assert (contiguous.paged, contiguous.table_dtype, contiguous.num_q_heads) == (False, None, 4)


@pytest.mark.parametrize("block,page,block_n", [(16, 16, 16), (32, 32, 32), (48, 48, 16), (64, 64, 64),
                                                (256, 256, 64), (1, 0, 64), (24, 0, 64)])
def test_a_paged_tile_lies_inside_one_block_or_the_rows_are_gathered(block, page, block_n):
    from tileops_cuda.kernels.attention_decode import page_layout

    got_page, tiling = page_layout(block)
    assert (got_page, tiling.block_n) == (page, block_n)
    assert page == 0 or block % tiling.block_n == 0
    assert tiling.stages * tiling.block_n >= 128  # ~128 KiB of K and V in flight at D=256
