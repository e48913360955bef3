"""The Gated DeltaNet prefill (ChunkGatedDeltaRuleFwdOp) in the chunked form, and its float64 oracle.

The recurrence is the decode step's (``rgdr.py``, RGDR.md), per sequence and value head,
with the state ``S`` ``[DV, DK]`` held in float32 across the whole sequence::

    S = S · exp(g_t);  d_t = β_t (v_t − S k_t);  S = S + d_t k_tᵀ;  o_t = S (scale · q_t)

The chunked form runs it 64 tokens at a time. Inside a chunk, with ``G_i`` the running sum
of ``g`` from the chunk start and ``S₀`` the state before the chunk, every state the chunk
passes through is ``S₀`` decayed plus a decayed sum of the chunk's own updates, so

    d_i = β_i v_i − β_i e^{G_i} S₀ k_i − Σ_{j<i} β_i e^{G_i−G_j} (k_i·k_j) d_j

which is the unit lower-triangular system ``(I + A) D = β V − (β e^G K) S₀ᵀ`` with
``A_ij = β_i e^{G_i−G_j} k_i·k_j`` (j < i). Solving it once for the right-hand sides ``β V``
and ``β e^G K`` gives ``U`` and ``W`` (the WY / UT transform), with ``D = U − W S₀ᵀ``; then

    O = (e^G ⊙ Q) S₀ᵀ + (tril(e^{G_i−G_j}) ⊙ Q Kᵀ) D      S_next = e^{G_last} S₀ + Dᵀ (e^{G_last−G} ⊙ K)

Only the last two lines touch the state, so the sequential part is one step per chunk.
Decay factors are always formed from differences ``G_i − G_j`` (``j <= i``) and never
divided, so a strongly decaying chunk underflows to zero instead of overflowing.

How it runs: sequences are ordered by their number of chunks, longest first, so the
sequences that have a ``j``-th chunk are a prefix of the batch; step ``j`` handles that
chunk of each of them together, batched over sequences and value heads. A short last
chunk is padded with tokens whose ``k``, ``q``, ``v``, ``β`` and ``g`` are zero: they add
nothing to the state and their outputs are not stored. Where every sequence is shorter than
a chunk, the one chunk is as long as the longest of them.

:func:`chunk_gated_delta_rule` is the reference kernel (``compute_dtype`` float32; float64
checks the algebra). :func:`chunk_gated_delta_rule_by_recurrence` is the float64 oracle the
kernels are checked against: the decode step's float64 form run token by token on a
float64 copy of the initial states, whose final values are then rounded once and scattered.
"""

from __future__ import annotations

import torch

from .rgdr import L2NORM_EPS, clipped_bounds, recurrent_gated_delta_rule, zero_uncovered_tokens

__all__ = ["CHUNK", "chunk_gated_delta_rule", "chunk_gated_delta_rule_by_recurrence"]

#: Tokens per chunk (flash-linear-attention's and vLLM's value).
CHUNK = 64


