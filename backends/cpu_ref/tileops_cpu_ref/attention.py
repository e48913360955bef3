"""Full attention of a hybrid model on the reference backend (QKNormRopeFwdOp,
AttentionDecodeFwdOp, AttentionPrefillFwdOp, SigmoidGateMulFwdOp).

The norm, the rotary embedding and the gate are HF's own expressions (``Qwen3NextRMSNorm``,
``Qwen3NextRotaryEmbedding`` / ``Qwen3_5TextRotaryEmbedding``, ``apply_rotary_pos_emb``,
``attn_output * torch.sigmoid(gate)``) evaluated in the input dtype where HF evaluates them in
it, so a model patched with these kernels gives HF's bits. Attention is
``F.scaled_dot_product_attention`` on float32 copies (grouped query heads through
``enable_gqa``), rounded once: the decode step over all sequences in one call with a mask of
each one's length (on a contiguous cache whose rows are the live sequences, over slices of the
cache, no gather), the prefill once per distinct prompt length (``is_causal``), so a batch of
equal prompts is one call. Metadata is read on the host; a sequence or slot outside the cache
raises before anything is written (the ops' contents checks name it first when enabled).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Sequence

import torch
import torch.nn.functional as F

from .constants import constant
from .gated_delta_net import zero_centred_rms_norm
from .rgdr import clipped_bounds

__all__ = ["qk_norm_rope", "attention_decode", "attention_prefill", "sigmoid_gate_mul", "rope_angles", "rope_tables"]

_ACC = torch.float32
#: Cache elements a decode step gathers at a time (a group of sequences' keys, and as many values): 64 Mi,
#: 256 MiB of float32 each.
_GATHERED = 1 << 26


@functools.lru_cache(maxsize=64)
def _inv_freq(rotary_dim: int, theta: float) -> torch.Tensor:
    """HF's float32 ``inv_freq`` (``1 / theta^(2i / rotary_dim)``), made once per size and base
    (shared: never write to it)."""
    with torch.inference_mode(False):
        return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))


def rope_angles(positions: torch.Tensor, rotary_dim: int, theta: float, rope_style: str,
                mrope_section: Sequence[int]) -> torch.Tensor:
    """``[T, rotary_dim / 2]`` float32 angles, formed as HF forms them (float32 inv_freq and product).

    Interleaved MRoPE takes frequency ``i``'s position from row 1 where ``i % 3 == 1`` and
    ``i < 3 · section[1]``, from row 2 where ``i % 3 == 2`` and ``i < 3 · section[2]``, else row 0.
    """
    freqs = positions.to("cpu").float().unsqueeze(-1) * _inv_freq(rotary_dim, theta)  # [T, R/2] or [3, T, R/2]
    if rope_style == "neox":
        return freqs
    if rope_style != "mrope_interleaved":
        raise ValueError(f"rope_style must be 'neox' or 'mrope_interleaved', got {rope_style!r}")
    row = _mrope_rows(rotary_dim, tuple(mrope_section))
    return freqs.gather(0, row.view(1, 1, -1).expand(1, *freqs.shape[1:]))[0]


@functools.lru_cache(maxsize=64)
def _mrope_rows(rotary_dim: int, mrope_section: tuple[int, ...]) -> torch.Tensor:
    """Which position row (0, 1, 2) each frequency of interleaved MRoPE takes (:func:`rope_angles`),
    made once per size and sections (shared: never write to it)."""
    with torch.inference_mode(False):
        i = torch.arange(rotary_dim // 2)
        row = torch.zeros_like(i)
        row[(i % 3 == 1) & (i < 3 * mrope_section[1])] = 1
        row[(i % 3 == 2) & (i < 3 * mrope_section[2])] = 2
        return row


@functools.lru_cache(maxsize=64)
def _halves_swapped(rotary_dim: int) -> torch.Tensor:
    """Indices ``R/2 .. R-1, 0 .. R/2-1``: a rotary vector with its halves swapped (shared: never write to it)."""
    with torch.inference_mode(False):
        return torch.arange(rotary_dim).roll(rotary_dim // 2)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """HF's ``apply_rotary_pos_emb`` on ``[T, H, D]``: ``x · cos + rotate_half(x) · sin``.

    ``cos`` and ``signed_sin`` are ``[T, 1, R]`` in x's dtype, ``signed_sin`` with its first half
    negated: ``rotate_half(x) · sin`` is ``(-x2, x1) · sin``, which is ``(x2, x1) · (-sin1, sin2)``
    exactly (a sign flip rounds nothing), so the halves are swapped by one gather.
    """
    R = cos.shape[-1]
    rot = x[..., :R]
    swapped = rot.index_select(-1, _halves_swapped(R).to(x.device))
    rotated = (rot * cos).add_(swapped.mul_(signed_sin))
    return rotated if R == x.shape[-1] else torch.cat((rotated, x[..., R:]), dim=-1)


def rope_tables(positions: torch.Tensor, rotary_dim: int, theta: float, rope_style: str,
                mrope_section: Sequence[int], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, signed_sin)`` as :func:`_rotate` takes them, ``[T, 1, rotary_dim]`` in ``dtype``: HF's
    ``cos``/``sin`` of the angles (float32, rounded once), the sine's first half negated."""
    freqs = rope_angles(positions, rotary_dim, theta, rope_style, mrope_section).to(device)
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin()
    sin[:, : freqs.shape[-1]].neg_()
    return emb.cos().to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1)


