"""RGDR under fuzzed metadata: garbage never leaves output unwritten nor touches an unnamed slot.

Issue 19. Hypothesis draws sequence lengths (or prefix sums) that need not cover the tokens,
slot indices with repeats, padding (-1) and values outside the pool, and accepted counts out
of range. With contents checks off, the reference kernel may compute anything for garbage,
but (a) it writes every output element (the buffer is NaN-poisoned first) or raises before
writing anything, and (b) a pool slot that no index names stays bit-identical. With checks
on, a call either passes and matches the float64 reference, or is a ``CheckError`` raised
before the pool is touched.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tileops_core import CheckError, TileOpsError
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

NK, NV, DK, DV = 1, 2, 8, 8


@st.composite
def rgdr_metadata(draw: st.DrawFn) -> dict:
    T = draw(st.integers(1, 7))
    B = draw(st.integers(1, 4))
    pool = draw(st.integers(1, 9))
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    width = B + 1 if style == "cu_seqlens" else B
    seq = draw(st.lists(st.integers(-2, T + 3), min_size=width, max_size=width))
    indices = draw(st.lists(st.integers(-3, pool + 2), min_size=T, max_size=T))
    accepted = draw(st.none() | st.lists(st.integers(-2, T + 2), min_size=B, max_size=B))
    return {"T": T, "pool": pool, "style": style, "seq": seq, "indices": indices, "accepted": accepted,
            "seed": draw(st.integers(0, 2**31 - 1))}


def rgdr_tensors(m: dict, dims: tuple[int, int, int, int] = (NK, NV, DK, DV), dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu") -> dict:
    """The call's tensors for drawn metadata ``m`` (fresh random data from its seed)."""
    nk, nv, dk, dv = dims
    rng = torch.Generator().manual_seed(m["seed"])
    T = m["T"]
    args = {
        "query": torch.nn.functional.normalize(torch.randn(T, nk, dk, generator=rng), dim=-1).to(dtype),
        "key": torch.nn.functional.normalize(torch.randn(T, nk, dk, generator=rng), dim=-1).to(dtype),
        "value": torch.randn(T, nv, dv, generator=rng).to(dtype),
        "beta": torch.sigmoid(torch.randn(T, nv, generator=rng)).to(dtype),
        "state": torch.randn(m["pool"], nv, dv, dk, generator=rng),
        "actual_seq_lengths": torch.tensor(m["seq"], dtype=torch.int64),
        "ssm_state_indices": torch.tensor(m["indices"], dtype=torch.int64),
        "g": -(0.05 + 0.5 * torch.rand(T, nv, generator=rng)),
    }
    if m["accepted"] is not None:
        args["num_accepted_tokens"] = torch.tensor(m["accepted"], dtype=torch.int64)
    return {k: v.to(device) for k, v in args.items()}


def unnamed_slots(m: dict) -> torch.Tensor:
    """Pool slots that no index names (every one of them must stay as it was)."""
    keep = torch.ones(m["pool"], dtype=torch.bool)
    for i in m["indices"]:
        if 0 <= i < m["pool"]:
            keep[i] = False
    return keep


@settings(max_examples=150, deadline=None)
@given(m=rgdr_metadata())
def test_unchecked_garbage_metadata_writes_every_output_element_and_no_unnamed_slot(m: dict) -> None:
    args = rgdr_tensors(m)
    before = args["state"].clone()
    out = torch.full_like(args["value"], float("nan"))
    try:
        recurrent_gated_delta_rule(**args, seq_lens_style=m["style"], out=out)
    except (IndexError, ValueError, TileOpsError):
        assert torch.equal(args["state"].view(torch.uint8), before.view(torch.uint8)), "raised after writing"
        return
    assert not torch.isnan(out).any(), "an output element was left unwritten"
    keep = unnamed_slots(m)
    assert torch.equal(args["state"][keep].view(torch.uint8), before[keep].view(torch.uint8))


@settings(max_examples=150, deadline=None)
@given(m=rgdr_metadata())
def test_checked_metadata_is_served_exactly_or_refused_before_any_write(m: dict) -> None:
    args = rgdr_tensors(m)
    before = args["state"].clone()
    op = RecurrentGatedDeltaRuleFwdOp(seq_lens_style=m["style"], check_contents=True)
    try:
        out = op(**args)
    except CheckError:
        assert torch.equal(args["state"].view(torch.uint8), before.view(torch.uint8)), "refused after writing"
        return
    reference_state = before.double()
    expected = torch.empty(args["value"].shape, dtype=torch.float64)
    recurrent_gated_delta_rule(**{**args, "state": reference_state}, seq_lens_style=m["style"],
                               compute_dtype=torch.float64, out=expected)
    torch.testing.assert_close(out.double(), expected, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(args["state"].double(), reference_state, rtol=2e-5, atol=2e-5)
