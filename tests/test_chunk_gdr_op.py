"""ChunkGatedDeltaRuleFwdOp through its public API: the pool written in place, strided inputs,
and the metadata contents a shape check cannot see (checked before anything is written)."""

from __future__ import annotations

import os

import pytest
import torch

from tileops_core import CheckError
from tileops_core.ops.gated_delta_prefill import ChunkGatedDeltaRuleFwdOp, chunk_gdr_prefill_workload
from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule_by_recurrence

NK, NV, DK, DV = 2, 4, 16, 16


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _batch(lengths, **row):
    """The workload generator's batch (metadata, gates, unit q/k) plus random values and pool."""
    rng = _rng()
    made = chunk_gdr_prefill_workload({"lengths": lengths, "NK": NK, "NV": NV, "DK": DK, "has_initial_state_shape": 1,
                                       **row}, rng)
    t, T, S = made.tensors, made.indices["T"], made.indices["S"]
    return dict(query=t["query"], key=t["key"], value=torch.randn(T, NV, DV, generator=rng), g=t["g"], beta=t["beta"],
                state=torch.randn(S, NV, DV, DK, generator=rng), cu_seqlens=t["cu_seqlens"],
                ssm_state_indices=t["ssm_state_indices"], has_initial_state=t["has_initial_state"])


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref.double()).norm() / ref.double().norm())


def test_the_op_writes_the_pool_in_place_and_returns_the_output():
    args = _batch([1, 63, 64, 65])
    ref_out, ref_pool = chunk_gated_delta_rule_by_recurrence(*args.values())
    pool = args["state"]
    out = ChunkGatedDeltaRuleFwdOp()(**args)
    assert args["state"] is pool and out.shape == (193, NV, DV) and out.dtype == torch.float32
    assert _rel(out, ref_out) < 2e-5 and _rel(pool, ref_pool) < 2e-5


def test_query_key_value_sliced_from_one_projection_give_the_same_result():
    args = _batch([70, 5])
    T = args["value"].shape[0]
    fused = torch.cat([args["query"].flatten(1), args["key"].flatten(1), args["value"].flatten(1)], dim=1)
    q, k, v = fused.split([NK * DK, NK * DK, NV * DV], dim=1)
    views = dict(args, query=q.view(T, NK, DK), key=k.view(T, NK, DK), value=v.view(T, NV, DV),
                 state=args["state"].clone())
    assert not views["query"].is_contiguous()
    op = ChunkGatedDeltaRuleFwdOp()
    assert torch.equal(op(**views), op(**args)) and torch.equal(views["state"], args["state"])


def _refused(args, message):
    before = args["state"].clone()
    with pytest.raises(CheckError, match=message):
        ChunkGatedDeltaRuleFwdOp(check_contents=True)(**args)
    assert torch.equal(args["state"], before)


def test_prefix_sums_that_do_not_end_at_T_are_refused():
    args = _batch([10, 20])
    args["cu_seqlens"] = torch.tensor([0, 10, 25], dtype=torch.int32)
    _refused(args, r"cu_seqlens must run from 0 to T=30, got 0 \.\. 25")


def test_decreasing_prefix_sums_are_refused():
    args = _batch([10, 20, 5])
    args["cu_seqlens"] = torch.tensor([0, 31, 30, 35], dtype=torch.int32)
    _refused(args, r"cu_seqlens decreases \(sequence lengths \[31, -1, 5\]\)")


def test_a_slot_outside_the_pool_is_refused():
    args = _batch([3, 3])
    args["ssm_state_indices"] = torch.tensor([0, args["state"].shape[0]], dtype=torch.int32)
    _refused(args, rf"ssm_state_indices\[1\]={args['state'].shape[0]} lies outside \[-1, 6\)")


def test_two_sequences_writing_one_slot_are_refused():
    args = _batch([3, 4, 5])
    args["ssm_state_indices"] = torch.tensor([2, 0, 2], dtype=torch.int32)
    _refused(args, "sequences 0 and 2 both write state slot 2")


def test_an_empty_sequence_may_share_a_slot_it_does_not_write():
    args = _batch([3, 0, 5])
    args["ssm_state_indices"] = torch.tensor([2, 2, 4], dtype=torch.int32)
    ChunkGatedDeltaRuleFwdOp(check_contents=True)(**args)
