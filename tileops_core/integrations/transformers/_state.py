"""The GatedDeltaNet state in TileOPs' pool layout, kept in the model's own cache object.

transformers (>= 5.2x) keeps a linear-attention layer's states in a cache layer
(``LinearAttentionCacheLayerMixin``: ``conv_states[0]``, ``recurrent_states[0]``,
``has_previous_state[0]``), which ``Cache.reset``, ``reorder_cache`` (beam search) and
``offload`` handle along the batch axis only. The adapter stores the pools there in the
layout the ops read and write in place, with slot ``b`` = batch row ``b``:

- recurrent state ``[B, NV, DV, DK]`` (RecurrentGatedDeltaRuleFwdOp / ChunkGatedDeltaRuleFwdOp),
  float32 as HF keeps it;
- conv state ``[B, D, W - 1]`` (CausalConv1dUpdateFwdOp / CausalConv1dVarlenFwdOp), the
  model's dtype.

HF's own layouts (``[B, NV, DK, DV]`` and ``[B, D, W]``) are never built, so no call
transposes or copies state. Only the patched layer reads these entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["GDNShapes", "LinearAttentionPools", "cache_has_linear_attention_layers", "check_pools", "pools_for"]


@dataclass(frozen=True)
class GDNShapes:
    """One sequence's slot in each pool of a GatedDeltaNet layer, in the layouts above."""

    conv: tuple[int, int]  # (D, W - 1)
    recurrent: tuple[int, int, int]  # (NV, DV, DK)


@dataclass(frozen=True)
class LinearAttentionPools:
    """One layer's pools for one forward, and whether they hold the batch's earlier tokens."""

    conv: torch.Tensor
    ssm: torch.Tensor
    continuing: bool


def cache_has_linear_attention_layers() -> str | None:
    """None when this transformers keeps linear-attention states in cache layers; else why not."""
    try:
        from transformers.cache_utils import LinearAttentionCacheLayerMixin  # noqa: F401
    except ImportError:
        import transformers

        return (f"transformers {transformers.__version__} has no LinearAttentionCacheLayerMixin (its cache keeps "
                "GatedDeltaNet states in a layout TileOPs cannot address in place)")
    return None


def _fresh(batch: int, shapes: GDNShapes, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    conv = torch.zeros(batch, *shapes.conv, dtype=dtype, device=device)
    ssm = torch.zeros(batch, *shapes.recurrent, dtype=torch.float32, device=device)
    return conv, ssm


def _holds_pools(layer: Any, batch: int, shapes: GDNShapes) -> bool:
    conv, ssm = layer.conv_states[0], layer.recurrent_states[0]
    return conv is not None and ssm is not None and tuple(conv.shape) == (batch, *shapes.conv)


def check_pools(cache: Any, layer_idx: int, batch: int, shapes: GDNShapes) -> None:
    """Refuse a cache whose layer ``layer_idx`` the adapter cannot continue for ``batch`` rows. Made at the
    forward's entry (``_forward``), before any layer writes: :func:`pools_for` relies on it."""
    layer = cache.layers[layer_idx]
    if getattr(layer, "record_past", False):
        raise NotImplementedError(
            f"layer {layer_idx}: the cache records past conv states (assisted decoding's rollback), which needs HF's "
            "own conv layout; call this model without apply_tileops for assisted generation")
    if layer.has_previous_state[0] and not _holds_pools(layer, batch, shapes):
        conv = layer.conv_states[0]
        raise ValueError(
            f"layer {layer_idx}: the cache holds conv state {tuple(conv.shape) if conv is not None else None}, "
            f"not TileOPs' pool {(batch, *shapes.conv)}: it was filled by an unpatched forward or for another batch "
            "size")


def pools_for(cache: Any, layer_idx: int, batch: int, shapes: GDNShapes, dtype: torch.dtype,
              device: torch.device) -> LinearAttentionPools:
    """The pools of ``layer_idx`` in ``cache`` (made on its first forward; None: this call only). A cache
    that :func:`check_pools` refuses never gets here."""
    if cache is None:
        conv, ssm = _fresh(batch, shapes, dtype, device)
        return LinearAttentionPools(conv, ssm, False)
    layer = cache.layers[layer_idx]
    continuing = bool(layer.has_previous_state[0])
    if not _holds_pools(layer, batch, shapes):
        conv, ssm = _fresh(batch, shapes, dtype, device)
        if not torch.compiler.is_compiling():  # as HF does: static addresses let CUDA graphs capture the step
            torch._dynamo.mark_static_address(conv)
            torch._dynamo.mark_static_address(ssm)
        layer.conv_states[0], layer.recurrent_states[0] = conv, ssm
        layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
        layer.conv_kernel_size[0] = shapes.conv[1]
        layer.dtype, layer.device = dtype, device
    layer.has_previous_state[0] = True  # after this forward the pools hold the batch's tokens
    return LinearAttentionPools(layer.conv_states[0], layer.recurrent_states[0], continuing)
