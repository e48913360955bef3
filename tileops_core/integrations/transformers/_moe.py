"""The sparse MoE block of Qwen3-Next / Qwen3.5-MoE on TileOPs' MoE ops (``manifest/moe.yaml``).

- ``*SparseMoeBlock``: the block's forward runs the manifest's five ops in its order: the shared
  expert with its sigmoid gate (MoESharedExpertFwdOp), the router's logits (LinearFwdOp with
  ``every_module``, else torch's matmul), softmax / top-k / renormalisation
  (MoETopKRoutingFwdOp: HF's float32 operations, so HF's weights bit for bit; tied probabilities
  go to the lower expert id), then permute, the grouped experts and the un-permute, which adds
  the shared expert's output in its float32 sum (HF adds it in the model's dtype). Every op sizes
  its work from the token count alone (no host read of the routing), so a decode step of fixed
  batch captures in a CUDA graph where TileLang kernels serve them.
- A block the ops cannot take as a whole (no shared expert with a sigmoid gate, or an op without
  a kernel here) keeps HF's forward, and its pieces are routed one by one: ``*TopKRouter`` as
  MoETopKRoutingFwdOp, and ``*Experts`` through transformers' ``ExpertsInterface``, where
  TileOPs registers ``"tileops"`` (permute, grouped experts, un-permute) and ``apply_tileops``
  switches the model to it. A module the ops do not serve on its device keeps transformers'
  ``grouped_mm``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ...ops.gemm import LinearFwdOp
from ...ops.moe import (
    MoEGroupedExpertsFwdOp, MoEPermuteFwdOp, MoESharedExpertFwdOp, MoETopKRoutingFwdOp, MoEUnpermuteFwdOp,
)
from ._op_pool import OpPool
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
    """The three ops of one experts module's forward (``pool``'s: ``num_experts`` is a param) and its
    weights."""

    def __init__(self, m: Any, pool: OpPool) -> None:
        self.permute = pool.get(MoEPermuteFwdOp, num_experts=m.num_experts)
        self.grouped = pool.get(MoEGroupedExpertsFwdOp)
        self.unpermute = pool.get(MoEUnpermuteFwdOp)
        self.weights = (m.gate_up_proj, m.down_proj)  # looked up once (nn.Module attribute lookups cost per call)

    def __call__(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                 shared_output: torch.Tensor | None = None) -> torch.Tensor:
        permuted, offsets, index = self.permute(hidden_states, top_k_index)
        out = self.grouped(permuted, offsets, *self.weights)
        return self.unpermute(out, index, top_k_weights, shared_output)

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
                (self.unpermute, (rows, index, weights, x))]


def tileops_experts_forward(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                            top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``"tileops"`` experts implementation: the module's ops, else transformers' ``grouped_mm``."""
    ops = getattr(self, "_tileops_experts", None)
    if ops is None:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        return ALL_EXPERTS_FUNCTIONS["grouped_mm"](self, hidden_states, top_k_index, top_k_weights)
    result: torch.Tensor = ops(hidden_states, top_k_index, top_k_weights)
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


def patch_experts(name: str, m: Any, pool: OpPool) -> list[Route]:
    """Give the module its ops (the ``"tileops"`` experts implementation runs them) where kernels serve them."""
    kind, piece = type(m).__name__, "experts"
    problem = _experts_layout_problem(m)
    if problem is not None:
        return [Route(name, kind, piece, None, None, problem)]
    ops = _ExpertOps(m, pool)
    kernels: list[str] = []
    for op, args in ops.example_calls(m):
        answer = serving(op, *args)
        if answer.kernel is None:
            return [Route(name, kind, piece, type(op).__name__, None, answer.reason)]
        kernels.append(answer.kernel)
    m._tileops_experts = ops
    return [Route(name, kind, piece, _EXPERT_OPS, ", ".join(kernels), f"experts_implementation={TILEOPS_EXPERTS!r}",
                  covers=_descendants(name, m))]


