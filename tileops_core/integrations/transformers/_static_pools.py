"""Fixed-address state for a graph-captured decode step: GatedDeltaNet pools and the attention KV cache.

A CUDA graph replays kernels on the addresses it recorded, so everything a decode step reads
or writes across steps is allocated once, at the largest batch and length the session will
serve, and only ever written in place:

- per GatedDeltaNet layer, the conv pool ``[max_batch, conv_dim, W - 1]`` (model dtype) and the
  recurrent pool ``[max_batch, NV, DV, DK]`` (float32), the layouts the TileOPs ops address;
- per attention layer, keys and values ``[max_batch, max_len, NKV, D]`` with each row's real
  tokens left-aligned (as the dynamic adapter keeps them) and ``lengths`` ``[max_batch]``;
- the step's inputs: the next token ids and each row's rotary position ``[max_batch]``.

A batch of ``B <= max_batch`` rows uses the first ``B`` rows of each: leading-axis slices,
contiguous, at the buffers' own addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AttentionKV", "GDNPools", "StaticPools", "StaticGDNCache"]


@dataclass(frozen=True)
class GDNPools:
    """One GatedDeltaNet layer's conv and recurrent pools."""

    conv: torch.Tensor
    ssm: torch.Tensor


@dataclass(frozen=True)
class AttentionKV:
    """One attention layer's keys, values and per-row count of cached tokens."""

    keys: torch.Tensor
    values: torch.Tensor
    lengths: torch.Tensor


class _PoolSlot:
    """What the GatedDeltaNet adapter reads of a linear-attention cache layer (``_state.pools_for``),
    holding the static pools' first ``B`` rows, which a prefill has filled."""

    def __init__(self, pools: GDNPools, batch: int) -> None:
        self.conv_states = [pools.conv[:batch]]
        self.recurrent_states = [pools.ssm[:batch]]
        self.has_previous_state = [True]


class StaticGDNCache:
    """A cache object the GatedDeltaNet adapter's forward accepts, over the static pools:
    the adapter decodes straight into them (no HF cache, no copy)."""

    def __init__(self, gdn: dict[int, GDNPools], batch: int) -> None:
        self.batch = batch
        self.layers = {i: _PoolSlot(p, batch) for i, p in gdn.items()}


class StaticPools:
    """Every fixed-address buffer of one session, allocated once."""

    def __init__(self, model: Any, max_batch: int, max_len: int) -> None:
        p = next(model.parameters())
        dtype, device = p.dtype, p.device
        self.max_batch, self.max_len = max_batch, max_len
        self.gdn: dict[int, GDNPools] = {}
        self.kv: dict[int, AttentionKV] = {}
        for i, layer in enumerate(model.model.layers):
            if hasattr(layer, "linear_attn"):
                m = layer.linear_attn
                conv = torch.zeros(max_batch, m.conv_dim, m.conv_kernel_size - 1, dtype=dtype, device=device)
                ssm = torch.zeros(max_batch, m.num_v_heads, m.head_v_dim, m.head_k_dim, dtype=torch.float32,
                                  device=device)
                self.gdn[i] = GDNPools(conv, ssm)
            else:
                a = layer.self_attn
                nkv = a.config.num_key_value_heads
                keys = torch.zeros(max_batch, max_len, nkv, a.head_dim, dtype=dtype, device=device)
                self.kv[i] = AttentionKV(keys, torch.zeros_like(keys),
                                         torch.zeros(max_batch, dtype=torch.int32, device=device))
        self.ids = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self.positions = torch.zeros(max_batch, dtype=torch.int64, device=device)

    def tensors(self) -> list[torch.Tensor]:
        """Every buffer whose contents carry from one step to the next (what a replay reads in place)."""
        out = [self.ids, self.positions]
        for g in self.gdn.values():
            out += [g.conv, g.ssm]
        for kv in self.kv.values():
            out += [kv.keys, kv.values, kv.lengths]
        return out

    def addresses(self) -> list[int]:
        """The buffers' addresses (a test checks they never change)."""
        return [t.data_ptr() for t in self.tensors()]

    def snapshot(self) -> list[torch.Tensor]:
        return [t.clone() for t in self.tensors()]

    def restore(self, saved: list[torch.Tensor]) -> None:
        for t, s in zip(self.tensors(), saved):
            t.copy_(s)
