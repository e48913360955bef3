"""The RGDR decode step (RecurrentGatedDeltaRuleFwdOp), vectorised over sequences and heads.

One function serves two roles: with ``compute_dtype=torch.float32`` it is the CPU
reference kernel; with ``torch.float64`` it is the high-precision reference the
accelerator kernels are checked against. The semantics are ``RGDR.md``'s:

* tokens are packed by sequence, sequence ``b`` owning ``[s_b, s_b + L_b)``;
* value head ``h`` reads query/key head ``h // (NV // NK)``;
* the state of a sequence is read once, from the slot of its first accepted token,
  before this call writes anything;
* each token's output reads the updated state; then the running state is rounded to
  the state's dtype and the recurrence continues from the rounded value (the fp16/bf16
  drift is part of the semantics, not an error of the kernel);
* a negative slot index is padding: that token writes nothing, and a sequence whose
  first slot is negative starts from zeros.

How it runs: the states of all sequences are gathered once from the pool into one
``[B, NV, DV, DK]`` buffer (in plain decode where sequence ``b`` owns slot ``b`` and the pool
holds the compute dtype, the pool's first ``B`` rows are that buffer, updated in place), and
a Python loop runs over token positions only (``max(L_b)`` steps; one for plain decode).
Step ``j`` updates the sequences that have a ``j``-th token together, with batched matrix
products over ``B·NK`` key heads (GQA below), and scatters
their states to the pool in one ``index_copy_``. Sequences are ordered by length, longest
first, so the sequences alive at step ``j`` are a prefix of the buffer (a view, no copy).

Each step touches the state as few times as the algebra allows, since on the CPU the
state passes are the cost: with ``w`` the step's decay (``exp(g)``, ``exp(gk)``, per head
or per key channel), the state is first decayed in place, ``S ⊙= w``; then

    predicted = S k       out = (S + d kᵀ)(scale·q) = S (scale·q) + d (k · scale·q)

so one batched product ``S @ [k, scale·q]ᵀ`` reads the state once for both, and the update
``S += d kᵀ`` is in place: three passes over the state. No state-sized buffer is allocated
inside the loop (the page faults of fresh large buffers cost as much as the math).

Under GQA the ``G = NV / NK`` value heads of one key head are adjacent in the state, so the
state is viewed as ``[n·NK, G·DV, DK]`` and multiplied by the key head's own ``[k, q]``:
the query and key rows are never repeated onto the value heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import overload

import torch

from .constants import constant

__all__ = ["recurrent_gated_delta_rule", "host_bounds", "sequence_bounds", "uniform_length", "clipped_bounds",
           "zero_uncovered_tokens", "L2NORM_EPS"]

#: The epsilon of the in-kernel q/k l2 normalisation (flash-linear-attention's value).
L2NORM_EPS = 1e-6


def sequence_bounds(actual_seq_lengths: torch.Tensor, seq_lens_style: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(starts, lengths)`` as int64 CPU tensors of shape ``[B]``.

    ``lengths`` style gives ``L_b`` directly; ``cu_seqlens`` style gives the ``B + 1``
    prefix sums, whose consecutive differences are the lengths.
    """
    starts, lengths = host_bounds(actual_seq_lengths, seq_lens_style)
    return torch.tensor(starts, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)


def host_bounds(actual_seq_lengths: torch.Tensor, seq_lens_style: str) -> tuple[list[int], list[int]]:
    """``(starts, lengths)`` as Python lists: the metadata is a few hundred integers at most."""
    meta = actual_seq_lengths.tolist()
    if seq_lens_style == "cu_seqlens":
        return meta[:-1], [b - a for a, b in zip(meta[:-1], meta[1:])]
    if seq_lens_style == "lengths":
        starts, running = [], 0
        for n in meta:
            starts.append(running)
            running += n
        return starts, meta
    raise ValueError(f"seq_lens_style must be 'lengths' or 'cu_seqlens', got {seq_lens_style!r}")


def uniform_length(starts: list[int], lengths: list[int], T: int) -> int:
    """``L`` when every sequence has the same ``L > 0`` tokens and they tile ``[0, T)`` in order, else 0.

    The common decode layout (``L = 1``; speculative decoding: ``L`` draft tokens each), where
    step ``j``'s tokens are the strided rows ``j, L + j, 2L + j, ...``.
    """
    B = len(lengths)
    L = lengths[0] if B else 0
    return L if L > 0 and L * B == T and starts[0] == 0 and lengths.count(L) == B else 0


