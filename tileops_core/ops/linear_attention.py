"""RecurrentGatedDeltaRuleFwdOp: the Gated DeltaNet decode step, and its workload generator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ..workloads.generators import Generated, register_generator
from ..kernels.call_view import CallView, dim, dtype, flag
from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op
from .packed_metadata import PackedMetadataChecks

__all__ = ["RGDRCall", "RGDRKernel", "RecurrentGatedDeltaRuleFwdOp", "rgdr_decode_workload"]


class RGDRKernel(KernelInterface):
    """The gated delta rule decode step, called as ``launch`` declares.

    Writes one state slot per token (``state`` is mutated). Kernels specialise on head
    counts and sizes, never on B or T.
    """

    op = "RecurrentGatedDeltaRuleFwdOp"
    specialise_on = ("NK", "NV", "DK", "DV", "G")
    #: Kernels index packed rows; a strided state pool is written through a copy, then copied back.
    needs_contiguous = True

    @launch_signature
    def launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
               actual_seq_lengths: torch.Tensor, ssm_state_indices: torch.Tensor, g: torch.Tensor | None,
               gk: torch.Tensor | None, num_accepted_tokens: torch.Tensor | None, scale: float | None,
               seq_lens_style: str, use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


@dataclass(frozen=True)
class RGDRCall(CallView):
    """What an RGDR kernel may specialise on, typed: ``RGDRCall.of(call)``.

    Dtypes of absent optional inputs are None; ``gk_tail`` (the spec's ``G``: the axes of
    ``gk`` after ``[T, NV]``, ``()`` for a scalar decay per head) is None without ``gk``.
    """

    query_dtype: str = dtype("query")
    key_dtype: str = dtype("key")
    value_dtype: str = dtype("value")
    beta_dtype: str = dtype("beta")
    state_dtype: str = dtype("state")
    seq_lens_dtype: str = dtype("actual_seq_lengths")
    slot_dtype: str = dtype("ssm_state_indices")
    g_dtype: str | None = dtype("g", optional=True)
    gk_dtype: str | None = dtype("gk", optional=True)
    accepted_dtype: str | None = dtype("num_accepted_tokens", optional=True)
    num_k_heads: int = dim("NK")
    num_v_heads: int = dim("NV")
    head_k_dim: int = dim("DK")
    head_v_dim: int = dim("DV")
    gk_tail: tuple[int, ...] | None = dim("G", optional=True)
    has_g: bool = flag("has_g")
    has_gk: bool = flag("has_gk")
    has_num_accepted_tokens: bool = flag("has_num_accepted_tokens")
    seq_lens_style: str = flag("seq_lens_style")
    use_qk_l2norm_in_kernel: bool = flag("use_qk_l2norm_in_kernel")


class RecurrentGatedDeltaRuleFwdOp(PackedMetadataChecks, Op):
    """The RGDR decode step (RGDR.md); optionally checks metadata contents before writing."""

    interfaces = (RGDRKernel,)
    scale: float | None  # params: set from the checked values at construction
    seq_lens_style: str
    use_qk_l2norm_in_kernel: bool

    def __init__(self, scale: float | None = None, seq_lens_style: str = "lengths",
                 use_qk_l2norm_in_kernel: bool = False, **options: Any) -> None:
        super().__init__(scale=scale, seq_lens_style=seq_lens_style, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                         **options)

    def forward(self, query: Any, key: Any, value: Any, beta: Any, state: Any, actual_seq_lengths: Any,
                ssm_state_indices: Any, g: Any = None, gk: Any = None, num_accepted_tokens: Any = None) -> Any:
        return self.launch(RGDRKernel, query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk,
                           num_accepted_tokens, self.scale, self.seq_lens_style, self.use_qk_l2norm_in_kernel)

    def check_contents(self, **tensors: Any) -> None:
        """Metadata contents the shapes cannot show (one device sync): RGDR.md "Contents"."""
        self.check_per_token_slots(tensors, "ssm_state_indices", "state")


@register_generator("rgdr_decode")
def rgdr_decode_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A decode batch: B sequences of ``tokens_per_seq`` tokens (or the ``lengths`` list), each
    token writing its own slot of a pool with spare slots no token touches."""
    if "lengths" in row:
        lengths = torch.tensor(list(row["lengths"]), dtype=torch.int64)
    else:
        lengths = torch.full((int(row["B"]),), int(row.get("tokens_per_seq", 1)), dtype=torch.int64)
    B, T = lengths.numel(), int(lengths.sum())
    pool = int(row.get("S", T + B + 8))
    meta_dtype = getattr(torch, str(row.get("actual_seq_lengths_dtype", "int32")))
    if row.get("seq_lens_style", "lengths") == "cu_seqlens":
        meta = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    else:
        meta = lengths
    slot_dtype = getattr(torch, str(row.get("ssm_state_indices_dtype", "int32")))
    slots = torch.randperm(pool, generator=rng)[:T]
    tensors = {"actual_seq_lengths": meta.to(meta_dtype), "ssm_state_indices": slots.to(slot_dtype)}
    NV, DK = int(row["NV"]), int(row["DK"])
    # Realistic contents (never zeros): gates in (0, 1), decays negative, unit-norm q/k rows.
    tensors["beta"] = torch.sigmoid(torch.randn(T, NV, generator=rng))
    for name in ("query", "key"):
        x = torch.randn(T, int(row["NK"]), DK, generator=rng)
        tensors[name] = x / x.norm(dim=-1, keepdim=True)
    for name in ("g", "gk"):
        if f"{name}_shape" in row:
            shape = [T if d == "T" else int(row[d]) if isinstance(d, str) else int(d) for d in row[f"{name}_shape"]]
            tensors[name] = -(0.05 + 0.5 * torch.rand(shape, generator=rng))
    if "num_accepted_tokens_shape" in row:
        acc = torch.stack([1 + torch.randint(int(max(L, 1)), (1,), generator=rng)[0] for L in lengths.tolist()])
        tensors["num_accepted_tokens"] = acc.to(getattr(torch, str(row.get("num_accepted_tokens_dtype", "int32"))))
    return Generated({"B": B, "T": T, "S": pool}, tensors)
