"""Review 3: the reference kernels against float64 statements written here, one plain loop each,
read from the specs (``manifest/*.yaml``, RGDR.md), on the edges a serving system produces.

Every oracle below is written from the spec's text, not from another module: per sequence, per
token, per head, in float64. Inputs are fresh random values (never zeros); outputs that come as
``out=`` buffers are poisoned with NaN first, fresh ones are checked for NaN; pool slots that no
token addresses must keep their bits.
"""

from __future__ import annotations

import math

import pytest
import torch

from cpu_ref_rows import fresh_rng
from review3_common import TOL, rel, spans_of
from tileops_core.ops.conv import CausalConv1dUpdateFwdOp, CausalConv1dVarlenFwdOp
from tileops_cpu_ref.conv import causal_conv1d_update, causal_conv1d_varlen

def _live_sequences(spans, slots, accepted):
    """``(start, length, initial slot)`` of each sequence with tokens: the slot of its first accepted
    token (the count clipped to ``[1, L_b]``, as the spec clips unchecked counts)."""
    for b, (s, n) in enumerate(spans):
        if n > 0:
            a = 1 if accepted is None else min(max(accepted[b], 1), n)
            yield s, n, slots[s + a - 1]


# -- causal conv1d ---------------------------------------------------------------------------------


def _conv_token(x, weight, bias, activation, window, t):
    """out[t] from ``window`` ([D, W], oldest first) in float64, bias and SiLU included."""
    acc = torch.zeros(x.shape[1], dtype=torch.float64) if bias is None else bias.double().clone()
    for k in range(weight.shape[1]):
        acc += weight[:, k].double() * window[:, k]
    return acc * torch.sigmoid(acc) if activation == "silu" else acc


def _conv_tokens(x, weight, bias, activation, hist, s, n, out):
    """Tokens ``s .. s + n - 1`` of one sequence from window ``hist`` ([D, W - 1]): writes their ``out``
    rows and returns the window after each token."""
    after = []
    for t in range(s, s + n):
        window = torch.cat((hist, x[t].double().unsqueeze(1)), dim=1)
        out[t] = _conv_token(x, weight, bias, activation, window, t)
        hist = window[:, 1:]
        after.append(hist)
    return after


def _conv_update_oracle(x, state, weight, bias, spans, slots, accepted, activation):
    """manifest/conv.yaml, CausalConv1dUpdateFwdOp: per sequence, the window of its first accepted
    token's slot (zeros where padding), then each token writes the window after it to its slot."""
    pool, initial = state.double().clone(), state.double().clone()
    out = torch.zeros(x.shape, dtype=torch.float64)
    for s, n, first in _live_sequences(spans, slots, accepted):
        hist = initial[first].clone() if first >= 0 else torch.zeros(initial.shape[1:], dtype=torch.float64)
        for t, after in zip(range(s, s + n), _conv_tokens(x, weight, bias, activation, hist, s, n, out)):
            if slots[t] >= 0:
                pool[slots[t]] = after
    return out, pool


def _conv_varlen_oracle(x, state, weight, bias, spans, slots, has_init, activation):
    """manifest/conv.yaml, CausalConv1dVarlenFwdOp: each non-empty sequence from its slot's window
    where has_initial_state (zeros otherwise), writing its final window to its slot."""
    pool, initial = state.double().clone(), state.double().clone()
    out = torch.zeros(x.shape, dtype=torch.float64)
    for b, (s, n) in enumerate(spans):
        if n == 0:
            continue
        use = slots[b] >= 0 and has_init is not None and has_init[b]
        hist = initial[slots[b]].clone() if use else torch.zeros(initial.shape[1:], dtype=torch.float64)
        final = _conv_tokens(x, weight, bias, activation, hist, s, n, out)[-1]
        if slots[b] >= 0:
            pool[slots[b]] = final
    return out, pool


