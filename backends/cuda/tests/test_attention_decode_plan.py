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


# -- schedules: the candidates a sweep measures and the rule that picks one per call shape --------


def test_a_pinned_schedule_is_what_every_call_of_its_key_runs():
    from tileops_cuda.kernels.attention_decode import DecodeSchedule, ScheduleRule, schedule_for

    pinned = DecodeSchedule(combine="parallel", splits=8)
    rules = (ScheduleRule(DecodeSchedule(stages=3)),)
    assert schedule_for(_key(schedule=pinned), 1, 4096, rules) == pinned


def test_the_first_matching_rule_picks_the_schedule_else_the_measured_default():
    from tileops_cuda.kernels.attention_decode import DecodeSchedule, ScheduleRule, schedule_for

    small = DecodeSchedule(combine="parallel")
    paged = DecodeSchedule(tiles="gather")
    rules = (ScheduleRule(small, max_batch=16, max_capacity=8192), ScheduleRule(paged, paged=True))
    assert schedule_for(_key(), 16, 8192, rules) == small
    assert schedule_for(_key(), 17, 8192, rules) == DecodeSchedule()
    assert schedule_for(_key(), 1, 8193, rules) == DecodeSchedule()
    assert schedule_for(_key(paged=True, table_dtype="int32"), 64, 32768, rules) == paged
    # the measured rule: the light program up to 8 sequences, its tiles gathered (contiguous: but at B=2), the
    # parallel combine but for one sequence past 16k positions, which takes the sliced one
    paged_key = _key(paged=True, table_dtype="int32")
    gathered = DecodeSchedule(tiles="gather", combine="parallel", block_h=16)
    for B in (1, 3, 8):
        assert schedule_for(_key(), B, 4096) == gathered
        assert schedule_for(_key(), B, 16384) == gathered
    assert schedule_for(_key(), 2, 8192) == DecodeSchedule(combine="parallel", block_h=16)
    assert schedule_for(paged_key, 8, 32768) == DecodeSchedule(tiles="gather", combine="parallel", block_h=16)
    assert schedule_for(paged_key, 1, 16384) == DecodeSchedule(tiles="gather", combine="parallel", block_h=16)
    assert schedule_for(paged_key, 1, 16400) == DecodeSchedule(tiles="gather", combine="sliced", block_h=16)
    assert schedule_for(_key(), 1, 32768) == DecodeSchedule(tiles="gather", combine="sliced", block_h=16)
    assert schedule_for(_key(), 2, 32768) == DecodeSchedule(combine="parallel", block_h=16)
    assert schedule_for(_key(), 9, 4096) == DecodeSchedule(combine="parallel")
    assert schedule_for(paged_key, 9, 32768) == DecodeSchedule(tiles="gather", combine="parallel")


@pytest.mark.parametrize("changes,word", [
    (dict(stages=4), "stages=4"), (dict(tiles="rows"), "tiles='rows'"),
    (dict(combine="fused"), "combine='fused'"), (dict(min_split_tiles=0), "min_split_tiles=0"),
    (dict(splits=MAX_SPLITS + 1), f"splits={MAX_SPLITS + 1}"), (dict(block_h=32), "block_h=32"),
    (dict(block_h=16, stages=3), "the light program runs 2 stages"),
])
def test_schedule_fields_outside_their_choices_are_refused_by_name(changes, word):
    from tileops_cuda.kernels.attention_decode import DecodeSchedule

    with pytest.raises(ValueError, match=word.replace("(", r"\(")):
        DecodeSchedule(**changes)


def test_gathered_tiles_hold_two_programs_a_multiprocessor_so_the_plan_splits_twice_as_far():
    from tileops_cuda.kernels.attention_decode import page_layout

    _, tiling = page_layout(16, "gather")
    assert tiling.resident == 2 and page_layout(64, "gather")[1].resident == 1
    assert split_plan(16, 2, 8192, 64, H200_SMS * tiling.resident)[0] == 2 * split_plan(16, 2, 8192, 64, H200_SMS)[0] == 8


def test_a_minimum_of_tiles_a_split_gives_fewer_longer_splits():
    splits, chunk = split_plan(1, 2, 4096, 64, H200_SMS, min_split_tiles=8)
    assert (splits, chunk) == (8, 512)
    assert split_plan(1, 2, 4096, 64, H200_SMS)[0] == 64