def _router_forward(m: Any, op: MoETopKRoutingFwdOp) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    weight, hidden_dim = m.weight, m.hidden_dim  # looked up once (nn.Module attribute lookups cost per call)

    def forward(hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = F.linear(hidden_states.reshape(-1, hidden_dim), weight)
        weights, ids = op(logits)
        return logits, weights, ids
    return forward


def patch_router(name: str, m: Any, pool: OpPool) -> list[Route]:
    """HF's top-k router (softmax, top-k, renormalisation) as MoETopKRoutingFwdOp (``pool``'s)."""
    kind = type(m).__name__
    # Qwen3.5-MoE always renormalises (its router has no norm_topk_prob attribute)
    op = pool.get(MoETopKRoutingFwdOp, top_k=int(m.top_k), renormalize=bool(getattr(m, "norm_topk_prob", True)))
    w = m.weight
    answer = serving(op, torch.empty(1, m.num_experts, dtype=w.dtype, device=w.device))
    if not answer.ok:
        return [Route(name, kind, "routing", type(op).__name__, None, answer.reason)]
    m.forward = _router_forward(m, op)
    return [Route(name, kind, "routing", type(op).__name__, answer.kernel, "ties go to the lower expert id")]


def _descendants(name: str, m: Any) -> tuple[str, ...]:
    return tuple(n for n, _ in m.named_modules(prefix=name) if n != name)


_EXPERT_OPS = "MoEPermuteFwdOp, MoEGroupedExpertsFwdOp, MoEUnpermuteFwdOp"


def _shared_expert_problem(m: Any) -> str | None:
    shared, gate = getattr(m, "shared_expert", None), getattr(m, "shared_expert_gate", None)
    if shared is None or gate is None:
        return "no shared expert with a sigmoid gate"
    if _act_name(shared) not in _SILU or any(getattr(shared, p).bias is not None for p in
                                             ("gate_proj", "up_proj", "down_proj")) or gate.bias is not None:
        return "the shared expert is not a bias-free SiLU MLP"
    return None


class _BlockOps:
    """The ops of one sparse MoE block's forward (``pool``'s: experts and top-k are params).
    ``logits`` is None where torch's matmul forms the router's logits."""

    def __init__(self, m: Any, linear_logits: bool, pool: OpPool) -> None:
        router = m.gate
        self.logits = (pool.get(LinearFwdOp, in_features=int(router.hidden_dim), out_features=int(router.num_experts))
                       if linear_logits else None)
        # Qwen3.5-MoE always renormalises (its router has no norm_topk_prob attribute)
        renormalize = bool(getattr(router, "norm_topk_prob", True))
        self.routing = pool.get(MoETopKRoutingFwdOp, top_k=int(router.top_k), renormalize=renormalize)
        self.experts = _ExpertOps(m.experts, pool)
        self.shared = pool.get(MoESharedExpertFwdOp)

    def example_calls(self, m: Any) -> list[tuple[str, Any, tuple[Any, ...]]]:
        """``(piece, op, args)``: each op with small tensors of the block's dtype and device."""
        shared, w = m.shared_expert, m.gate.weight
        x = torch.empty(1, w.shape[1], dtype=w.dtype, device=w.device)
        calls: list[tuple[str, Any, tuple[Any, ...]]] = [
            ("shared expert", self.shared, (x, shared.gate_proj.weight, shared.up_proj.weight,
                                            shared.down_proj.weight, m.shared_expert_gate.weight)),
            ("routing", self.routing, (torch.empty(1, w.shape[0], dtype=w.dtype, device=w.device),))]
        if self.logits is not None:
            calls.append(("router logits", self.logits, (x, w)))
        calls += [("experts", op, args) for op, args in self.experts.example_calls(m.experts)]
        return calls


def _block_forward(m: Any, ops: _BlockOps) -> Callable[[torch.Tensor], torch.Tensor]:
    """The block's forward on ``ops`` (what the patched model and the static decode step run)."""
    # The block's weights, looked up once (nn.Module attribute lookups cost per call)
    shared = m.shared_expert
    weights_of_shared = (shared.gate_proj.weight, shared.up_proj.weight, shared.down_proj.weight,
                         m.shared_expert_gate.weight)
    router, router_weight = m.gate, m.gate.weight
    router_hooks = router._forward_hooks  # (torch keeps this dict for the module's life)
    logits_op = ops.logits

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        B, S, H = hidden_states.shape
        x = hidden_states.view(-1, H)
        shared_out = ops.shared(x, *weights_of_shared)
        logits = logits_op(x, router_weight) if logits_op is not None else F.linear(x, router_weight)
        weights, ids = ops.routing(logits)
        if router_hooks:
            _router_ran(router, x, (logits, weights, ids))
        return ops.experts(x, ids, weights, shared_out).view(B, S, H)
    return forward


def _router_ran(router: Any, x: torch.Tensor, output: tuple[torch.Tensor, ...]) -> None:
    """The router module's forward hooks, given what its forward returns (logits, top-k weights, expert
    ids): the block does the router's work in the ops and never calls it, and HF records
    ``output_router_logits`` with such a hook (found in review: no logits were recorded and HF's
    load-balancing loss indexed an empty tuple). Hooks observe; a value one returns is not used."""
    with_kwargs = router._forward_hooks_with_kwargs
    for key, hook in list(router._forward_hooks.items()):
        if key in with_kwargs:
            hook(router, (x,), {}, output)
        else:
            hook(router, (x,), output)


def patch_sparse_moe_block(name: str, m: Any, every_module: bool, pool: OpPool) -> list[Route]:
    """Run the whole block on the MoE ops (its router, experts and shared expert are no longer called),
    where the block's layout allows it and a kernel serves every op; else one route that says why
    (the walk then routes the block's modules one by one)."""
    kind = type(m).__name__
    problem = _shared_expert_problem(m) or _experts_layout_problem(m.experts)
    if problem is not None:
        return [Route(name, kind, "block", None, None, problem)]
    ops = _BlockOps(m, every_module, pool)
    kernels: dict[str, list[str]] = {}
    for piece, op, args in ops.example_calls(m):
        answer = serving(op, *args)
        if answer.kernel is None:
            return [Route(name, kind, "block", type(op).__name__, None, answer.reason)]
        kernels.setdefault(piece, []).append(answer.kernel)
    m.forward = _block_forward(m, ops)
    router, experts = f"{name}.gate", f"{name}.experts"
    shared = _descendants(f"{name}.shared_expert", m.shared_expert) + (f"{name}.shared_expert",
                                                                       f"{name}.shared_expert_gate")
    if ops.logits is not None:
        logits = Route(name, kind, "router logits", "LinearFwdOp", kernels["router logits"][0], "", covers=(router,))
    else:
        logits = Route(name, kind, "router logits", None, None, "torch's matmul kept (every_module=True routes it "
                       "through LinearFwdOp)", covers=(router,))
    return [
        Route(name, kind, "shared expert", "MoESharedExpertFwdOp", kernels["shared expert"][0], "with its sigmoid gate",
              covers=shared),
        logits,
        Route(name, kind, "routing", "MoETopKRoutingFwdOp", kernels["routing"][0], "ties go to the lower expert id",
              covers=(router,)),
        Route(name, kind, "experts", _EXPERT_OPS, ", ".join(kernels["experts"]),
              "the shared expert's output summed in the un-permute",
              covers=_descendants(experts, m.experts) + (experts,)),
    ]