def _conv_inputs(T, n_slots, pool, *, D=16, W=4, dtype=torch.float32, gen):
    return dict(x=torch.randn(T, D, generator=gen).to(dtype),
                conv_state=torch.randn(pool, D, W - 1, generator=gen).to(dtype),
                weight=torch.randn(D, W, generator=gen).to(dtype), bias=torch.randn(D, generator=gen).to(dtype),
                conv_state_indices=torch.randperm(pool, generator=gen)[:n_slots])


def _check_conv(op_name, inputs, meta, style, extra, activation="silu"):
    """Run the reference (out= poisoned with NaN) and compare with the oracle: out within the dtype's
    tolerance, every pool slot bit for bit against the oracle's rounding (windows are copies)."""
    x, state = inputs["x"], inputs["conv_state"]
    T = x.shape[0]
    spans = spans_of(meta, style, T)
    slots = inputs["conv_state_indices"].tolist()
    pool = state.clone()
    out = torch.full_like(x, float("nan"))
    meta_t = torch.tensor(meta, dtype=torch.int64)
    if op_name == "update":
        accepted = extra
        got = causal_conv1d_update(x, pool, inputs["weight"], meta_t, inputs["conv_state_indices"], inputs["bias"],
                                   None if accepted is None else torch.tensor(accepted), activation=activation,
                                   seq_lens_style=style, out=out)
        want, want_pool = _conv_update_oracle(x, state, inputs["weight"], inputs["bias"], spans, slots, accepted,
                                              activation)
    else:
        has_init = extra
        got = causal_conv1d_varlen(x, pool, inputs["weight"], meta_t, inputs["conv_state_indices"],
                                   None if has_init is None else torch.tensor(has_init), inputs["bias"],
                                   activation=activation, seq_lens_style=style, out=out)
        want, want_pool = _conv_varlen_oracle(x, state, inputs["weight"], inputs["bias"], spans, slots, has_init,
                                              activation)
    assert not got.isnan().any()
    assert rel(got, want) <= TOL[x.dtype]
    assert torch.equal(pool, want_pool.to(state.dtype))
    return got, pool


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("meta_lengths", [[2, 5], [3, -1, 2], [0, 9]], ids=["past-T", "negative", "one-past-T"])
def test_conv_update_with_unchecked_lengths_past_t_follows_the_rgdr_rule(style, meta_lengths):
    """Lengths running past T (contents checks off, as in serving) are clipped as RGDR clips them:
    the call writes what its covered tokens write and never raises (it raised ValueError, writing
    nothing)."""
    gen = fresh_rng()
    T = 4
    inputs = _conv_inputs(T, T, T + 3, gen=gen)
    meta = meta_lengths if style == "lengths" else [0, *torch.tensor(meta_lengths).cumsum(0).tolist()]
    _check_conv("update", inputs, meta, style, [1] * len(meta_lengths))


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("meta_lengths", [[2, 5], [3, -1, 2], [0, 9]], ids=["past-T", "negative", "one-past-T"])
def test_conv_varlen_with_unchecked_lengths_past_t_follows_the_rgdr_rule(style, meta_lengths):
    gen = fresh_rng()
    T = 4
    inputs = _conv_inputs(T, len(meta_lengths), len(meta_lengths) + 2, gen=gen)
    meta = meta_lengths if style == "lengths" else [0, *torch.tensor(meta_lengths).cumsum(0).tolist()]
    _check_conv("varlen", inputs, meta, style, [True] * len(meta_lengths))


@pytest.mark.parametrize("op_cls,n_slots", [(CausalConv1dUpdateFwdOp, 5), (CausalConv1dVarlenFwdOp, 2)],
                         ids=["update", "varlen"])
