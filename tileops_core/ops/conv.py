"""Depthwise causal conv1d over packed tokens: the decode step and the varlen prefill, with their
workload generators.

Both ops share RecurrentGatedDeltaRuleFwdOp's metadata conventions (``actual_seq_lengths`` as
lengths or cu_seqlens, negative slots as padding, ``num_accepted_tokens``) so one set of
metadata tensors serves a whole GatedDeltaNet layer. The math is in ``manifest/conv.yaml``.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op
from ..workloads.generators import Generated, register_generator
from .packed_metadata import PackedMetadataChecks

__all__ = [
    "CausalConv1dUpdateKernel", "CausalConv1dUpdateFwdOp", "CausalConv1dVarlenKernel", "CausalConv1dVarlenFwdOp",
    "conv_decode_workload", "conv_varlen_workload",
]


class CausalConv1dUpdateKernel(KernelInterface):
    """The decode step, called as ``launch`` declares; writes one pool slot per token (``conv_state``
    is mutated).

    Kernels specialise on the channel count and width, never on B, T or the pool size. They
    read strided ``x`` and ``conv_state`` themselves (no contiguity copies by the core).
    """

    op = "CausalConv1dUpdateFwdOp"
    specialise_on = ("D", "W")

    @launch_signature
    def launch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, actual_seq_lengths: torch.Tensor,
               conv_state_indices: torch.Tensor, bias: torch.Tensor | None, num_accepted_tokens: torch.Tensor | None,
               activation: str | None, seq_lens_style: str) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class CausalConv1dVarlenKernel(KernelInterface):
    """The varlen prefill, called as ``launch`` declares; writes one pool slot per non-empty sequence.

    Kernels specialise on the channel count and width, never on B, T or the pool size.
    """

    op = "CausalConv1dVarlenFwdOp"
    specialise_on = ("D", "W")

    @launch_signature
    def launch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, actual_seq_lengths: torch.Tensor,
               conv_state_indices: torch.Tensor, has_initial_state: torch.Tensor | None, bias: torch.Tensor | None,
               activation: str | None, seq_lens_style: str) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class _CausalConv1dOp(PackedMetadataChecks, Op):
    """The params both conv ops take: the activation after the conv and the metadata style."""

    abstract = True
    activation: str | None  # params: set from the checked values at construction
    seq_lens_style: str

    def __init__(self, activation: str | None = None, seq_lens_style: str = "lengths", **options: Any) -> None:
        super().__init__(activation=activation, seq_lens_style=seq_lens_style, **options)


class CausalConv1dUpdateFwdOp(_CausalConv1dOp):
    """The causal conv1d decode step; optionally checks metadata contents before writing."""

    interfaces = (CausalConv1dUpdateKernel,)

    def forward(self, x: Any, conv_state: Any, weight: Any, actual_seq_lengths: Any, conv_state_indices: Any,
                bias: Any = None, num_accepted_tokens: Any = None) -> Any:
        return self.launch(CausalConv1dUpdateKernel, x, conv_state, weight, actual_seq_lengths, conv_state_indices,
                           bias, num_accepted_tokens, self.activation, self.seq_lens_style)

    def check_contents(self, **tensors: Any) -> None:
        """Lengths that tile T, slots in ``[-1, S)`` written by one sequence each, accepted counts
        in ``[1, L_b]``: what RGDR checks, under the same names."""
        self.check_per_token_slots(tensors, "conv_state_indices", "conv_state")


class CausalConv1dVarlenFwdOp(_CausalConv1dOp):
    """The causal conv1d over packed prefill sequences; optionally checks metadata contents."""

    interfaces = (CausalConv1dVarlenKernel,)

    def forward(self, x: Any, conv_state: Any, weight: Any, actual_seq_lengths: Any, conv_state_indices: Any,
                has_initial_state: Any = None, bias: Any = None) -> Any:
        return self.launch(CausalConv1dVarlenKernel, x, conv_state, weight, actual_seq_lengths, conv_state_indices,
                           has_initial_state, bias, self.activation, self.seq_lens_style)

    def check_contents(self, **tensors: Any) -> None:
        """Lengths that tile T, slots in ``[-1, S)``, no slot written by two non-empty sequences."""
        meta, slots, pool, x = (tensors.get(n) for n in ("actual_seq_lengths", "conv_state_indices", "conv_state",
                                                           "x"))
        if meta is None or slots is None or pool is None or x is None:
            return
        op, inputs = type(self).__name__, self.op_spec().inputs
        slots = slots.to("cpu", torch.int64)
        lengths = self.sequence_lengths(op, meta, x.shape[0], inputs["actual_seq_lengths"].loc)
        self.slots_in_pool(op, "conv_state_indices", slots, pool.shape[0], inputs["conv_state_indices"].loc)
        live = lengths > 0  # an empty sequence writes nothing, so it may name any slot
        self.one_writer_per_slot(op, "conv_state", slots[live], torch.arange(slots.numel())[live],
                                  inputs["conv_state_indices"].loc)


# -- workload generators -------------------------------------------------------------------------


def _row_lengths(row: Mapping[str, Any]) -> torch.Tensor:
    """The row's ``lengths`` list, else ``B`` sequences of ``tokens_per_seq`` tokens."""
    if "lengths" in row:
        return torch.tensor(list(row["lengths"]), dtype=torch.int64)
    return torch.full((int(row["B"]),), int(row.get("tokens_per_seq", 1)), dtype=torch.int64)


