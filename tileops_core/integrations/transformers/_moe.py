"""The sparse MoE block of Qwen3-Next / Qwen3.5-MoE on TileOPs' MoE ops (``manifest/moe.yaml``).

- ``*TopKRouter``: softmax, top-k and renormalisation as MoETopKRoutingFwdOp (HF's float32
  operations, so HF's weights bit for bit; tied probabilities go to the lower expert id).
- ``*Experts``: transformers dispatches an experts module's forward through its
  ``ExpertsInterface`` by the config's ``experts_implementation``; TileOPs registers
  ``"tileops"`` there (permute, grouped experts, un-permute) and ``apply_tileops`` switches the
  model to it. A module the ops do not serve on its device keeps transformers' ``grouped_mm``.
- ``*SparseMoeBlock``: the shared expert and its sigmoid gate as MoESharedExpertFwdOp; the
  block's sum of routed and shared outputs stays HF's (in the model's dtype).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ...ops.moe import (
    MoEGroupedExpertsFwdOp, MoEPermuteFwdOp, MoESharedExpertFwdOp, MoETopKRoutingFwdOp, MoEUnpermuteFwdOp,
)
from ._report import Route
from ._serving import serving

__all__ = [
    "TILEOPS_EXPERTS", "patch_experts", "patch_router", "patch_sparse_moe_block", "register_experts",
    "use_tileops_experts",
]

#: The name TileOPs' experts forward is registered under in transformers' ExpertsInterface.
TILEOPS_EXPERTS = "tileops"
_SILU = ("silu", "swish")


def _act_name(m: Any) -> str | None:
    return getattr(getattr(m, "config", None), "hidden_act", None)


class _ExpertOps:
    """The three ops of one experts module's forward and its weights (built per module: ``num_experts``
    is a param)."""

    def __init__(self, m: Any) -> None:
        self.permute = MoEPermuteFwdOp(num_experts=m.num_experts)
        self.grouped = MoEGroupedExpertsFwdOp()
        self.unpermute = MoEUnpermuteFwdOp()
        self.weights = (m.gate_up_proj, m.down_proj)  # looked up once (nn.Module attribute lookups cost per call)

    def __call__(self, m: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                 top_k_weights: torch.Tensor) -> torch.Tensor:
        permuted, offsets, index = self.permute(hidden_states, top_k_index)
        out = self.grouped(permuted, offsets, *self.weights)
        return self.unpermute(out, index, top_k_weights)

    def example_calls(self, m: Any) -> list[tuple[Any, tuple[Any, ...]]]:
        """Each op with small tensors of the module's dtype and device (what ``serving`` plans)."""
        w = m.down_proj
        K = int(m.config.num_experts_per_tok)
        x = torch.empty(1, w.shape[1], dtype=w.dtype, device=w.device)
        rows = torch.empty(K, w.shape[1], dtype=w.dtype, device=w.device)
        ids = torch.zeros(1, K, dtype=torch.int64, device=w.device)
        offsets = torch.zeros(m.num_experts + 1, dtype=torch.int32, device=w.device)
        index = torch.zeros(1, K, dtype=torch.int32, device=w.device)
        weights = torch.empty(1, K, dtype=w.dtype, device=w.device)
        return [(self.permute, (x, ids)), (self.grouped, (rows, offsets, m.gate_up_proj, w)),
                (self.unpermute, (rows, index, weights))]