def test_conv_op_without_contents_checks_serves_lengths_past_t(op_cls, n_slots, monkeypatch):
    """Through the op, contents checks off (serving): no bare ValueError; the uncovered tail is zeros."""
    monkeypatch.delenv("TILEOPS_CHECK_CONTENTS", raising=False)
    gen = fresh_rng()
    inputs = _conv_inputs(5, n_slots, 7, gen=gen)
    inputs["actual_seq_lengths"] = torch.tensor([1, 1] if op_cls is CausalConv1dVarlenFwdOp else [1] * 5)
    inputs["actual_seq_lengths"][-1] = 9
    out = op_cls(activation="silu", check_contents=False)(**inputs)
    assert not out.isnan().any()
    if op_cls is CausalConv1dVarlenFwdOp:
        assert out[1:].abs().sum() > 0  # the second sequence, clipped to tokens [1, 5), is computed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_conv_update_ragged_padding_and_accepted_edges_match_the_loop(dtype, style):
    """Zero-length sequences, a padded first slot, accepted counts 1 and L_b, a tail no sequence
    covers; spare pool slots keep their bits."""
    gen = fresh_rng()
    lengths = [3, 0, 1, 4, 2]
    T = sum(lengths) + 2  # two uncovered tokens at the end
    inputs = _conv_inputs(T, T, T + 4, dtype=dtype, gen=gen)
    inputs["conv_state_indices"][[4, 7]] = -1  # sequence 3's first slot (accepted 1) and a later token
    meta = lengths if style == "lengths" else [0, *torch.tensor(lengths).cumsum(0).tolist()]
    got, _ = _check_conv("update", inputs, meta, style, [1, 5, 1, 1, 2])
    assert torch.equal(got[-2:], torch.zeros_like(got[-2:]))
    _check_conv("update", inputs, meta, style, [3, 1, 1, 4, 2])


@pytest.mark.parametrize("accepted", [None, [1, 1]])
def test_conv_update_where_every_slot_is_padding_writes_outputs_and_no_slot(accepted):
    gen = fresh_rng()
    inputs = _conv_inputs(4, 4, 3, gen=gen)
    inputs["conv_state_indices"] = torch.full((4,), -1)
    _check_conv("update", inputs, [2, 2], "lengths", accepted)


def test_conv_update_one_sequence_covering_all_tokens_and_uniform_mtp():
    gen = fresh_rng()
    inputs = _conv_inputs(6, 6, 9, W=3, gen=gen)
    _check_conv("update", inputs, [6], "lengths", [4])
    _check_conv("update", inputs, [2, 2, 2], "lengths", [2, 1, 2])


@pytest.mark.parametrize("op_name", ["update", "varlen"])
def test_conv_empty_batches(op_name):
    gen = fresh_rng()
    for T, meta in ((0, []), (0, [0, 0]), (3, [])):
        inputs = _conv_inputs(T, T if op_name == "update" else len(meta), 4, gen=gen)
        extra = ([1] * len(meta)) if op_name == "update" else [True] * len(meta)
        _check_conv(op_name, inputs, meta, "lengths", extra)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_conv_varlen_short_sequences_padding_and_repeated_slot_of_an_empty_sequence(dtype):
    """Sequences shorter than W - 1 keep part of their initial window; an empty sequence names the
    same slot as a live one (allowed: it writes nothing); a padding slot writes nothing."""
    gen = fresh_rng()
    lengths = [1, 0, 6, 2, 1]
    inputs = _conv_inputs(sum(lengths), 5, 8, dtype=dtype, gen=gen)
    inputs["conv_state_indices"][1] = inputs["conv_state_indices"][0]
    inputs["conv_state_indices"][3] = -1
    _check_conv("varlen", inputs, lengths, "lengths", [True, True, False, True, True])
    _check_conv("varlen", inputs, [0, *torch.tensor(lengths).cumsum(0).tolist()], "cu_seqlens", None)
    long = [1, 1, 30]  # padded rows would more than double the tokens: the token-table road
    inputs = _conv_inputs(sum(long), 3, 5, dtype=dtype, gen=gen)
    _check_conv("varlen", inputs, long, "lengths", [True, False, True])


# -- RecurrentGatedDeltaRule ----------------------------------------------------------------------


