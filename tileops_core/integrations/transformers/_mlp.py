"""The SiLU-gated MLPs on SiluAndMulFwdOp (the MoE block's pieces are in ``_moe``).

``*MLP`` (gate_proj, up_proj, down_proj): the gate and up weights are packed once into one
``[2I, H]`` tensor whose halves become the two Linears' weights (views, no extra memory), so
one matmul yields SiluAndMulFwdOp's ``[*, 2I]`` input.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ...ops.activation import SiluAndMulFwdOp
from ._report import Route
from ._serving import serving

__all__ = ["patch_mlp"]

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