def qk_norm_rope(query: torch.Tensor, key: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                 positions: torch.Tensor, rotary_dim: int, theta: float, eps: float, rope_style: str,
                 mrope_section: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-centred RMSNorm per head (float32, rounded), then the rotary embedding in the input dtype."""
    cos, sin = rope_tables(positions, rotary_dim, theta, rope_style, mrope_section, query.dtype, query.device)
    # q's and k's heads side by side, each with its own weight: one norm and one rotation over both (the same
    # arithmetic element by element; at a decode step's sizes the op count is the time, not the elements)
    nq, nkv = query.shape[1], key.shape[1]
    both = torch.cat((query, key), dim=1)
    weight = torch.cat((q_weight.expand(nq, -1), k_weight.expand(nkv, -1)))
    out = _rotate(zero_centred_rms_norm(both, weight, eps), cos, sin)
    return out[:, :nq].contiguous(), out[:, nq:].contiguous()


def sigmoid_gate_mul(attn: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``attn · sigmoid(gate)``: the sigmoid rounded to the input dtype, then the product (HF's order)."""
    return attn * torch.sigmoid(gate)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, *,
          attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
    """Heads-first float32 attention; ``q`` ``[n, NQ, S, D]``, ``k``/``v`` ``[n, NKV, S', D]``."""
    return F.scaled_dot_product_attention(q.to(_ACC), k.to(_ACC), v.to(_ACC), attn_mask=attn_mask,
                                          is_causal=is_causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


@functools.lru_cache(maxsize=64)
def _rows(batch: int, device: torch.device) -> torch.Tensor:
    """``arange(batch)`` on ``device``, made once per size (shared: never write to it)."""
    with torch.inference_mode(False):
        return torch.arange(batch, device=device)


def _decode_every_row(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                      value_cache: torch.Tensor, lengths: torch.Tensor, shortest: int, longest: int,
                      scale: float | None) -> torch.Tensor:
    """The common decode step: sequence ``b`` is cache row ``b`` of a contiguous cache and every
    one is live. The keys and values it reads are then the slices ``cache[:B, :longest + 1]`` (no
    gather), and only a batch of unequal lengths needs a mask.

    Masked positions get weight exactly 0, so whatever finite values they hold add exactly 0;
    a non-finite one makes the output NaN (``0 · inf``), and only then are those positions read
    as zeros (a second pass): the result is always that of zeroed positions.
    """
    B, dev = query.shape[0], query.device
    at = lengths.to(dev)
    rows = _rows(B, dev)
    key_cache.index_put_((rows, at), key)
    value_cache.index_put_((rows, at), value)
    ctx = longest + 1
    group = _rows_a_group(ctx, key_cache)
    if group >= B:  # a decode step of a small batch: one group, its result returned as it is
        return _attend_rows(query, key_cache[:B, :ctx], value_cache[:B, :ctx], at, shortest == longest, scale)
    out = torch.empty_like(query)
    for g0 in range(0, B, group):
        g = slice(g0, min(g0 + group, B))
        out[g] = _attend_rows(query[g], key_cache[g, :ctx], value_cache[g, :ctx], at[g], shortest == longest, scale)
    return out


def _rows_a_group(ctx: int, key_cache: torch.Tensor) -> int:
    """How many sequences a decode step attends at once: their ``ctx`` positions of float32 keys within
    ``_GATHERED`` elements, and as many of values (a batch of 64 at 32k would otherwise convert 4 GiB of
    keys and as much of values at once); at least one."""
    return max(1, _GATHERED // (ctx * math.prod(key_cache.shape[2:])))


def _attend_rows(query: torch.Tensor, key_rows: torch.Tensor, value_rows: torch.Tensor, at: torch.Tensor,
                 equal: bool, scale: float | None) -> torch.Tensor:
    """:func:`_decode_every_row` for some rows: ``query`` ``[n, NQ, D]`` over ``key_rows`` /
    ``value_rows`` ``[n, ctx, NKV, D]`` at positions ``0 .. at`` (``equal``: every ``at`` is ``ctx - 1``)."""
    n, ctx = key_rows.shape[:2]
    k, v = key_rows.to(_ACC), value_rows.to(_ACC)
    q = query.unsqueeze(2)
    if equal:
        return _sdpa(q, k.transpose(1, 2), v.transpose(1, 2), scale).squeeze(2).to(query.dtype)
    valid = torch.arange(ctx, device=query.device) <= at.unsqueeze(1)  # [n, ctx]
    mask = valid.view(n, 1, 1, ctx)
    o = _sdpa(q, k.transpose(1, 2), v.transpose(1, 2), scale, attn_mask=mask)
    if bool(o.isnan().any()):
        keep, zero = valid.view(n, ctx, 1, 1), constant(0.0, _ACC)
        k, v = torch.where(keep, k, zero), torch.where(keep, v, zero)
        o = _sdpa(q, k.transpose(1, 2), v.transpose(1, 2), scale, attn_mask=mask)
    return o.squeeze(2).to(query.dtype)


def attention_decode(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                     value_cache: torch.Tensor, cache_seqlens: torch.Tensor, block_table: torch.Tensor | None,
                     scale: float | None) -> torch.Tensor:
    """Write each live sequence's new key/value at its length, then attend over positions ``0 .. n``."""
    N, L = key_cache.shape[0], key_cache.shape[1]
    if block_table is None and 0 < cache_seqlens.numel() <= N:
        shortest, longest = (int(x) for x in torch.aminmax(cache_seqlens))
        if shortest >= 0 and longest < L:
            return _decode_every_row(query, key, value, key_cache, value_cache, cache_seqlens.long(), shortest,
                                     longest, scale)
    lengths = cache_seqlens.to("cpu", torch.int64)
    live = torch.nonzero(lengths >= 0).flatten()
    n = lengths[live]
    if block_table is None:
        rows, at = live, n
        if bool((n >= L).any()) or (live.numel() and int(live.max()) >= N):
            raise IndexError(f"cache_seqlens {lengths.tolist()} do not fit a contiguous cache of {N} rows of "
                             f"{L} positions; nothing was written")
    else:
        table = block_table.to("cpu", torch.int64)
        if bool((n >= table.shape[1] * L).any()):
            raise IndexError(f"cache_seqlens {lengths.tolist()} exceed the block table's {table.shape[1]} blocks of "
                             f"{L}; nothing was written")
        # Every block the step reads, not only the one it writes (found in review: an entry of -1 before it
        # read block N - 1, one past N raised after the write).
        read = torch.arange(table.shape[1]).unsqueeze(0) <= (n // L).unsqueeze(1)  # [n_live, blocks]
        entries = table[live]
        outside = read & ((entries < 0) | (entries >= N))
        if bool(outside.any()):
            raise IndexError(f"the block table names blocks {entries[outside].tolist()} outside [0, {N}) among those "
                             f"the step reads; nothing was written")
        rows, at = table[live, n // L], n % L
    dev = query.device
    rows, at, live_d = rows.to(dev), at.to(dev), live.to(dev)
    key_cache[rows, at] = key.index_select(0, live_d)
    value_cache[rows, at] = value.index_select(0, live_d)
    out = torch.zeros(query.shape, dtype=query.dtype, device=dev)
    if live.numel() == 0:
        return out
    group = _rows_a_group(int(n.max()) + 1, key_cache)
    for g0 in range(0, live.numel(), group):
        g = slice(g0, g0 + group)
        out.index_copy_(0, live_d[g], _decode_gathered(query.index_select(0, live_d[g]), key_cache, value_cache,
                                                        live[g], n[g], None if block_table is None else table, L,
                                                        scale).to(out.dtype))
    return out


def _decode_gathered(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, live: torch.Tensor,
                     n: torch.Tensor, table: torch.Tensor | None, L: int, scale: float | None) -> torch.Tensor:
    """Attention of the sequences ``live`` (their queries ``query``, lengths ``n``, CPU indices) over
    positions ``0 .. n`` gathered from the caches (contiguous rows, or ``table``'s blocks of ``L``)."""
    dev = query.device
    ctx = int(n.max()) + 1
    pos = torch.arange(ctx)
    if table is None:
        src_rows, src_at = live.unsqueeze(1).expand(-1, ctx), pos.expand(live.numel(), -1)
    else:
        blocks = table[live].gather(1, (pos // L).clamp(max=table.shape[1] - 1).expand(live.numel(), -1))
        blocks = torch.where(pos.unsqueeze(0) <= n.unsqueeze(1), blocks, 0)  # entries past the last block: unread
        src_rows, src_at = blocks, (pos % L).expand(live.numel(), -1)
    valid = (pos.unsqueeze(0) <= n.unsqueeze(1)).to(dev)  # [n_live, ctx]
    src_rows, src_at = src_rows.to(dev), src_at.to(dev)
    keep = valid.unsqueeze(-1).unsqueeze(-1)
    # Positions past a sequence's length are zeroed, not only masked: whatever they hold never
    # reaches the output (0 · NaN would).
    k = torch.where(keep, key_cache[src_rows, src_at].to(_ACC), 0.0)  # [n_live, ctx, NKV, D]
    v = torch.where(keep, value_cache[src_rows, src_at].to(_ACC), 0.0)
    o = _sdpa(query.unsqueeze(2), k.transpose(1, 2), v.transpose(1, 2), scale, attn_mask=valid.view(-1, 1, 1, ctx))
    return o.squeeze(2)


def _bounds(cu_seqlens: torch.Tensor, T: int) -> tuple[list[int], list[int]]:
    """The prompts' ``(starts, lengths)`` as the spec reads ``cu_seqlens``, unchecked metadata
    included: RecurrentGatedDeltaRuleFwdOp's rule (:func:`~tileops_cpu_ref.rgdr.clipped_bounds`),
    prompt ``b`` spanning ``[clip(max(cu[0..b])), clip(max(cu[0..b + 1])))`` with ``clip(x) =
    min(max(x, 0), T)``: spans end to end inside the tokens, entries past T or decreasing never
    raise (they raised a bare ValueError), valid prefix sums read as written."""
    return clipped_bounds(cu_seqlens.tolist(), "cu_seqlens", T)


def _token_slots(starts: list[int], lengths: list[int], slot_mapping: torch.Tensor | None, N: int,
                 L: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, rows, positions)`` of every cache write, checked inside the cache."""
    n = torch.tensor(lengths, dtype=torch.int64)
    seq = torch.repeat_interleave(torch.arange(n.numel()), n)
    pos = torch.arange(seq.numel()) - (torch.cumsum(n, 0) - n)[seq]  # position in its sequence
    tokens = torch.tensor(starts, dtype=torch.int64)[seq] + pos
    if slot_mapping is None:
        rows, at = seq, pos
        if bool((at >= L).any()) or (seq.numel() and int(seq.max()) >= N):
            raise IndexError(f"sequence lengths {lengths} do not fit a contiguous cache of {N} rows of {L} "
                             "positions; nothing was written")
        return tokens, rows, at
    slots = slot_mapping.to("cpu", torch.int64)[tokens]
    if bool((slots >= N * L).any()):
        raise IndexError(f"slot_mapping names slots past the cache's {N * L}; nothing was written")
    written = slots >= 0
    return tokens[written], slots[written] // L, slots[written] % L


def attention_prefill(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                      value_cache: torch.Tensor, cu_seqlens: torch.Tensor, slot_mapping: torch.Tensor | None,
                      scale: float | None) -> torch.Tensor:
    """Write the prompts' keys/values into the cache, then causal attention within each prompt."""
    T = query.shape[0]
    starts, lengths = _bounds(cu_seqlens, T)
    dev = query.device
    if slot_mapping is None and len(starts) <= _SLICED_PROMPTS:
        _write_prompts_sliced(starts, lengths, key, value, key_cache, value_cache)
    else:
        tokens, rows, at = _token_slots(starts, lengths, slot_mapping, key_cache.shape[0], key_cache.shape[1])
        tokens, rows, at = tokens.to(dev), rows.to(dev), at.to(dev)
        key_cache[rows, at] = key.index_select(0, tokens)
        value_cache[rows, at] = value.index_select(0, tokens)
    tiled = sum(lengths) == T and starts == [0, *itertools.accumulate(lengths)][:-1]  # every row is written
    out = (torch.empty if tiled else torch.zeros)(query.shape, dtype=query.dtype, device=dev)
    for n in sorted({n for n in lengths if n > 0}):
        group = [s for s, m in zip(starts, lengths) if m == n]
        if len(group) == 1:  # one prompt of this length: slices, no gather
            s = group[0]

            def heads_first(x: torch.Tensor) -> torch.Tensor:
                return x[s : s + n].unsqueeze(0).transpose(1, 2)

            o = _sdpa(heads_first(query), heads_first(key), heads_first(value), scale, is_causal=True)
            out[s : s + n] = o.transpose(1, 2)[0].to(out.dtype)
            continue
        idx = (torch.tensor(group).unsqueeze(1) + torch.arange(n)).flatten().to(dev)  # [same-length prompts · n]

        def heads_first(x: torch.Tensor) -> torch.Tensor:
            return x.index_select(0, idx).view(len(group), n, *x.shape[1:]).transpose(1, 2)

        o = _sdpa(heads_first(query), heads_first(key), heads_first(value), scale, is_causal=True)
        out.index_copy_(0, idx, o.transpose(1, 2).reshape(-1, *query.shape[1:]).to(out.dtype))
    return out


#: Prompts up to which a prefill on a contiguous cache writes each prompt's keys and values as two
#: slice copies (a few calls each) rather than through index tensors (a dozen calls whatever the count).
_SLICED_PROMPTS = 8


def _write_prompts_sliced(starts: list[int], lengths: list[int], key: torch.Tensor, value: torch.Tensor,
                          key_cache: torch.Tensor, value_cache: torch.Tensor) -> None:
    """Prompt ``b``'s keys and values into cache row ``b``, positions ``0 .. n_b - 1``; checked first."""
    N, L = key_cache.shape[:2]
    if any(n > L for n in lengths) or (len(lengths) > N and any(n > 0 for n in lengths[N:])):
        raise IndexError(f"sequence lengths {lengths} do not fit a contiguous cache of {N} rows of {L} "
                         "positions; nothing was written")
    for b, (s, n) in enumerate(zip(starts, lengths)):
        if n > 0:
            key_cache[b, :n] = key[s : s + n]
            value_cache[b, :n] = value[s : s + n]