@dataclass(frozen=True)
class _Schedule:
    """Which tokens each step updates, for the sequences with at least one token.

    ``uniform`` is the common decode layout (every sequence has the same length ``L`` and
    they tile ``[0, T)``): step ``j``'s tokens are then ``j, L + j, 2L + j, ...``, a strided
    slice of every token tensor. Otherwise ``tokens[j]`` indexes them, longest sequence first.
    """

    first_tokens: list[int] | None  # the token whose slot holds each sequence's initial state; None: s_b
    live: list[int]  # live[j]: how many sequences have a j-th token (a prefix: longest first)
    uniform: int  # L when uniform, else 0
    tokens: list[torch.Tensor]  # tokens[j] (non-uniform only), on the tensors' device

    @classmethod
    def plan(cls, starts: list[int], lengths: list[int], accepted: list[int] | None, T: int,
             device: torch.device) -> _Schedule | None:
        L = uniform_length(starts, lengths, T)
        if L:
            first = None if accepted is None else [b * L + a - 1 for b, a in enumerate(accepted)]
            return cls(first, [len(lengths)] * L, L, [])
        order = sorted((b for b, n in enumerate(lengths) if n > 0), key=lambda b: -lengths[b])
        if not order:
            return None
        first = [starts[b] + (accepted[b] - 1 if accepted is not None else 0) for b in order]
        by_length = [lengths[b] for b in order]
        live = [sum(1 for n in by_length if n > j) for j in range(by_length[0])]
        tokens = [torch.tensor([starts[b] + j for b in order[:n]], dtype=torch.int64, device=device)
                  for j, n in enumerate(live)]
        return cls(first, live, 0, tokens)

    @overload
    def rows(self, x: torch.Tensor, j: int) -> torch.Tensor: ...
    @overload
    def rows(self, x: None, j: int) -> None: ...
    @overload
    def rows(self, x: torch.Tensor | None, j: int) -> torch.Tensor | None: ...

    def rows(self, x: torch.Tensor | None, j: int) -> torch.Tensor | None:
        """The rows of token tensor ``x`` that step ``j`` updates (None stays None)."""
        if x is None or self.uniform == 1:
            return x
        if self.uniform:
            return x[j :: self.uniform]
        return x.index_select(0, self.tokens[j])

    def first_rows(self, x: torch.Tensor) -> torch.Tensor:
        """The rows of ``x`` at each sequence's first accepted token."""
        if self.first_tokens is None:
            return self.rows(x, 0)
        return x.index_select(0, torch.tensor(self.first_tokens, dtype=torch.int64, device=x.device))

    def write_rows(self, out: torch.Tensor, j: int, read: torch.Tensor, delta: torch.Tensor,
                   k_dot_q: torch.Tensor) -> None:
        """Store step ``j``'s outputs, ``read + delta * k_dot_q``, into their token rows of ``out``."""
        if self.uniform:
            torch.addcmul(read, delta, k_dot_q, out=out if self.uniform == 1 else out[j :: self.uniform])
        else:
            out.index_copy_(0, self.tokens[j], read.addcmul_(delta, k_dot_q).to(out.dtype))


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype`` (itself when it already is: this skips a dispatch on the hot path)."""
    return t if t.dtype == dtype else t.to(dtype)


def _promotes_to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` itself where an op with a ``dtype`` operand computes in ``dtype`` (a narrower float), else cast."""
    return t if torch.promote_types(t.dtype, dtype) == dtype else t.to(dtype)


