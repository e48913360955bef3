"""The SiLU-gated MLPs on SiluAndMulFwdOp (the MoE block's pieces are in ``_moe``).

``*MLP`` (gate_proj, up_proj, down_proj): the gate and up weights are packed (again after a dtype
or device conversion) into one ``[2I, H]`` tensor whose halves become the two Linears' weights
(views, no extra memory), so
one matmul (LinearFwdOp with ``every_module``, else torch's) yields SiluAndMulFwdOp's
``[*, 2I]`` input. ``down_proj`` is a Linear like any other (``_plain``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

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
    inter = w.shape[0]
    def repack() -> tuple[torch.Tensor, Any]:
        return _pack(m, op, inter, linears, every_module)

    _, matmul = repack()
    _repack_after_conversions(m, repack)
    gate_up = (f"{name}.gate_proj", f"{name}.up_proj")  # their weights are the packed one's halves
    if every_module and matmul.ok:
        packed_route = Route(name, kind, "gate/up", "LinearFwdOp", matmul.kernel, "packed into one matmul",
                             covers=gate_up)
    else:
        packed_route = Route(name, kind, "gate/up", "LinearFwdOp", None,
                             kept_on_torch(matmul, "matmul (of gate/up packed into one)"), covers=gate_up)
    return [packed_route, Route(name, kind, "act", type(op).__name__, answer.kernel, "", covers=(f"{name}.act_fn",))]


def _pack(m: Any, op: SiluAndMulFwdOp, inter: int, linears: LinearOps, every_module: bool) -> tuple[torch.Tensor, Any]:
    """Pack the gate and up weights into one ``[2I, H]`` tensor whose halves become their Parameters'
    data (the same Parameter objects: an optimiser or a state dict holding them keeps them), and set
    the forward that multiplies by it; the packed matmul's serving answer."""
    gate, up = m.gate_proj.weight, m.up_proj.weight
    with torch.no_grad():
        packed = torch.cat([gate, up], dim=0)
    gate.data, up.data = packed[:inter], packed[inter:]
    linear, matmul = linears.serving_for(packed, every_module)
    m.forward = _mlp_forward(m, op, packed, linear if every_module and matmul.ok else None)
    return packed, matmul


def _repack_after_conversions(m: Any, repack: Callable[[], Any]) -> None:
    """``model.to(dtype)``, ``.half()``, ``.cuda()`` convert each Parameter on its own (``Module._apply``):
    the gate and up weights stop being halves of the packed tensor the forward multiplies by, which would
    then keep the old dtype and values (found in review: a crash, or stale weights after a round trip and a
    new state dict). The module's own ``_apply`` packs them again after every conversion."""
    convert = m._apply  # the class's, bound to m

    def _apply(fn: Callable[..., Any], recurse: bool = True) -> Any:
        convert(fn, recurse)
        repack()
        return m

    m._apply = _apply
