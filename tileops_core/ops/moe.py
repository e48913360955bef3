"""The sparse MoE block's ops (routing, permute, grouped experts, shared expert, un-permute), their
kernel interfaces and the workload generator that makes consistent routing metadata.

The order a model calls them in, the permuted layout they share and the math are in
``manifest/moe.yaml``. Kernels specialise on the sizes that shape their tiles (experts, hidden
and intermediate sizes, top-k), never on the token count.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import fail
from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op
from ..op.torchtypes import to_torch
from ..workloads.generators import Generated, register_generator

__all__ = [
    "MoETopKRoutingKernel", "MoETopKRoutingFwdOp", "MoEPermuteKernel", "MoEPermuteFwdOp",
    "MoEGroupedExpertsKernel", "MoEGroupedExpertsFwdOp", "MoESharedExpertKernel", "MoESharedExpertFwdOp",
    "MoEUnpermuteKernel", "MoEUnpermuteFwdOp", "moe_routing_workload",
]


class MoETopKRoutingKernel(KernelInterface):
    """``kernel(router_logits, top_k, renormalize, ids_dtype: torch.dtype) -> (topk_weights, topk_ids)``."""

    op = "MoETopKRoutingFwdOp"
    specialise_on = ("E", "top_k")

    @launch_signature
    def launch(router_logits: torch.Tensor, top_k: int, renormalize: bool,
               ids_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # a declaration: kernels implement it


class MoETopKRoutingFwdOp(Op):
    """Softmax, top-k and (optionally) renormalisation of a router's logits; ties go to the lower id."""

    interfaces = (MoETopKRoutingKernel,)
    top_k: int  # params: set from the checked values at construction
    renormalize: bool
    ids_dtype: str

    def __init__(self, top_k: int, renormalize: bool = True, ids_dtype: Any = "int64", **options: Any) -> None:
        super().__init__(top_k=top_k, renormalize=renormalize, ids_dtype=ids_dtype, **options)

    def forward(self, router_logits: Any) -> Any:
        return self.launch(MoETopKRoutingKernel, router_logits, self.top_k, self.renormalize,
                           to_torch(self.ids_dtype))


