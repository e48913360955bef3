"""The GatedDeltaNet adapter: a Qwen3-Next / Qwen3.5 linear-attention layer on TileOPs ops.

HF's layer calls module-level functions (``causal_conv1d_update``, ``torch_chunk_gated_delta_rule``,
...) bound when its module is imported, with the state in HF's layouts; transformers offers no
hook that hands those functions the cache (``use_kernelized_func`` only swaps them through the
``kernels`` hub). So the layer's ``forward`` is replaced on the instance by this adapter, which
keeps the module's own projections (``in_proj_*``, ``fix_query_key_value_ordering``,
``out_proj``) and runs the rest as TileOPs ops over the pools of ``_state``:

    conv1d (decode: CausalConv1dUpdateFwdOp, prefill: CausalConv1dVarlenFwdOp)
    -> q, k, v: the conv output's column slices, each copied contiguous (what the recurrent ops read)
    -> GDNGatingFwdOp: g, beta
    -> decode: RecurrentGatedDeltaRuleFwdOp, prefill: ChunkGatedDeltaRuleFwdOp (l2-normalised q/k in the kernel)
    -> GatedRMSNormFwdOp -> out_proj

Batch row ``b`` is sequence ``b`` and owns pool slot ``b``. Left padding needs nothing more:
HF zeroes the padded positions' hidden states (as this adapter does), which leaves a zero
state and a zero conv window until a row's first real token, exactly as in HF.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from ...ops.conv import CausalConv1dUpdateFwdOp, CausalConv1dVarlenFwdOp
from ...ops.gated_delta_net import GatedRMSNormFwdOp, GDNGatingFwdOp
from ...ops.gated_delta_prefill import ChunkGatedDeltaRuleFwdOp
from ...ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
from ._forward import ForwardCall, ForwardChecks
from ._report import Route
from ._serving import serving
from ._state import GDNShapes, check_pools, pools_for

__all__ = ["GDNOps", "patch_gated_delta_net"]


class GDNOps:
    """The op instances every GatedDeltaNet layer of one model shares (plans are per shape)."""

    def __init__(self, norm_eps: float) -> None:
        self.gating = GDNGatingFwdOp()
        self.norm = GatedRMSNormFwdOp(eps=norm_eps)
        self.conv_update = CausalConv1dUpdateFwdOp(activation="silu")
        self.conv_varlen = CausalConv1dVarlenFwdOp(activation="silu", seq_lens_style="cu_seqlens")
        self.decode = RecurrentGatedDeltaRuleFwdOp(use_qk_l2norm_in_kernel=True)
        self.prefill = ChunkGatedDeltaRuleFwdOp(use_qk_l2norm_in_kernel=True)


class _Metadata:
    """Per (B, T, device): lengths, prefix sums and slots (row b -> slot b), made once; a model
    serving prompts of ever-new lengths keeps the last few dozen shapes, not all it has seen."""

    _KEPT = 64

    def __init__(self) -> None:
        self._made: dict[tuple[int, int, torch.device], tuple[torch.Tensor, ...]] = {}

    def __call__(self, batch: int, tokens: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        key = (batch, tokens, device)
        made = self._made.get(key)
        if made is None:
            if len(self._made) >= self._KEPT:
                self._made.clear()
            rows = torch.arange(batch, dtype=torch.int32, device=device)
            ones = torch.ones(batch, dtype=torch.int32, device=device)
            cu = torch.arange(batch + 1, dtype=torch.int32, device=device) * tokens
            slots_per_token = rows.repeat_interleave(tokens)
            made = self._made[key] = (rows, ones, cu, slots_per_token, ones.bool())
        return made


def _shapes(m: Any) -> GDNShapes:
    return GDNShapes(conv=(m.conv_dim, m.conv_kernel_size - 1), recurrent=(m.num_v_heads, m.head_v_dim, m.head_k_dim))


def _projections(m: Any) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """The layer's own projections: ``h -> (mixed_qkv [B, T, conv_dim], z, b, a)``."""
    if hasattr(m, "in_proj_qkvz"):  # Qwen3-Next: one fused qkvz and one ba projection, grouped per key head
        qkvz, ba, fix_ordering = m.in_proj_qkvz, m.in_proj_ba, m.fix_query_key_value_ordering

        def qwen3_next(h: torch.Tensor) -> tuple[torch.Tensor, ...]:
            q, k, v, z, b, a = fix_ordering(qkvz(h), ba(h))
            B, T = h.shape[:2]
            return torch.cat((q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)), dim=-1), z, b, a
        return qwen3_next

    in_qkv, in_z, in_b, in_a = m.in_proj_qkv, m.in_proj_z, m.in_proj_b, m.in_proj_a

    def qwen3_5(h: torch.Tensor) -> tuple[torch.Tensor, ...]:  # Qwen3.5: separate qkv, z, b, a projections
        return in_qkv(h), in_z(h), in_b(h), in_a(h)
    return qwen3_5


