"""Presence bits, index-dtype bits, batch, scale and the work-item plan of the tiling."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tileops_ascend.platform import ASCEND_310P
from tileops_ascend.tiling import (
    TilingError,
    calc_fixed_ub_bytes,
    calc_working_ub_bytes,
    ceil_align,
    ceil_div,
    compute_tiling,
    get_block_dim,
    get_optional_inputs,
    kernel_scratch_bytes,
    v_slices,
    work_items_by_core,
)

BASE = dict(t=6, nk=2, dk=64, nv=4, dv=64, state_slots=9, seq_lens_len=3)


def _tiling(**overrides):
    return compute_tiling(**{**BASE, **overrides})


def test_ceil_helpers_match_the_cpp_integer_forms():
    assert [ceil_align(v, 16) for v in (1, 16, 17, 32, 33)] == [16, 16, 32, 32, 48]
    assert [ceil_div(v, 16) for v in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]


def test_fixed_bytes_bill_gk_as_scalar_or_vector():
    no_gk = calc_fixed_ub_bytes(32, 128, 128, True, False, False)
    assert calc_fixed_ub_bytes(32, 128, 128, True, True, True) - no_gk == 8 * 4 * 32
    assert calc_fixed_ub_bytes(32, 128, 128, True, True, False) - no_gk == 8 * 4 * 128


def test_working_bytes_add_the_g_buffer_only_with_g():
    with_g = calc_working_ub_bytes(32, 128, 128, True, False, False)
    assert with_g - calc_working_ub_bytes(32, 128, 128, False, False, False) == 8 * 4 * 32


def test_presence_bits_follow_the_optional_inputs():
    data = _tiling(has_g=True, gk_shape=(6, 4, 64), has_num_accepted_tokens=True).data
    assert (data.has_gama, data.has_gama_k, data.has_accepted_tokens, data.gama_k_scalar) == (1, 1, 1, 0)
    data = _tiling().data
    assert (data.has_gama, data.has_gama_k, data.has_accepted_tokens, data.gama_k_scalar) == (0, 0, 0, 0)


@pytest.mark.parametrize("shape, scalar", [((6, 4), 1), ((6, 4, 1), 1), ((6, 4, 64), 0)])
def test_gk_is_scalar_when_it_has_fewer_than_t_nv_dk_elements(shape, scalar):
    assert _tiling(gk_shape=shape).data.gama_k_scalar == scalar


def test_scalar_gk_next_to_g_keeps_its_bit():
    """Upstream clears hasGamaK here and the gk decay is silently lost; the kernel applies both."""
    flags = get_optional_inputs(t=6, nv=4, dk=64, has_g=True, gk_shape=(6, 4), has_num_accepted_tokens=False)
    assert (flags.has_gama, flags.has_gama_k, flags.gama_k_scalar) == (True, True, True)
    assert _tiling(has_g=True, gk_shape=(6, 4)).data.has_gama_k == 1


def test_lengths_style_batch_is_the_length_and_prefix_bit_is_off():
    data = _tiling(seq_lens_len=3, seq_lens_style="lengths").data
    assert (data.b, data.cu_seqlens_is_prefix) == (3, 0)


def test_cu_seqlens_style_batch_is_one_less_and_prefix_bit_is_on():
    data = _tiling(seq_lens_len=4, seq_lens_style="cu_seqlens").data
    assert (data.b, data.cu_seqlens_is_prefix) == (3, 1)


def test_empty_batch_counts_as_one_like_get_shape_dims():
    assert _tiling(seq_lens_len=0).data.b == 1


def test_unknown_seq_lens_style_is_an_error():
    with pytest.raises(TilingError) as err:
        _tiling(seq_lens_style="offsets")
    assert str(err.value) == "seq_lens_style must be 'lengths' or 'cu_seqlens', got 'offsets'"


@pytest.mark.parametrize("cu, ssm", [("int32", "int32"), ("int64", "int32"), ("int32", "int64"), ("int64", "int64")])
def test_index_dtype_bits(cu, ssm):
    data = _tiling(seq_lens_dtype=cu, ssm_state_indices_dtype=ssm).data
    assert (data.cu_seqlens_is_int64, data.ssm_state_indices_is_int64) == (int(cu == "int64"), int(ssm == "int64"))


def test_index_dtype_accepts_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert _tiling(seq_lens_dtype=torch.int64).data.cu_seqlens_is_int64 == 1


def test_index_dtype_other_than_int32_or_int64_is_an_error():
    with pytest.raises(TilingError) as err:
        _tiling(ssm_state_indices_dtype="int16")
    assert str(err.value) == "index tensors must be int32 or int64, got int16"


def test_scale_none_means_dk_to_the_minus_half_in_float32():
    expected = struct.unpack("<f", struct.pack("<f", 64**-0.5))[0]
    assert _tiling(dk=64).data.scale == expected == 0.125


def test_explicit_scale_is_kept_rounded_to_float32():
    assert _tiling(scale=0.1).data.scale == struct.unpack("<f", struct.pack("<f", 0.1))[0]


def test_shape_fields_are_copied_from_the_call():
    data = _tiling(t=5, nk=2, dk=48, nv=6, dv=80, state_slots=11).data
    assert (data.t, data.nk, data.dk, data.nv, data.dv, data.s_block_num) == (5, 2, 48, 6, 80, 11)


@pytest.mark.parametrize("name", ["nk", "dk", "nv", "dv"])
def test_zero_head_count_or_dim_is_an_error(name):
    with pytest.raises(TilingError) as err:
        _tiling(**{name: 0})
    assert str(err.value) == f"{name.upper()}=0: the 310P kernel needs every head count and head dim positive"


@pytest.mark.parametrize("b, nv, cores, expected", [(1, 2, 8, 2), (1, 32, 8, 8), (3, 3, 8, 8), (0, 4, 8, 1), (2, 2, 0, 1)])
def test_block_dim_is_min_of_tasks_and_cores(b, nv, cores, expected):
    assert get_block_dim(b, nv, cores) == expected


def test_core_count_is_clamped_to_eight_and_zero_becomes_one():
    assert dataclasses.replace(ASCEND_310P, core_count=30).schedulable_cores == 8
    assert dataclasses.replace(ASCEND_310P, core_count=0).schedulable_cores == 1
    assert _tiling(platform=dataclasses.replace(ASCEND_310P, core_count=2)).block_dim == 2


@given(batch=st.integers(1, 20), nv=st.integers(1, 40), block_dim=st.integers(1, 8))
def test_every_work_item_runs_once_on_core_b_nv_plus_h_mod_block_dim(batch, nv, block_dim):
    cores = work_items_by_core(batch, nv, block_dim)
    items = [item for core in cores for item in core]
    assert sorted(items) == [(b, h) for b in range(batch) for h in range(nv)]
    for core, core_items in enumerate(cores):
        assert all((b * nv + h) % block_dim == core for b, h in core_items)


@given(dv=st.integers(1, 1024), v_step=st.sampled_from([16, 32, 48, 64, 128, 256]))
def test_v_slices_tile_dv_without_gaps(dv, v_step):
    slices = v_slices(dv, v_step)
    assert [start for start, _ in slices] == list(range(0, dv, v_step))
    assert sum(rows for _, rows in slices) == dv
    assert all(0 < rows <= v_step for _, rows in slices)


@given(
    t=st.integers(1, 64),
    nk=st.sampled_from([1, 2, 4, 16]),
    group=st.sampled_from([1, 2, 4]),
    dk=st.integers(1, 600),
    dv=st.integers(1, 600),
    has_g=st.booleans(),
    gk=st.sampled_from([None, "scalar", "vector"]),
    ub=st.integers(20000, 400000),
)
def test_every_accepted_tiling_fits_the_ub(t, nk, group, dk, dv, has_g, gk, ub):
    nv = nk * group
    gk_shape = None if gk is None else ((t, nv) if gk == "scalar" else (t, nv, dk))
    platform = dataclasses.replace(ASCEND_310P, ub_bytes=ub)
    try:
        tiling = compute_tiling(
            t=t, nk=nk, dk=dk, nv=nv, dv=dv, state_slots=t, seq_lens_len=t, has_g=has_g, gk_shape=gk_shape,
            platform=platform,
        )
    except TilingError:
        return
    profile = tiling.profile
    a_dk = ceil_align(dk, 16)
    queues = 5 + (gk == "vector") + profile.state_out_buffer_num + profile.attn_out_buffer_num
    assert queues <= 8
    assert tiling.v_step >= 16 and tiling.v_step % 16 == 0
    assert len(v_slices(dv, tiling.v_step)) == tiling.repeat
    queue_bytes = ((2 + 2 * profile.state_out_buffer_num) * a_dk + 2 * profile.attn_out_buffer_num) * tiling.v_step
    assert tiling.fixed_ub_bytes + queue_bytes + tiling.ub_rest_bytes == ub
    assert tiling.scratch_bytes == kernel_scratch_bytes(
        nv=nv, dv=dv, dk=dk, v_step=tiling.v_step, inputs=get_optional_inputs(
            t=t, nv=nv, dk=dk, has_g=has_g, gk_shape=gk_shape, has_num_accepted_tokens=False
        ),
    )
    assert tiling.scratch_bytes <= tiling.ub_rest_bytes
