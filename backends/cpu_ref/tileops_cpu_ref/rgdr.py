"""Reference semantics of RecurrentGatedDeltaRuleFwdOp (the RGDR decode step).

One function serves two roles: with ``compute_dtype=torch.float32`` it is the CPU
reference kernel; with ``torch.float64`` it is the high-precision reference every
accelerator kernel is checked against. The math follows ``RGDR.md`` literally:

* tokens are packed by sequence, sequence ``b`` owning ``[s_b, s_b + L_b)``;
* value head ``h`` reads query/key head ``h // (NV // NK)``;
* the state of a sequence is read once, from the slot of its first accepted token,
  before this call writes anything;
* each token's output reads the updated state; then the running state is rounded to
  the state's dtype and the recurrence continues from the rounded value (the fp16/bf16
  drift is part of the semantics, not an error of the kernel);
* a negative slot index is padding: that token writes nothing, and a sequence whose
  first slot is negative starts from zeros.

Sequences are processed together, one token position at a time, so a decode batch
costs ``max(L_b)`` vectorised steps instead of ``T`` Python iterations.
"""

from __future__ import annotations

import torch

__all__ = ["recurrent_gated_delta_rule", "sequence_bounds", "L2NORM_EPS"]

#: The epsilon of the in-kernel q/k l2 normalisation (flash-linear-attention's value).
L2NORM_EPS = 1e-6


def sequence_bounds(actual_seq_lengths: torch.Tensor, seq_lens_style: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(starts, lengths)`` as int64 CPU tensors of shape ``[B]``.

    ``lengths`` style gives ``L_b`` directly; ``cu_seqlens`` style gives the ``B + 1``
    prefix sums, whose consecutive differences are the lengths.
    """
    meta = actual_seq_lengths.to(device="cpu", dtype=torch.int64)
    if seq_lens_style == "cu_seqlens":
        lengths = meta[1:] - meta[:-1]
        starts = meta[:-1].clone()
    elif seq_lens_style == "lengths":
        lengths = meta
        starts = torch.cumsum(meta, 0) - meta
    else:
        raise ValueError(f"seq_lens_style must be 'lengths' or 'cu_seqlens', got {seq_lens_style!r}")
    return starts, lengths


def _l2_normalise(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


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
    NV, DV = value.shape[1], value.shape[2]
    group = NV // NK
    scale = DK**-0.5 if scale is None else scale
    device = state.device
    if out is None:
        out = torch.empty((T, NV, DV), dtype=value.dtype, device=value.device)

    starts, lengths = sequence_bounds(actual_seq_lengths, seq_lens_style)
    slots = ssm_state_indices.to(device=device, dtype=torch.int64)
    active = lengths > 0
    if not bool(active.any()):
        return out
    starts, lengths = starts[active], lengths[active]
    first = starts.clone()
    if num_accepted_tokens is not None:
        accepted = num_accepted_tokens.to(device="cpu", dtype=torch.int64)[active]
        first += accepted - 1

    # Every sequence's initial state is gathered before any slot is written.
    first_slot = slots[first.to(device)]
    S = state.index_select(0, first_slot.clamp(min=0)).to(compute_dtype)  # [b, NV, DV, DK]
    S = torch.where((first_slot >= 0).view(-1, 1, 1, 1), S, torch.zeros_like(S))

    q_all = query.to(compute_dtype)
    k_all = key.to(compute_dtype)
    if use_qk_l2norm_in_kernel:
        q_all, k_all = _l2_normalise(q_all), _l2_normalise(k_all)
    # GQA: expand query/key heads onto value heads once.
    q_all = q_all.repeat_interleave(group, dim=1) * scale  # [T, NV, DK]
    k_all = k_all.repeat_interleave(group, dim=1)
    v_all = value.to(compute_dtype)
    beta_all = beta.to(compute_dtype)
    g_all = None if g is None else g.to(compute_dtype)
    gk_all = None if gk is None else gk.to(compute_dtype)

    for step in range(int(lengths.max())):
        live = lengths > step
        idx = torch.nonzero(live).flatten()
        t = (starts[idx] + step).to(device)
        idx = idx.to(device)
        Sb = S.index_select(0, idx)
        if g_all is not None:
            Sb = Sb * torch.exp(g_all[t]).view(-1, NV, 1, 1)
        if gk_all is not None:
            decay = torch.exp(gk_all[t])
            Sb = Sb * (decay.view(-1, NV, 1, 1) if decay.dim() == 2 else decay.view(-1, NV, 1, DK))
        k = k_all[t]  # [n, NV, DK]
        predicted = torch.einsum("nhvk,nhk->nhv", Sb, k)
        delta = beta_all[t].unsqueeze(-1) * (v_all[t] - predicted)
        Sb = Sb + delta.unsqueeze(-1) * k.unsqueeze(-2)
        out[t] = torch.einsum("nhvk,nhk->nhv", Sb, q_all[t]).to(out.dtype)  # the updated state, unrounded
        # Re-quantise: the recurrence continues from what the state buffer can hold.
        Sb = Sb.to(state.dtype).to(compute_dtype)
        write_slot = slots[t]
        keep = write_slot >= 0
        if bool(keep.any()):
            state[write_slot[keep]] = Sb[keep].to(state.dtype)
        S[idx] = Sb
    return out
