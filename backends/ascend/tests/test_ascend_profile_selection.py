"""SelectBufferProfile's rules on crafted budgets: queue cap, then each tie-break."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tileops_ascend.platform import ASCEND_310P
from tileops_ascend.tiling import (
    BufferProfile,
    OptionalInputFlags,
    TilingError,
    calc_v_step_coeff,
    ceil_align,
    compute_tiling,
    evaluate_buffer_profile,
    is_better_profile,
    select_buffer_profile,
)

G_ONLY = OptionalInputFlags(has_gama=True, has_gama_k=False, has_accepted_tokens=False, gama_k_scalar=False)
G_AND_VECTOR_GK = OptionalInputFlags(has_gama=True, has_gama_k=True, has_accepted_tokens=False, gama_k_scalar=False)
G_AND_SCALAR_GK = OptionalInputFlags(has_gama=True, has_gama_k=True, has_accepted_tokens=False, gama_k_scalar=True)


def _chosen(selection):
    return selection.profile.state_out_buffer_num, selection.profile.attn_out_buffer_num


def test_profile_over_eight_queues_is_skipped_so_2x2_never_runs_on_310p():
    selection = select_buffer_profile(262144, nv=32, dv=128, dk=128, inputs=G_ONLY)
    assert dict(selection.considered)[(2, 2)] == "needs 9 TQue buffers > 8"


def test_vector_gk_takes_a_queue_and_leaves_only_1x1():
    selection = select_buffer_profile(262144, nv=32, dv=128, dk=128, inputs=G_AND_VECTOR_GK)
    assert selection.considered == (
        ((1, 1), "vStep 128, repeat 1"),
        ((1, 2), "needs 9 TQue buffers > 8"),
        ((2, 2), "needs 10 TQue buffers > 8"),
    )
    assert _chosen(selection) == (1, 1)


def test_scalar_gk_takes_no_queue():
    selection = select_buffer_profile(262144, nv=32, dv=128, dk=128, inputs=G_AND_SCALAR_GK)
    assert _chosen(selection) == (1, 2)


def test_lower_queue_cap_removes_1x2():
    platform = dataclasses.replace(ASCEND_310P, max_tque_buffer_num=7)
    selection = select_buffer_profile(262144, nv=32, dv=128, dk=128, inputs=G_ONLY, platform=platform)
    assert dict(selection.considered)[(1, 2)] == "needs 8 TQue buffers > 7"
    assert _chosen(selection) == (1, 1)


def test_fewer_repeats_beat_deeper_queues():
    # UB - working = 164700: 1x1 gets floor16(164700 / 1286) = 128 (one pass),
    # 1x2 gets floor16(164700 / 1288) = 112 (two passes of 64).
    selection = select_buffer_profile(185820, nv=32, dv=128, dk=128, inputs=G_ONLY)
    assert selection.working_ub_bytes == 185820 - 164700
    assert selection.considered[:2] == (((1, 1), "vStep 128, repeat 1"), ((1, 2), "vStep 64, repeat 2"))
    assert _chosen(selection) == (1, 1)


def test_fewer_repeats_budget_is_refused_because_the_scratch_would_overflow():
    """The budget above is where upstream's vStep bill (no 2*aDk for stateInQueue_) overflows the kernel's scratch."""
    platform = dataclasses.replace(ASCEND_310P, ub_bytes=185820)
    with pytest.raises(TilingError) as err:
        compute_tiling(t=1, nk=16, dk=128, nv=32, dv=128, state_slots=1, seq_lens_len=1, has_g=True, platform=platform)
    assert str(err.value) == (
        "the kernel's fp32 scratch needs 145920 bytes but profile 1x1 with vStep 128 leaves 113244 "
        "(DK=128, DV=128, UB 185820 bytes): the vStep budget omits stateInQueue_'s 2*aDk bytes per row"
    )


def test_upstream_budget_would_overflow_the_scratch_at_the_real_ub_for_dk_80_dv_256():
    """Not only crafted budgets: at 262144 bytes, DK=80/DV=256 gets vStep 256 and 8320 bytes too little scratch."""
    with pytest.raises(TilingError) as err:
        compute_tiling(t=8, nk=16, dk=80, nv=32, dv=256, state_slots=8, seq_lens_len=1, has_g=True)
    assert str(err.value) == (
        "the kernel's fp32 scratch needs 180224 bytes but profile 1x2 with vStep 256 leaves 171904 "
        "(DK=80, DV=256, UB 262144 bytes): the vStep budget omits stateInQueue_'s 2*aDk bytes per row"
    )


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("gk", [None, "scalar", "vector"])
def test_scratch_check_never_refuses_square_power_of_two_heads_at_the_real_ub(d, gk):
    for nv in range(1, 129):
        gk_shape = None if gk is None else ((8, nv) if gk == "scalar" else (8, nv, d))
        tiling = compute_tiling(
            t=8, nk=1, dk=d, nv=nv, dv=d, state_slots=8, seq_lens_len=1, has_g=True, gk_shape=gk_shape
        )
        assert tiling.scratch_bytes <= tiling.ub_rest_bytes


def test_equal_repeats_prefer_the_deeper_profile():
    selection = select_buffer_profile(262144, nv=32, dv=128, dk=128, inputs=G_ONLY)
    assert selection.considered[:2] == (((1, 1), "vStep 128, repeat 1"), ((1, 2), "vStep 128, repeat 1"))
    assert _chosen(selection) == (1, 2)


def test_deepest_profile_wins_when_the_queue_cap_allows_it():
    platform = dataclasses.replace(ASCEND_310P, max_tque_buffer_num=9)
    tiling = compute_tiling(t=1, nk=16, dk=128, nv=32, dv=128, state_slots=1, seq_lens_len=1, has_g=True, platform=platform)
    assert (tiling.profile.state_out_buffer_num, tiling.profile.attn_out_buffer_num) == (2, 2)
    assert tiling.ub_rest_bytes == 262144 - 6784 - (6 * 128 + 4) * 128


def test_larger_v_step_breaks_a_tie_of_repeats_and_depth():
    small = BufferProfile(1, 2, 48, 2)
    large = BufferProfile(2, 1, 64, 2)
    assert is_better_profile(large, small)
    assert not is_better_profile(small, large)


def test_any_valid_profile_beats_none():
    assert is_better_profile(BufferProfile(1, 1, 16, 8), None)


@given(
    dv=st.integers(1, 1024),
    a_dk=st.sampled_from([16, 32, 64, 128, 256, 512]),
    rest=st.integers(0, 400000),
)
def test_equal_repeats_imply_equal_v_step_so_the_third_tie_break_never_decides(dv, a_dk, rest):
    """Pass two re-solves vStep from (DV, repeat) only, so profiles tied on repeat are tied on vStep."""
    profiles = [evaluate_buffer_profile(rest, 0, a_dk, dv, s, a) for s, a in ((1, 1), (1, 2), (2, 2))]
    valid = [p for p in profiles if p is not None]
    for p in valid:
        for q in valid:
            if p.repeat_time == q.repeat_time:
                assert p.v_step == q.v_step


@given(dv=st.integers(1, 2048), a_dk=st.sampled_from([16, 64, 128, 256]), rest=st.integers(0, 600000))
def test_second_pass_never_grows_v_step_and_gives_exactly_repeat_passes(dv, a_dk, rest):
    profile = evaluate_buffer_profile(rest, 0, a_dk, dv, 1, 1)
    first_pass = rest // calc_v_step_coeff(a_dk, 1, 1) // 16 * 16
    if first_pass < 16:
        assert profile is None
        return
    assert profile.v_step <= first_pass
    assert profile.v_step % 16 == 0
    assert len(range(0, dv, profile.v_step)) == profile.repeat_time
    assert profile.v_step == ceil_align(-(-dv // profile.repeat_time), 16)
