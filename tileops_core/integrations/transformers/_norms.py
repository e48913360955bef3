"""The zero-centred RMSNorms, and the decoder layer's residual add fused into its second norm.

- ``*RMSNorm`` (``x̂ · (1 + w)``, the layer norms, the final norm, attention's q/k norms):
  ZeroCentredRMSNormFwdOp, the weight passed as stored (no ``1 + w`` formed per call).
- ``*DecoderLayer``: HF adds the mixer's output to the layer input and normalises the sum
  with ``post_attention_layernorm``; the adapter does both in FusedAddZeroCentredRMSNormFwdOp,
  which writes the sum into the mixer's output (a tensor the layer owns; the layer input,
  which output capture may hold, is never written; nor is the mixer's output where a forward
  hook on the mixer or on its out projection, whose output it is, may hold it: the add writes
  a copy). The rest of the layer is HF's order.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.nn.modules.module import _global_forward_hooks

from ...ops.gated_delta_net import FusedAddZeroCentredRMSNormFwdOp, ZeroCentredRMSNormFwdOp
from ._op_pool import OpPool
from ._report import Route
from ._serving import serving
from ._compat import cache_keyword

__all__ = ["patch_decoder_layer", "patch_rms_norm"]


def _example(weight: torch.Tensor) -> torch.Tensor:
    return torch.empty(1, weight.shape[0], dtype=weight.dtype, device=weight.device)


def patch_rms_norm(name: str, m: Any, pool: OpPool) -> list[Route]:
    """A zero-centred RMSNorm module as ZeroCentredRMSNormFwdOp (``pool``'s), where a kernel serves it."""
    kind = type(m).__name__
    op = pool.get(ZeroCentredRMSNormFwdOp, role=name.rsplit(".", 1)[-1], eps=float(m.eps))  # one a module name
    answer = serving(op, _example(m.weight), m.weight)
    if not answer.ok:
        return [Route(name, kind, "norm", type(op).__name__, None, answer.reason)]
    weight = m.weight

    def forward(x: torch.Tensor) -> torch.Tensor:
        return op(x, weight)

    m.forward = forward
    return [Route(name, kind, "norm", type(op).__name__, answer.kernel, "")]


def _layer_forward(layer: Any, op: FusedAddZeroCentredRMSNormFwdOp, cache_name: str) -> Callable[..., torch.Tensor]:
    linear = getattr(layer, "block_type", getattr(layer, "layer_type", None)) == "linear_attention"
    mixer_cache = cache_keyword(type(layer.linear_attn).forward, "cache", "cache_params") if linear else cache_name
    weight = layer.post_attention_layernorm.weight
    # The layer's modules, looked up once (nn.Module attribute lookups cost per call)
    input_layernorm, mixer, mlp = layer.input_layernorm, layer.linear_attn if linear else layer.self_attn, layer.mlp
    # The mixer's output is its out projection's: hooks on either may keep it (torch keeps these dicts for the
    # modules' life; found in review: an activation kept on o_proj became residual + output)
    projection = getattr(mixer, "out_proj", None) if linear else getattr(mixer, "o_proj", None)
    mixer_hooks, projection_hooks = mixer._forward_hooks, getattr(projection, "_forward_hooks", {})

    def forward(hidden_states: torch.Tensor, position_embeddings: Any = None, attention_mask: Any = None,
                position_ids: Any = None, **kwargs: Any) -> torch.Tensor:
        h = input_layernorm(hidden_states)
        if linear:
            kwargs[mixer_cache] = kwargs.pop(cache_name, None)
            h = mixer(hidden_states=h, attention_mask=attention_mask, **kwargs)
        else:
            h, _ = mixer(hidden_states=h, attention_mask=attention_mask, position_ids=position_ids,
                         position_embeddings=position_embeddings, **kwargs)
        if mixer_hooks or projection_hooks or _global_forward_hooks:
            h = h.clone()  # a hook may keep (or have returned) the mixer's output: the add must not write into it
        normed = op(hidden_states, h, weight)  # h <- hidden_states + h, as HF's residual add rounds it
        out = mlp(normed)
        if isinstance(out, tuple):  # MoE blocks may return (hidden, router logits)
            out = out[0]
        return h + out

    return forward


def patch_decoder_layer(name: str, layer: Any, pool: OpPool) -> list[Route]:
    """Fuse the first residual add into ``post_attention_layernorm`` (``pool``'s op), where a kernel serves it."""
    kind = type(layer).__name__
    cache_name = cache_keyword(type(layer).forward, "cache", "past_key_values")
    norm = layer.post_attention_layernorm
    op = pool.get(FusedAddZeroCentredRMSNormFwdOp, eps=float(norm.eps))
    x = _example(norm.weight)
    answer = serving(op, x, x.clone(), norm.weight)
    if not answer.ok:
        return [Route(name, kind, "residual add + norm", type(op).__name__, None, answer.reason)]
    layer.forward = _layer_forward(layer, op, cache_name)
    return [Route(name, kind, "residual add + norm", type(op).__name__, answer.kernel, "",
                  covers=(f"{name}.post_attention_layernorm",))]