@pytest.mark.parametrize("capacity,asked,got", [(4096, 16, 16), (4096, 7, 7), (200, 16, 4), (1, 4, 1)])
def test_a_pinned_split_count_covers_the_capacity_in_whole_tiles(capacity, asked, got):
    from tileops_cuda.kernels.attention_decode import pinned_split

    splits, chunk = pinned_split(capacity, 64, asked)
    assert splits == got and chunk % 64 == 0
    assert splits * chunk >= capacity > (splits - 1) * chunk


@pytest.mark.parametrize("block,gathered", [(16, True), (48, True), (1, True), (64, False), (128, False)])
def test_gathered_paged_tiles_are_64_positions_for_blocks_not_a_multiple_of_64(block, gathered):
    from tileops_cuda.kernels.attention_decode import page_layout

    page, tiling = page_layout(block, "gather")
    assert tiling.gather == gathered and tiling.block_n == 64 and page == block
    assert page_layout(block, "block") == page_layout(block)


@pytest.mark.parametrize("changes", [dict(num_q_heads=34, num_kv_heads=2), dict(num_q_heads=4, head_dim=16)],
                         ids=["17-heads-a-group", "head-size-16"])
def test_a_key_the_light_program_refuses_falls_through_to_the_next_rule(changes):
    from tileops_cuda.kernels.attention_decode import DecodeSchedule, reachable_schedules, schedule_for

    assert decode_refusal(_key(**changes)) is None
    assert schedule_for(_key(**changes), 1, 4096) == DecodeSchedule(combine="parallel")
    assert reachable_schedules(_key(**changes)) == (DecodeSchedule(combine="parallel"),)
    assert reachable_schedules(_key()) == (DecodeSchedule(tiles="gather", combine="parallel", block_h=16),
                                           DecodeSchedule(tiles="gather", combine="sliced", block_h=16),
                                           DecodeSchedule(combine="parallel", block_h=16),
                                           DecodeSchedule(combine="parallel"))


def test_the_programs_prepared_are_every_schedule_a_rule_can_pick_for_the_layout(monkeypatch):
    from tileops_cuda.kernels import attention_decode as ad

    contiguous, paged = ad.DecodeSchedule(stages=3), ad.DecodeSchedule(tiles="gather")
    small = ad.DecodeSchedule(stages=3, combine="parallel")
    monkeypatch.setattr(ad, "SCHEDULE_RULES", (ad.ScheduleRule(small, paged=False, max_batch=4),
                                               ad.ScheduleRule(paged, paged=True)))
    # A bounded rule leaves the default reachable; a rule without bounds leaves nothing after it.
    assert set(ad.reachable_schedules(_key())) == {small, ad.DecodeSchedule()}
    assert ad.reachable_schedules(_key(paged=True, table_dtype="int32")) == (paged,)
    monkeypatch.setattr(ad, "SCHEDULE_RULES", (ad.ScheduleRule(contiguous, paged=False),
                                               ad.ScheduleRule(small, paged=False)))
    assert ad.reachable_schedules(_key()) == (contiguous,)
    assert ad.reachable_schedules(_key(schedule=paged)) == (paged,)


def _recording_run(key, calls):
    """The launch function with compiled programs stood in for by recorders (CPU tensors)."""
    from tileops_cuda.kernels.attention_decode import _make_run

    def programs(block_size, schedule):
        calls.append(("program", block_size, schedule))
        return lambda *args: calls.append(("split", args[7].shape[0], args[-2], args[6]))

    def combines(kind):
        calls.append(("combine-program", kind))
        return lambda *args: calls.append(("combine", kind, args[-1]))

    return _make_run(key, programs, combines)


def _two_sequence_call(torch) -> tuple:
    """``(query, key/value, cache, lengths)`` of a 2-sequence call (D 16, capacity 1000) on the CPU."""
    q, kv = torch.randn(2, 16, 16), torch.randn(2, 2, 16)
    return q, kv, torch.randn(3, 1000, 2, 16), torch.tensor([5, 999], dtype=torch.int32)


