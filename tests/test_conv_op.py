"""The causal conv1d ops through their public API: metadata contents checks and strided inputs.

Contents checking is on in the test suite (TILEOPS_CHECK_CONTENTS=1); each check fails before
anything is written and names the declaration it guards.
"""

from __future__ import annotations

import os

import pytest
import torch

from tileops_core import CheckError
from tileops_core.ops.conv import CausalConv1dUpdateFwdOp, CausalConv1dVarlenFwdOp

D, W = 16, 4


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _args(lengths, *, per_token=True, spare=3, rng=None):
    rng = rng or _rng()
    T = sum(lengths)
    n = T if per_token else len(lengths)
    return dict(x=torch.randn(T, D, generator=rng), conv_state=torch.randn(n + spare, D, W - 1, generator=rng),
                weight=torch.randn(D, W, generator=rng), actual_seq_lengths=torch.tensor(lengths),
                conv_state_indices=torch.randperm(n + spare, generator=rng)[:n])


def _refused(op, args, message: str) -> None:
    before = args["conv_state"].clone()
    with pytest.raises(CheckError, match=message):
        op(**args)
    assert torch.equal(args["conv_state"], before)


def test_update_lengths_that_do_not_tile_t_are_refused():
    args = _args([2, 3])
    args["actual_seq_lengths"] = torch.tensor([2, 2])
    _refused(CausalConv1dUpdateFwdOp(), args,
             r"CausalConv1dUpdateFwdOp: actual_seq_lengths sums to 4 tokens, but T=5 \(manifest/conv.yaml:\d+")


def test_update_cu_seqlens_not_starting_at_zero_are_refused():
    args = _args([2, 3])
    args["actual_seq_lengths"] = torch.tensor([1, 3, 5])
    _refused(CausalConv1dUpdateFwdOp(seq_lens_style="cu_seqlens"), args,
             r"actual_seq_lengths \(cu_seqlens\) must start at 0, got \[1\]")


def test_update_slot_outside_the_pool_is_refused():
    args = _args([2, 3])
    pool = args["conv_state"].shape[0]
    args["conv_state_indices"][3] = pool
    _refused(CausalConv1dUpdateFwdOp(), args, rf"conv_state_indices \[{pool}\] lie outside \[-1, {pool}\)")


def test_update_two_sequences_writing_one_slot_are_refused():
    args = _args([2, 3])
    args["conv_state_indices"][4] = args["conv_state_indices"][0]
    slot = int(args["conv_state_indices"][0])
    _refused(CausalConv1dUpdateFwdOp(), args, rf"sequences 0 and 1 both write conv_state slot {slot}")


def test_update_tokens_of_one_sequence_may_share_a_slot():
    args = _args([3])
    args["conv_state_indices"].fill_(1)
    CausalConv1dUpdateFwdOp()(**args)
    # the slot holds the window after the last token: its last W - 1 inputs
    assert torch.equal(args["conv_state"][1], args["x"].T)


def test_update_accepted_count_out_of_range_is_refused():
    args = _args([2, 3])
    args["num_accepted_tokens"] = torch.tensor([1, 4])
    _refused(CausalConv1dUpdateFwdOp(), args, r"num_accepted_tokens\[1\]=4 is outside \[1, 3\]")


def test_varlen_two_sequences_writing_one_slot_are_refused_but_an_empty_one_may_repeat_a_slot():
    args = _args([2, 0, 3], per_token=False)
    args["conv_state_indices"][1] = args["conv_state_indices"][0]
    CausalConv1dVarlenFwdOp()(**args)  # the empty sequence writes nothing
    args["conv_state_indices"][2] = args["conv_state_indices"][0]
    slot = int(args["conv_state_indices"][0])
    _refused(CausalConv1dVarlenFwdOp(), args, rf"sequences 0 and 2 both write conv_state slot {slot}")


@pytest.mark.parametrize("op_class, per_token", [(CausalConv1dUpdateFwdOp, True), (CausalConv1dVarlenFwdOp, False)])
def test_a_strided_slice_of_a_projection_is_accepted_as_it_is(op_class, per_token):
    args = _args([3, 2], per_token=per_token)
    projection = torch.randn(5, 3 * D, generator=_rng())
    projection[:, D : 2 * D] = args["x"]
    state = args["conv_state"].clone()
    expected = op_class(activation="silu")(**args)
    got = op_class(activation="silu")(**dict(args, x=projection[:, D : 2 * D], conv_state=state))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(state, args["conv_state"])


def test_a_non_silu_activation_is_refused_at_construction():
    with pytest.raises(CheckError, match="activation"):
        CausalConv1dUpdateFwdOp(activation="gelu")
