"""The vectorised RGDR kernel against a literal, token-by-token transcription of RGDR.md.

The oracle (:func:`_literal`) is the naive form: one sequence, one head, one token at a
time, in float64. The kernel users run is ``RefRGDR.fn`` (float32 accumulation); the same
function with ``compute_dtype=float64`` is the reference other backends are checked against.

Tolerances, as ``||got - oracle|| / ||oracle||``:

* float64 kernel: 1e-9 (the same math, summed in another order);
* float32 kernel, output: 2e-5 when the output is float32, else the output dtype's rounding
  (bfloat16 1.6e-2, float16 2e-3) -- the conformance suite's per-dtype tolerances;
* float32 kernel, state: 1e-5 for a float32 state.
* a 16-bit state: 1e-3 for the state and at least that for the output. Both sides round the
  state to its dtype after every token, so they differ only where float32 and float64 fall
  on opposite sides of a rounding boundary; such an element moves by one ulp (2^-8 of it
  in bfloat16) and the recurrence carries it on: in these small pools, up to a few 1e-4.

Slots no token writes are compared bit for bit.
"""

from __future__ import annotations

import math

import pytest
import torch

from cpu_ref_rows import fresh_rng, workload_params
from tileops_core.bench.workloads import instantiate
from tileops_cpu_ref.kernels import RefRGDR
from tileops_cpu_ref.rgdr import L2NORM_EPS, recurrent_gated_delta_rule

OUT_TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
STATE_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-3, torch.float16: 1e-3}
#: Workload rows whose state pool is above this run only with ``-m all_workloads``.
SMALL_POOL_BYTES = 64 << 20


def _literal(query, key, value, beta, state, lengths, slots, g, gk, accepted, scale, l2norm):
    """RGDR.md's pseudo-code, one sequence, one head, one token at a time, in float64."""
    T, NK, DK = query.shape
    NV, DV = value.shape[1:]
    grp = NV // NK
    out = torch.zeros(T, NV, DV, dtype=torch.float64)
    initial = {}
    start = 0
    for b, L in enumerate(lengths):
        if L > 0:
            first = start + (accepted[b] - 1 if accepted is not None else 0)
            slot = int(slots[first])
            initial[b] = state[slot].double().clone() if slot >= 0 else torch.zeros(NV, DV, DK, dtype=torch.float64)
        start += L
    start = 0
    for b, L in enumerate(lengths):
        for h in range(NV):
            if L == 0:
                continue
            S = initial[b][h]
            for t in range(start, start + L):
                q, k = query[t, h // grp].double(), key[t, h // grp].double()
                if l2norm:
                    q = q / math.sqrt(float((q * q).sum()) + L2NORM_EPS)
                    k = k / math.sqrt(float((k * k).sum()) + L2NORM_EPS)
                if g is not None:
                    S = S * math.exp(float(g[t, h]))
                if gk is not None:
                    S = S * torch.exp(gk[t, h].double())
                d = float(beta[t, h]) * (value[t, h].double() - S @ k)
                S = S + torch.outer(d, k)
                out[t, h] = S @ (scale * q)
                S = S.to(state.dtype).double()
                if slots[t] >= 0:
                    state[int(slots[t]), h] = S.to(state.dtype)
        start += L
    return out


def _case(lengths, *, state_dtype=torch.float32, dtype=torch.float32, with_g=True, gk_form=None, accepted=False,
          padding=(), NK=2, NV=4, DK=8, DV=16, slot_b_is_row_b=False, rng=None):
    """Fresh random inputs (never zeros); ``padding`` lists the tokens whose slot is -1;
    ``slot_b_is_row_b``: token t's slot is t (the pool's spare slots follow)."""
    gen = rng or fresh_rng()
    T = sum(lengths)
    q = torch.randn(T, NK, DK, generator=gen).to(dtype)
    k = (torch.randn(T, NK, DK, generator=gen) / math.sqrt(DK)).to(dtype)
    v = torch.randn(T, NV, DV, generator=gen).to(dtype)
    beta = torch.rand(T, NV, generator=gen).to(dtype)
    pool = T + 3
    state = torch.randn(pool, NV, DV, DK, generator=gen).to(state_dtype)
    slots = torch.arange(T) if slot_b_is_row_b else torch.randperm(pool, generator=gen)[:T]
    for t in padding:
        slots[t] = -1
    g = -torch.rand(T, NV, generator=gen) if with_g else None
    gk = None
    if gk_form == "scalar":
        gk = -torch.rand(T, NV, generator=gen)
    elif gk_form == "vector":
        gk = -torch.rand(T, NV, DK, generator=gen)
    acc = None
    if accepted:
        acc = torch.tensor([1 + int(torch.randint(L, (1,), generator=gen)) if L else 1 for L in lengths])
    return dict(query=q, key=k, value=v, beta=beta, state=state, actual_seq_lengths=torch.tensor(lengths),
                ssm_state_indices=slots, g=g, gk=gk, num_accepted_tokens=acc)


def _oracle(case, *, scale=None, l2norm=False):
    """(out, final state) of the literal transcription, on a copy of the case's state."""
    state = case["state"].clone()
    DK = case["query"].shape[-1]
    out = _literal(case["query"], case["key"], case["value"], case["beta"], state,
                   case["actual_seq_lengths"].tolist(), case["ssm_state_indices"], case["g"], case["gk"],
                   case["num_accepted_tokens"], DK**-0.5 if scale is None else scale, l2norm)
    return out, state


def _run_kernel(case, *, scale=None, l2norm=False, style="lengths"):
    """The kernel users run, called as the op calls it; returns (out, final state)."""
    state = case["state"].clone()
    meta = case["actual_seq_lengths"]
    if style == "cu_seqlens":
        meta = torch.cat([torch.zeros(1, dtype=meta.dtype), meta.cumsum(0)])
    out = RefRGDR.fn(case["query"], case["key"], case["value"], case["beta"], state, meta,
                     case["ssm_state_indices"], case["g"], case["gk"], case["num_accepted_tokens"], scale, style,
                     l2norm)
    return out, state


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected.double()).norm() / expected.double().norm())


