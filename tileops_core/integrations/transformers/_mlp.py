"""The SiLU-gated MLPs on SiluAndMulFwdOp (the MoE block's pieces are in ``_moe``).

``*MLP`` (gate_proj, up_proj, down_proj): the gate and up weights are packed once into one
``[2I, H]`` tensor whose halves become the two Linears' weights (views, no extra memory), so
one matmul (LinearFwdOp with ``every_module``, else torch's) yields SiluAndMulFwdOp's
``[*, 2I]`` input. ``down_proj`` is a Linear like any other (``_plain``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ...ops.activation import SiluAndMulFwdOp
from ._plain import LinearOps, kept_on_torch
from ._report import Route
from ._serving import serving

__all__ = ["patch_mlp"]

_SILU = ("silu", "swish")


def _act_name(m: Any) -> str | None:
    config = getattr(m, "config", None)
    return getattr(config, "hidden_act", None)


def _mlp_forward(m: Any, op: SiluAndMulFwdOp, packed: torch.Tensor,
                 linear: Callable[..., torch.Tensor] | None) -> Callable[[torch.Tensor], torch.Tensor]:
    down_proj = m.down_proj  # looked up once (nn.Module attribute lookups cost per call)

    def forward(x: torch.Tensor) -> torch.Tensor:
        return down_proj(op(linear(x, packed) if linear is not None else F.linear(x, packed)))
    return forward


def patch_mlp(name: str, m: Any, op: SiluAndMulFwdOp, linears: LinearOps, every_module: bool) -> list[Route]:
    """Pack gate/up and run the activation as SiluAndMulFwdOp (and the packed matmul as LinearFwdOp
    with ``every_module``), where kernels serve them."""
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
    linear, matmul = linears.serving_for(packed, every_module)
    gate_up = (f"{name}.gate_proj", f"{name}.up_proj")  # their weights are the packed one's halves
    if every_module and matmul.ok:
        m.forward = _mlp_forward(m, op, packed, linear)
        packed_route = Route(name, kind, "gate/up", "LinearFwdOp", matmul.kernel, "packed into one matmul",
                             covers=gate_up)
    else:
        m.forward = _mlp_forward(m, op, packed, None)
        packed_route = Route(name, kind, "gate/up", "LinearFwdOp", None,
                             kept_on_torch(matmul, "matmul (of gate/up packed into one)"), covers=gate_up)
    return [packed_route, Route(name, kind, "act", type(op).__name__, answer.kernel, "", covers=(f"{name}.act_fn",))]
