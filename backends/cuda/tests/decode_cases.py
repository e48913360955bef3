"""Decode batches for checking the attention decode kernel against float64 (the GPU tests and the
decode sweep share them): ragged batches with padding, contiguous or paged with spare blocks,
every cache slot no sequence reads NaN-poisoned, and the float64 reference step.

Nothing here imports torch at module import.
"""

from __future__ import annotations

__all__ = ["decode_batch", "decode_reference", "places", "poison_unread"]


def places(inputs, b: int, n: int):
    """``(rows, offsets)`` of positions ``0 .. n`` of sequence ``b`` (device tensors)."""
    import torch

    dev = inputs["query"].device
    pos = torch.arange(n + 1, device=dev)
    L = inputs["key_cache"].shape[1]
    table = inputs.get("block_table")
    if table is None:
        return torch.full_like(pos, b), pos
    return table[b].long()[pos // L], pos % L


def poison_unread(inputs) -> None:
    """NaN into every cache slot no sequence reads before this step (the step's own slot included)."""
    import torch

    read = torch.zeros(inputs["key_cache"].shape[:2], dtype=torch.bool, device=inputs["key_cache"].device)
    for b, n in enumerate(inputs["cache_seqlens"].tolist()):
        if n > 0:
            rows, at = places(inputs, b, n - 1)
            read[rows, at] = True
    inputs["key_cache"][~read] = float("nan")
    inputs["value_cache"][~read] = float("nan")


def decode_reference(inputs, scale):
    """float64 ``(out, key_cache, value_cache)`` after the step, on the device."""
    import torch

    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    q = inputs["query"].double()
    B, NQ, D = q.shape
    NKV = inputs["key"].shape[1]
    out = torch.zeros(B, NQ, D, dtype=torch.float64, device=q.device)
    for b, n in enumerate(inputs["cache_seqlens"].tolist()):
        if n < 0:
            continue
        rows, at = places(inputs, b, n)
        kc[rows[n], at[n]] = inputs["key"][b]
        vc[rows[n], at[n]] = inputs["value"][b]
        k = kc[rows, at].double().repeat_interleave(NQ // NKV, dim=1)  # [n + 1, NQ, D]
        v = vc[rows, at].double().repeat_interleave(NQ // NKV, dim=1)
        s = torch.einsum("hd,thd->ht", q[b], k) * (D ** -0.5 if scale is None else scale)
        out[b] = torch.einsum("ht,thd->hd", torch.softmax(s, dim=-1), v)
    return out, kc, vc


def decode_batch(device, gen, lengths, NQ=16, NKV=2, D=256, block=None, dtype="bfloat16", capacity=None):
    """A decode batch with the given ``cache_seqlens`` (-1: padding); contiguous, or paged with
    ``block``-token blocks drawn at random from a pool with spare blocks (unused entries -1)."""
    import torch

    tdt = getattr(torch, dtype)
    B = len(lengths)
    capacity = capacity or max(lengths) + 1
    r = lambda *s: torch.randn(*s, device=device, generator=gen).to(tdt)  # noqa: E731
    inputs = dict(query=r(B, NQ, D), key=r(B, NKV, D), value=r(B, NKV, D),
                  cache_seqlens=torch.tensor(lengths, dtype=torch.int32, device=device))
    if block is None:
        inputs.update(key_cache=r(B + 2, capacity, NKV, D), value_cache=r(B + 2, capacity, NKV, D))
        return inputs
    M = -(-capacity // block)
    N = B * M + 3
    table = torch.randperm(N, device=device, generator=gen)[: B * M].view(B, M).int()
    used = torch.arange(M, device=device).unsqueeze(0) <= (torch.tensor(lengths, device=device).clamp(min=0)
                                                           // block).unsqueeze(1)
    table[~used] = -1
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D), block_table=table)
    return inputs