def _gdn_forward(m: Any, ops: GDNOps, metadata: _Metadata) -> Callable[..., torch.Tensor]:
    project = _projections(m)
    shapes = _shapes(m)
    kd, nk, dk, nv, dv = m.key_dim, m.num_k_heads, m.head_k_dim, m.num_v_heads, m.head_v_dim
    # The layer's modules and parameters, looked up once (nn.Module attribute lookups cost per call)
    conv1d, A_log, dt_bias, norm_weight, out_proj, layer_idx = (m.conv1d, m.A_log, m.dt_bias, m.norm.weight,
                                                                m.out_proj, m.layer_idx)

    def forward(hidden_states: torch.Tensor, cache: Any = None, attention_mask: torch.Tensor | None = None,
                cache_params: Any = None, **kwargs: Any) -> torch.Tensor:
        cache = cache if cache is not None else cache_params  # transformers < 5.2x names it cache_params
        if attention_mask is not None:  # HF's apply_mask_to_padding_states: padded positions become zeros
            hidden_states = (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)
        B, T, _ = hidden_states.shape
        mixed, z, b, a = project(hidden_states)
        x = mixed.reshape(B * T, shapes.conv[0])
        pools = pools_for(cache, layer_idx, B, shapes, x.dtype, x.device)
        rows, ones, cu, slots, has_init = metadata(B, T, x.device)
        weight, bias = conv1d.weight.squeeze(1), conv1d.bias
        decode = pools.continuing and T == 1
        if decode:
            x = ops.conv_update(x, pools.conv, weight, ones, rows, bias)
        else:
            x = ops.conv_varlen(x, pools.conv, weight, cu, rows, has_init if pools.continuing else None, bias)
        # The recurrent ops read q, k, v contiguous (their interfaces say so): one copy of each
        # column slice here costs less than the op layer's contiguity pass over every argument.
        query = x[:, :kd].contiguous().view(B * T, nk, dk)
        key = x[:, kd:2 * kd].contiguous().view(B * T, nk, dk)
        value = x[:, 2 * kd:].contiguous().view(B * T, nv, dv)
        g, beta = ops.gating(a.reshape(B * T, nv), b.reshape(B * T, nv), A_log, dt_bias)
        if decode:
            core = ops.decode(query, key, value, beta, pools.ssm, ones, rows, g)
        else:
            core = ops.prefill(query, key, value, g, beta, pools.ssm, cu, rows, has_init if pools.continuing else None)
        core = ops.norm(core, z.reshape(B * T, nv, dv), norm_weight)
        return out_proj(core.reshape(B, T, nv * dv))

    return forward


def _example_calls(m: Any, ops: GDNOps) -> list[tuple[str, Any, tuple[Any, ...]]]:
    """One small call of each op with the layer's sizes, dtype and device (planned, never run)."""
    s = _shapes(m)
    p = m.conv1d.weight
    dt, dev = p.dtype, p.device
    i32 = {"dtype": torch.int32, "device": dev}
    one, zero, cu = torch.ones(1, **i32), torch.zeros(1, **i32), torch.tensor([0, 1], **i32)
    nv, dv, dk = s.recurrent
    x = torch.empty(1, s.conv[0], dtype=dt, device=dev)
    conv = torch.empty(1, *s.conv, dtype=dt, device=dev)
    w = p.squeeze(1)
    q = torch.empty(1, m.num_k_heads, dk, dtype=dt, device=dev)
    v = torch.empty(1, nv, dv, dtype=dt, device=dev)
    beta = torch.empty(1, nv, dtype=dt, device=dev)
    g = torch.empty(1, nv, dtype=torch.float32, device=dev)
    ssm = torch.empty(1, *s.recurrent, dtype=torch.float32, device=dev)
    return [
        ("gating", ops.gating, (beta, beta, m.A_log, m.dt_bias)),
        ("conv1d decode", ops.conv_update, (x, conv, w, one, zero, m.conv1d.bias)),
        ("conv1d prefill", ops.conv_varlen, (x, conv, w, cu, zero, None, m.conv1d.bias)),
        ("recurrent decode", ops.decode, (q, q, v, beta, ssm, one, zero, g)),
        ("chunked prefill", ops.prefill, (q, q, v, g, beta, ssm, cu, zero)),
        ("gated norm", ops.norm, (v, v, m.norm.weight)),
    ]


def _pools_check(layer_idx: int, shapes: GDNShapes) -> Callable[[ForwardCall], None]:
    """The layer's refusals of a forward's cache, for :class:`ForwardChecks` (a fresh cache has nothing to refuse)."""
    def check(call: ForwardCall) -> None:
        if call.cache is not None:
            check_pools(call.cache, layer_idx, call.batch, shapes)
    return check


def patch_gated_delta_net(name: str, m: Any, ops: GDNOps, metadata: _Metadata, why_not: str | None,
                          checks: ForwardChecks) -> list[Route]:
    """Replace ``m.forward`` when every op of the layer has a kernel here, registering its cache's refusals
    in ``checks``; the routes either way."""
    kind = type(m).__name__
    if why_not is not None:
        return [Route(name, kind, "layer", None, None, why_not)]
    if m.activation not in ("silu", "swish"):
        return [Route(name, kind, "layer", None, None, f"conv activation {m.activation!r}: the conv ops apply silu")]
    routes = []
    for piece, op, args in _example_calls(m, ops):
        answer = serving(op, *args)
        routes.append(Route(name, kind, piece, type(op).__name__, answer.kernel, answer.reason))
    if not all(r.served for r in routes):  # the pools' layout is all or nothing: leave the whole layer
        return [Route(name, kind, r.piece, r.op, None, r.reason or "another piece of the layer has no kernel here")
                for r in routes]
    m.forward = _gdn_forward(m, ops, metadata)  # an instance attribute: nn.Module.__call__ finds it first
    checks.register(name, _pools_check(m.layer_idx, _shapes(m)))
    # The conv ops read conv1d's weights and the gated norm op norm's: neither module's forward is called.
    child = {"conv1d decode": "conv1d", "conv1d prefill": "conv1d", "gated norm": "norm"}
    return [replace(r, covers=(f"{name}.{child[r.piece]}",)) if r.piece in child else r for r in routes]