class MoEPermuteKernel(KernelInterface):
    """``kernel(hidden_states, topk_ids, num_experts) -> (permuted, expert_offsets, permuted_index)``."""

    op = "MoEPermuteFwdOp"
    specialise_on = ("H", "K", "num_experts")

    @launch_signature
    def launch(hidden_states: torch.Tensor, topk_ids: torch.Tensor,
               num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # a declaration: kernels implement it


class MoEPermuteFwdOp(Op):
    """Token copies grouped by expert, with the per-expert offsets and the inverse map."""

    interfaces = (MoEPermuteKernel,)
    num_experts: int

    def __init__(self, num_experts: int, **options: Any) -> None:
        super().__init__(num_experts=num_experts, **options)

    def forward(self, hidden_states: Any, topk_ids: Any) -> Any:
        return self.launch(MoEPermuteKernel, hidden_states, topk_ids, self.num_experts)

    def check_contents(self, **tensors: Any) -> None:
        """Every expert id in ``[0, num_experts)``."""
        _indices_in_range(self, "topk_ids", tensors.get("topk_ids"), self.num_experts)


class MoEGroupedExpertsKernel(KernelInterface):
    """``kernel(hidden_states, expert_offsets, gate_up_proj, down_proj) -> out``: each expert's
    SwiGLU MLP over its rows."""

    op = "MoEGroupedExpertsFwdOp"
    specialise_on = ("E", "H", "I")

    @launch_signature
    def launch(hidden_states: torch.Tensor, expert_offsets: torch.Tensor, gate_up_proj: torch.Tensor,
               down_proj: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class MoEGroupedExpertsFwdOp(Op):
    """The routed experts' gate/up GEMM, SiLU-and-multiply and down GEMM over permuted rows."""

    interfaces = (MoEGroupedExpertsKernel,)

    def forward(self, hidden_states: Any, expert_offsets: Any, gate_up_proj: Any, down_proj: Any) -> Any:
        return self.launch(MoEGroupedExpertsKernel, hidden_states, expert_offsets, gate_up_proj, down_proj)

    def check_contents(self, **tensors: Any) -> None:
        """Offsets that start at 0, never decrease and end at the row count N."""
        offsets, x = tensors.get("expert_offsets"), tensors.get("hidden_states")
        if offsets is None or x is None:
            return
        offs = offsets.to("cpu", torch.int64)
        if offs.numel() and (int(offs[0]) != 0 or int(offs[-1]) != x.shape[0] or bool((offs.diff() < 0).any())):
            fail(type(self).__name__, f"expert_offsets must rise from 0 to N={x.shape[0]}, got {offs[:8].tolist()}"
                 f"{' ...' if offs.numel() > 8 else ''}", self.op_spec().inputs["expert_offsets"].loc)


class MoESharedExpertKernel(KernelInterface):
    """``kernel(x, gate_proj, up_proj, down_proj, expert_gate) -> out``; no sigmoid gate when
    ``expert_gate`` is None."""

    op = "MoESharedExpertFwdOp"
    specialise_on = ("H", "I")

    @launch_signature
    def launch(x: torch.Tensor, gate_proj: torch.Tensor, up_proj: torch.Tensor, down_proj: torch.Tensor,
               expert_gate: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class MoESharedExpertFwdOp(Op):
    """The shared expert's SwiGLU MLP, optionally scaled by its sigmoid gate."""

    interfaces = (MoESharedExpertKernel,)

    def forward(self, x: Any, gate_proj: Any, up_proj: Any, down_proj: Any, expert_gate: Any = None) -> Any:
        return self.launch(MoESharedExpertKernel, x, gate_proj, up_proj, down_proj, expert_gate)


class MoEUnpermuteKernel(KernelInterface):
    """``kernel(expert_output, permuted_index, topk_weights, shared_output) -> out``."""

    op = "MoEUnpermuteFwdOp"
    specialise_on = ("H", "K")

    @launch_signature
    def launch(expert_output: torch.Tensor, permuted_index: torch.Tensor, topk_weights: torch.Tensor,
               shared_output: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class MoEUnpermuteFwdOp(Op):
    """Each token's expert rows, weighted and summed in float32 (plus the shared expert's output)."""

    interfaces = (MoEUnpermuteKernel,)

    def forward(self, expert_output: Any, permuted_index: Any, topk_weights: Any, shared_output: Any = None) -> Any:
        return self.launch(MoEUnpermuteKernel, expert_output, permuted_index, topk_weights, shared_output)

    def check_contents(self, **tensors: Any) -> None:
        """Every index names a row of ``expert_output``."""
        rows = tensors.get("expert_output")
        if rows is not None:
            _indices_in_range(self, "permuted_index", tensors.get("permuted_index"), rows.shape[0])


def _indices_in_range(op: Op, name: str, values: Any, high: int) -> None:
    """Fail, naming input ``name``'s declaration, unless every value lies in ``[0, high)``."""
    if values is None or values.numel() == 0:
        return
    values = values.to("cpu", torch.int64)
    bad = (values < 0) | (values >= high)
    if bool(bad.any()):
        fail(type(op).__name__, f"{name} {values[bad][:8].tolist()} lie outside [0, {high})",
             op.op_spec().inputs[name].loc)


# -- workload generator ---------------------------------------------------------------------------


@register_generator("moe_routing")
def moe_routing_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """``T`` tokens routed to ``K`` distinct experts each out of ``E`` (or the row's ``num_experts``),
    of which the last ``empty_experts`` are never chosen; returns ``topk_ids`` with the matching
    permuted-order metadata (``expert_offsets``, ``permuted_index``), as MoEPermuteFwdOp makes them."""
    T, K = int(row["T"]), int(row["K"])
    E = int(row["E"] if "E" in row else row["num_experts"])
    chosen_from = E - int(row.get("empty_experts", 0))
    if not 1 <= K <= chosen_from:
        raise ValueError(f"moe_routing: K={K} distinct experts out of {chosen_from} that may be chosen")
    ids = torch.rand(T, chosen_from, generator=rng).argsort(dim=1)[:, :K]  # K distinct experts per token
    order = torch.argsort(ids.flatten(), stable=True)
    inverse = torch.empty(T * K, dtype=torch.int64)
    inverse[order] = torch.arange(T * K)
    counts = torch.bincount(ids.flatten(), minlength=E)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    tensors = {"topk_ids": ids, "expert_offsets": offsets, "permuted_index": inverse.view(T, K)}
    return Generated({"T": T, "K": K, "E": E, "N": T * K}, tensors)
