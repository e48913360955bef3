"""RGDR under fuzzed metadata: garbage never leaves output unwritten nor touches an unnamed slot.

Issue 19. Hypothesis draws sequence lengths (or prefix sums) that need not cover the tokens,
slot indices with repeats, padding (-1) and values outside the pool (some past int32), and
accepted counts out of range. With contents checks off, the reference kernel may compute
anything for garbage, but (a) it writes every output element (the buffer is NaN-poisoned
first), zeros on the tokens no sequence covers, or raises before writing anything, and (b) a
pool slot that no index names stays bit-identical. The rule every backend follows
(``clipped_bounds``) lays the sequences end to end inside the tokens and reads valid metadata
exactly as written. With checks on, a call either passes and matches the float64 reference,
or is a ``CheckError`` raised before the pool is touched.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tileops_core import CheckError, TileOpsError
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
from tileops_cpu_ref.rgdr import clipped_accepted, clipped_bounds, host_bounds, recurrent_gated_delta_rule

NK, NV, DK, DV = 1, 2, 8, 8
#: Metadata values past int32: a kernel that reads 64-bit metadata must clip them, never wrap them.
HUGE = st.sampled_from([2**32, 2**32 + 1, -(2**32) + 1, 2**31])


@st.composite
def with_one_huge(draw: st.DrawFn, values: st.SearchStrategy[list[int]]) -> list[int]:
    """A drawn list, one element in five lists replaced by a value past int32."""
    drawn = draw(values)
    if drawn and draw(st.integers(0, 4)) == 0:
        drawn[draw(st.integers(0, len(drawn) - 1))] = draw(HUGE)
    return drawn


@st.composite
def rgdr_metadata(draw: st.DrawFn) -> dict:
    T = draw(st.integers(1, 7))
    B = draw(st.integers(1, 4))
    pool = draw(st.integers(1, 9))
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    width = B + 1 if style == "cu_seqlens" else B
    seq = draw(with_one_huge(st.lists(st.integers(-2, T + 3), min_size=width, max_size=width)))
    indices = draw(with_one_huge(st.lists(st.integers(-3, pool + 2), min_size=T, max_size=T)))
    accepted = draw(st.none() | with_one_huge(st.lists(st.integers(-2, T + 2), min_size=B, max_size=B)))
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
    starts, lengths = clipped_bounds(m["seq"], m["style"], m["T"])
    assert torch.equal(uncovered_rows(out, starts, lengths), torch.zeros_like(uncovered_rows(out, starts, lengths)))
    keep = unnamed_slots(m)
    assert torch.equal(args["state"][keep].view(torch.uint8), before[keep].view(torch.uint8))


def uncovered_rows(out: torch.Tensor, starts: list[int], lengths: list[int]) -> torch.Tensor:
    """The rows of ``out`` no sequence covers."""
    covered = torch.zeros(out.shape[0], dtype=torch.bool)
    for start, n in zip(starts, lengths):
        covered[start : start + n] = True
    return out[~covered.to(out.device)]


@st.composite
def valid_metadata(draw: st.DrawFn) -> dict:
    """Metadata the contents check accepts: non-negative lengths summing to T (or their prefix
    sums from 0), accepted counts in ``[1, L_b]``."""
    lengths = draw(st.lists(st.integers(0, 6), min_size=0, max_size=300))
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    meta = lengths if style == "lengths" else [sum(lengths[:b]) for b in range(len(lengths) + 1)]
    accepted = [draw(st.integers(1, max(n, 1))) for n in lengths]
    return {"T": sum(lengths), "style": style, "meta": meta, "lengths": lengths, "accepted": accepted}


@settings(max_examples=300, deadline=None)
@given(v=valid_metadata())
def test_valid_metadata_is_followed_exactly_as_written(v: dict) -> None:
    """The unchecked-metadata rule changes nothing a contents check would accept."""
    starts, lengths = clipped_bounds(v["meta"], v["style"], v["T"])
    assert (starts, lengths) == host_bounds(torch.tensor(v["meta"], dtype=torch.int64), v["style"])
    assert lengths == v["lengths"]
    assert clipped_accepted(v["accepted"], lengths) == v["accepted"]


@settings(max_examples=300, deadline=None)
@given(T=st.integers(0, 40), style=st.sampled_from(["lengths", "cu_seqlens"]),
       meta=st.lists(st.integers(-50, 50) | HUGE, min_size=1, max_size=40))
def test_any_metadata_is_followed_as_disjoint_spans_laid_end_to_end_inside_the_tokens(T: int, style: str,
                                                                                      meta: list[int]) -> None:
    starts, lengths = clipped_bounds(meta, style, T)
    assert len(starts) == len(meta) - (style == "cu_seqlens")
    assert all(n >= 0 and 0 <= s and s + n <= T for s, n in zip(starts, lengths))
    assert all(starts[b + 1] == starts[b] + lengths[b] for b in range(len(starts) - 1))
    if style == "lengths" and starts:
        assert starts[0] == 0


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