def test_a_call_shape_is_planned_once_and_one_split_needs_no_combine():
    torch = pytest.importorskip("torch")
    from tileops_cuda.kernels.attention_decode import DecodeSchedule

    calls: list = []
    run = _recording_run(_key(head_dim=16, schedule=DecodeSchedule(combine="parallel", splits=4)), calls)
    q, kv, cache, lengths = _two_sequence_call(torch)
    for _ in range(2):
        run(q, kv, kv, cache, cache.clone(), lengths, None, None)
    assert [c[0] for c in calls] == ["program", "combine-program", "split", "combine", "split", "combine"]
    assert calls[2][1:3] == (4, 256) and calls[3] == ("combine", "parallel", 256)

    calls.clear()
    one = _recording_run(_key(head_dim=16, schedule=DecodeSchedule(splits=1)), calls)
    one(q, kv, kv, cache, cache.clone(), lengths, None, None)
    assert [c[0] for c in calls] == ["program", "combine-program", "split"]


def test_a_launcher_keeps_a_bounded_number_of_call_shapes_plans(monkeypatch):
    """Serving varies B and the block table's width step to step (found in review: 16384 plans kept by one
    launcher): past MAX_PLANS the plans are dropped and made again on demand."""
    torch = pytest.importorskip("torch")
    from tileops_cuda.kernels import attention_decode as ad

    planned: list = []
    real = ad.call_plan
    monkeypatch.setattr(ad, "call_plan", lambda *args: planned.append(args[1]) or real(*args))
    monkeypatch.setattr(ad, "MAX_PLANS", 2)
    run = _recording_run(_key(head_dim=16, schedule=ad.DecodeSchedule(splits=1)), [])
    cache = torch.randn(4, 64, 2, 16)
    for batch in (1, 2, 1, 3, 1):
        q, kv = torch.randn(batch, 16, 16), torch.randn(batch, 2, 16)
        run(q, kv, kv, cache, cache.clone(), torch.arange(batch, dtype=torch.int32), None, None)
    assert planned == [1, 2, 3, 1]  # B=1 planned once, then again after the third shape dropped the first two


def test_the_light_schedule_gets_sixteen_score_rows_fitting_three_an_sm_and_plans_one_an_sm():
    from tileops_cuda.kernels.attention_decode import DecodeSchedule, planned_splits, split_tiling

    page, tiling = split_tiling(_key(), DecodeSchedule(combine="parallel", block_h=16), None)
    assert page is None
    assert (tiling.block_h, tiling.block_n, tiling.stages, tiling.resident, tiling.launch_bound) == (16, 32, 2, 1, 3)
    # B=1 at 4k and 8k: 64 splits, 128 programs on the H200's 132 multiprocessors.
    assert [planned_splits(1, 2, n, tiling, H200_SMS)[0] for n in (4096, 8192)] == [64, 64]


@pytest.mark.parametrize("batch,capacity,splits,tiles,two_an_sm", [
    (1, 4096, 64, 2, False), (1, 8192, 64, 4, False), (2, 8192, 29, 9, False),  # two an SM: splits of 1-4 tiles
    (1, 32768, 128, 8, True), (8, 4096, 15, 9, True), (8, 32768, 15, 69, True), (4, 8192, 29, 9, True),
])
def test_the_light_plan_fills_two_programs_an_sm_only_where_each_split_keeps_eight_tiles(batch, capacity, splits, tiles,
                                                                                         two_an_sm):
    from tileops_cuda.kernels.attention_decode import LIGHT_TILING, planned_splits

    got, chunk = planned_splits(batch, 2, capacity, LIGHT_TILING, H200_SMS)
    assert (got, chunk) == (splits, tiles * 32)
    assert ((got, chunk) == split_plan(batch, 2, capacity, 32, 2 * H200_SMS)) == two_an_sm
    assert ((got, chunk) == split_plan(batch, 2, capacity, 32, H200_SMS)) != two_an_sm


def test_a_tiling_without_a_long_split_fill_plans_as_split_plan():
    from tileops_cuda.kernels.attention_decode import DecodeTiling, planned_splits

    tiling = DecodeTiling(block_n=64, resident=2)
    assert planned_splits(16, 2, 8192, tiling, H200_SMS) == split_plan(16, 2, 8192, 64, 2 * H200_SMS)


