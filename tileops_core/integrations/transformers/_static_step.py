"""One decode step of a patched model over the static pools: no host sync, no Python branch on data.

The step walks the model's decoder layers itself (HF's model forward builds masks and cache
bookkeeping on the host every call) and runs each piece where a CUDA graph can hold it, every
one on a TileOPs op (the Linear layers and the embedding too after ``apply_tileops(model,
every_module=True)``):

- embedding, the Linear projections, ``lm_head``, the layer norms, the final norm, the MLPs and
  the sparse MoE blocks: the modules as ``apply_tileops`` patched them (a MoE block's routing,
  permute, grouped experts, un-permute and shared expert size their work from the token count,
  which a step fixes; their TileLang kernels read no routing metadata on the host);
- the first residual add fused into ``post_attention_layernorm`` (FusedAddZeroCentredRMSNormFwdOp);
- GatedDeltaNet: the adapter's own forward (``_gdn._gdn_forward``) handed a cache object over
  the static pools, so decode runs the same ops (conv1d update, gating, RGDR, gated norm) in place;
- full attention: the adapter's projections through QKNormRopeFwdOp from each row's device
  position, AttentionDecodeFwdOp writing the new key/value at each row's length of the
  fixed-capacity cache and attending over it (its kernels size their work from the capacity,
  not the lengths), then SigmoidGateMulFwdOp and ``o_proj`` (``_attention.AttentionLayer``).

The ops this step makes itself are made with ``check_contents=False``: those checks read tensor
contents (a sync). On the CPU the reference kernels read lengths and routing on the host, which
costs nothing there; a CUDA step served by a reference kernel would sync, which the session's
capture reports.
"""

from __future__ import annotations

from typing import Any

import torch

from ...ops.gated_delta_net import FusedAddZeroCentredRMSNormFwdOp
from ._attention import AttentionLayer, AttentionOps
from ._gdn import GDNOps, _gdn_forward, _Metadata
from ._op_pool import OpPool
from ._static_pools import AttentionKV, StaticGDNCache, StaticPools

__all__ = ["StaticStep"]


def _without_contents_checks(*ops: Any) -> None:
    for op in ops:
        op.checks_contents = False


class StaticStep:
    """``step(batch) -> logits [batch, vocab]``: one token per row from ``pools.ids``, states in place."""

    def __init__(self, model: Any, pools: StaticPools) -> None:
        self.model, self.pools = model, pools
        inner, config = model.model, model.config
        gdn_ops = GDNOps(float(config.rms_norm_eps))
        _without_contents_checks(*vars(gdn_ops).values())
        metadata = self._metadata = _Metadata()
        self._gdn = {i: _gdn_forward(inner.layers[i].linear_attn, gdn_ops, metadata) for i in pools.gdn}
        pool = OpPool()  # one add-norm op for the layers of one eps (planned once a shape, not once a layer)
        self._add_norm = {i: pool.get(FusedAddZeroCentredRMSNormFwdOp, eps=float(layer.post_attention_layernorm.eps),
                                      check_contents=False)
                          for i, layer in enumerate(inner.layers)}
        self._attention: dict[int, AttentionLayer] = {}
        self._rope_rows = 1
        if pools.kv:
            first = inner.layers[next(iter(pools.kv))].self_attn
            # Qwen3.5's text rotary takes three position rows (MRoPE), others one.
            ops = AttentionOps(config, first.head_dim, getattr(inner.rotary_emb, "mrope_section", None),
                               check_contents=False)
            self._attention = {i: AttentionLayer(inner.layers[i].self_attn, ops) for i in pools.kv}
            self._rope_rows = ops.rows
        self._gdn_cache: StaticGDNCache | None = None

    def start(self, batch: int, static: bool = False) -> None:
        """A new batch was prefilled into the pools: the GatedDeltaNet layers continue from them. The
        cache object is kept while the batch size is (a compiled step guards on it). Its one-token
        metadata is made here, outside any compiled region: a trace that made it would change what
        its own guards read, and compile twice per batch size (found in review: the fifth batch size
        hit the recompile limit). ``static``: its pool views are marked static addresses, as the pools
        are, so that a reduce-overhead step that writes them in place still replays its CUDA graph."""
        if self._gdn_cache is None or self._gdn_cache.batch != batch:
            self._gdn_cache = StaticGDNCache(self.pools.gdn, batch)
            if static:
                for slot in self._gdn_cache.layers.values():
                    torch._dynamo.mark_static_address(slot.conv_states[0])
                    torch._dynamo.mark_static_address(slot.recurrent_states[0])
        if self.pools.gdn:
            self._metadata(batch, 1, self.pools.ids.device)

    def __call__(self, batch: int) -> torch.Tensor:
        inner, p = self.model.model, self.pools
        x = inner.embed_tokens(p.ids[:batch].view(batch, 1))
        positions = p.positions[:batch]
        if self._rope_rows == 3:
            positions = positions.expand(3, batch)
        for i, layer in enumerate(inner.layers):
            h = layer.input_layernorm(x)
            if i in self._gdn:
                h = self._gdn[i](h, cache=self._gdn_cache)
            else:
                h = self._attention_step(self._attention[i], p.kv[i], h, positions, batch)
            normed = self._add_norm[i](x, h, layer.post_attention_layernorm.weight)  # h <- x + h
            x = h + layer.mlp(normed)
        logits = self.model.lm_head(inner.norm(x)).view(batch, -1)
        p.positions[:batch] += 1
        return logits

    def _attention_step(self, layer: AttentionLayer, kv: AttentionKV, h: torch.Tensor, positions: torch.Tensor,
                        batch: int) -> torch.Tensor:
        query, key, value, gate = layer.project(h, positions)
        out = layer.ops.decode(query, key, value, kv.keys, kv.values, kv.lengths[:batch])
        kv.lengths[:batch] += 1
        return layer.output(out, gate, batch, 1)
