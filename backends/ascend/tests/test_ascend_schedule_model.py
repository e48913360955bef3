"""The CPU model of the 310P schedule against the float64 reference, and the plan it walks."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rgdr_cases import make_case
from tileops_ascend.launch import prepare_kernel_inputs, tiling_for
from tileops_ascend.platform import ASCEND_310P
from tileops_ascend.schedule_model import ScheduleError, run_schedule, work_block_dim
from tileops_ascend.tiling import v_slices
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule, sequence_bounds

# fp16 tolerance: a couple of fp16 ulps (2**-10 relative) on the state, a few on out.
OUT_TOL = dict(rtol=4e-3, atol=1e-3)
STATE_TOL = dict(rtol=2e-3, atol=1e-3)

CASES = [
    pytest.param([1, 1, 1, 1], dict(), None, id="decode-g"),
    pytest.param([3, 1, 8, 2], dict(gk="vector", accepted=True, index_dtype=torch.int64), None, id="mtp-vector-gk"),
    pytest.param([2, 5, 0, 3], dict(gk="scalar", seq_lens_style="cu_seqlens"), None, id="prefix-sums-scalar-gk-and-g"),
    pytest.param([2, 0, 3], dict(nk=1, nv=4, dk=24, dv=40, g=False), None, id="unaligned-dims-no-gates"),
    pytest.param([1, 2, 1, 1, 3], dict(nk=4, nv=8, dk=16, dv=16, accepted=True), None, id="more-items-than-cores"),
    pytest.param([2, 4], dict(nk=1, nv=2, dk=64, dv=80, gk="scalar"), 40000, id="repeat-3-with-tail-slice"),
    pytest.param([2, 4], dict(nk=1, nv=2, dk=64, dv=80), 24000, id="repeat-5"),
    pytest.param([3, 1], dict(nk=2, nv=4, dk=128, dv=128, gk="vector"), 60000, id="dk-dv-128-repeat-8"),
]


def _reference(case, seq_lens_style="lengths"):
    state = case["state"].clone()
    out = torch.empty(case["value"].shape, dtype=torch.float64)
    recurrent_gated_delta_rule(
        case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
        case["ssm_state_indices"], case["g"], case["gk"], case["num_accepted_tokens"],
        seq_lens_style=seq_lens_style, compute_dtype=torch.float64, out=out,
    )
    return out, state


def _model(case, *, ub=None, seq_lens_style="lengths", **kwargs):
    inputs = prepare_kernel_inputs(**{**case, "state": case["state"].clone()})
    platform = ASCEND_310P if ub is None else dataclasses.replace(ASCEND_310P, ub_bytes=ub)
    tiling = tiling_for(inputs, seq_lens_style=seq_lens_style, platform=platform)
    out = run_schedule(inputs, tiling.data, **kwargs)
    return out, inputs.state, tiling


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lengths, options, ub", CASES)
def test_schedule_matches_the_float64_reference(lengths, options, ub, seed):
    case = make_case(lengths, seed=seed, **options)
    style = options.get("seq_lens_style", "lengths")
    want_out, want_state = _reference(case, style)
    out, state, tiling = _model(case, ub=ub, seq_lens_style=style)
    if ub is not None:
        assert tiling.repeat > 1
    assert out.dtype == torch.float16 and state.dtype == torch.float16
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL)
    torch.testing.assert_close(state.double(), want_state.double(), **STATE_TOL)


@pytest.mark.parametrize("lengths, options, ub", CASES[1:3] + CASES[5:6])
def test_fp32_running_state_of_the_kernel_source_is_within_fp16_of_the_reference(lengths, options, ub):
    case = make_case(lengths, seed=7, **options)
    style = options.get("seq_lens_style", "lengths")
    want_out, want_state = _reference(case, style)
    out, state, _ = _model(case, ub=ub, seq_lens_style=style, requantize_running_state=False)
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL)
    torch.testing.assert_close(state.double(), want_state.double(), **STATE_TOL)


def test_running_state_modes_write_identical_states_with_one_token_per_sequence():
    """Between calls the state is fp16 either way; only out differs, by reading S before or after rounding."""
    case = make_case([1, 1, 1], gk="vector", seed=8)
    a, state_a, _ = _model(case)
    b, state_b, _ = _model(case, requantize_running_state=False)
    assert torch.equal(state_a, state_b)
    torch.testing.assert_close(a.double(), b.double(), **OUT_TOL)


def test_running_state_modes_differ_over_several_tokens():
    """The two precisions are distinguishable, so the agreement above is not vacuous."""
    case = make_case([8], seed=9)
    _, state_a, _ = _model(case)
    _, state_b, _ = _model(case, requantize_running_state=False)
    assert not torch.equal(state_a, state_b)


@pytest.mark.parametrize("lengths, options, ub", [CASES[4], CASES[5]])
def test_trace_is_the_tiled_plan(lengths, options, ub):
    case = make_case(lengths, seed=10, **options)
    inputs = prepare_kernel_inputs(**case)
    platform = ASCEND_310P if ub is None else dataclasses.replace(ASCEND_310P, ub_bytes=ub)
    tiling = tiling_for(inputs, platform=platform)
    trace = []
    run_schedule(inputs, tiling.data, trace=trace)
    block_dim = work_block_dim(tiling.data)
    assert block_dim == tiling.block_dim
    nv = tiling.data.nv
    starts, counts = sequence_bounds(case["actual_seq_lengths"], "lengths")
    active = [b for b, n in enumerate(counts.tolist()) if n > 0]
    assert [step.core for step in trace] == sorted(step.core for step in trace)
    for step in trace:
        assert step.core == (step.b * nv + step.h) % block_dim
        assert step.tokens == tuple(range(int(starts[step.b]), int(starts[step.b] + counts[step.b])))
    passes = {}
    for step in trace:
        passes.setdefault((step.b, step.h), []).append((step.v_start, step.rows))
    assert sorted(passes) == [(b, h) for b in active for h in range(nv)]
    assert all(p == v_slices(tiling.data.dv, tiling.v_step) for p in passes.values())
    assert all(len(p) == tiling.repeat for p in passes.values())


def test_every_output_row_is_written_and_unwritten_slots_stay_bit_identical():
    case = make_case([3, 1, 8, 2], gk="vector", accepted=True, extra_slots=7, seed=11)
    before = case["state"].clone()
    out, state, _ = _model(case)
    assert not torch.isnan(out).any()
    untouched = torch.ones(state.shape[0], dtype=torch.bool)
    untouched[case["ssm_state_indices"].long()] = False
    assert int(untouched.sum()) == 7
    assert torch.equal(state[untouched], before[untouched])


def test_one_call_of_l_tokens_equals_l_calls_of_one_token():
    case = make_case([6], seed=12)
    case["ssm_state_indices"] = torch.full((6,), 3, dtype=torch.int32)
    whole, whole_state, _ = _model(case)
    state = case["state"].clone()
    pieces = []
    for t in range(6):
        step = {name: (x[t : t + 1] if name not in ("state", "actual_seq_lengths") and x is not None else x)
                for name, x in case.items()}
        step.update(state=state, actual_seq_lengths=torch.tensor([1], dtype=torch.int32))
        inputs = prepare_kernel_inputs(**step)
        pieces.append(run_schedule(inputs, tiling_for(inputs).data))
    assert torch.equal(whole, torch.cat(pieces))
    assert torch.equal(whole_state, state)


def test_accepted_count_picks_the_initial_slot():
    case = make_case([4], accepted=True, seed=13)
    case["num_accepted_tokens"] = torch.tensor([3], dtype=torch.int32)
    want_out, _ = _reference(case)
    out, _, _ = _model(case)
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL)
    case_from_first = {**case, "num_accepted_tokens": None}
    assert not torch.allclose(_model(case_from_first)[0], out)


def test_accepted_count_out_of_range_falls_back_to_the_first_token_like_the_kernel():
    case = make_case([4], accepted=True, seed=14)
    case["num_accepted_tokens"] = torch.tensor([0], dtype=torch.int32)
    out, _, _ = _model(case)
    want, _, _ = _model({**case, "num_accepted_tokens": None})
    assert torch.equal(out, want)


def test_scalar_gk_next_to_g_is_applied():
    case = make_case([2, 2], gk="scalar", seed=15)
    with_gk, _, tiling = _model(case)
    assert (tiling.data.has_gama, tiling.data.has_gama_k, tiling.data.gama_k_scalar) == (1, 1, 1)
    without_gk, _, _ = _model({**case, "gk": None})
    assert not torch.allclose(with_gk, without_gk)


def test_sequence_longer_than_mtp_is_where_the_kernel_would_stop():
    case = make_case([1, 9], seed=16)
    with pytest.raises(ScheduleError) as err:
        _model(case)
    assert str(err.value) == (
        "sequence 1 has 9 tokens > MAX_MTP=8: the kernel returns here, leaving core 0's remaining work uncomputed"
    )


def test_negative_slot_is_an_out_of_pool_address():
    case = make_case([2, 2], seed=17)
    case["ssm_state_indices"][3] = -1
    with pytest.raises(ScheduleError) as err:
        _model(case)
    assert str(err.value) == "ssm_state_indices[3] = -1 is negative: the kernel would address outside the pool"


def test_index_dtype_that_disagrees_with_the_tiling_bit_is_caught():
    case = make_case([2, 1], seed=18)
    inputs = prepare_kernel_inputs(**case)
    tiling = tiling_for(inputs)
    wrong = inputs._replace(ssm_state_indices=inputs.ssm_state_indices.long())
    with pytest.raises(ScheduleError) as err:
        run_schedule(wrong, tiling.data)
    assert str(err.value) == (
        "ssm_state_indices is torch.int64 but the tiling says torch.int32: the kernel would read its memory with the "
        "wrong element width"
    )


def test_scale_is_the_tiling_scale():
    case = make_case([2], seed=19)
    inputs = prepare_kernel_inputs(**{**case, "state": case["state"].clone()})
    out_default = run_schedule(inputs, tiling_for(inputs).data)
    inputs = prepare_kernel_inputs(**{**case, "state": case["state"].clone()})
    out_double = run_schedule(inputs, tiling_for(inputs, scale=2 * 32**-0.5).data)
    torch.testing.assert_close(out_double.double(), 2 * out_default.double(), rtol=2e-3, atol=1e-3)
    assert not math.isclose(float(out_default.abs().max()), 0.0)