def _index_dtype(row: Mapping[str, Any], name: str) -> torch.dtype:
    dtype: torch.dtype = getattr(torch, str(row.get(f"{name}_dtype", "int32")))
    return dtype


def _seq_meta(row: Mapping[str, Any], lengths: torch.Tensor) -> torch.Tensor:
    """``actual_seq_lengths`` in the row's style and dtype."""
    if row.get("seq_lens_style", "lengths") == "cu_seqlens":
        meta = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    else:
        meta = lengths
    return meta.to(_index_dtype(row, "actual_seq_lengths"))


@register_generator("conv_decode")
def conv_decode_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A decode batch: each token writes its own slot of a pool with spare slots no token touches;
    a fraction ``padding`` of tokens, and every token of the sequences in ``pad_sequences``, get
    slot -1; accepted counts are drawn in ``[1, L_b]`` when the row passes them."""
    lengths = _row_lengths(row)
    B, T = lengths.numel(), int(lengths.sum())
    pool = int(row.get("S", T + B + 8))
    slots = torch.randperm(pool, generator=rng)[:T]
    if T and float(row.get("padding", 0.0)) > 0:
        slots[torch.rand(T, generator=rng) < float(row["padding"])] = -1
    starts = torch.cumsum(lengths, 0) - lengths
    for b in row.get("pad_sequences", ()):
        slots[int(starts[b]) : int(starts[b] + lengths[b])] = -1
    tensors = {"actual_seq_lengths": _seq_meta(row, lengths),
               "conv_state_indices": slots.to(_index_dtype(row, "conv_state_indices"))}
    if "num_accepted_tokens_shape" in row:
        acc = 1 + (torch.rand(B, generator=rng) * lengths.clamp(min=1)).long()  # in [1, max(L_b, 1)]
        tensors["num_accepted_tokens"] = acc.to(_index_dtype(row, "num_accepted_tokens"))
    return Generated({"B": B, "T": T, "S": pool}, tensors)


@register_generator("conv_varlen")
def conv_varlen_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A prefill batch: one distinct slot per sequence out of a pool with spare slots, slot -1 for
    the sequences in ``pad_sequences``; ``has_initial_state`` (when the row passes it) alternates
    from a random first value, so rows of two or more sequences hold both values."""
    lengths = _row_lengths(row)
    B, T = lengths.numel(), int(lengths.sum())
    pool = int(row.get("S", B + 4))
    slots = torch.randperm(pool, generator=rng)[:B]
    for b in row.get("pad_sequences", ()):
        slots[int(b)] = -1
    tensors = {"actual_seq_lengths": _seq_meta(row, lengths),
               "conv_state_indices": slots.to(_index_dtype(row, "conv_state_indices"))}
    if "has_initial_state_shape" in row:
        first = int(torch.randint(2, (1,), generator=rng))
        tensors["has_initial_state"] = (torch.arange(B) + first) % 2 == 1
    return Generated({"B": B, "T": T, "S": pool}, tensors)
