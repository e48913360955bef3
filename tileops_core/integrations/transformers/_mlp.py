"""The SiLU-gated MLPs, the MoE experts' gate and the router's softmax on TileOPs ops.

- ``*MLP`` (gate_proj, up_proj, down_proj): the gate and up weights are packed once into one
  ``[2I, H]`` tensor whose halves become the two Linears' weights (views, no extra memory),
  so one matmul yields SiluAndMulFwdOp's ``[*, 2I]`` input.
- ``*Experts``: transformers' own hook, ``_apply_gate`` (used by the ``grouped_mm`` and
  ``batched_mm`` experts implementations of ``ExpertsInterface``), becomes SiluAndMulFwdOp.
  The ``eager`` implementation has no such hook and is left as it was.
- ``*TopKRouter``: HF's forward with its float32 softmax as SoftmaxFwdOp.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ...ops.activation import SiluAndMulFwdOp
from ...ops.reduction import SoftmaxFwdOp
from ._report import Route
from ._serving import serving

__all__ = ["patch_experts", "patch_mlp", "patch_router"]

_SILU = ("silu", "swish")


def _act_name(m: Any) -> str | None:
    config = getattr(m, "config", None)
    return getattr(config, "hidden_act", None)


def _mlp_forward(m: Any, op: SiluAndMulFwdOp, packed: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return m.down_proj(op(F.linear(x, packed)))
    return forward


def patch_mlp(name: str, m: Any, op: SiluAndMulFwdOp) -> list[Route]:
    """Pack gate/up and run the activation as SiluAndMulFwdOp, where a kernel serves it."""
    kind = type(m).__name__
    if _act_name(m) not in _SILU:
        return [Route(name, kind, "act", None, None, f"activation {_act_name(m)!r} is not SiLU")]
    if m.gate_proj.bias is not None or m.up_proj.bias is not None:
        return [Route(name, kind, "act", None, None, "gate/up projections with bias are not packed")]
    w = m.gate_proj.weight
    answer = serving(op, torch.empty(1, 2 * w.shape[0], dtype=w.dtype, device=w.device))
    if not answer.ok:
        return [Route(name, kind, "act", type(op).__name__, None, answer.reason)]
    with torch.no_grad():
        packed = torch.cat([m.gate_proj.weight, m.up_proj.weight], dim=0)
    inter = w.shape[0]
    m.gate_proj.weight = nn.Parameter(packed[:inter], requires_grad=w.requires_grad)
    m.up_proj.weight = nn.Parameter(packed[inter:], requires_grad=w.requires_grad)
    m.forward = _mlp_forward(m, op, packed)
    return [Route(name, kind, "act", type(op).__name__, answer.kernel, "gate/up packed into one matmul")]


def patch_experts(name: str, m: Any, op: SiluAndMulFwdOp, implementation: str | None) -> list[Route]:
    """Route the experts' gate (``_apply_gate``) through SiluAndMulFwdOp."""
    kind = type(m).__name__
    if implementation in (None, "eager"):
        return [Route(name, kind, "gate", None, None, f"experts implementation {implementation!r} has no gate hook; "
                                                        "set experts_implementation='grouped_mm' to route it")]
    if not getattr(m, "has_gate", True) or _act_name(m) not in _SILU:
        return [Route(name, kind, "gate", None, None, "the experts' activation is not a SiLU gate")]
    p = m.down_proj
    answer = serving(op, torch.empty(1, 2 * m.intermediate_dim, dtype=p.dtype, device=p.device))
    if not answer.ok:
        return [Route(name, kind, "gate", type(op).__name__, None, answer.reason)]
    m._apply_gate = op  # transformers.integrations.moe: gate_up_out [S, 2I] -> [S, I], gate half first
    return [Route(name, kind, "gate", type(op).__name__, answer.kernel, f"through {implementation}")]


def _router_forward(m: Any, op: SoftmaxFwdOp) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    normalise = getattr(m, "norm_topk_prob", True)  # Qwen3.5-MoE always normalises (no attribute)

    def forward(hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = hidden_states.reshape(-1, m.hidden_dim)
        logits = F.linear(hidden_states, m.weight)
        probs = op(logits)
        top_value, top_index = torch.topk(probs, m.top_k, dim=-1)
        if normalise:
            top_value = top_value / top_value.sum(dim=-1, keepdim=True)
        return logits, top_value.to(logits.dtype), top_index
    return forward


def patch_router(name: str, m: Any) -> list[Route]:
    """HF's top-k router with its float32 softmax as SoftmaxFwdOp."""
    kind = type(m).__name__
    op = SoftmaxFwdOp(dim=-1, dtype=torch.float32, N=m.num_experts)
    w = m.weight
    answer = serving(op, torch.empty(1, m.num_experts, dtype=w.dtype, device=w.device))
    if not answer.ok:
        return [Route(name, kind, "softmax", type(op).__name__, None, answer.reason)]
    m.forward = _router_forward(m, op)
    return [Route(name, kind, "softmax", type(op).__name__, answer.kernel, "")]
