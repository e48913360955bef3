"""Depthwise causal conv1d over packed tokens (CausalConv1dUpdateFwdOp, CausalConv1dVarlenFwdOp),
vectorised over sequences and tokens, float32 accumulation.

The math is ``manifest/conv.yaml``'s. Both ops reduce to one computation: every covered token
``t`` of sequence ``b`` (position ``j = t - s_b``) sees a window of ``W`` inputs whose tap ``k``
is ``x[t - (W - 1) + k]`` when that row belongs to the sequence (``j - (W - 1) + k >= 0``) and
entry ``W - 1 + j - (W - 1) + k`` of the sequence's initial window otherwise. So the initial
windows of all sequences (``[n, D, W - 1]``, gathered from the pool before anything is
written) are laid as rows in front of ``x`` in one buffer, a ``[tokens, W]`` table indexes each
token's taps in it, and the output is ``W`` gathered multiply-adds: a Python loop over the
taps only, never over sequences or tokens. A token's new window is its taps ``1 .. W - 1``,
gathered the same way and scattered to the pool with one ``index_copy_``. The ragged decode step
takes this road, and so does a prefill whose sequences' lengths differ widely; otherwise the prefill lays
each sequence as one padded row (:func:`causal_conv1d_varlen`: fewer torch calls, the same sums in the same
order).

The decode step's common layout, every sequence with the same ``L`` tokens tiling ``[0, T)``
(plain decode: ``L = 1``), takes a shorter road with the same math: each sequence's initial
window and its ``L`` inputs are laid side by side as one ``[B, D, W - 1 + L]`` row, whose
length-``W`` windows (an ``unfold`` view) are the taps of its tokens and whose length-``W - 1``
windows after the first are the windows to store. A handful of torch calls, whatever ``B``.
Plain decode (``L = 1``) at all but tiny sizes skips the row too (:func:`_one_token_each`).

Metadata is read on the host (a few hundred integers at most). Unchecked metadata is followed by
RecurrentGatedDeltaRuleFwdOp's rule (:func:`~tileops_cpu_ref.rgdr.clipped_bounds`: the sequences laid
end to end inside ``[0, T)``, a negative length counting as 0; accepted counts clipped to ``[1, L_b]``),
as the conv ops' specs say; tokens no sequence covers get zeros. A slot past the pool raises before
anything is written (the ops' contents checks name bad metadata first when enabled).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from .rgdr import clipped_bounds, uniform_length

__all__ = ["causal_conv1d_update", "causal_conv1d_varlen"]

_ACC = torch.float32
#: Outputs (tokens x channels) from which the uniform decode sums its taps one multiply-add per tap
#: rather than in one reduction (measured: the crossover lies between 8x96 and 1x8192).
_TAPS_AT_ONCE = 4096


class _Tokens:
    """The covered tokens of the non-empty sequences, in token order within each sequence.

    ``seq`` is the index among the non-empty sequences (``live``), ``pos`` the position in
    its sequence, ``token`` the row of ``x``; all int64 tensors on ``device``.
    """

    def __init__(self, starts: torch.Tensor, lengths: torch.Tensor, device: torch.device) -> None:
        self.live = torch.nonzero(lengths > 0).flatten()
        live_lengths = lengths[self.live]
        n = int(live_lengths.sum())
        seq = torch.repeat_interleave(torch.arange(self.live.numel()), live_lengths)
        first_of_seq = torch.cumsum(live_lengths, 0) - live_lengths
        self.pos = (torch.arange(n) - first_of_seq[seq]).to(device)
        self.token = (starts[self.live][seq].to(device) + self.pos)
        self.seq = seq.to(device)
        self.last = (first_of_seq + live_lengths - 1).to(device)  # each live sequence's last entry

    def taps(self, width: int, T: int) -> torch.Tensor:
        """``[n, width]`` rows of the buffer ``cat(initial windows as rows, x)`` that each token reads."""
        W1 = width - 1
        rel = self.pos.unsqueeze(1) - W1 + torch.arange(width, device=self.pos.device)  # position of tap k
        from_x = self.live.numel() * W1 + self.token.unsqueeze(1) - W1 + torch.arange(width, device=rel.device)
        from_init = (self.seq * W1 + W1).unsqueeze(1) + rel
        return torch.where(rel >= 0, from_x, from_init)


def _check_pool(slots: Sequence[int], pool: int) -> None:
    outside = [s for s in slots if s >= pool]
    if outside:  # before the first write: a slot past the pool must never be written through
        raise IndexError(f"conv_state_indices {outside[:8]} lie past the conv state pool of {pool} slots; "
                         "nothing was written")


def _initial_windows(conv_state: torch.Tensor, slots: torch.Tensor, use: torch.Tensor) -> torch.Tensor:
    """``[n, D, W - 1]`` float32 windows of ``slots`` where ``use``, zeros elsewhere (read before any write)."""
    if conv_state.shape[0] == 0:  # an empty pool: every slot is padding
        return torch.zeros((slots.numel(), *conv_state.shape[1:]), dtype=_ACC, device=conv_state.device)
    windows = conv_state.index_select(0, slots.clamp(min=0)).to(_ACC)
    return windows.masked_fill_(~use.view(-1, 1, 1), 0)


def _convolve(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
              init: torch.Tensor, tokens: _Tokens, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Write every row of ``out`` (zeros where no sequence covers it); return the tap table and the
    buffer it indexes, for the window writes."""
    T, D = x.shape
    W = weight.shape[1]
    rows = torch.cat((init.transpose(1, 2).reshape(-1, D), x.to(_ACC)))
    taps = tokens.taps(W, T)
    w = weight.to(_ACC)
    acc = torch.zeros(taps.shape[0], D, dtype=_ACC, device=x.device) if bias is None else (
        bias.to(_ACC).expand(taps.shape[0], D).clone())
    for k in range(W):
        acc.addcmul_(rows.index_select(0, taps[:, k]), w[:, k])
    acc = _activate(acc, activation)
    out.zero_()
    out.index_copy_(0, tokens.token, acc.to(out.dtype))
    return taps, rows