def _rgdr_oracle(q, k, v, beta, state, spans, slots, g=None, gk=None, accepted=None, scale=None, l2=False,
                 requant=True):
    """RGDR.md's semantics, one sequence, head and token at a time, float64 (re-quantised to the
    state's dtype after every token, as the spec says)."""
    T, NK, DK = q.shape
    NV, DV = v.shape[1:]
    grp = NV // NK
    scale = DK**-0.5 if scale is None else scale
    pool, initial = state.clone(), state.double().clone()
    out = torch.zeros(v.shape, dtype=torch.float64)
    for s, n, first in _live_sequences(spans, slots, accepted):
        for h in range(NV):
            S = initial[first, h].clone() if first >= 0 else torch.zeros(DV, DK, dtype=torch.float64)
            for t in range(s, s + n):
                qt, kt = q[t, h // grp].double(), k[t, h // grp].double()
                if l2:
                    qt = qt / torch.sqrt((qt * qt).sum() + 1e-6)
                    kt = kt / torch.sqrt((kt * kt).sum() + 1e-6)
                if g is not None:
                    S = S * math.exp(float(g[t, h]))
                if gk is not None:
                    S = S * torch.exp(gk[t, h].double())  # a scalar, or one factor per key column
                d = float(beta[t, h]) * (v[t, h].double() - S @ kt)
                S = S + torch.outer(d, kt)
                out[t, h] = S @ (scale * qt)
                if requant:
                    S = S.to(state.dtype).double()
                if slots[t] >= 0:
                    pool[slots[t], h] = S.to(state.dtype)
    return out, pool


def _rgdr_inputs(T, pool, *, NK=2, NV=4, DK=8, DV=8, dtype=torch.float32, state_dtype=torch.float32, gen):
    return dict(query=torch.randn(T, NK, DK, generator=gen).to(dtype), key=torch.randn(T, NK, DK, generator=gen).to(dtype),
                value=torch.randn(T, NV, DV, generator=gen).to(dtype),
                beta=torch.rand(T, NV, generator=gen).add(0.05).to(dtype),
                state=torch.randn(pool, NV, DV, DK, generator=gen).mul(0.3).to(state_dtype),
                g=-torch.rand(T, NV, generator=gen), gk_scalar=-torch.rand(T, NV, generator=gen) * 0.5,
                gk_vector=-torch.rand(T, NV, DK, generator=gen) * 0.5)


def _check_rgdr(inp, meta, style, slots, *, gate="g", accepted=None, l2=False):
    from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

    T = inp["query"].shape[0]
    spans = spans_of(meta, style, T)
    g = inp["g"] if gate in ("g", "g+gk", "g+gkv") else None
    gk = {"gk": inp["gk_scalar"], "g+gk": inp["gk_scalar"], "gkv": inp["gk_vector"],
          "g+gkv": inp["gk_vector"]}.get(gate)
    pool = inp["state"].clone()
    out = torch.full(inp["value"].shape, float("nan"), dtype=inp["value"].dtype)
    got = recurrent_gated_delta_rule(inp["query"], inp["key"], inp["value"], inp["beta"], pool, torch.tensor(meta),
                                     torch.tensor(slots), g, gk, None if accepted is None else torch.tensor(accepted),
                                     seq_lens_style=style, use_qk_l2norm_in_kernel=l2, out=out)
    want, want_pool = _rgdr_oracle(inp["query"], inp["key"], inp["value"], inp["beta"], inp["state"], spans, slots,
                                   g, gk, accepted, l2=l2)
    assert not got.isnan().any()
    tol = max(TOL[inp["value"].dtype], TOL[inp["state"].dtype])
    assert rel(got, want) <= tol * 4
    addressed = {slots[t] for a, n in spans for t in range(a, a + n) if slots[t] >= 0}
    for s in range(pool.shape[0]):
        if s not in addressed:
            assert torch.equal(pool[s], inp["state"][s]), f"slot {s} not addressed but changed"
    assert rel(pool, want_pool) <= tol * 4
    return got, pool


@pytest.mark.parametrize("gate", ["g", "gk", "gkv", "g+gk", "g+gkv", None])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_rgdr_ragged_mtp_padding_and_gates_match_the_loop(gate, style):
    gen = fresh_rng()
    lengths = [3, 0, 1, 4, 2]
    T = sum(lengths) + 1
    inp = _rgdr_inputs(T, T + 3, gen=gen)
    slots = torch.randperm(T + 3, generator=gen)[:T].tolist()
    slots[4] = -1  # sequence 3's first token
    meta = lengths if style == "lengths" else [0, *torch.tensor(lengths).cumsum(0).tolist()]
    got, _ = _check_rgdr(inp, meta, style, slots, gate=gate, accepted=[1, 3, 1, 1, 2], l2=gate is None)
    assert torch.equal(got[-1], torch.zeros_like(got[-1]))
    _check_rgdr(inp, meta, style, slots, gate=gate, accepted=[3, 1, 1, 4, 1])


@pytest.mark.parametrize("dtype,state_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                               (torch.bfloat16, torch.float32)])
def test_rgdr_low_precision_state_requantised_per_token(dtype, state_dtype):
    gen = fresh_rng()
    inp = _rgdr_inputs(6, 8, dtype=dtype, state_dtype=state_dtype, gen=gen)
    _check_rgdr(inp, [6], "lengths", list(range(6)), gate="g+gkv", accepted=[1])
    _check_rgdr(inp, [2, 2, 2], "lengths", [0, 1, 2, 3, -1, 5], gate="g", accepted=[2, 1, 2])


def test_rgdr_every_slot_padding_unchecked_lengths_and_empty_batches():
    gen = fresh_rng()
    inp = _rgdr_inputs(4, 3, gen=gen)
    _check_rgdr(inp, [2, 2], "lengths", [-1] * 4)
    _check_rgdr(inp, [2, 5], "lengths", [0, 1, 2, -1], accepted=[1, 2])
    _check_rgdr(inp, [0, 3, 9], "cu_seqlens", [2, 1, 0, -1])
    _check_rgdr(inp, [3, -1, 4], "lengths", [0, 2, 1, -1])
    _check_rgdr(inp, [], "lengths", [0, 1, 2, -1])
    _check_rgdr(_rgdr_inputs(0, 3, gen=gen), [], "lengths", [])
    _check_rgdr(_rgdr_inputs(0, 3, gen=gen), [0, 0], "cu_seqlens", [])


def test_rgdr_one_slot_for_every_token_of_a_sequence_keeps_the_last_state():
    """vLLM without per-token slots: every token of a sequence names one slot; the last write wins."""
    gen = fresh_rng()
    inp = _rgdr_inputs(5, 4, gen=gen)
    _check_rgdr(inp, [3, 2], "lengths", [2, 2, 2, 0, 0], gate="gkv", accepted=[3, 1])


def test_rgdr_largest_head_counts_with_tiny_dims():
    gen = fresh_rng()
    inp = _rgdr_inputs(4, 5, NK=16, NV=32, DK=2, DV=1, gen=gen)
    _check_rgdr(inp, [1, 1, 1, 1], "lengths", [4, 0, 3, 1], gate="g+gk")
    _check_rgdr(inp, [2, 2], "lengths", [4, 0, 3, 1], gate="g", accepted=[2, 1])


# -- QKNormRope -----------------------------------------------------------------------------------


def _qk_norm_rope_oracle(x, w, pos, R, theta, eps, style, section):
    """Zero-centred RMSNorm per head then rotary on the first R channels (NeoX halves), in float64
    (the spec's roundings are HF's; compared at the dtype's tolerance)."""
    T, H, D = x.shape
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(T):
        for h in range(H):
            xv = x[t, h].double()
            y = xv / math.sqrt(float((xv * xv).mean()) + eps) * (1 + w.double())
            r = y.clone()
            for i in range(R // 2):
                if style == "neox":
                    p = int(pos[t])
                else:
                    row = 1 if (i % 3 == 1 and i < 3 * section[1]) else 2 if (i % 3 == 2 and i < 3 * section[2]) else 0
                    p = int(pos[row, t])
                ang = p * (1.0 / theta ** (2 * i / R))
                a, b = y[i], y[i + R // 2]
                r[i] = a * math.cos(ang) - b * math.sin(ang)
                r[i + R // 2] = b * math.cos(ang) + a * math.sin(ang)
            out[t, h] = r
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("style,R,section", [("neox", 4, (0, 0, 0)), ("neox", 8, (0, 0, 0)),
                                             ("mrope_interleaved", 8, (2, 1, 1)),
                                             ("mrope_interleaved", 6, (11, 11, 10))])
def test_qk_norm_rope_matches_the_loop(dtype, style, R, section):
    from tileops_cpu_ref.attention import qk_norm_rope

    gen = fresh_rng()
    T, NQ, NKV, D = 5, 16, 2, 8
    q, k = torch.randn(T, NQ, D, generator=gen).to(dtype), torch.randn(T, NKV, D, generator=gen).to(dtype)
    qw, kw = torch.randn(D, generator=gen).to(dtype), torch.randn(D, generator=gen).to(dtype)
    pos = torch.randint(0, 50, (T,) if style == "neox" else (3, T), generator=gen)
    qo, ko = qk_norm_rope(q, k, qw, kw, pos, R, 1000.0, 1e-6, style, section)
    tol = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    assert rel(qo, _qk_norm_rope_oracle(q, qw, pos, R, 1000.0, 1e-6, style, section)) <= tol
    assert rel(ko, _qk_norm_rope_oracle(k, kw, pos, R, 1000.0, 1e-6, style, section)) <= tol
    e0, e1 = qk_norm_rope(q[:0], k[:0], qw, kw, pos[..., :0], R, 1000.0, 1e-6, style, section)
    assert e0.shape == (0, NQ, D) and e1.shape == (0, NKV, D)


# -- norms and gating -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_norms_and_gdn_gating_match_the_loop(dtype):
    from tileops_cpu_ref.gated_delta_net import (fused_add_zero_centred_rms_norm, gated_rms_norm, gdn_gating,
                                                 zero_centred_rms_norm)

    gen = fresh_rng()
    tol = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dtype]
    x, r, gate = (torch.randn(3, 4, 16, generator=gen).to(dtype) for _ in range(3))
    w = torch.randn(16, generator=gen).to(dtype)

    def norm(v):
        v = v.double()
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-6)

    assert rel(zero_centred_rms_norm(x, w, 1e-6), norm(x) * (1 + w.double())) <= tol
    res = r.clone()
    got = fused_add_zero_centred_rms_norm(x, res, w, 1e-6)
    assert torch.equal(res, x + r)
    assert rel(got, norm(x + r) * (1 + w.double())) <= tol
    g = gate.double()
    assert rel(gated_rms_norm(x, gate, w, 1e-6), w.double() * norm(x) * g * torch.sigmoid(g)) <= tol * 2
    a, b = torch.randn(5, 32, generator=gen).mul(8).to(dtype), torch.randn(5, 32, generator=gen).to(dtype)
    A_log, dt_bias = torch.randn(32, generator=gen).to(dtype), torch.randn(32, generator=gen).to(dtype)
    g_out, beta = gdn_gating(a, b, A_log, dt_bias)
    z = a.double() + dt_bias.double()
    softplus = torch.where(z > 20, z, torch.log1p(torch.exp(z)))
    assert g_out.dtype == torch.float32 and beta.dtype == dtype
    assert rel(g_out, -torch.exp(A_log.double()) * softplus) <= 2e-6
    assert rel(beta, torch.sigmoid(b.double())) <= tol
    e = gdn_gating(a[:0], b[:0], A_log, dt_bias)
    assert e[0].shape == (0, 32) and e[1].shape == (0, 32)


# -- MoE ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [0, 1, 7])
def test_moe_block_matches_the_loop(dtype, T):
    """Routing, permute (stable order, empty experts), grouped SwiGLU experts and un-permute, each
    against a loop over tokens and copies in float64."""
    from tileops_cpu_ref.moe import moe_grouped_experts, moe_permute, moe_topk_routing, moe_unpermute

    gen = fresh_rng()
    E, K, H, I = 6, 3, 8, 4
    tol = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}[dtype]
    logits = torch.randn(T, E, generator=gen).to(dtype)
    if T:
        logits[0, 1] = logits[0, 4] = logits[0].max() + 1  # a tie: the lower id first
    weights, ids = moe_topk_routing(logits, K, True)
    for t in range(T):
        p = torch.softmax(logits[t].double(), 0)
        order = sorted(range(E), key=lambda e: (-float(torch.softmax(logits[t].float(), 0)[e]), e))[:K]
        assert ids[t].tolist() == order
        assert rel(weights[t], p[order] / p[order].sum()) <= tol
    x = torch.randn(T, H, generator=gen).to(dtype)
    permuted, offsets, index = moe_permute(x, ids, E)
    copies = sorted(range(T * K), key=lambda c: (int(ids.view(-1)[c]), c))
    assert offsets.tolist() == [sum(1 for c in copies if int(ids.view(-1)[c]) < e) for e in range(E + 1)]
    for r, c in enumerate(copies):
        assert int(index.view(-1)[c]) == r and torch.equal(permuted[r], x[c // K])
    gate_up = torch.randn(E, 2 * I, H, generator=gen).to(dtype)
    down = torch.randn(E, H, I, generator=gen).to(dtype)
    expert_out = moe_grouped_experts(permuted, offsets, gate_up, down)
    want = torch.zeros(T * K, H, dtype=torch.float64)
    for r, c in enumerate(copies):
        e = int(ids.view(-1)[c])
        gu = gate_up[e].double() @ permuted[r].double()
        gg, uu = gu[:I], gu[I:]
        want[r] = down[e].double() @ (gg * torch.sigmoid(gg) * uu)
    assert not expert_out.isnan().any() and rel(expert_out, want) <= tol * 2
    shared = torch.randn(T, H, generator=gen).to(dtype)
    y = moe_unpermute(expert_out, index, weights, shared)
    want_y = shared.double().clone()
    for t in range(T):
        for k in range(K):
            want_y[t] += weights[t, k].double() * expert_out[int(index[t, k])].double()
    assert rel(y, want_y) <= tol


# -- ChunkGatedDeltaRule --------------------------------------------------------------------------


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lengths,tail", [([70, 0, 3, 1, 65], 0), ([5], 2), ([0, 0], 3), ([], 0)],
                         ids=["ragged", "one-seq-tail", "all-empty", "B=0"])
def test_chunk_gdr_matches_the_token_loop(state_dtype, lengths, tail):
    """Each sequence from its slot where has_initial_state (zeros otherwise or where padding), its
    final state written once, rounded once; uncovered tokens zeros; other slots keep their bits."""
    from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule

    gen = fresh_rng()
    T, B = sum(lengths) + tail, len(lengths)
    inp = _rgdr_inputs(T, B + 3, state_dtype=state_dtype, gen=gen)
    slots = torch.randperm(B + 3, generator=gen)[:B].tolist()
    if B >= 3:
        slots[2] = -1
    has = [b % 2 == 0 for b in range(B)]
    cu = [0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()]
    pool = inp["state"].clone()
    out = torch.full(inp["value"].shape, float("nan"))
    chunk_gated_delta_rule(inp["query"], inp["key"], inp["value"], inp["g"], inp["beta"], pool, torch.tensor(cu),
                           torch.tensor(slots, dtype=torch.int64), torch.tensor(has, dtype=torch.bool), out=out)
    # the oracle: per-token slots (the sequence's slot on each token), initial state zero where not has
    start = inp["state"].clone()
    for b, sl in enumerate(slots):
        if sl >= 0 and not has[b]:
            start[sl] = 0
    tok_slots = [slots[b] for b in range(B) for _ in range(lengths[b])] + [-1] * tail
    want, want_pool = _rgdr_oracle(inp["query"], inp["key"], inp["value"], inp["beta"], start,
                                   spans_of(cu, "cu_seqlens", T), tok_slots, inp["g"], requant=False)
    assert not out.isnan().any()
    assert rel(out, want) <= 1e-5
    for s in range(pool.shape[0]):
        written = any(sl == s and lengths[b] > 0 for b, sl in enumerate(slots))
        if written:
            assert rel(pool[s], want_pool[s]) <= max(1e-5, TOL[state_dtype])
        else:
            assert torch.equal(pool[s], inp["state"][s])
