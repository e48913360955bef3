"""The vectorised causal conv1d kernels (decode and varlen) against the naive float64 oracles.

The oracles are the conformance suite's (``tests/catalogue_references.py``: one sequence and one
token at a time, in float64). Outputs are compared at the conformance suite's per-dtype
tolerances (float32 2e-5, float16 2e-3, bfloat16 1.6e-2, relative); pool windows hold copies of
inputs, so every slot is compared bit for bit. Outputs are poisoned with NaN before each call.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from cpu_ref_rows import fresh_rng
from tileops_cpu_ref.conv import causal_conv1d_update, causal_conv1d_varlen

# The float64 oracles live with the conformance suite that also checks every backend against them.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import REFERENCES  # noqa: E402

OUT_TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    den = float(expected.double().norm())
    return float((got.double() - expected.double()).norm()) / (den or 1.0)


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])


def _case(lengths, *, D=24, W=4, dtype=torch.float32, bias=True, per_token=True, extra_slots=3, rng=None):
    """Fresh random inputs (never zeros): per-token slots (decode) or per-sequence slots (varlen),
    a random permutation of a pool with spare slots."""
    gen = rng or fresh_rng()
    T, B = sum(lengths), len(lengths)
    n = T if per_token else B
    pool = n + extra_slots
    return dict(
        x=torch.randn(T, D, generator=gen).to(dtype),
        conv_state=torch.randn(pool, D, W - 1, generator=gen).to(dtype),
        weight=torch.randn(D, W, generator=gen).to(dtype),
        actual_seq_lengths=torch.tensor(lengths),
        conv_state_indices=torch.randperm(pool, generator=gen)[:n],
        bias=torch.randn(D, generator=gen).to(dtype) if bias else None,
    )


def _poisoned(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, float("nan"))


def _run_update(case, *, accepted=None, activation="silu", style="lengths"):
    state = case["conv_state"].clone()
    meta = _cu(case["actual_seq_lengths"].tolist()) if style == "cu_seqlens" else case["actual_seq_lengths"]
    out = causal_conv1d_update(case["x"], state, case["weight"], meta, case["conv_state_indices"], case["bias"],
                               accepted, activation=activation, seq_lens_style=style, out=_poisoned(case["x"]))
    return out, state


def _run_varlen(case, *, has_init=None, activation="silu", style="lengths"):
    state = case["conv_state"].clone()
    meta = _cu(case["actual_seq_lengths"].tolist()) if style == "cu_seqlens" else case["actual_seq_lengths"]
    out = causal_conv1d_varlen(case["x"], state, case["weight"], meta, case["conv_state_indices"], has_init,
                               case["bias"], activation=activation, seq_lens_style=style, out=_poisoned(case["x"]))
    return out, state


def _oracle(op: str, case, **extra):
    inputs = {k: v for k, v in {**case, **extra}.items() if v is not None}
    params = {"activation": extra.pop("activation", "silu")}
    return REFERENCES[op](None, inputs, params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("accepted", [False, True], ids=["all-tokens", "accepted"])
def test_update_matches_the_float64_oracle_on_a_ragged_batch_with_padding(dtype, style, accepted):
    lengths = [3, 0, 1, 5, 2]
    case = _case(lengths, dtype=dtype, bias=not accepted)
    case["conv_state_indices"][[2, 6]] = -1  # the first token of a sequence, and one in the middle of another
    acc = torch.tensor([2, 1, 1, 4, 2]) if accepted else None
    out, state = _run_update(case, accepted=acc, style=style)
    expected = _oracle("CausalConv1dUpdateFwdOp", case, num_accepted_tokens=acc)
    assert _relative(out, expected["out"]) <= OUT_TOL[dtype]
    assert torch.equal(state, expected["conv_state"].to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("accepted", [False, True], ids=["all-tokens", "accepted"])
@pytest.mark.parametrize("per_seq", [1, 3])
@pytest.mark.parametrize("D", [24, 2048], ids=["one-reduction", "tap-by-tap"])
def test_update_matches_the_float64_oracle_when_every_sequence_has_the_same_length(dtype, style, accepted, per_seq, D):
    lengths = [per_seq] * 4
    case = _case(lengths, D=D, dtype=dtype, bias=not accepted)
    slots = case["conv_state_indices"]
    slots[per_seq] = -1  # the first token of the second sequence
    slots[-1] = slots[0]  # one slot named twice: the later token's window is stored
    acc = torch.tensor([1, 3, 2, 1]).clamp(max=per_seq) if accepted else None
    out, state = _run_update(case, accepted=acc, style=style)
    expected = _oracle("CausalConv1dUpdateFwdOp", case, num_accepted_tokens=acc)
    assert _relative(out, expected["out"]) <= OUT_TOL[dtype]
    assert torch.equal(state, expected["conv_state"].to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", [2, 3, 4, 6])
def test_varlen_matches_the_float64_oracle_with_sequences_shorter_than_the_window(dtype, width):
    lengths = [1, 7, 0, 2, 4, 3]
    case = _case(lengths, W=width, dtype=dtype, per_token=False)
    has_init = torch.tensor([True, False, True, True, True, False])
    out, state = _run_varlen(case, has_init=has_init, style="cu_seqlens")
    expected = _oracle("CausalConv1dVarlenFwdOp", case, has_initial_state=has_init)
    assert _relative(out, expected["out"]) <= OUT_TOL[dtype]
    assert torch.equal(state, expected["conv_state"].to(dtype))


def test_varlen_without_has_initial_state_starts_every_sequence_from_zeros():
    case = _case([3, 2], per_token=False)
    out, _ = _run_varlen(case)
    zeroed = dict(case, conv_state=torch.zeros_like(case["conv_state"]))
    out_from_zeros, _ = _run_varlen(zeroed, has_init=torch.tensor([True, True]))
    torch.testing.assert_close(out, out_from_zeros, rtol=0, atol=0)


def test_without_activation_the_output_is_the_plain_convolution():
    case = _case([4], D=8, W=4, bias=True)
    case["conv_state_indices"].fill_(-1)
    out, _ = _run_update(case, activation=None)
    x, w = case["x"].double(), case["weight"].double()
    padded = torch.cat([torch.zeros(3, 8, dtype=torch.float64), x])
    expected = torch.stack([(padded[t : t + 4].T * w).sum(1) for t in range(4)]) + case["bias"].double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_a_padding_sequence_starts_from_a_zero_window_and_writes_nothing():
    case = _case([2, 2])
    case["conv_state_indices"][:2] = -1
    out, state = _run_update(case)
    alone = dict(case, x=case["x"][:2], actual_seq_lengths=torch.tensor([2]),
                 conv_state=torch.zeros_like(case["conv_state"]), conv_state_indices=torch.tensor([0, 0]))
    out_alone, _ = _run_update(alone)
    torch.testing.assert_close(out[:2], out_alone, rtol=1e-6, atol=1e-6)  # float32, other batch size
    changed = (state != case["conv_state"]).flatten(1).any(1).nonzero().flatten().tolist()
    assert changed == sorted(case["conv_state_indices"][2:].tolist())


def test_update_leaves_slots_no_covered_token_names_bit_identical():
    case = _case([2, 1, 3], extra_slots=5)
    T = case["x"].shape[0]
    case["actual_seq_lengths"] = torch.tensor([2, 1, 1])  # tokens 4 and 5 belong to no sequence
    case["conv_state_indices"][1] = -1
    out, state = _run_update(case)
    named = case["conv_state_indices"][: T - 2]
    untouched = torch.ones(state.shape[0], dtype=torch.bool)
    untouched[named[named >= 0]] = False
    assert torch.equal(state[untouched].view(torch.uint8), case["conv_state"][untouched].view(torch.uint8))
    assert not torch.equal(state[~untouched], case["conv_state"][~untouched])


def test_varlen_leaves_slots_of_padding_and_empty_sequences_bit_identical():
    case = _case([2, 0, 3, 1], per_token=False, extra_slots=4)
    case["conv_state_indices"][3] = -1
    _, state = _run_varlen(case, has_init=torch.tensor([True, True, False, True]))
    written = case["conv_state_indices"][[0, 2]]
    untouched = torch.ones(state.shape[0], dtype=torch.bool)
    untouched[written] = False
    assert torch.equal(state[untouched].view(torch.uint8), case["conv_state"][untouched].view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_varlen_of_one_long_prompt_among_short_ones_takes_the_token_table_and_agrees_with_the_padded_rows(dtype):
    """Padding [1, 2, 1, 30] to the longest would hold 120 rows for 34 tokens: the token table serves it,
    within the float64 oracle's tolerance, and the padded road agrees (the same sums in the same order;
    which SIMD path adds them may round a float32 last bit differently) and stores the same windows."""
    from tileops_cpu_ref import conv

    case = _case([1, 2, 1, 30], per_token=False, dtype=dtype)
    has_init = torch.tensor([True, False, True, True])
    case["conv_state_indices"][1] = -1
    out, state = _run_varlen(case, has_init=has_init)
    expected = _oracle("CausalConv1dVarlenFwdOp", case, has_initial_state=has_init)
    assert _relative(out, expected["out"]) <= OUT_TOL[dtype]
    assert torch.equal(state, expected["conv_state"].to(dtype))
    padded_state, starts, lengths = case["conv_state"].clone(), [0, 1, 3, 4], [1, 2, 1, 30]
    slots = case["conv_state_indices"].tolist()
    padded = conv._varlen_padded(case["x"], padded_state, case["weight"], case["bias"], "silu", starts, lengths,
                                 [0, 1, 2, 3], slots, [s >= 0 and bool(u) for s, u in zip(slots, has_init)],
                                 _poisoned(case["x"]))
    torch.testing.assert_close(out, padded, rtol=1e-6 if dtype == torch.float32 else 8e-3, atol=1e-6)
    assert torch.equal(state, padded_state)


def test_varlen_where_two_sequences_name_one_slot_the_later_ones_window_is_stored():
    """The kernel's rule under the op's check (which refuses it): the later sequence wins, as a
    token-by-token writer would leave it."""
    case = _case([3, 5, 2], per_token=False)
    case["conv_state_indices"][2] = case["conv_state_indices"][0]
    _, state = _run_varlen(case, has_init=torch.tensor([True, True, True]))
    slot = int(case["conv_state_indices"][0])
    assert torch.equal(state[slot], torch.cat((case["conv_state"][slot][:, 2:], case["x"][8:].T), dim=1))


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_garbage_metadata_never_leaves_an_output_element_unwritten(style):
    """Lengths short of T, empty and padding sequences, accepted counts out of range: every output
    row is written, and rows no sequence covers are zeros."""
    case = _case([2, 0, 3, 4, 1])
    case["actual_seq_lengths"] = torch.tensor([2, 0, 3, 1, 0])  # covers 6 of 10 tokens
    case["conv_state_indices"][2:5] = -1
    out, _ = _run_update(case, accepted=torch.tensor([0, 7, 9, -3, 2]), style=style)
    assert torch.isfinite(out).all()
    assert torch.equal(out[6:], torch.zeros_like(out[6:]))
    vcase = _case([4, 3], per_token=False)
    vcase["actual_seq_lengths"] = torch.tensor([1, 2])
    vout, _ = _run_varlen(vcase, has_init=torch.tensor([True, False]), style=style)
    assert torch.isfinite(vout).all() and torch.equal(vout[3:], torch.zeros_like(vout[3:]))


def test_one_call_of_l_tokens_equals_l_calls_of_one_token_on_one_slot():
    case = _case([5], extra_slots=1)
    case["conv_state_indices"].fill_(1)
    out, state = _run_update(case)
    chained = case["conv_state"].clone()
    pieces = [causal_conv1d_update(case["x"][t : t + 1], chained, case["weight"], torch.tensor([1]),
                                   torch.tensor([1]), case["bias"], activation="silu") for t in range(5)]
    # float32 sums of W products; batch size only changes which SIMD path adds them
    torch.testing.assert_close(out, torch.cat(pieces), rtol=1e-6, atol=1e-6)
    assert torch.equal(state, chained)


def test_a_prefill_equals_decoding_its_tokens_one_by_one():
    case = _case([6], per_token=False, extra_slots=1)
    out, state = _run_varlen(case, has_init=torch.tensor([True]))
    chained = case["conv_state"].clone()
    slot = case["conv_state_indices"]
    pieces = [causal_conv1d_update(case["x"][t : t + 1], chained, case["weight"], torch.tensor([1]), slot,
                                   case["bias"], activation="silu") for t in range(6)]
    # float32 sums of W products; batch size only changes which SIMD path adds them
    torch.testing.assert_close(out, torch.cat(pieces), rtol=1e-6, atol=1e-6)
    assert torch.equal(state, chained)


def test_a_strided_slice_of_a_projection_gives_what_a_contiguous_copy_gives():
    case = _case([3, 2], D=16)
    projection = torch.randn(5, 40, generator=fresh_rng())
    projection[:, 8:24] = case["x"]
    sliced = dict(case, x=projection[:, 8:24])
    assert not sliced["x"].is_contiguous()
    torch.testing.assert_close(_run_update(sliced), _run_update(case), rtol=0, atol=0)


def test_a_slot_past_the_pool_is_refused_before_anything_is_written():
    case = _case([3, 2])
    pool = case["conv_state"].shape[0]
    case["conv_state_indices"][4] = pool
    state = case["conv_state"].clone()
    with pytest.raises(IndexError, match=rf"conv_state_indices \[{pool}\] lie past the conv state pool of {pool} "
                                         "slots; nothing was written"):
        causal_conv1d_update(case["x"], state, case["weight"], case["actual_seq_lengths"], case["conv_state_indices"])
    assert torch.equal(state, case["conv_state"])


@pytest.mark.parametrize("run", [causal_conv1d_update, causal_conv1d_varlen], ids=["update", "varlen"])
def test_a_sequence_reaching_past_t_is_clipped_to_t_as_rgdr_clips_it(run):
    """Unchecked lengths past T (contents checks off, as in serving) follow RGDR's rule
    (``clipped_bounds``), as the spec says the metadata means what it means there: the call equals
    the one with the clipped lengths, bit for bit (it raised ValueError, writing nothing)."""
    case = _case([3, 2], per_token=run is causal_conv1d_update)
    clipped_state, state = case["conv_state"].clone(), case["conv_state"].clone()
    args = (case["weight"],)
    want = run(case["x"], clipped_state, *args, torch.tensor([3, 2]), case["conv_state_indices"])
    got = run(case["x"], state, *args, torch.tensor([3, 4]), case["conv_state_indices"])
    assert torch.equal(got, want) and torch.equal(state, clipped_state)
