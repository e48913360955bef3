"""The staged RGDR kernel's host side without a GPU: what it refuses and why, its schedule,
when selection prefers it, and that the shared launcher calls its compiled functions."""

from __future__ import annotations

import pytest

from tileops_cuda.kernels import rgdr, rgdr_staged
from tileops_cuda.kernels.rgdr_staged import RGDRStagedTiling


def _key(**kw):
    base = dict(input_dtype="bfloat16", state_dtype="bfloat16", num_k_heads=16, num_v_heads=32, head_k_dim=128,
                head_v_dim=128)
    base.update(kw)
    return rgdr.RGDRBuildKey(**base)


def test_staged_serves_the_qwen_shapes_with_every_tiling_of_its_schedule():
    for state in ("bfloat16", "float32"):
        key = _key(state_dtype=state)
        assert [rgdr_staged.rgdr_staged_refusal(key, t) for t in rgdr_staged.staged_schedule(key).tilings()] == [None, None]


def test_staged_refuses_a_block_that_does_not_divide_head_v_dim():
    reason = rgdr_staged.rgdr_staged_refusal(_key(head_v_dim=48), RGDRStagedTiling(128, 16, 4, 8, rows_in_flight=2))
    assert reason.startswith("RGDR staged TileLang kernel: head_v_dim=48 must be a multiple of the value tile (32)")


def test_staged_refuses_more_shared_memory_than_a_program_may_ask_for():
    reason = rgdr_staged.rgdr_staged_refusal(_key(state_dtype="float32", head_k_dim=256, head_v_dim=256),
                                             RGDRStagedTiling(128, 16, 32, 1, rows_in_flight=4))  # fmt: skip
    assert "bytes of shared memory per program" in reason and "use a smaller block_v" in reason


def test_staged_refuses_rows_in_flight_that_do_not_divide_the_rows_per_thread():
    reason = rgdr_staged.rgdr_staged_refusal(_key(), RGDRStagedTiling(128, 16, 4, 8, rows_in_flight=3))
    assert "rows_in_flight=3 must divide rows_per_thread=4" in reason


def test_staged_refuses_fewer_than_one_sequence_per_program():
    reason = rgdr_staged.rgdr_staged_refusal(_key(), RGDRStagedTiling(128, 16, 4, 8, rows_in_flight=2, seqs_per_program=0))
    assert "seqs_per_program=0 must be at least 1" in reason


def test_two_blocks_in_shared_memory_when_a_program_runs_several_sequences():
    one = RGDRStagedTiling(128, 16, 8, 4, rows_in_flight=4)
    two = RGDRStagedTiling(128, 16, 8, 4, rows_in_flight=4, seqs_per_program=4)
    assert two.smem_bytes(_key()) - one.smem_bytes(_key()) == 64 * 128 * 2


def test_staged_refuses_an_unknown_load_form():
    reason = rgdr_staged.rgdr_staged_refusal(_key(), RGDRStagedTiling(128, 16, 4, 8, load="tma"))
    assert "load='tma' is not one of ('async', 'plain')" in reason


def test_staged_schedule_falls_back_to_the_small_tiling_where_the_large_block_cannot_be_built():
    sched = rgdr_staged.staged_schedule(_key(head_v_dim=48))
    assert sched.large == sched.small
    sched = rgdr_staged.staged_schedule(_key())
    assert sched.large.block_v > sched.small.block_v
    assert sched.pick(1, 1) == sched.small and sched.pick(256, 256) == sched.large


def test_selection_prefers_the_staged_kernel_only_for_the_state_dtypes_measured_faster(monkeypatch):
    reason = rgdr_staged.staged_selection_refusal(_key(state_dtype="float32"))
    assert reason.endswith("the state is float32; the register-tiled kernel serves it")
    monkeypatch.setattr(rgdr_staged, "STAGED_STATE_DTYPES", ("bfloat16",))
    assert rgdr_staged.staged_selection_refusal(_key(state_dtype="bfloat16")) is None
    assert rgdr_staged.staged_selection_refusal(_key(state_dtype="float32")) is not None


def test_the_shared_launcher_calls_the_staged_tiling_its_schedule_picks():
    torch = pytest.importorskip("torch")
    key = _key(num_k_heads=2, num_v_heads=4)
    sched = rgdr_staged.staged_schedule(key)
    calls: dict[str, list] = {"small": [], "large": []}
    kernels = {sched.small: lambda *a: calls["small"].append(a), sched.large: lambda *a: calls["large"].append(a)}
    launcher = rgdr.RGDRLauncher(key, sched, kernels, sm_count=4)
    B = 40
    q = torch.randn(B, 2, 128, dtype=torch.bfloat16)
    v = torch.randn(B, 4, 128, dtype=torch.bfloat16)
    state = torch.randn(B + 1, 4, 128, 128, dtype=torch.bfloat16)
    out = launcher.run(q, q, v, torch.rand(B, 4, dtype=torch.bfloat16), state, torch.ones(B, dtype=torch.int32),
                       torch.arange(B, dtype=torch.int32), torch.randn(B, 4))  # fmt: skip
    assert len(calls["large"]) == 1 and not calls["small"]
    args = calls["large"][0]
    assert args[-3] is out and args[-2] == 128**-0.5 and args[-1] == 1  # out, default scale, splits