def _per_value_head(x: torch.Tensor, NV: int, compute_dtype: torch.dtype, l2norm: bool) -> torch.Tensor:
    """``[T, NK, D]`` query or key rows as ``[T, NV, D]`` in ``compute_dtype`` (value head ``h``
    reads head ``h // (NV // NK)``), l2-normalised first where asked."""
    x = x.to(compute_dtype)
    if l2norm:
        x = x * (x * x).sum(-1, keepdim=True).add_(L2NORM_EPS).rsqrt_()
    NK = x.shape[1]
    return x if NK == NV else x.repeat_interleave(NV // NK, dim=1)


def _step_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 scale: float, l2norm: bool, compute_dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``(q · scale, k, v, g, β)`` token-major in ``compute_dtype``, q and k per value head (:func:`_per_value_head`)."""
    NV = value.shape[1]
    q = _per_value_head(query, NV, compute_dtype, l2norm) * scale  # not in place: that may be the caller's query
    k = _per_value_head(key, NV, compute_dtype, l2norm)
    return (q, k, *(x.to(compute_dtype) for x in (value, g, beta)))


def _initial_states(state: torch.Tensor, slots: list[int], reads: list[bool],
                    compute_dtype: torch.dtype) -> torch.Tensor:
    """``[n, NV, DV, DK]`` in ``compute_dtype``: ``state[slot]`` where a sequence reads its slot, else zeros."""
    S = torch.zeros((len(slots), *state.shape[1:]), dtype=compute_dtype, device=state.device)
    rows = [i for i, r in enumerate(reads) if r]
    if rows:
        where = torch.tensor(rows, dtype=torch.int64, device=state.device)
        src = torch.tensor([slots[i] for i in rows], dtype=torch.int64, device=state.device)
        S.index_copy_(0, where, state.index_select(0, src).to(compute_dtype))
    return S


def _write_final_states(state: torch.Tensor, slots: list[int], S: torch.Tensor) -> None:
    """``state[slots[i]] = S[i]`` rounded to the state's dtype, skipping negative (padding) slots."""
    rows = [i for i, s in enumerate(slots) if s >= 0]
    if rows:
        where = torch.tensor(rows, dtype=torch.int64, device=state.device)
        dst = torch.tensor([slots[i] for i in rows], dtype=torch.int64, device=state.device)
        state.index_copy_(0, dst, S.index_select(0, where).to(state.dtype))


def _chunk_step(S0: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of ``n`` sequences: ``(outputs [n, NV, C, DV], next states [n, NV, DV, DK])``.

    ``q`` (already scaled) and ``k`` are ``[n, NV, C, DK]``, ``v`` ``[n, NV, C, DV]``, ``g`` and
    ``beta`` ``[n, NV, C]``; padded tokens are zero in all of them.
    """
    C = g.shape[-1]
    G = g.cumsum(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()
    decay = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()  # e^{G_i−G_j}, j <= i
    A = (k @ k.transpose(-1, -2)).mul_(decay).tril_(-1).mul_(beta.unsqueeze(-1))
    A.diagonal(dim1=-2, dim2=-1).fill_(1.0)  # I + A, unit lower triangular
    rhs = torch.cat((v * beta.unsqueeze(-1), k * (beta * G.exp()).unsqueeze(-1)), dim=-1)
    UW = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
    U, W = UW.split((v.shape[-1], k.shape[-1]), dim=-1)
    S0t = S0.transpose(-1, -2)  # [n, NV, DK, DV]
    D = U - W @ S0t
    out = (q * G.exp().unsqueeze(-1)) @ S0t + ((q @ k.transpose(-1, -2)).mul_(decay)) @ D
    G_last = G[..., -1:]
    S_next = S0 * G_last.exp().unsqueeze(-1) + D.transpose(-1, -2) @ (k * (G_last - G).exp().unsqueeze(-1))
    return out, S_next


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    has_initial_state: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    compute_dtype: torch.dtype = torch.float32,
    chunk_size: int = CHUNK,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run the prefill: write the final states into ``state`` and return ``out``.

    ``out`` has ``value``'s dtype unless a buffer is given. Every initial state is read
    before any final state is written; a slot past the pool is refused before either.
    """
    T, NK, DK = query.shape
    NV, DV = value.shape[1:]
    scale = DK**-0.5 if scale is None else scale
    if out is None:
        out = torch.empty(value.shape, dtype=value.dtype, device=value.device)
    # The spans every backend follows, unchecked metadata included (RGDR.md): clipped to [0, T) and laid end to
    # end, the tokens no sequence covers zeroed (found in review: left unwritten, and negative bounds read as
    # Python slices from the end).
    starts, lengths = clipped_bounds(cu_seqlens.tolist(), "cu_seqlens", T)
    ends = [s + n for s, n in zip(starts, lengths)]
    slot_list = ssm_state_indices.tolist()
    outside = [s for s in slot_list if s >= state.shape[0]]
    if outside:
        raise IndexError(f"ssm_state_indices {outside[:8]} lie past the state pool of {state.shape[0]} slots; "
                         "nothing was written")
    zero_uncovered_tokens(out, starts, lengths)
    has = [False] * len(slot_list) if has_initial_state is None else has_initial_state.tolist()
    # Sequences with tokens, most chunks first: the ones alive at chunk step j are a prefix.
    order = sorted((b for b in range(len(slot_list)) if lengths[b] > 0), key=lambda b: -lengths[b])
    if not order:
        return out
    if len(order) == 1:
        b = order[0]
        return _lone_sequence(query, key, value, g, beta, state, starts[b], ends[b], slot_list[b],
                              bool(has[b]), scale, use_qk_l2norm_in_kernel, compute_dtype, chunk_size, out)
    first = torch.tensor([starts[b] for b in order], dtype=torch.int64, device=value.device)
    count = torch.tensor([lengths[b] for b in order], dtype=torch.int64, device=value.device)
    slots = [slot_list[b] for b in order]
    S = _initial_states(state, slots, [bool(has[b]) and slot_list[b] >= 0 for b in order], compute_dtype)

    q_all, k_all, v_all, g_all, beta_all = _step_inputs(query, key, value, g, beta, scale, use_qk_l2norm_in_kernel,
                                                        compute_dtype)
    # A batch of short prompts runs one chunk of its longest length, not one padded to 64: the
    # algebra holds for any chunk length, and the padding would be most of the work.
    chunk_size = min(chunk_size, int(count[0]))
    n_chunks = (count + chunk_size - 1) // chunk_size
    offsets = torch.arange(chunk_size, device=value.device)
    for j in range(int(n_chunks[0])):
        n = int((n_chunks > j).sum())
        position = j * chunk_size + offsets  # [C] within each sequence
        valid = position < count[:n, None]  # [n, C]
        tokens = (first[:n, None] + position).masked_fill(~valid, 0).flatten()
        keep = valid.flatten()

        def chunk(x: torch.Tensor) -> torch.Tensor:
            """Rows of the chunk, zero on padding, heads first: ``[T, NV, *D]`` -> ``[n, NV, C, *D]``."""
            rows = x.index_select(0, tokens).view(n, chunk_size, *x.shape[1:])
            rows = rows * valid.view(n, chunk_size, *([1] * (x.dim() - 1)))
            return rows.movedim(1, 2)

        o, S_next = _chunk_step(S[:n], chunk(q_all), chunk(k_all), chunk(v_all), chunk(g_all), chunk(beta_all))
        S[:n] = S_next
        rows = o.movedim(2, 1).reshape(n * chunk_size, NV, DV)
        out.index_copy_(0, tokens[keep], rows[keep].to(out.dtype))
    _write_final_states(state, slots, S)
    return out


def _lone_sequence(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                   state: torch.Tensor, start: int, end: int, slot: int, reads: bool, scale: float, l2norm: bool,
                   compute_dtype: torch.dtype, chunk_size: int, out: torch.Tensor) -> torch.Tensor:
    """:func:`chunk_gated_delta_rule` for a call whose tokens are one sequence's (a prompt alone; others
    empty): its chunks are slices of the rows, the last one shorter instead of padded (the algebra holds
    for any chunk length), and its slot is read and written in place, so the batched path's token tables,
    masks and index copies (a third of a short prompt's time on the CPU) are not built. The same steps."""
    rows = slice(start, end)
    inputs = _step_inputs(query[rows], key[rows], value[rows], g[rows], beta[rows], scale, l2norm, compute_dtype)
    if reads and slot >= 0:
        S = state[slot : slot + 1].to(compute_dtype, copy=True)
    else:
        S = torch.zeros((1, *state.shape[1:]), dtype=compute_dtype, device=state.device)
    for a in range(0, end - start, chunk_size):
        c = slice(a, a + chunk_size)
        o, S = _chunk_step(S, *(x[None, c].movedim(1, 2) for x in inputs))
        out[start + a : start + a + o.shape[2]] = o[0].movedim(0, 1)
    if slot >= 0:
        state[slot] = S[0]
    return out


def chunk_gated_delta_rule_by_recurrence(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, cu_seqlens: torch.Tensor, ssm_state_indices: torch.Tensor,
    has_initial_state: torch.Tensor | None = None, *, scale: float | None = None, use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 oracle: ``(out [T, NV, DV] float64, expected state pool)``; ``state`` is not written.

    Each sequence runs through the decode step's float64 reference token by token, on a
    float64 working pool of one slot per sequence (so nothing is rounded between tokens);
    the final states are rounded once to the pool's dtype and scattered into a copy of it.
    """
    B = ssm_state_indices.shape[0]
    bounds = cu_seqlens.tolist()
    slots = ssm_state_indices.tolist()
    has = [False] * B if has_initial_state is None else has_initial_state.tolist()
    work = _initial_states(state.cpu(), slots, [bool(h) and s >= 0 for h, s in zip(has, slots)], torch.float64)
    lengths = torch.tensor([b - a for a, b in zip(bounds[:-1], bounds[1:])], dtype=torch.int64)
    token_slots = torch.repeat_interleave(torch.arange(B), lengths)  # sequence b runs in working slot b
    out = torch.empty(value.shape, dtype=torch.float64)
    recurrent_gated_delta_rule(
        query.cpu(), key.cpu(), value.cpu(), beta.cpu(), work, cu_seqlens.cpu(), token_slots, g.cpu(),
        scale=scale, seq_lens_style="cu_seqlens", use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        compute_dtype=torch.float64, out=out,
    )
    expected = state.detach().cpu().clone()
    written = [b for b in range(B) if slots[b] >= 0 and lengths[b] > 0]
    _write_final_states(expected, [slots[b] for b in written], work[written])
    return out, expected
