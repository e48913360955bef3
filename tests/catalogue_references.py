"""Float64 references for the catalogue, one small argument adapter per op.

An op whose spec names a ``ref_api`` is checked against that very function, resolved from
the spec text by attribute lookup (``torch.nn.functional.rms_norm``), called on float64
copies of the inputs. Ops whose ``ref_api`` is ``none`` use the float64 form of their
reference semantics (RGDR.md; the SSD step; the chunked prefill as the RGDR recurrence run token by
token; attention as ``F.scaled_dot_product_attention`` per sequence in float64, the cache written slot by
slot; the rotary embedding rotating one frequency at a time from HF's float32 angles). An adapter returns
the expected outputs and the expected final values of mutated inputs.

Tolerances, as ``||out - ref|| / ||ref||`` against the float64 result, by the dtype of the
tensor compared: float64 1e-10, float32 2e-5, float16 2e-3, bfloat16 1.6e-2; integer outputs (expert ids, offsets,
index maps) must be exact.
"""

from __future__ import annotations

import bisect
import importlib
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule_by_recurrence
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule
from tileops_cpu_ref.ssd import ssd_decode

__all__ = ["ERROR_SCALES", "REFERENCES", "TOLERANCE", "resolve_ref_api", "relative_error"]

TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2,
             torch.int32: 0.0, torch.int64: 0.0}


def resolve_ref_api(text: str) -> Callable[..., Any]:
    """``torch.nn.functional.rms_norm`` -> the function, by import + getattr (never eval)."""
    parts = text.split(".")
    obj: Any = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


#: Elements of ``out`` that :func:`relative_error` compares at a time: a paged decode row's caches hold a billion
#: elements, and float64 copies of both sides would not fit the 24 GiB machine ``pytest -m all_workloads`` runs on.
_CHUNK = 1 << 24