def _write_windows(conv_state: torch.Tensor, slots: torch.Tensor, taps: torch.Tensor, rows: torch.Tensor) -> None:
    """Store the window after each entry of ``taps`` (its taps ``1 .. W - 1``) in ``slots``; padding
    slots write nothing and, where one slot is named twice, the later entry wins."""
    keep = torch.nonzero(slots >= 0).flatten()
    if keep.numel() == 0:
        return
    slots, taps = slots[keep], taps[keep]
    order = torch.argsort(slots * taps.shape[0] + torch.arange(slots.numel(), device=slots.device))
    slots, taps = slots[order], taps[order]
    last = torch.ones_like(slots, dtype=torch.bool)
    last[:-1] = slots[1:] != slots[:-1]
    slots, taps = slots[last], taps[last]
    windows = rows[taps[:, 1:]].transpose(1, 2)  # [n, D, W - 1]
    conv_state.index_copy_(0, slots, windows.to(conv_state.dtype))


def _out_buffer(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out


def _activate(acc: torch.Tensor, activation: str | None) -> torch.Tensor:
    """``activation`` applied in place on the float32 accumulator."""
    if activation == "silu":
        return F.silu(acc, inplace=True)
    if activation is not None:
        raise ValueError(f"activation must be 'silu' or None, got {activation!r}")
    return acc


def _last_writer_of_each_slot(slots: list[int]) -> list[int]:
    """The entries that write: non-negative slots, the later entry where one slot is named twice."""
    last = {s: i for i, s in enumerate(slots) if s >= 0}
    return sorted(last.values())


def _update_uniform(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    activation: str | None, L: int, slot_tensor: torch.Tensor, slots: list[int],
                    accepted: list[int] | None, out: torch.Tensor | None) -> torch.Tensor:
    """The update for ``B`` sequences of ``L`` tokens each, tiling ``x`` (see the module docstring).

    ``slots`` is ``slot_tensor`` read on the host; the tensor itself indexes where it can (one
    token per sequence, no padding), saving the host-to-tensor round trip.
    """
    T, D = x.shape
    B, W = T // L, weight.shape[1]
    every_token = L == 1 and accepted is None  # each token is its sequence's first
    first = range(0, T, L) if accepted is None else [b * L + min(max(a, 1), L) - 1 for b, a in enumerate(accepted)]
    first_slots = slots if every_token else [slots[i] for i in first]
    padded = min(first_slots) < 0
    if conv_state.shape[0] == 0:  # an empty pool: every slot is padding (the pool check said so)
        init = x.new_zeros(B, D, W - 1)
    else:
        index = slot_tensor.to(x.device) if every_token and not padded else torch.tensor(
            [max(s, 0) for s in first_slots], dtype=torch.int64, device=x.device)
        init = conv_state.index_select(0, index)
        if padded:
            init.masked_fill_(torch.tensor([s < 0 for s in first_slots], device=x.device).view(-1, 1, 1), 0)
    if L == 1 and T * D >= _TAPS_AT_ONCE:
        acc, windows = _one_token_each(x, _cast(init, x.dtype), weight, bias)
    else:
        row = torch.cat((_cast(init, x.dtype), x.view(B, L, D).transpose(1, 2)), dim=-1)  # [B, D, W - 1 + L]
        row32, w = _cast(row, _ACC), _cast(weight, _ACC)
        if T * D < _TAPS_AT_ONCE:  # one reduction over the taps: fewest calls
            acc = torch.linalg.vecdot(row32.unfold(-1, W, 1), w.unsqueeze(1))  # [B, D, L]; taps oldest first
            if bias is not None:
                acc.add_(_cast(bias, _ACC).unsqueeze(-1))
        else:  # a multiply-add per tap over whole [B, D, L] slices: a length-W reduction per output is slow
            acc = _bias_or_zeros(bias, (B, D, L), x.device)
            for k in range(W):
                acc.addcmul_(row32.narrow(-1, k, L), w[:, k : k + 1])
        # Token t's window is its taps 1 .. W - 1: the row's length-(W - 1) windows after the first.
        if L == 1:
            windows = row.narrow(-1, 1, W - 1)
        else:
            windows = row.unfold(-1, W - 1, 1).narrow(2, 1, L).transpose(1, 2).reshape(T, D, W - 1)
    result = _activate(acc, activation).transpose(1, 2).reshape(T, D)
    if out is None:
        out = _cast(result, x.dtype).contiguous()  # (packed, as every backend writes it: found in review)
    else:
        out.copy_(result)
    writers = _last_writer_of_each_slot(slots)
    if not writers:
        return out
    if len(writers) == T:  # every token writes, in token order
        written = _cast(slot_tensor.to(x.device), torch.int64)  # index_copy_ takes int64 indices
    else:
        windows = windows.index_select(0, torch.tensor(writers, dtype=torch.int64, device=x.device))
        written = torch.tensor([slots[i] for i in writers], dtype=torch.int64, device=x.device)
    conv_state.index_copy_(0, written, _cast(windows, conv_state.dtype))
    return out


def _bias_or_zeros(bias: torch.Tensor | None, shape: tuple[int, int, int], device: torch.device) -> torch.Tensor:
    """A float32 ``[B, D, L]`` accumulator holding the bias of each channel (zeros without one)."""
    if bias is None:
        return torch.zeros(shape, dtype=_ACC, device=device)
    return _cast(bias, _ACC).view(shape[1], 1).expand(shape).clone()


def _one_token_each(x: torch.Tensor, init: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain decode step, one token a sequence, without the ``[B, D, W]`` row: ``(acc [B, D,
    1] float32, windows [B, D, W - 1])``.

    The row's last-axis concatenation and the strided window it stores took most of the step
    (Qwen3.5 heads, B = 32: 5.5 ms a call, 2.0 ms this way, one thread). The taps are summed in
    the row's order, oldest first, so the result is bit for bit the row's. A new window is the
    initial one shifted by one element of its flat ``[B, D * (W - 1)]`` view (tap ``k + 1``
    becomes tap ``k``; what crosses into a channel's last tap is overwritten by the token's input).
    """
    B, D = x.shape
    W1 = init.shape[-1]
    w = _cast(weight, _ACC)
    acc = _bias_or_zeros(bias, (B, D, 1), x.device).view(B, D)
    for k in range(W1):
        acc.addcmul_(init[:, :, k], w[:, k])
    acc.addcmul_(x, w[:, W1])
    flat = init.reshape(B, D * W1)
    windows = torch.empty((B, D * W1), dtype=x.dtype, device=x.device)
    windows[:, :-1].copy_(flat[:, 1:])
    windows.view(B, D, W1)[:, :, W1 - 1].copy_(x)
    return acc.unsqueeze(-1), windows.view(B, D, W1)


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype`` (itself when it already is: no dispatch)."""
    return t if t.dtype == dtype else t.to(dtype)


def causal_conv1d_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                         actual_seq_lengths: torch.Tensor, conv_state_indices: torch.Tensor,
                         bias: torch.Tensor | None = None, num_accepted_tokens: torch.Tensor | None = None, *,
                         activation: str | None = None, seq_lens_style: str = "lengths",
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """The decode step: write one window per token with a non-negative slot; return ``out``.

    A sequence's initial window is the slot of its first accepted token (an accepted count
    outside ``[1, L_b]`` is clamped into it), zeros when that slot is padding.
    """
    T = x.shape[0]
    host_slots = conv_state_indices.tolist()
    _check_pool(host_slots, conv_state.shape[0])
    starts, lengths = clipped_bounds(actual_seq_lengths.tolist(), seq_lens_style, T)
    L = uniform_length(starts, lengths, T)
    if L:
        host_accepted = None if num_accepted_tokens is None else num_accepted_tokens.tolist()
        return _update_uniform(x, conv_state, weight, bias, activation, L, conv_state_indices, host_slots,
                               host_accepted, out)
    out = _out_buffer(x, out)
    starts_t, lengths_t = torch.tensor(starts, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)
    tokens = _Tokens(starts_t, lengths_t, x.device)
    slots = conv_state_indices.to(device=x.device, dtype=torch.int64)
    live_lengths = lengths_t[tokens.live]
    first = starts_t[tokens.live]
    if num_accepted_tokens is not None:
        accepted = num_accepted_tokens.to("cpu", torch.int64)[tokens.live]
        first = first + torch.minimum(accepted.clamp(min=1), live_lengths) - 1
    first_slots = slots.index_select(0, first.to(x.device))
    init = _initial_windows(conv_state, first_slots, first_slots >= 0)
    taps, rows = _convolve(x, weight, bias, activation, init, tokens, out)
    _write_windows(conv_state, slots.index_select(0, tokens.token), taps, rows)
    return out


def causal_conv1d_varlen(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                         actual_seq_lengths: torch.Tensor, conv_state_indices: torch.Tensor,
                         has_initial_state: torch.Tensor | None = None, bias: torch.Tensor | None = None, *,
                         activation: str | None = None, seq_lens_style: str = "lengths",
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """The prefill: one final window per non-empty sequence with a non-negative slot; return ``out``.

    Sequences of similar lengths go as padded rows (:func:`_varlen_padded`: about ten torch calls
    whatever the batch); where padding them to the longest would more than double the tokens (one
    long prompt among short ones), through the token table (:func:`_convolve`), which holds each
    token once. The same sums in the same order either way (which SIMD path adds them may round a
    float32 last bit differently).
    """
    T = x.shape[0]
    out = _out_buffer(x, out)
    starts, lengths = clipped_bounds(actual_seq_lengths.tolist(), seq_lens_style, T)
    live = [b for b, n in enumerate(lengths) if n > 0]
    all_slots = conv_state_indices.tolist()
    slots = [int(all_slots[b]) for b in live]
    _check_pool(slots, conv_state.shape[0])
    if not live:
        return out.zero_()
    initial = [False] * len(lengths) if has_initial_state is None else [bool(v) for v in has_initial_state.tolist()]
    use = [s >= 0 and initial[b] for b, s in zip(live, slots)]
    if len(live) * max(lengths[b] for b in live) <= 2 * T:
        return _varlen_padded(x, conv_state, weight, bias, activation, starts, lengths, live, slots, use, out)
    tokens = _Tokens(torch.tensor(starts, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64), x.device)
    slot_t = torch.tensor(slots, dtype=torch.int64, device=x.device)
    init = _initial_windows(conv_state, slot_t, torch.tensor(use, dtype=torch.bool, device=x.device))
    taps, rows = _convolve(x, weight, bias, activation, init, tokens, out)
    _write_windows(conv_state, slot_t, taps.index_select(0, tokens.last), rows)
    return out


def _varlen_padded(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   activation: str | None, starts: list[int], lengths: list[int], live: list[int], slots: list[int],
                   use: list[bool], out: torch.Tensor) -> torch.Tensor:
    """The prefill with each non-empty sequence (``live``, its pool slot, whether its initial window is
    read) as a row of ``W - 1 + L_max`` float32 inputs: its initial window or zeros, its tokens, then
    zeros, gathered from ``x`` and the pool with one index built on the host; the taps are ``W``
    multiply-adds over all rows at once, the final windows one more gather. The token-table road took
    323 µs a call on the tiny model's prefill against 83 µs for HF's ``F.conv1d`` statement, most of
    that prefill's difference; this one about 97 (2026-12-04, one thread).
    """
    T, D = x.shape
    W1 = weight.shape[1] - 1
    with_init = [i for i, u in enumerate(use) if u]
    n, L = len(live), max(lengths[b] for b in live)
    # Host indices, made into one tensor: the pool slots read; each padded row's sources in
    # cat(a zero row, the read windows' taps, x); the covered entries of the output rows, in token
    # order; the final windows' rows and the slots they go to (a slot named twice: the later wins).
    first_x = 1 + len(with_init) * W1
    init_row = {i: 1 + j * W1 for j, i in enumerate(with_init)}
    index: list[int] = []
    for i, b in enumerate(live):
        base = init_row.get(i)
        index.extend([0] * W1 if base is None else range(base, base + W1))
        index.extend(range(first_x + starts[b], first_x + starts[b] + lengths[b]))
        index.extend([0] * (L - lengths[b]))
    tokens, entries = zip(*[(starts[b] + j, i * L + j) for i, b in enumerate(live) for j in range(lengths[b])])
    in_order = tokens == tuple(range(T))  # the sequences tile x in order (a prefill's usual layout)
    last = {s: i for i, s in enumerate(slots) if s >= 0}
    ends = [i * (W1 + L) + lengths[live[i]] + m for i in last.values() for m in range(W1)]
    parts = [[slots[i] for i in with_init], index, list(entries), [] if in_order else list(tokens), ends, list(last)]
    read, gather, chosen_rows, token_rows, end_rows, written = torch.tensor(
        [v for part in parts for v in part], dtype=torch.int64, device=x.device).split([len(p) for p in parts])
    pieces = [x.new_zeros(1, D, dtype=_ACC)]
    if with_init:
        pieces.append(conv_state.index_select(0, read).to(_ACC).transpose(1, 2).reshape(-1, D))
    pieces.append(_cast(x, _ACC))
    rows = torch.cat(pieces).index_select(0, gather).view(n, W1 + L, D)
    w = _cast(weight, _ACC).t()
    acc = torch.zeros((n, L, D), dtype=_ACC, device=x.device) if bias is None else (
        _cast(bias, _ACC).expand(n, L, D).clone())
    for k in range(W1 + 1):  # taps oldest first, as every road sums them
        acc.addcmul_(rows.narrow(1, k, L), w[k])
    chosen = _activate(acc, activation).view(-1, D).index_select(0, chosen_rows)
    if in_order:
        out.copy_(chosen)
    else:
        out.zero_()
        out.index_copy_(0, token_rows, chosen.to(out.dtype))
    if last:
        windows = rows.view(-1, D).index_select(0, end_rows).view(len(last), W1, D).transpose(1, 2)
        conv_state.index_copy_(0, written, windows.to(conv_state.dtype))
    return out
