"""The chunked prefill kernel against the decode step's float64 recurrence, run token by token.

The oracle is :func:`chunk_gated_delta_rule_by_recurrence`: RGDR's float64 reference (itself
checked against a literal transcription of RGDR.md in ``test_rgdr_reference.py``) on a
float64 copy of the initial states, the final states rounded once to the pool's dtype.

Tolerances, as ``||got - oracle|| / ||oracle||``:

* the chunked algebra in float64: 1e-12 (the same math, in another order: this is what shows
  the chunked form is exact, not an approximation);
* the float32 kernel: output 2e-5 when float32, else the output dtype's rounding (bfloat16
  1.6e-2, float16 2e-3); a float32 state 2e-5, a 16-bit state its dtype's rounding. Both sides
  round the state once, at the end, so a 16-bit state differs only by that rounding.

Lengths are mixed around the chunk size (1, 63, 64, 65, 1000) with an empty sequence and a
padding slot among them; slots of no sequence are compared bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from cpu_ref_rows import fresh_rng
from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule, chunk_gated_delta_rule_by_recurrence
from tileops_cpu_ref.kernels import RefChunkGDR

TOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
MIXED = [1, 63, 64, 65, 1000]
#: The same around the chunk size, shorter: for the dtype combinations (the oracle costs a step per token).
SHORT = [1, 63, 64, 65, 200]


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm())


def _case(lengths, rng, *, dtype=torch.float32, state_dtype=torch.float32, NK=2, NV=4, DK=16, DV=32,
          padding=(), initial=True, unit_qk=True, spare=3):
    """Fresh random inputs (never zeros): sequence ``b`` owns slot ``slots[b]`` of a pool with
    ``spare`` slots no sequence owns; sequences listed in ``padding`` get slot -1."""
    B, T = len(lengths), sum(lengths)

    def rows(*shape):
        x = torch.randn(*shape, generator=rng)
        return x / x.norm(dim=-1, keepdim=True) if unit_qk else x

    pool = B + spare
    slots = torch.randperm(pool, generator=rng)[:B]
    for b in padding:
        slots[b] = -1
    has = torch.rand(B, generator=rng) < 0.6
    has[0] = True
    return {
        "query": rows(T, NK, DK).to(dtype), "key": rows(T, NK, DK).to(dtype),
        "value": torch.randn(T, NV, DV, generator=rng).to(dtype),
        "g": -(0.05 + 0.5 * torch.rand(T, NV, generator=rng)),
        "beta": torch.sigmoid(torch.randn(T, NV, generator=rng)).to(dtype),
        "state": torch.randn(pool, NV, DV, DK, generator=rng).to(state_dtype),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32),
        "ssm_state_indices": slots.to(torch.int32),
        "has_initial_state": has if initial else None,
    }


def _run(case, **kw):
    """The kernel on a copy of the pool: ``(out, pool after)``."""
    args = dict(case, state=case["state"].clone())
    out = chunk_gated_delta_rule(*args.values(), **kw)
    return out, args["state"]


def test_chunked_algebra_in_float64_equals_the_token_by_token_recurrence():
    case = _case([*MIXED, 0, 130], fresh_rng(), padding=(5,), DV=16)
    out, pool = _run(case, compute_dtype=torch.float64, out=torch.empty(case["value"].shape, dtype=torch.float64))
    ref_out, ref_pool = chunk_gated_delta_rule_by_recurrence(*case.values())
    assert _rel(out, ref_out) < TOL[torch.float64]
    assert _rel(pool, ref_pool) < TOL[torch.float32]  # both rounded once to the float32 pool


@pytest.mark.parametrize("lengths,dtype,state_dtype", [
    (MIXED, torch.float32, torch.float32), (SHORT, torch.bfloat16, torch.float32),
    (SHORT, torch.float16, torch.bfloat16), (SHORT, torch.bfloat16, torch.float16)])
def test_reference_kernel_matches_the_recurrence_on_mixed_lengths(lengths, dtype, state_dtype):
    case = _case(lengths, fresh_rng(), dtype=dtype, state_dtype=state_dtype, padding=(2,))
    ref_out, ref_pool = chunk_gated_delta_rule_by_recurrence(*case.values())
    out, pool = RefChunkGDR.fn(*case.values(), None, False), case["state"]  # the kernel users run
    assert out.dtype == dtype
    assert _rel(out, ref_out) < max(TOL[dtype], TOL[torch.float32])
    assert _rel(pool, ref_pool) < max(TOL[state_dtype], TOL[torch.float32])


def test_slots_of_no_sequence_stay_bit_identical():
    # Slot owners: sequences with tokens. Untouched: spare slots, the empty sequence's slot,
    # and (by construction) no slot of the padding sequence.
    case = _case([65, 0, 64, 1], fresh_rng(), state_dtype=torch.bfloat16, padding=(3,), spare=4)
    before = case["state"].clone()
    _, pool = _run(case)
    owned = {int(s) for s, n in zip(case["ssm_state_indices"], [65, 0, 64, 1]) if s >= 0 and n > 0}
    for slot in range(pool.shape[0]):
        if slot not in owned:
            assert torch.equal(pool[slot].view(torch.int16), before[slot].view(torch.int16)), f"slot {slot} changed"
    assert all(not torch.equal(pool[s], before[s]) for s in owned)


def test_poisoned_output_is_fully_written():
    case = _case(MIXED, fresh_rng(), padding=(0,))
    poison = torch.full(case["value"].shape, float("nan"))
    _run(case, out=poison)
    assert torch.isfinite(poison).all()


@pytest.mark.parametrize("cu, spans", [([0, 3], [(0, 3)]), ([2, 5, 8], [(2, 5), (5, 8)]), ([0, 0], []),
                                       ([-8, -2], []), ([-3, 4], [(0, 4)]), ([-3, 4, 8], [(0, 4), (4, 8)])])
def test_unchecked_metadata_runs_the_clipped_spans_and_zeroes_the_tokens_no_span_covers(cu, spans):
    """Contents checks off, cu_seqlens that do not tile [0, T): the spans every backend follows (RGDR's
    clipped_bounds) and zeros elsewhere (found in review: rows left as torch.empty gave 5.7e18, and negative
    bounds ran as Python slices from the end)."""
    T = 8
    case = _case([T], fresh_rng(), NK=1, NV=2, DK=16, DV=8)
    case["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
    B = len(cu) - 1
    case["ssm_state_indices"] = torch.arange(B, dtype=torch.int32)
    case["has_initial_state"] = None
    poison = torch.full(case["value"].shape, float("nan"))
    out, pool = _run(case, out=poison)
    covered = torch.zeros(T, dtype=torch.bool)
    for start, end in spans:
        covered[start:end] = True
    assert torch.isfinite(out).all() and not out[~covered].any()
    for b, (start, end) in enumerate(spans):  # each span as its own well-formed call
        alone = dict(case, query=case["query"][start:end], key=case["key"][start:end],
                     value=case["value"][start:end], g=case["g"][start:end], beta=case["beta"][start:end],
                     cu_seqlens=torch.tensor([0, end - start], dtype=torch.int32),
                     ssm_state_indices=torch.tensor([b], dtype=torch.int32))
        want, want_pool = _run(alone)
        torch.testing.assert_close(out[start:end], want)
        torch.testing.assert_close(pool[b], want_pool[b])
    assert torch.equal(pool[len(spans):], case["state"][len(spans):])  # no other slot written


def test_without_has_initial_state_every_sequence_starts_from_zeros():
    case = _case([63, 65], fresh_rng(), initial=False)
    zeros = dict(case, state=torch.zeros_like(case["state"]))
    out, _ = _run(case)
    out_from_zeros, _ = _run(zeros)
    assert torch.equal(out, out_from_zeros)


def test_a_sequence_without_initial_state_ignores_its_slot_contents():
    case = _case([70, 70], fresh_rng())
    case["has_initial_state"] = torch.tensor([True, False])
    out, _ = _run(case)
    slot = int(case["ssm_state_indices"][1])
    case["state"][slot].normal_(generator=fresh_rng())
    again, _ = _run(case)
    assert torch.equal(out[70:], again[70:])


def test_continuing_from_the_written_state_equals_one_longer_call():
    # Chunked prefill in two calls (the second has_initial_state) is the same prefill in one call
    # (a float64 pool, so the state handed between the calls is not rounded).
    rng = fresh_rng()
    whole = _case([150], rng, state_dtype=torch.float64)
    out, pool = _run(whole, compute_dtype=torch.float64, out=torch.empty(150, 4, 32, dtype=torch.float64))
    first = {n: (t[:100] if n in ("query", "key", "value", "g", "beta") else t) for n, t in whole.items()}
    first["cu_seqlens"] = torch.tensor([0, 100], dtype=torch.int32)
    out_a, pool_a = _run(first, compute_dtype=torch.float64, out=torch.empty(100, 4, 32, dtype=torch.float64))
    second = {n: (t[100:] if n in ("query", "key", "value", "g", "beta") else t) for n, t in whole.items()}
    second.update(state=pool_a, cu_seqlens=torch.tensor([0, 50], dtype=torch.int32),
                  has_initial_state=torch.tensor([True]))
    out_b, pool_b = _run(second, compute_dtype=torch.float64, out=torch.empty(50, 4, 32, dtype=torch.float64))
    assert _rel(torch.cat((out_a, out_b)), out) < TOL[torch.float64]
    assert _rel(pool_b, pool) < TOL[torch.float64]


def test_in_kernel_l2norm_equals_normalising_the_rows_first():
    case = _case([64, 65], fresh_rng(), unit_qk=False)
    normalised = dict(case, **{n: case[n] / case[n].norm(dim=-1, keepdim=True) for n in ("query", "key")})
    out, _ = _run(case, use_qk_l2norm_in_kernel=True)
    ref_out, _ = chunk_gated_delta_rule_by_recurrence(*normalised.values())
    assert _rel(out, ref_out) < TOL[torch.float32]


def test_scale_multiplies_the_output():
    case = _case([64, 3], fresh_rng())
    out, _ = _run(case, scale=0.5)
    ref_out, _ = chunk_gated_delta_rule_by_recurrence(*case.values(), scale=0.5)
    assert _rel(out, ref_out) < TOL[torch.float32]


def test_a_slot_past_the_pool_is_refused_before_any_write():
    case = _case([5, 5], fresh_rng())
    case["ssm_state_indices"][1] = case["state"].shape[0]
    before = case["state"].clone()
    with pytest.raises(IndexError, match="past the state pool"):
        chunk_gated_delta_rule(*case.values())
    assert torch.equal(case["state"], before)


@pytest.mark.parametrize("lengths,padding", [([1], ()), ([63], ()), ([64], ()), ([130], ()), ([0, 65, 0], ()),
                                             ([0, 70], (1,))], ids=["1", "63", "64", "130", "empties-65", "padding-70"])
@pytest.mark.parametrize("dtype,state_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)])
def test_a_lone_sequence_runs_its_chunks_as_slices_within_the_tolerance(lengths, padding, dtype, state_dtype):
    """One sequence with tokens (a prompt alone, the others empty) takes the slices path (``_lone_sequence``):
    the oracle's outputs and state on a NaN-poisoned output, its slot read where ``has_initial_state`` says,
    a padding slot's sequence writing nothing, every other slot bit for bit."""
    case = _case(lengths, fresh_rng(), dtype=dtype, state_dtype=state_dtype, padding=padding)
    before = case["state"].clone()
    ref_out, ref_pool = chunk_gated_delta_rule_by_recurrence(*case.values())
    out, pool = _run(case, out=torch.full(case["value"].shape, float("nan"), dtype=dtype))
    assert torch.isfinite(out).all()
    assert _rel(out, ref_out) < max(TOL[dtype], TOL[torch.float32])
    assert _rel(pool, ref_pool) < max(TOL[state_dtype], TOL[torch.float32])
    owner = [int(s) for s, n in zip(case["ssm_state_indices"], lengths) if n > 0 and s >= 0]
    for slot in range(pool.shape[0]):
        if slot not in owner:
            assert torch.equal(pool[slot].view(torch.int16 if state_dtype != torch.float32 else torch.int32),
                               before[slot].view(torch.int16 if state_dtype != torch.float32 else torch.int32))


@pytest.mark.parametrize("lengths", [[5, 7], [9]], ids=["batch", "lone"])
def test_the_inputs_are_left_as_they_were_where_no_conversion_copies_them(lengths):
    """float32 rows, as many key heads as value heads, no L2 norm: nothing converts the query, and the
    scale must not be applied to the caller's tensor (it was, in place, before 2026-12-04f)."""
    case = _case(lengths, fresh_rng(), NK=4, NV=4)
    before = {name: t.clone() for name, t in case.items() if name != "state" and isinstance(t, torch.Tensor)}
    _run(case)
    for name, t in before.items():
        assert torch.equal(case[name], t), f"{name} was written"