def relative_error(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """``||out - ref|| / ||ref||`` over the finite elements (``/ ||scale||`` where an op's result can
    be far smaller than what it is computed from: see :data:`ERROR_SCALES`).

    An infinity counts as exact only where the reference, rounded to ``out``'s dtype, is the
    same infinity (``1 / 0``, or a float16 result past 65504); anywhere else, and any NaN,
    makes the error infinite. Large tensors are compared a slab of leading rows at a time
    (:data:`_CHUNK`), the squared sums added up.
    """
    out, ref = out.detach().cpu(), ref.detach().cpu()
    if out.shape != ref.shape or out.ndim == 0:  # broadcast (callers check shapes first) or a scalar: at once
        terms = _squared_terms(out, ref, scale)
    else:
        wide = scale.detach().cpu().expand_as(ref) if scale is not None else None
        step = max(1, _CHUNK // max(1, math.prod(out.shape[1:])))
        terms = (0.0, 0.0)
        for at in range(0, out.shape[0], step):
            part = _squared_terms(out[at:at + step], ref[at:at + step], None if wide is None else wide[at:at + step])
            if part is None:
                return float("inf")
            terms = (terms[0] + part[0], terms[1] + part[1])
    if terms is None:
        return float("inf")
    diff, denom = math.sqrt(terms[0]), math.sqrt(terms[1])
    return diff if denom == 0 else diff / denom


def _squared_terms(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None) -> tuple[float, float] | None:
    """``(||out - ref||², ||ref||²)`` (or ``||scale||²``) over the finite elements of one slab, in float64;
    None where an element makes the error infinite (:func:`relative_error`)."""
    out64, ref64 = out.double(), ref.double()
    expected_inf = torch.isinf(ref.to(out.dtype).double())
    same_inf = torch.isinf(out64) & expected_inf & (torch.sign(out64) == torch.sign(ref64))
    if not (torch.isfinite(out64) | same_inf).all():
        return None
    keep = ~same_inf & torch.isfinite(ref64)
    base = ref64 if scale is None else scale.double().expand_as(ref64)
    return float((out64[keep] - ref64[keep]).square().sum()), float(base[keep].square().sum())


def _d(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else (t.double() if t.is_floating_point() else t)


def _rms_norm(api, i, p):
    eps = p.get("eps")
    if eps is None:
        eps = torch.finfo(i["x"].dtype).eps
    return {"output": api(_d(i["x"]), tuple(p["normalized_shape"]), _d(i.get("weight")), eps)}


def _group_norm(api, i, p):
    return {"output": api(_d(i["x"]), p["num_groups"], _d(i.get("weight")), _d(i.get("bias")), p.get("eps", 1e-5))}


def _softmax(api, i, p):
    x = i["input"]
    if p.get("dtype") is not None:
        x = x.to(getattr(torch, p["dtype"]))
    return {"output": api(x.double(), p["dim"])}


def _sum(api, i, p):
    x = _d(i["input"])
    dim, keepdim = p.get("dim"), p.get("keepdim", False)
    if dim is None:
        out = api(x)
        return {"output": out.reshape((1,) * x.dim()) if keepdim else out}
    return {"output": api(x, dim, keepdim=keepdim)}


def _sum_scale(i, p):
    """The sum of magnitudes over the reduced axes: a float sum's rounding error is bounded relative to
    it, not to the sum itself, which random signed inputs can bring arbitrarily near zero (a float32
    full sum of 32768 normal values missed 2e-5 relative to its own value, 5.4e-5, on one seed)."""
    x = _d(i["input"]).abs()
    dim, keepdim = p.get("dim"), p.get("keepdim", False)
    if dim is None:
        out = x.sum()
        return out.reshape((1,) * x.dim()) if keepdim else out
    return x.sum(dim, keepdim=keepdim)


def _reciprocal(api, i, p):
    return {"output": api(i["input"].double())}


def _silu_and_mul(api, i, p):
    gate, up = _d(i["x"]).chunk(2, dim=-1)
    return {"out": F.silu(gate) * up}


def _bmm(api, i, p):
    return {"d": api(_d(i["a"]), _d(i["b"]))}


def _gemm(api, i, p):
    a, b = _d(i["a"]), _d(i["b"])
    a = a.t() if p.get("trans_a", False) else a
    b = b.t() if p.get("trans_b", True) else b
    return {"d": api(a, b)}


def _linear(api, i, p):
    return {"output": api(_d(i["input"]), _d(i["weight"]), _d(i.get("bias")))}


def _ssd(api, i, p):
    state = i["state"].double().clone()
    y = ssd_decode(i["A"], i["dt"], i["x"], i["B_in"], i["C_in"], state, torch.float64)
    return {"y_out": y, "state": state}


def _rgdr(api, i, p):
    state = i["state"].clone()
    T, NV, DV = i["value"].shape
    out = torch.empty(T, NV, DV, dtype=torch.float64)
    recurrent_gated_delta_rule(
        i["query"], i["key"], i["value"], i["beta"], state, i["actual_seq_lengths"], i["ssm_state_indices"],
        i.get("g"), i.get("gk"), i.get("num_accepted_tokens"), scale=p.get("scale"),
        seq_lens_style=p.get("seq_lens_style", "lengths"), use_qk_l2norm_in_kernel=p.get("use_qk_l2norm_in_kernel",
                                                                                          False),
        compute_dtype=torch.float64, out=out,
    )
    return {"out": out, "state": state}


def _seq_bounds(meta: torch.Tensor, style: str) -> list[tuple[int, int]]:
    """``[(start, length), ...]`` read literally from the metadata."""
    m = meta.tolist()
    if style == "cu_seqlens":
        return [(a, b - a) for a, b in zip(m[:-1], m[1:])]
    starts = [sum(m[:b]) for b in range(len(m))]
    return list(zip(starts, m))


def _conv_sequence(x, weight, bias, activation, window, start, length, out):
    """Naive float64 causal conv of one sequence from ``window`` ([D, W - 1], oldest first); writes
    ``out`` rows and returns the window after each token."""
    W = weight.shape[1]
    after = []
    hist = [window[:, k] for k in range(W - 1)]  # per channel, oldest first
    for t in range(start, start + length):
        taps = hist + [x[t]]
        acc = torch.zeros(x.shape[1], dtype=torch.float64) if bias is None else bias.clone()
        for k in range(W):
            acc = acc + weight[:, k] * taps[k]
        out[t] = acc * torch.sigmoid(acc) if activation == "silu" else acc
        hist = taps[1:]
        after.append(torch.stack(hist, dim=1))
    return after


def _conv_update(api, i, p):
    x, weight, bias = _d(i["x"]), _d(i["weight"]), _d(i.get("bias"))
    state = i["conv_state"].double().clone()
    initial = state.clone()  # every window is read before the call writes
    slots = i["conv_state_indices"].tolist()
    accepted = None if i.get("num_accepted_tokens") is None else i["num_accepted_tokens"].tolist()
    out = torch.zeros(x.shape, dtype=torch.float64)
    for b, (start, length) in enumerate(_seq_bounds(i["actual_seq_lengths"], p.get("seq_lens_style", "lengths"))):
        if length <= 0:
            continue
        first = start + (accepted[b] - 1 if accepted is not None else 0)
        window = initial[slots[first]] if slots[first] >= 0 else torch.zeros(initial.shape[1:], dtype=torch.float64)
        after = _conv_sequence(x, weight, bias, p.get("activation"), window, start, length, out)
        for j, w in enumerate(after):
            if slots[start + j] >= 0:
                state[slots[start + j]] = w
    return {"out": out, "conv_state": state}


def _conv_varlen(api, i, p):
    x, weight, bias = _d(i["x"]), _d(i["weight"]), _d(i.get("bias"))
    state = i["conv_state"].double().clone()
    initial = state.clone()
    slots = i["conv_state_indices"].tolist()
    has_init = None if i.get("has_initial_state") is None else i["has_initial_state"].tolist()
    out = torch.zeros(x.shape, dtype=torch.float64)
    for b, (start, length) in enumerate(_seq_bounds(i["actual_seq_lengths"], p.get("seq_lens_style", "lengths"))):
        if length <= 0:
            continue
        from_slot = slots[b] >= 0 and has_init is not None and has_init[b]
        window = initial[slots[b]] if from_slot else torch.zeros(initial.shape[1:], dtype=torch.float64)
        after = _conv_sequence(x, weight, bias, p.get("activation"), window, start, length, out)
        if slots[b] >= 0:
            state[slots[b]] = after[-1]
    return {"out": out, "conv_state": state}


def _chunk_gdr(api, i, p):
    out, state = chunk_gated_delta_rule_by_recurrence(
        i["query"], i["key"], i["value"], i["g"], i["beta"], i["state"], i["cu_seqlens"], i["ssm_state_indices"],
        i.get("has_initial_state"), scale=p.get("scale"), use_qk_l2norm_in_kernel=p.get("use_qk_l2norm_in_kernel",
                                                                                       False),
    )
    return {"out": out, "state": state}


def _rms_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _zero_centred_rms_norm(api, i, p):
    return {"output": _rms_normed(_d(i["x"]), p.get("eps", 1e-6)) * (1.0 + _d(i["weight"]))}


def _fused_add_zero_centred_rms_norm(api, i, p):
    h = _d(i["x"]) + _d(i["residual"])
    return {"output": _rms_normed(h, p.get("eps", 1e-6)) * (1.0 + _d(i["weight"])), "residual": h}


def _gated_rms_norm(api, i, p):
    normed = _rms_normed(_d(i["x"]), p.get("eps", 1e-6))
    return {"output": normed * _d(i["weight"]) * F.silu(_d(i["gate"]))}


def _gdn_gating(api, i, p):
    g = -torch.exp(_d(i["A_log"])) * F.softplus(_d(i["a"]) + _d(i["dt_bias"]))
    return {"g": g, "beta": torch.sigmoid(_d(i["b"]))}


def _rope_angle(positions: torch.Tensor, i: int, p: dict) -> torch.Tensor:
    """Frequency ``i``'s angle at every token, formed in float32 as HF forms it (the spec says so)."""
    R = p["rotary_dim"]
    inv = 1.0 / (p.get("theta", 10000.0) ** (torch.arange(0, R, 2, dtype=torch.float32) / R))
    row = positions
    if p.get("rope_style", "neox") == "mrope_interleaved":
        section = p.get("mrope_section", (11, 11, 10))
        which = 1 if i % 3 == 1 and i < 3 * section[1] else 2 if i % 3 == 2 and i < 3 * section[2] else 0
        row = positions[which]
    return (row.float() * inv[i]).double()


def _qk_norm_rope(api, i, p):
    out = {}
    R, eps = p["rotary_dim"], p.get("eps", 1e-6)
    for name, weight, result in (("query", "q_weight", "query_out"), ("key", "k_weight", "key_out")):
        x = _rms_normed(_d(i[name]), eps) * (1.0 + _d(i[weight]))
        y = x.clone()
        for f in range(R // 2):
            angle = _rope_angle(i["positions"], f, p).view(-1, 1)
            a, b = x[..., f], x[..., f + R // 2]
            y[..., f] = a * torch.cos(angle) - b * torch.sin(angle)
            y[..., f + R // 2] = b * torch.cos(angle) + a * torch.sin(angle)
        out[result] = y
    return out


#: Attention scores :func:`_attend` holds at a time (float64, 1 GiB): a 16k-token prompt's whole causal score
#: matrix would take 34 GB, which SDPA's float64 path on the CPU materialises.
_SCORES = 1 << 27


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, causal: bool) -> torch.Tensor:
    """float64 SDPA of one sequence, ``[S, NQ, D]`` queries over ``[S', NKV, D]`` keys/values; a block of
    queries at a time where the scores would pass :data:`_SCORES` (causal as SDPA's ``is_causal``, aligned
    top-left: query ``i`` sees keys ``0..i``)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    qh, kh, vh = (t.double().transpose(0, 1) for t in (q, k, v))  # [NQ, S, D]
    S, Sk = qh.shape[1], kh.shape[1]
    block = max(1, _SCORES // max(1, qh.shape[0] * Sk))
    if block >= S:
        return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, scale=scale).transpose(0, 1)
    parts = []
    for s0 in range(0, S, block):
        s1 = min(S, s0 + block)
        if causal:
            mask = torch.arange(min(s1, Sk)).unsqueeze(0) <= torch.arange(s0, s1).unsqueeze(1)
            parts.append(F.scaled_dot_product_attention(qh[:, s0:s1], kh[:, :s1], vh[:, :s1], attn_mask=mask,
                                                        scale=scale))
        else:
            parts.append(F.scaled_dot_product_attention(qh[:, s0:s1], kh, vh, scale=scale))
    return torch.cat(parts, dim=1).transpose(0, 1)


def _attention_decode(api, i, p):
    """Each live sequence's key/value written at its length, then float64 attention over positions 0..n.
    The caches stay in their own dtype (the written rows are the step's keys and values, exact in it) and
    each sequence's positions are gathered at once: a float64 copy of a paged 64 x 32k row's caches would
    take 17 GB, and a position-by-position gather minutes."""
    kc, vc = i["key_cache"].clone(), i["value_cache"].clone()
    L = kc.shape[1]
    out = torch.zeros(i["query"].shape, dtype=torch.float64)
    table = i.get("block_table")
    for b, n in enumerate(i["cache_seqlens"].tolist()):
        if n < 0:
            continue
        j = torch.arange(n + 1)
        rows, cols = (torch.full_like(j, b), j) if table is None else (table[b, j // L].long(), j % L)
        kc[rows[n], cols[n]], vc[rows[n], cols[n]] = i["key"][b], i["value"][b]
        out[b] = _attend(i["query"][b : b + 1], kc[rows, cols], vc[rows, cols], p.get("scale"), False)[0]
    return {"out": out, "key_cache": kc, "value_cache": vc}


def _attention_prefill(api, i, p):
    kc, vc = i["key_cache"].double().clone(), i["value_cache"].double().clone()
    L = kc.shape[1]
    out = torch.zeros(i["query"].shape, dtype=torch.float64)
    slots = i.get("slot_mapping")
    for b, (start, length) in enumerate(_seq_bounds(i["cu_seqlens"], "cu_seqlens")):
        for j in range(length):
            t = start + j
            if slots is None:
                kc[b, j], vc[b, j] = _d(i["key"][t]), _d(i["value"][t])
            elif slots[t] >= 0:
                s = int(slots[t])
                kc[s // L, s % L], vc[s // L, s % L] = _d(i["key"][t]), _d(i["value"][t])
        if length:
            rows = slice(start, start + length)
            out[rows] = _attend(i["query"][rows], i["key"][rows], i["value"][rows], p.get("scale"), True)
    return {"out": out, "key_cache": kc, "value_cache": vc}


def _sigmoid_gate_mul(api, i, p):
    return {"output": _d(i["attn"]) * torch.sigmoid(_d(i["gate"]))}
def _moe_topk_routing(api, i, p):
    """Per token: float64 softmax, experts by descending probability then ascending id, top_k of them."""
    probs = torch.softmax(_d(i["router_logits"]), dim=-1)
    T, K = probs.shape[0], p["top_k"]
    weights, ids = torch.empty(T, K, dtype=torch.float64), torch.empty(T, K, dtype=torch.int64)
    for t in range(T):
        row = probs[t].tolist()
        chosen = sorted(range(len(row)), key=lambda e: (-row[e], e))[:K]
        w = torch.tensor([row[e] for e in chosen], dtype=torch.float64)
        weights[t] = w / w.sum() if p.get("renormalize", True) else w
        ids[t] = torch.tensor(chosen)
    return {"topk_weights": weights, "topk_ids": ids}


def _moe_rows_by_expert(ids: list[list[int]]) -> list[tuple[int, int, int]]:
    """``(e, t, k)`` of every copy in permuted order: experts ascending, copies in ``t * K + k`` order."""
    return sorted((e, t, k) for t, row in enumerate(ids) for k, e in enumerate(row))


def _moe_permute(api, i, p):
    ids, x, E = i["topk_ids"].tolist(), _d(i["hidden_states"]), p["num_experts"]
    T, K = i["topk_ids"].shape
    rows = _moe_rows_by_expert(ids)
    tokens = torch.tensor([t for _, t, _ in rows], dtype=torch.int64)
    permuted = x[tokens]
    inverse = torch.empty(T * K, dtype=torch.int64)
    inverse[torch.tensor([t * K + k for _, t, k in rows], dtype=torch.int64)] = torch.arange(len(rows))
    inverse = inverse.view(T, K)
    experts = [e for e, _, _ in rows]
    offsets = torch.tensor([bisect.bisect_left(experts, e) for e in range(E + 1)], dtype=torch.int64)
    return {"permuted": permuted, "expert_offsets": offsets, "permuted_index": inverse}


def _swiglu64(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """``x`` rows through a SwiGLU MLP whose weights are ``[out, in]``, all float64."""
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def _moe_grouped_experts(api, i, p):
    """Expert by expert (weights converted one expert at a time: a real-size bank is gigabytes)."""
    x, w_gu, w_down = _d(i["hidden_states"]), i["gate_up_proj"], i["down_proj"]
    offsets, I = i["expert_offsets"].tolist(), w_down.shape[2]
    out = torch.empty(x.shape, dtype=torch.float64)
    for e in range(w_gu.shape[0]):
        lo, hi = offsets[e], offsets[e + 1]
        if hi > lo:
            gu = w_gu[e].double()
            out[lo:hi] = _swiglu64(x[lo:hi], gu[:I], gu[I:], w_down[e].double())
    return {"out": out}


def _moe_shared_expert(api, i, p):
    x = _d(i["x"])
    flat = x.reshape(-1, x.shape[-1])
    out = _swiglu64(flat, _d(i["gate_proj"]), _d(i["up_proj"]), _d(i["down_proj"]))
    if i.get("expert_gate") is not None:
        # The gate logit rounded to x's dtype, as the spec (and HF's Linear) rounds it: the sigmoid
        # turns the logit's absolute error into the output's relative one, and with unit-variance
        # data |logit| ~ sqrt(H) = 45 at H = 2048, where one bfloat16 rounding of it moves the output
        # by up to 0.1 relative (an H200 run failed a decode row at 0.11 against an unrounded logit).
        logit = (flat @ _d(i["expert_gate"]).T).to(i["x"].dtype).double()
        out = out * torch.sigmoid(logit)
    return {"out": out.reshape(x.shape)}


def _moe_unpermute(api, i, p):
    y, index, w = _d(i["expert_output"]), i["permuted_index"].tolist(), _d(i["topk_weights"])
    shared = _d(i.get("shared_output"))
    out = torch.zeros(len(index), y.shape[1], dtype=torch.float64)
    for t, rows in enumerate(index):
        out[t] = shared[t] if shared is not None else 0.0
        for k, r in enumerate(rows):
            out[t] += w[t, k] * y[r]
    return {"out": out}


#: op name -> adapter(ref_api_function_or_None, inputs, params) -> {name: expected tensor}
#: op -> ``(inputs, params) -> tensor``: what an output's error is measured against where that is not
#: the reference output itself (``relative_error``'s ``scale``).
ERROR_SCALES: dict[str, Callable[[dict[str, torch.Tensor], dict[str, Any]], torch.Tensor]] = {
    "SumFwdOp": _sum_scale,
}

REFERENCES: dict[str, Callable[..., dict[str, torch.Tensor]]] = {
    "RMSNormFwdOp": _rms_norm,
    "GroupNormFwdOp": _group_norm,
    "SoftmaxFwdOp": _softmax,
    "SumFwdOp": _sum,
    "ReciprocalFwdOp": _reciprocal,
    "SiluAndMulFwdOp": _silu_and_mul,
    "BmmFwdOp": _bmm,
    "GemmFwdOp": _gemm,
    "LinearFwdOp": _linear,
    "SSDDecodeFwdOp": _ssd,
    "RecurrentGatedDeltaRuleFwdOp": _rgdr,
    "CausalConv1dUpdateFwdOp": _conv_update,
    "CausalConv1dVarlenFwdOp": _conv_varlen,
    "ChunkGatedDeltaRuleFwdOp": _chunk_gdr,
    "ZeroCentredRMSNormFwdOp": _zero_centred_rms_norm,
    "FusedAddZeroCentredRMSNormFwdOp": _fused_add_zero_centred_rms_norm,
    "GatedRMSNormFwdOp": _gated_rms_norm,
    "GDNGatingFwdOp": _gdn_gating,
    "QKNormRopeFwdOp": _qk_norm_rope,
    "AttentionDecodeFwdOp": _attention_decode,
    "AttentionPrefillFwdOp": _attention_prefill,
    "SigmoidGateMulFwdOp": _sigmoid_gate_mul,
    "MoETopKRoutingFwdOp": _moe_topk_routing,
    "MoEPermuteFwdOp": _moe_permute,
    "MoEGroupedExpertsFwdOp": _moe_grouped_experts,
    "MoESharedExpertFwdOp": _moe_shared_expert,
    "MoEUnpermuteFwdOp": _moe_unpermute,
}