def _written(case) -> torch.Tensor:
    """Mask of the slots some token writes."""
    mask = torch.zeros(case["state"].shape[0], dtype=torch.bool)
    slots = case["ssm_state_indices"]
    mask[slots[slots >= 0]] = True
    return mask


def _assert_matches_oracle(case, **params):
    expected, expected_state = _oracle(case, scale=params.get("scale"), l2norm=params.get("l2norm", False))
    out, state = _run_kernel(case, **params)
    assert out.dtype == case["value"].dtype and out.shape == case["value"].shape and out.is_contiguous()
    out_err = _relative(out, expected)
    out_tol = max(OUT_TOL[out.dtype], STATE_TOL[state.dtype])
    assert out_err <= out_tol, f"out relative error {out_err:.3g}"
    written = _written(case)
    if written.any():
        state_err = _relative(state[written], expected_state[written])
        assert state_err <= STATE_TOL[state.dtype], f"state relative error {state_err:.3g}"
    assert torch.equal(state[~written], case["state"][~written]), "a slot no token writes changed"


ODD_CASES = {
    "variable-lengths-with-empty": dict(lengths=[3, 1, 0, 5, 2]),
    "every-sequence-empty-but-one": dict(lengths=[0, 0, 4, 0]),
    "one-token-each": dict(lengths=[1] * 6),
    "mtp-uniform": dict(lengths=[3] * 4, accepted=True),
    "mtp-variable": dict(lengths=[4, 2, 3, 1], accepted=True),
    "padding-first-token": dict(lengths=[2, 3], padding=(0,)),
    "padding-mid-sequence": dict(lengths=[3, 2], padding=(1, 3)),
    "padding-whole-decode-batch": dict(lengths=[1, 1, 1], padding=(0, 2)),
    "bf16-state": dict(lengths=[2, 3, 1], state_dtype=torch.bfloat16),
    "fp16-state-fp16-inputs": dict(lengths=[2, 2], state_dtype=torch.float16, dtype=torch.float16),
    "bf16-inputs-fp32-state": dict(lengths=[1, 1, 1, 1], dtype=torch.bfloat16),
    "scalar-gk-with-g": dict(lengths=[2, 1, 3], gk_form="scalar"),
    "vector-gk-with-g": dict(lengths=[2, 1, 3], gk_form="vector"),
    "vector-gk-only": dict(lengths=[3, 3], with_g=False, gk_form="vector"),
    "no-decay": dict(lengths=[2, 4], with_g=False),
    "no-gqa": dict(lengths=[2, 1], NK=4, NV=4),
    "gqa-4": dict(lengths=[1, 2, 1], NK=1, NV=4),
    "dk-not-16-byte-rows": dict(lengths=[2, 2], DK=6, DV=5),
    # Pools large enough for the 16-byte-element write path (and one whose rows do not allow it).
    "large-heads": dict(lengths=[1] * 5, DK=64, DV=64),
    "large-heads-bf16-state-mtp": dict(lengths=[2] * 4, state_dtype=torch.bfloat16, accepted=True, DK=64, DV=64),
    "large-heads-odd-row-bytes": dict(lengths=[1] * 5, DK=66, DV=64),
    # Plain decode with slot b = row b: the pool rows are updated in place.
    "decode-in-place": dict(lengths=[1] * 5, slot_b_is_row_b=True),
    "decode-in-place-vector-gk": dict(lengths=[1] * 3, slot_b_is_row_b=True, gk_form="vector", NK=1),
    "decode-slot-b-is-row-b-bf16-state": dict(lengths=[1] * 4, slot_b_is_row_b=True, state_dtype=torch.bfloat16),
}