def tileops_experts_forward(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                            top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``"tileops"`` experts implementation: the module's ops, else transformers' ``grouped_mm``."""
    ops = getattr(self, "_tileops_experts", None)
    if ops is None:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        return ALL_EXPERTS_FUNCTIONS["grouped_mm"](self, hidden_states, top_k_index, top_k_weights)
    result: torch.Tensor = ops(self, hidden_states, top_k_index, top_k_weights)
    return result


def register_experts() -> None:
    """Register ``"tileops"`` in transformers' ExpertsInterface (idempotent: one global mapping entry)."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(TILEOPS_EXPERTS, tileops_experts_forward)


def use_tileops_experts(model: Any) -> None:
    """Switch ``model`` to the ``"tileops"`` experts implementation when :func:`patch_experts` gave
    any of its experts modules their ops (the choice is the model config's, for all its modules)."""
    if any(hasattr(m, "_tileops_experts") for m in model.modules()):
        register_experts()
        model.set_experts_implementation(TILEOPS_EXPERTS)


def _experts_layout_problem(m: Any) -> str | None:
    if not getattr(m, "has_gate", True) or _act_name(m) not in _SILU:
        return "the experts' activation is not a SiLU gate"
    if getattr(m, "has_bias", False) or getattr(m, "is_transposed", False) or not getattr(m, "is_concatenated", True):
        return "expert weights with bias or in a transposed or interleaved layout"
    if getattr(m, "_is_expert_parallel", False):
        return "expert-parallel experts (sentinel ids) are not routed"
    return None


def patch_experts(name: str, m: Any) -> list[Route]:
    """Give the module its ops (the ``"tileops"`` experts implementation runs them) where kernels serve them."""
    kind, piece = type(m).__name__, "experts"
    problem = _experts_layout_problem(m)
    if problem is not None:
        return [Route(name, kind, piece, None, None, problem)]
    ops = _ExpertOps(m)
    kernels: list[str] = []
    for op, args in ops.example_calls(m):
        answer = serving(op, *args)
        if answer.kernel is None:
            return [Route(name, kind, piece, type(op).__name__, None, answer.reason)]
        kernels.append(answer.kernel)
    m._tileops_experts = ops
    return [Route(name, kind, piece, "MoEPermuteFwdOp, MoEGroupedExpertsFwdOp, MoEUnpermuteFwdOp",
                  ", ".join(kernels), f"experts_implementation={TILEOPS_EXPERTS!r}")]


def _router_forward(m: Any, op: MoETopKRoutingFwdOp) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    weight, hidden_dim = m.weight, m.hidden_dim  # looked up once (nn.Module attribute lookups cost per call)

    def forward(hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = F.linear(hidden_states.reshape(-1, hidden_dim), weight)
        weights, ids = op(logits)
        return logits, weights, ids
    return forward


def patch_router(name: str, m: Any) -> list[Route]:
    """HF's top-k router (softmax, top-k, renormalisation) as MoETopKRoutingFwdOp."""
    kind = type(m).__name__
    # Qwen3.5-MoE always renormalises (its router has no norm_topk_prob attribute)
    op = MoETopKRoutingFwdOp(top_k=m.top_k, renormalize=bool(getattr(m, "norm_topk_prob", True)))
    w = m.weight
    answer = serving(op, torch.empty(1, m.num_experts, dtype=w.dtype, device=w.device))
    if not answer.ok:
        return [Route(name, kind, "routing", type(op).__name__, None, answer.reason)]
    m.forward = _router_forward(m, op)
    return [Route(name, kind, "routing", type(op).__name__, answer.kernel, "ties go to the lower expert id")]


def _block_forward(m: Any, op: MoESharedExpertFwdOp) -> Callable[[torch.Tensor], torch.Tensor]:
    # The block's modules and the shared expert's weights, looked up once (nn.Module attribute
    # lookups cost per call)
    shared, router, experts = m.shared_expert, m.gate, m.experts
    weights_of_shared = (shared.gate_proj.weight, shared.up_proj.weight, shared.down_proj.weight,
                         m.shared_expert_gate.weight)

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        B, S, H = hidden_states.shape
        x = hidden_states.view(-1, H)
        shared_out = op(x, *weights_of_shared)
        _, weights, ids = router(x)
        return (experts(x, ids, weights) + shared_out).reshape(B, S, H)
    return forward


def patch_sparse_moe_block(name: str, m: Any) -> list[Route]:
    """The block's shared expert and its sigmoid gate as MoESharedExpertFwdOp (router and experts
    are their own modules, routed by :func:`patch_router` and :func:`patch_experts`)."""
    kind, piece = type(m).__name__, "shared expert"
    shared, gate = getattr(m, "shared_expert", None), getattr(m, "shared_expert_gate", None)
    if shared is None or gate is None:
        return [Route(name, kind, piece, None, None, "no shared expert with a sigmoid gate")]
    if _act_name(shared) not in _SILU or any(getattr(shared, p).bias is not None for p in
                                             ("gate_proj", "up_proj", "down_proj")) or gate.bias is not None:
        return [Route(name, kind, piece, None, None, "the shared expert is not a bias-free SiLU MLP")]
    op, w = MoESharedExpertFwdOp(), shared.gate_proj.weight
    answer = serving(op, torch.empty(1, w.shape[1], dtype=w.dtype, device=w.device), w, shared.up_proj.weight,
                     shared.down_proj.weight, gate.weight)
    if not answer.ok:
        return [Route(name, kind, piece, type(op).__name__, None, answer.reason)]
    m.forward = _block_forward(m, op)
    return [Route(name, kind, piece, type(op).__name__, answer.kernel, "with its sigmoid gate")]