def _gathered_states(state: torch.Tensor, slots: torch.Tensor, compute_dtype: torch.dtype,
                     padded: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The initial states ``[n, NV, DV, DK]`` in ``compute_dtype`` (zeros where the slot is
    padding), and a buffer of their shape in the state's dtype when that differs (else None):
    the gathered rows themselves, reused for the per-token re-quantisation. An empty pool has no row
    to clamp a padding slot to, and every slot is padding there (slots lie in ``[-1, S)``): zeros."""
    if state.shape[0] == 0:
        S = torch.zeros((slots.numel(), *state.shape[1:]), dtype=compute_dtype, device=state.device)
        return S, None if compute_dtype == state.dtype else torch.zeros_like(S, dtype=state.dtype)
    gathered = state.index_select(0, slots.clamp(min=0) if padded else slots)
    S = _cast(gathered, compute_dtype)
    if padded:
        S.masked_fill_((slots < 0).view(-1, 1, 1, 1), 0)
    return S, None if S is gathered else gathered


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as 16-byte elements where it is large and its layout allows (else ``t``).

    ``index_copy_`` costs per element, not per byte; a copy moves bits unchanged whatever the
    element type, so copying the rows as complex128 is bit-for-bit the same write, twice as fast.
    """
    if t.numel() < 2**16 or not t.is_contiguous() or (t.shape[-1] * t.element_size()) % 16 or t.data_ptr() % 16:
        return t
    # Rows of plain strides first: is_contiguous() passes a size-1 axis of any stride, which the dtype view
    # refuses (found in review: an NV = 1 pool permuted from [S, DV, DK, 1]).
    return t.view(t.shape[0], -1).view(torch.complex128)


def _write_states(state: torch.Tensor, slots: torch.Tensor, S: torch.Tensor, padded: bool) -> None:
    """Store ``S[i]`` into ``state[slots[i]]``, skipping padding slots."""
    if padded:
        kept = torch.nonzero(slots >= 0).flatten()
        slots, S = slots.index_select(0, kept), S.index_select(0, kept)
    wide_state, wide_S = _wide(state), _wide(S)
    if wide_state.dtype == wide_S.dtype:
        state, S = wide_state, wide_S
    state.index_copy_(0, slots, S)


def clipped_bounds(meta: list[int], seq_lens_style: str, T: int) -> tuple[list[int], list[int]]:
    """``(starts, lengths)`` of the sequences as every backend follows them, unchecked
    metadata included (RGDR.md; the manifest's description): laid end to end, each inside the
    tokens ``[0, T)``. With ``clip(x) = min(max(x, 0), T)``:

    * ``lengths``: a negative length counts as 0; sequence ``b`` spans
      ``[clip(s_b), clip(s_b + L_b))`` with ``s_b`` the sum of the earlier (non-negative) lengths;
    * ``cu_seqlens``: sequence ``b`` spans ``[s_b, max(s_b, clip(cu[b + 1])))`` with
      ``s_b = clip(max(cu[0..b]))``.

    Either way the spans are disjoint and tile ``[starts[0], starts[-1] + lengths[-1])``, so the
    tokens no sequence covers are a head and a tail, which a kernel zeroes cheaply. Metadata
    that passes the contents check (non-negative lengths summing to T; cu_seqlens from 0,
    non-decreasing, to T) comes back exactly as :func:`host_bounds` reads it."""
    # Comparisons, not min/max: this runs per call over B sequences on the CPU decode path.
    starts, lengths = [], []
    if seq_lens_style == "cu_seqlens":
        high = meta[0] if meta else 0
        for b in range(len(meta) - 1):
            if meta[b] > high:
                high = meta[b]
            start = 0 if high < 0 else high if high < T else T
            end = meta[b + 1]
            end = start if end < start else end if end < T else T
            starts.append(start)
            lengths.append(end - start)
    elif seq_lens_style == "lengths":
        running = 0
        for n in meta:
            start = running if running < T else T
            if n > 0:
                running += n
            starts.append(start)
            lengths.append((running if running < T else T) - start)
    else:
        raise ValueError(f"seq_lens_style must be 'lengths' or 'cu_seqlens', got {seq_lens_style!r}")
    return starts, lengths


def clipped_accepted(accepted: list[int], lengths: list[int]) -> list[int]:
    """Each accepted count clipped to ``[1, L_b]`` (a sequence with no tokens keeps its count:
    nothing reads it)."""
    return [min(max(a, 1), n) if n > 0 else a for a, n in zip(accepted, lengths)]


def zero_uncovered_tokens(out: torch.Tensor, starts: list[int], lengths: list[int]) -> None:
    """Rows no sequence covers (only unchecked metadata leaves any) are zeros, never left
    unwritten: the spans of :func:`clipped_bounds` tile one range, so these are a head and a tail."""
    T = out.shape[0]
    head = starts[0] if starts else T
    tail = starts[-1] + lengths[-1] if starts else T
    if head > 0:
        out[:head].zero_()
    if tail < T:
        out[tail:].zero_()


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    actual_seq_lengths: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    g: torch.Tensor | None = None,
    gk: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    seq_lens_style: str = "lengths",
    use_qk_l2norm_in_kernel: bool = False,
    compute_dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run one RGDR decode call: write ``state`` in place and return ``out``.

    ``out`` has ``value``'s dtype unless a buffer is given (the float64 reference
    passes a float64 buffer to keep full precision for comparisons).
    """
    T, NK, DK = query.shape
    NV, DV = value.shape[1:]
    scale = DK**-0.5 if scale is None else scale
    if out is None:
        out = torch.empty(value.shape, dtype=value.dtype, device=value.device)
    starts, lengths = clipped_bounds(actual_seq_lengths.tolist(), seq_lens_style, T)
    accepted = None if num_accepted_tokens is None else clipped_accepted(num_accepted_tokens.tolist(), lengths)
    zero_uncovered_tokens(out, starts, lengths)
    schedule = _Schedule.plan(starts, lengths, accepted, T, state.device)
    if schedule is None:
        return out
    host_slots = ssm_state_indices.tolist()  # host metadata, like the lengths
    padded = min(host_slots) < 0
    outside = [s for s in host_slots if s >= state.shape[0]]
    if outside:  # checked before the first write: a slot past the pool must never be written through
        raise IndexError(f"ssm_state_indices {outside[:8]} lie past the state pool of {state.shape[0]} slots; "
                         "nothing was written")
    # One token per sequence, each in its own slot b = its row b, the state already in the compute dtype:
    # the pool rows are the running states, updated in place (no gather, no scatter).
    in_place = (schedule.uniform == 1 and schedule.first_tokens is None and state.dtype == compute_dtype
                and state.is_contiguous() and host_slots == list(range(T)))
    slots = ssm_state_indices if ssm_state_indices.device == state.device else ssm_state_indices.to(state.device)
    if not in_place:
        slots = _cast(slots, torch.int64)  # index_copy_ takes int64 indices

    # [T, NK, 2, DK]: the key and scale·query rows of each token and key head, side by side.
    kq = _cast(torch.stack((key, query), dim=-2), compute_dtype)
    if use_qk_l2norm_in_kernel:
        kq = kq * (kq * kq).sum(-1, keepdim=True).add_(constant(L2NORM_EPS, compute_dtype)).rsqrt_()
    kq.select(-2, 1).mul_(constant(scale, compute_dtype))  # kq is this call's own buffer (stack, or the l2norm product)
    G = NV // NK  # GQA: value head h reads query/key head h // G
    k_rows = kq.narrow(-2, 0, 1)  # [T, NK, 1, DK]
    k_dot_q = kq.prod(-2).sum(-1, keepdim=True).unsqueeze(-1)  # [T, NK, 1, 1]
    # Per value head, grouped under the key heads: [T, NK, G, DV]. value and beta enter only binary
    # ops with compute_dtype operands, which promote them exactly.
    v_all = _promotes_to(value, compute_dtype).view(T, NK, G, DV)
    beta_all = _promotes_to(beta, compute_dtype).view(T, NK, G, 1)
    out_grouped = out.view(T, NK, G, DV)
    # Each token's decay, shaped to scale the state: [T, NV, 1, 1] per head, [T, NV, 1, DK] per channel.
    log_decay = None if g is None else _cast(g, compute_dtype)
    if gk is not None and gk.dim() == 2:
        log_decay = _cast(gk, compute_dtype) if log_decay is None else log_decay + _cast(gk, compute_dtype)
    decay = None if log_decay is None else log_decay.exp().view(T, NV, 1, 1)
    if gk is not None and gk.dim() == 3:
        channel = _cast(gk, compute_dtype).exp().unsqueeze(-2)
        decay = channel if decay is None else decay * channel

    if in_place:
        S, rounded = state.narrow(0, 0, T), None
    else:
        S, rounded = _gathered_states(state, schedule.first_rows(slots), compute_dtype, padded)  # before any write
    for j, n in enumerate(schedule.live):
        Sj = S if n == S.shape[0] else S[:n]
        w = schedule.rows(decay, j)
        if w is not None:
            Sj.mul_(w)
        grouped = Sj.view(n, NK, G * DV, DK)  # the value heads of each key head, stacked
        # [n·NK, G·DV, 2]: S k and S (scale·q), one pass over the state.
        kq_j = schedule.rows(kq, j).reshape(n * NK, 2, DK)
        product = torch.bmm(grouped.view(n * NK, G * DV, DK), kq_j.transpose(1, 2))
        predicted, read = product.view(n, NK, G, DV, 2).unbind(-1)
        delta = (schedule.rows(v_all, j) - predicted).mul_(schedule.rows(beta_all, j))
        schedule.write_rows(out_grouped, j, read, delta, schedule.rows(k_dot_q, j))
        grouped.addcmul_(delta.view(n, NK, G * DV, 1), schedule.rows(k_rows, j))
        stored = Sj
        if rounded is not None:  # the recurrence continues from what the state buffer can hold
            stored = rounded if n == S.shape[0] else rounded[:n]
            stored.copy_(Sj)
            Sj.copy_(stored)
        if not in_place:
            _write_states(state, schedule.rows(slots, j), stored, padded)
    return out