@pytest.mark.parametrize("name", sorted(ODD_CASES))
@pytest.mark.parametrize("l2norm", [False, True])
def test_kernel_matches_literal_transcription_on_odd_cases(name, l2norm):
    _assert_matches_oracle(_case(**ODD_CASES[name]), l2norm=l2norm)


def test_explicit_scale_is_applied_to_the_query():
    _assert_matches_oracle(_case([2, 3]), scale=0.37)


def test_cu_seqlens_style_equals_lengths_style():
    case = _case([2, 4, 0, 1], accepted=True)
    assert all(torch.equal(a, b) for a, b in zip(_run_kernel(case), _run_kernel(case, style="cu_seqlens")))


_SPEC, _ROWS = workload_params("RecurrentGatedDeltaRuleFwdOp", "state", SMALL_POOL_BYTES)


@pytest.mark.parametrize("row_index,dtypes", _ROWS)
def test_kernel_matches_literal_transcription_on_workload_rows(row_index, dtypes):
    inst = instantiate(_SPEC, _SPEC.workloads[row_index], dtypes, rng=fresh_rng())
    i = inst.inputs
    case = dict(query=i["query"], key=i["key"], value=i["value"], beta=i["beta"], state=i["state"],
                actual_seq_lengths=i["actual_seq_lengths"], ssm_state_indices=i["ssm_state_indices"],
                g=i.get("g"), gk=i.get("gk"), num_accepted_tokens=i.get("num_accepted_tokens"))
    style = inst.op_kwargs.get("seq_lens_style", "lengths")
    if style == "cu_seqlens":  # the oracle reads lengths
        meta = case["actual_seq_lengths"]
        case["actual_seq_lengths"] = meta[1:] - meta[:-1]
    _assert_matches_oracle(case, l2norm=inst.op_kwargs.get("use_qk_l2norm_in_kernel", False), style=style)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_g,gk_form", [(False, None), (True, None), (True, "scalar"), (False, "vector")])
@pytest.mark.parametrize("accepted", [False, True])
def test_float64_reference_matches_literal_transcription(state_dtype, with_g, gk_form, accepted):
    case = _case([3, 1, 0, 5, 2], state_dtype=state_dtype, with_g=with_g, gk_form=gk_form, accepted=accepted,
                 padding=(4,))
    expected, expected_state = _oracle(case, l2norm=True)
    state = case["state"].clone()
    got = torch.empty(expected.shape, dtype=torch.float64)
    recurrent_gated_delta_rule(**{**case, "state": state}, use_qk_l2norm_in_kernel=True,
                               compute_dtype=torch.float64, out=got)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state.double(), expected_state.double(), rtol=1e-9, atol=1e-9)