@pytest.mark.parametrize("block,tiles,page,gather,block_n", [
    (16, "gather", 16, True, 32), (48, "gather", 48, True, 32), (1, "gather", 1, True, 32),
    (16, "block", 0, False, 32), (32, "block", 32, False, 32), (64, "gather", 64, False, 32), (128, "block", 128, False, 32),
])
def test_the_light_program_pages_32_position_tiles_inside_a_block_or_gathers_them(block, tiles, page, gather, block_n):
    from tileops_cuda.kernels.attention_decode import LIGHT_TILING, DecodeSchedule, split_tiling

    schedule = DecodeSchedule(tiles=tiles, combine="parallel", block_h=16)
    key = _key(paged=True, table_dtype="int32", schedule=schedule)
    assert decode_refusal(key) is None
    got_page, tiling = split_tiling(key, schedule, block)
    assert (got_page, tiling.gather, tiling.block_n, tiling.block_h) == (page, gather, block_n, 16)
    assert tiling.launch_bound == LIGHT_TILING.launch_bound and tiling.stages == (1 if gather else 2)


def test_a_group_wider_than_the_light_programs_rows_is_refused():
    from tileops_cuda.kernels.attention_decode import DecodeSchedule

    reason = decode_refusal(_key(num_q_heads=32, num_kv_heads=1, schedule=DecodeSchedule(block_h=16)))
    assert reason.endswith("32 query heads a key/value head exceed DecodeSchedule.block_h=16; pin block_h=64")


def test_a_head_size_the_light_programs_warps_cannot_split_is_refused():
    from tileops_cuda.kernels.attention_decode import DecodeSchedule

    reason = decode_refusal(_key(num_q_heads=4, head_dim=16, schedule=DecodeSchedule(block_h=16)))
    assert reason.endswith("DecodeSchedule.block_h=16 spreads the value product's 16 columns over 4 warps of "
                           "8-column mma tiles (a multiple of 32); pin block_h=64")


def test_a_calls_plan_is_the_rules_schedule_its_tiling_and_that_tilings_splits():
    from tileops_cuda.kernels.attention_decode import (
        GATHERED_LIGHT_TILING, LIGHT_TILING, DecodeSchedule, call_plan, page_layout,
    )

    light = DecodeSchedule(tiles="gather", combine="parallel", block_h=16)
    assert call_plan(_key(), 1, None, 4096, lambda: H200_SMS) == (light, GATHERED_LIGHT_TILING, 64, 64)
    assert call_plan(_key(), 2, None, 8192, lambda: H200_SMS)[1] == LIGHT_TILING
    paged = _key(paged=True, table_dtype="int32")
    schedule, tiling, splits, chunk = call_plan(paged, 64, 16, 32768, lambda: H200_SMS)
    assert schedule == DecodeSchedule(tiles="gather", combine="parallel")
    assert tiling == page_layout(16, "gather")[1]
    assert (splits, chunk) == split_plan(64, 2, 32768, 64, 2 * H200_SMS)

    def no_count() -> int:
        raise AssertionError("a pinned split count needs no multiprocessor count (CPU callers have none)")

    pinned = DecodeSchedule(combine="parallel", splits=8)
    assert call_plan(_key(schedule=pinned), 1, None, 4096, no_count)[2:] == (8, 512)


def test_a_contiguous_key_gathers_its_tiles_as_over_paged_blocks():
    """``tiles="gather"`` on a contiguous key: its tiles read row by row, one stage, as the paged layout's gathered
    programs read theirs (the light program and the 64-row one, which fills two programs an SM)."""
    from tileops_cuda.kernels.attention_decode import (
        GATHERED_LIGHT_TILING, GATHERED_TILING, LIGHT_TILING, DecodeSchedule, page_layout, schedule_refusal,
        split_tiling,
    )

    light = DecodeSchedule(tiles="gather", combine="parallel", block_h=16)
    assert split_tiling(_key(), light, None) == (None, GATHERED_LIGHT_TILING)
    assert GATHERED_LIGHT_TILING.gather and GATHERED_LIGHT_TILING.stages == 1
    assert split_tiling(_key(), DecodeSchedule(combine="parallel", block_h=16), None) == (None, LIGHT_TILING)
    full = DecodeSchedule(tiles="gather", combine="parallel")
    assert split_tiling(_key(), full, None) == (None, GATHERED_TILING) and page_layout(16, "gather")[1] == GATHERED_TILING
    assert (GATHERED_TILING.stages, GATHERED_TILING.resident, GATHERED_TILING.block_h) == (1, 2, 64)
    assert schedule_refusal(_key(), light) is None and schedule_refusal(_key(), full) is None
