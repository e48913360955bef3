"""The vectorised RGDR reference against a literal, token-by-token transcription of RGDR.md."""

from __future__ import annotations

import math

import pytest
import torch

from tileops_cpu_ref.rgdr import L2NORM_EPS, recurrent_gated_delta_rule


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


def _case(lengths, *, state_dtype, with_g, gk_form, accepted, padding, seed):
    gen = torch.Generator().manual_seed(seed)
    T, NK, NV, DK, DV = sum(lengths), 2, 4, 8, 16
    q = torch.randn(T, NK, DK, generator=gen)
    k = torch.randn(T, NK, DK, generator=gen) / math.sqrt(DK)
    v = torch.randn(T, NV, DV, generator=gen)
    beta = torch.rand(T, NV, generator=gen)
    S_slots = T + 3
    state = torch.randn(S_slots, NV, DV, DK, generator=gen).to(state_dtype)
    slots = torch.randperm(S_slots, generator=gen)[:T]
    if padding:
        slots[0] = -1
    g = -torch.rand(T, NV, generator=gen) if with_g else None
    gk = None
    if gk_form == "scalar":
        gk = -torch.rand(T, NV, generator=gen)
    elif gk_form == "vector":
        gk = -torch.rand(T, NV, DK, generator=gen)
    acc = None
    if accepted:
        acc = torch.tensor([1 + int(torch.randint(L, (1,), generator=gen)) if L else 1 for L in lengths])
    return q, k, v, beta, state, slots, g, gk, acc


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_g,gk_form", [(False, None), (True, None), (True, "scalar"), (False, "vector")])
@pytest.mark.parametrize("accepted", [False, True])
def test_vectorised_reference_matches_literal_transcription(state_dtype, with_g, gk_form, accepted):
    lengths = [3, 1, 0, 5, 2]
    q, k, v, beta, state, slots, g, gk, acc = _case(
        lengths, state_dtype=state_dtype, with_g=with_g, gk_form=gk_form, accepted=accepted, padding=False, seed=7
    )
    expected_state = state.clone()
    expected = _literal(q, k, v, beta, expected_state, lengths, slots, g, gk, acc, 8**-0.5, l2norm=True)
    got = torch.empty(sum(lengths), 4, 16, dtype=torch.float64)
    recurrent_gated_delta_rule(
        q, k, v, beta, state, torch.tensor(lengths), slots, g, gk, acc,
        use_qk_l2norm_in_kernel=True, compute_dtype=torch.float64, out=got,
    )
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state.double(), expected_state.double(), rtol=1e-9, atol=1e-9)


def test_cu_seqlens_style_equals_lengths_style():
    lengths = [2, 4, 1]
    case = _case(lengths, state_dtype=torch.float32, with_g=True, gk_form=None, accepted=False, padding=False, seed=3)
    q, k, v, beta, state, slots, g, gk, acc = case
    state2 = state.clone()
    a = recurrent_gated_delta_rule(q, k, v, beta, state, torch.tensor(lengths), slots, g)
    prefix = torch.tensor([0, 2, 6, 7], dtype=torch.int32)
    b = recurrent_gated_delta_rule(q, k, v, beta, state2, prefix, slots, g, seq_lens_style="cu_seqlens")
    assert torch.equal(a, b) and torch.equal(state, state2)


def test_padding_slot_writes_nothing_and_starts_from_zero():
    lengths = [2]
    q, k, v, beta, state, slots, g, gk, acc = _case(
        lengths, state_dtype=torch.float32, with_g=False, gk_form=None, accepted=False, padding=True, seed=5
    )
    before = state.clone()
    expected_state = state.clone()
    expected = _literal(q, k, v, beta, expected_state, lengths, slots, None, None, None, 8**-0.5, l2norm=False)
    got = torch.empty(2, 4, 16, dtype=torch.float64)
    recurrent_gated_delta_rule(q, k, v, beta, state, torch.tensor(lengths), slots, compute_dtype=torch.float64, out=got)
    torch.testing.assert_close(got, expected)
    untouched = torch.ones(state.shape[0], dtype=torch.bool)
    untouched[slots[1]] = False
    assert torch.equal(state[untouched], before[untouched])


def test_one_call_of_l_tokens_equals_l_calls_of_one_token():
    """A sequence decoded in one call matches the same tokens fed one per call, chained through one slot."""
    gen = torch.Generator().manual_seed(11)
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
