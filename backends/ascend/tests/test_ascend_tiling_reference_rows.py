"""The three reference rows of RGDR.md reproduce exactly (UB 262144 bytes, NV=32)."""

from __future__ import annotations

import pytest

from tileops_ascend.tiling import compute_tiling

# (dk=dv, g, gk shape, fixed, working, profile, vStep, repeat, ubRest), transcribed from RGDR.md.
REFERENCE_ROWS = [
    pytest.param(128, None, 6784, 21120, (1, 2), 128, 1, 189312, id="g-only"),
    pytest.param(128, "vector", 10880, 25216, (1, 1), 128, 1, 185472, id="g-and-vector-gk"),
    pytest.param(256, None, 12928, 39552, (1, 2), 64, 4, 183424, id="g-only-dk-dv-256"),
]


@pytest.mark.parametrize("d, gk, fixed, working, profile, v_step, repeat, ub_rest", REFERENCE_ROWS)
def test_reference_row_reproduces_exactly(d, gk, fixed, working, profile, v_step, repeat, ub_rest):
    t = 3
    tiling = compute_tiling(
        t=t, nk=16, dk=d, nv=32, dv=d, state_slots=5, seq_lens_len=t, has_g=True,
        gk_shape=(t, 32, d) if gk == "vector" else None,
    )
    assert tiling.fixed_ub_bytes == fixed
    assert tiling.working_ub_bytes == working
    assert (tiling.profile.state_out_buffer_num, tiling.profile.attn_out_buffer_num) == profile
    assert tiling.v_step == v_step
    assert tiling.repeat == repeat
    assert tiling.ub_rest_bytes == ub_rest
    assert tiling.data.ub_rest_bytes == ub_rest
    assert (tiling.data.state_out_buffer_num, tiling.data.attn_out_buffer_num, tiling.data.v_step) == (*profile, v_step)


def test_reference_row_launch_facts_are_the_host_constants():
    """One tiling key, 16 MiB workspace, all 8 cores busy when B*NV >= 8."""
    tiling = compute_tiling(t=1, nk=16, dk=128, nv=32, dv=128, state_slots=1, seq_lens_len=1, has_g=True)
    assert tiling.tiling_key == 0
    assert tiling.workspace_bytes == 16 * 1024 * 1024
    assert tiling.block_dim == 8
    assert tiling.data.vector_core_num == 8
    assert tiling.data.ub_cal_size == 262144
