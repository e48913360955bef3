"""One decode step of a patched model over the static pools: no host sync, no Python branch on data.

The step walks the model's decoder layers itself (HF's model forward builds masks and cache
bookkeeping on the host every call) and runs each piece where a CUDA graph can hold it:

- embedding, the Linear projections, ``lm_head``: the model's own modules;
- the layer norms and the final norm: the modules ``apply_tileops`` patched (zero-centred
  RMSNorm ops); the first residual add fused into ``post_attention_layernorm``;
- GatedDeltaNet: the adapter's own forward (``_gdn._gdn_forward``) handed a cache object over
  the static pools, so decode runs the same ops (conv1d update, gating, RGDR, gated norm) in place;
- full attention: q/k norms as patched, HF's rotary module and ``apply_rotary_pos_emb`` from the
  device positions, the new key/value written at each row's length, attention over the whole
  fixed-capacity cache with the positions past each row's length masked, and the output gate as
  SigmoidGateMulFwdOp. TileOPs' AttentionDecodeFwdOp / QKNormRopeFwdOp are not used here: their
  kernels read lengths and positions on the host (the only kernels they have are the reference's),
  which no CUDA graph can hold;
- MoE blocks: the router (as patched), transformers' ``grouped_mm`` experts (sized on the device,
  written for CUDA graphs; TileOPs' MoE ops read expert offsets on the host), and the shared
  expert as MoESharedExpertFwdOp.

Every op here is made with ``check_contents=False``: those checks read tensor contents (a sync).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ...ops.attention import SigmoidGateMulFwdOp
from ...ops.gated_delta_net import FusedAddZeroCentredRMSNormFwdOp
from ...ops.moe import MoESharedExpertFwdOp
from ._gdn import GDNOps, _gdn_forward, _Metadata
from ._static_pools import AttentionKV, StaticGDNCache, StaticPools

__all__ = ["StaticStep"]


def _without_contents_checks(*ops: Any) -> None:
    for op in ops:
        op.checks_contents = False


class StaticStep:
    """``step(batch) -> logits [batch, vocab]``: one token per row from ``pools.ids``, states in place."""

    def __init__(self, model: Any, pools: StaticPools) -> None:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        self.model, self.pools = model, pools
        inner, config = model.model, model.config
        modeling = importlib.import_module(type(model).__module__)
        self._apply_rope: Callable[..., tuple[torch.Tensor, torch.Tensor]] = modeling.apply_rotary_pos_emb
        self._experts = ALL_EXPERTS_FUNCTIONS["grouped_mm"]
        gdn_ops = GDNOps(float(config.rms_norm_eps))
        _without_contents_checks(*vars(gdn_ops).values())
        metadata = _Metadata()
        self._gdn = {i: _gdn_forward(inner.layers[i].linear_attn, gdn_ops, metadata) for i in pools.gdn}
        self._add_norm = {i: FusedAddZeroCentredRMSNormFwdOp(eps=float(layer.post_attention_layernorm.eps),
                                                             check_contents=False)
                          for i, layer in enumerate(inner.layers)}
        self._gate = SigmoidGateMulFwdOp(check_contents=False)
        self._shared = MoESharedExpertFwdOp(check_contents=False)
        # Qwen3.5's text rotary takes three position rows (MRoPE; transformers < 5.2x requires them), others one.
        self._rope_rows = 3 if hasattr(inner.rotary_emb, "mrope_section") else 0
        self._gdn_cache: StaticGDNCache | None = None

    def start(self, batch: int) -> None:
        """A new batch was prefilled into the pools: the GatedDeltaNet layers continue from them. The
        cache object is kept while the batch size is (a compiled step guards on it)."""
        if self._gdn_cache is None or self._gdn_cache.batch != batch:
            self._gdn_cache = StaticGDNCache(self.pools.gdn, batch)

    def __call__(self, batch: int) -> torch.Tensor:
        inner, p = self.model.model, self.pools
        x = inner.embed_tokens(p.ids[:batch].view(batch, 1))
        positions = p.positions[:batch].view(batch, 1)
        if self._rope_rows:
            positions = positions.expand(self._rope_rows, batch, 1)
        cos, sin = inner.rotary_emb(x, positions)
        for i, layer in enumerate(inner.layers):
            h = layer.input_layernorm(x)
            if i in self._gdn:
                h = self._gdn[i](h, cache=self._gdn_cache)
            else:
                h = self._attention(layer.self_attn, p.kv[i], h, cos, sin, batch)
            normed = self._add_norm[i](x, h, layer.post_attention_layernorm.weight)  # h <- x + h
            x = h + self._mlp(layer.mlp, normed)
        logits = self.model.lm_head(inner.norm(x)).view(batch, -1)
        p.positions[:batch] += 1
        return logits

    def _attention(self, m: Any, kv: AttentionKV, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   batch: int) -> torch.Tensor:
        nq, nkv, d = m.config.num_attention_heads, m.config.num_key_value_heads, m.head_dim
        qg = m.q_proj(h).view(batch, 1, nq, 2 * d)
        query = m.q_norm(qg[..., :d]).transpose(1, 2)  # [B, NQ, 1, D]
        key = m.k_norm(m.k_proj(h).view(batch, 1, nkv, d)).transpose(1, 2)
        query, key = self._apply_rope(query, key, cos, sin)
        rows, at = self.pools.rows[:batch], kv.lengths[:batch].long()
        kv.keys.index_put_((rows, at), key[:, :, 0])
        kv.values.index_put_((rows, at), m.v_proj(h).view(batch, nkv, d))
        seen = (self.pools.key_positions <= kv.lengths[:batch, None]).view(batch, 1, 1, -1)
        out = F.scaled_dot_product_attention(query, kv.keys[:batch].transpose(1, 2), kv.values[:batch].transpose(1, 2),
                                             attn_mask=seen, scale=m.scaling, enable_gqa=nq != nkv)
        kv.lengths[:batch] += 1
        out = self._gate(out.transpose(1, 2).reshape(batch, 1, nq * d), qg[..., d:].reshape(batch, 1, nq * d))
        return m.o_proj(out)

    def _mlp(self, mlp: Any, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(mlp, "experts"):
            return mlp(x)
        B, S, H = x.shape
        flat = x.view(-1, H)
        se = mlp.shared_expert
        shared = self._shared(flat, se.gate_proj.weight, se.up_proj.weight, se.down_proj.weight,
                              mlp.shared_expert_gate.weight)
        _, weights, ids = mlp.gate(flat)
        return (self._experts(mlp.experts, flat, ids, weights) + shared).view(B, S, H)