def test_padding_slot_writes_nothing_and_starts_from_zero():
    case = _case([2], with_g=False, padding=(0,))
    expected, _ = _oracle(case)
    out, state = _run_kernel(case)
    assert _relative(out, expected) <= OUT_TOL[torch.float32]
    # The first token wrote nothing: only the second token's slot changed.
    changed = (state != case["state"]).flatten(1).any(1)
    assert changed.nonzero().flatten().tolist() == [int(case["ssm_state_indices"][1])]
    # Starting from zeros: the first token's output is beta * v (k.q) scale, independent of the pool.
    k, q = case["key"][0], case["query"][0]
    first = case["beta"][0, :, None] * case["value"][0] * (k * q).sum(-1).repeat_interleave(2)[:, None] * 8**-0.5
    torch.testing.assert_close(out[0], first, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_an_empty_pool_serves_sequences_of_padding_slots_from_zeros(state_dtype):
    """A pool of no slot leaves only padding (slots lie in [-1, S)): each sequence starts from zeros, as a
    padding slot does in any pool (found in review: the gather of slot 0 raised)."""
    case = _case([1, 2], state_dtype=state_dtype, with_g=True, padding=(0, 1, 2))
    expected, _ = _oracle(case)
    empty = case["state"][:0]
    out = recurrent_gated_delta_rule(**{**case, "state": empty})
    assert _relative(out, expected) <= max(OUT_TOL[torch.float32], STATE_TOL[state_dtype])


def test_one_call_of_l_tokens_equals_l_calls_of_one_token():
    """A sequence decoded in one call matches the same tokens fed one per call, chained through one slot."""
    gen = fresh_rng()
    L, NK, NV, DK, DV = 4, 1, 2, 8, 8
    q, k = torch.randn(L, NK, DK, generator=gen), torch.randn(L, NK, DK, generator=gen) / 3
    v, beta, g = torch.randn(L, NV, DV, generator=gen), torch.rand(L, NV, generator=gen), -torch.rand(L, NV, generator=gen)
    state = torch.randn(1, NV, DV, DK, generator=gen).to(torch.bfloat16)
    chained = state.clone()
    whole = recurrent_gated_delta_rule(q, k, v, beta, state, torch.tensor([L]), torch.zeros(L, dtype=torch.int64), g)
    pieces = [
        recurrent_gated_delta_rule(
            q[t : t + 1], k[t : t + 1], v[t : t + 1], beta[t : t + 1], chained,
            torch.tensor([1]), torch.zeros(1, dtype=torch.int64), g[t : t + 1],
        )
        for t in range(L)
    ]
    torch.testing.assert_close(whole, torch.cat(pieces), rtol=1e-6, atol=1e-6)
    assert torch.equal(state, chained)


def test_no_sequence_with_tokens_writes_nothing():
    case = _case([0, 0], with_g=False)
    case["ssm_state_indices"] = torch.zeros(0, dtype=torch.int64)
    out, state = _run_kernel(case)
    assert out.shape == (0, 4, 16) and torch.equal(state, case["state"])


@pytest.mark.parametrize("offset", [1, 4], ids=["unaligned", "aligned-offset"])
def test_a_pool_at_an_offset_in_its_storage_is_written_like_any_other(offset):
    # The pool write copies 16-byte elements only where the address allows it.
    case = _case([1] * 5, DK=64, DV=64)
    pool = case["state"]
    storage = torch.empty(pool.numel() + offset)
    case["state"] = storage[offset:].view(pool.shape)
    case["state"].copy_(pool)
    _assert_matches_oracle(case)


def test_a_contiguous_pool_with_an_odd_stride_on_a_size_one_axis_is_written_like_any_other():
    # is_contiguous() ignores the stride of a size-1 axis; the 16-byte view of the pool write must not
    # (found in review: NV = 1 permuted from [S, DV, DK, 1] raised "stride(1) must be divisible by 4").
    case = _case([1] * 5, NK=1, NV=1, DK=128, DV=128)
    pool = case["state"]
    odd = torch.empty(pool.shape[0], 128, 128, 1).permute(0, 3, 1, 2)
    assert odd.is_contiguous() and odd.stride(1) == 1
    case["state"] = odd.copy_(pool)
    _assert_matches_oracle(case)


def test_a_slot_past_the_pool_is_refused_before_anything_is_written():
    case = _case([3, 2])
    pool = case["state"].shape[0]
    case["ssm_state_indices"][4] = pool  # the last token of the second sequence, after four good writes
    state = case["state"].clone()
    with pytest.raises(IndexError, match=rf"ssm_state_indices \[{pool}\] lie past the state pool of {pool} slots; "
                                         "nothing was written"):
        RefRGDR.fn(case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
                   case["ssm_state_indices"], case["g"], case["gk"], case["num_accepted_tokens"], None, "lengths",
                   False)
    assert torch.equal(state, case["state"])  # not one slot overwritten
