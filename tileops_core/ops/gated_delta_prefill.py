"""ChunkGatedDeltaRuleFwdOp: the Gated DeltaNet prefill (chunked form), and its workload generator.

The metadata follows vLLM's GDN prefill: ``cu_seqlens [B + 1]`` packs the sequences,
``ssm_state_indices [B]`` names each sequence's slot in the state pool (negative: padding),
and ``has_initial_state [B]`` says which sequences continue from their slot (absent: none
does, a fresh prefill). vLLM gathers ``state[indices]``, zeroes the rows without an initial
state and scatters the final states back; this op does the gather and scatter itself, so
the pool is written in place and slots of no sequence are never touched.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import fail
from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op
from ..workloads.generators import Generated, register_generator

__all__ = ["ChunkGDRKernel", "ChunkGatedDeltaRuleFwdOp", "chunk_gdr_prefill_workload"]


class ChunkGDRKernel(KernelInterface):
    """The chunked gated delta rule, called as ``launch`` declares.

    Reads each sequence's initial state before writing any, and writes one final state per
    sequence with tokens and a slot (``state`` is mutated). Kernels specialise on head counts
    and sizes, never on B or T.
    """

    op = "ChunkGatedDeltaRuleFwdOp"
    specialise_on = ("NK", "NV", "DK", "DV")
    #: Kernels index packed rows; strided views (q/k/v sliced from one projection) are copied.
    needs_contiguous = True

    @launch_signature
    def launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor, cu_seqlens: torch.Tensor, ssm_state_indices: torch.Tensor,
               has_initial_state: torch.Tensor | None, scale: float | None,
               use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class ChunkGatedDeltaRuleFwdOp(Op):
    """The chunked gated delta rule over packed sequences; optionally checks metadata contents."""

    interfaces = (ChunkGDRKernel,)
    scale: float | None  # params: set from the checked values at construction
    use_qk_l2norm_in_kernel: bool

    def __init__(self, scale: float | None = None, use_qk_l2norm_in_kernel: bool = False, **options: Any) -> None:
        super().__init__(scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, **options)

    def forward(self, query: Any, key: Any, value: Any, g: Any, beta: Any, state: Any, cu_seqlens: Any,
                ssm_state_indices: Any, has_initial_state: Any = None) -> Any:
        return self.launch(ChunkGDRKernel, query, key, value, g, beta, state, cu_seqlens, ssm_state_indices,
                           has_initial_state, self.scale, self.use_qk_l2norm_in_kernel)

    def check_contents(self, **tensors: Any) -> None:
        """Metadata contents the shapes cannot show (one device sync): prefix sums that start at 0,
        never decrease and end at T; slots in ``[-1, S)``; no slot written by two sequences."""
        op, inputs = type(self).__name__, self.op_spec().inputs
        cu, slots, state, value = (tensors.get(n) for n in ("cu_seqlens", "ssm_state_indices", "state", "value"))
        if cu is None or slots is None or state is None or value is None:
            return
        bounds = cu.to("cpu", torch.int64).tolist()
        T = value.shape[0]
        if bounds[0] != 0 or bounds[-1] != T:
            fail(op, f"cu_seqlens must run from 0 to T={T}, got {bounds[0]} .. {bounds[-1]}", inputs["cu_seqlens"].loc)
        lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
        if any(n < 0 for n in lengths):
            fail(op, f"cu_seqlens decreases (sequence lengths {lengths})", inputs["cu_seqlens"].loc)
        pool, slot_loc = state.shape[0], inputs["ssm_state_indices"].loc
        written: dict[int, int] = {}
        for b, (slot, n) in enumerate(zip(slots.to("cpu", torch.int64).tolist(), lengths)):
            if not -1 <= slot < pool:
                fail(op, f"ssm_state_indices[{b}]={slot} lies outside [-1, {pool})", slot_loc)
            if slot >= 0 and n > 0:
                if slot in written:
                    fail(op, f"sequences {written[slot]} and {b} both write state slot {slot}", slot_loc)
                written[slot] = b


@register_generator("chunk_gdr_prefill")
def chunk_gdr_prefill_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A prefill batch: the ``lengths`` list, or ``tokens`` split evenly over ``B`` sequences.

    Each sequence gets its own slot of a pool with four spare slots no sequence touches; the
    first ``padding_slots`` sequences get slot -1. Where the row passes ``has_initial_state``,
    about half the sequences continue from their slot (at least one does, and one does not).
    Decays and write strengths are realistic (the recurrence is stable): ``g`` in
    ``[-0.55, -0.05]``, ``beta`` in (0, 1). Unless the op normalises q/k itself, their rows are
    unit-norm; otherwise the row's random data serves (large rows draw nothing here).
    """
    if "lengths" in row:
        lengths = [int(n) for n in row["lengths"]]
    else:
        B, tokens = int(row["B"]), int(row["tokens"])
        lengths = [tokens // B + (1 if b < tokens % B else 0) for b in range(B)]
    B, T, NV = len(lengths), sum(lengths), int(row["NV"])
    pool = B + 4
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    slots = torch.randperm(pool, generator=rng)[:B]
    slots[: int(row.get("padding_slots", 0))] = -1
    tensors = {
        "cu_seqlens": cu.to(getattr(torch, str(row.get("cu_seqlens_dtype", "int32")))),
        "ssm_state_indices": slots.to(getattr(torch, str(row.get("ssm_state_indices_dtype", "int32")))),
        "g": -(0.05 + 0.5 * torch.rand(T, NV, generator=rng)),
        "beta": torch.sigmoid(torch.randn(T, NV, generator=rng)),
    }
    if "has_initial_state_shape" in row:
        has = torch.rand(B, generator=rng) < 0.5
        if B > 1:
            has[0], has[-1] = True, False
        tensors["has_initial_state"] = has
    if not row.get("use_qk_l2norm_in_kernel", False):
        for name in ("query", "key"):
            x = torch.randn(T, int(row["NK"]), int(row["DK"]), generator=rng)
            tensors[name] = x / x.norm(dim=-1, keepdim=True)
    return Generated({"B": B, "T": T, "S": pool}, tensors)
