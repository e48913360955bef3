"""Normalisation ops and their kernel interfaces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..kernels.call_view import CallView, dim, dtype, flag
from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = ["RMSNormCall", "RMSNormKernel", "RMSNormFwdOp", "GroupNormKernel", "GroupNormFwdOp"]


class RMSNormKernel(KernelInterface):
    """RMSNorm over the trailing ``normalized_shape`` axes; called as ``launch`` declares."""

    op = "RMSNormFwdOp"
    specialise_on = ("N",)
    #: Kernels read x and weight as flat rows; the core copies a non-contiguous one (decided per plan).
    needs_contiguous = True

    @launch_signature
    def launch(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
               eps: float | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


@dataclass(frozen=True)
class RMSNormCall(CallView):
    """What an RMSNorm kernel may specialise on, typed: ``RMSNormCall.of(call)``."""

    x_dtype: str = dtype("x")
    #: The normalised trailing axes (the spec's ``N``, a Shape index).
    normalized_shape: tuple[int, ...] = dim("N")
    has_weight: bool = flag("has_weight")


class RMSNormFwdOp(Op):
    """``torch.nn.functional.rms_norm`` as a spec-checked op."""

    interfaces = (RMSNormKernel,)
    normalized_shape: tuple[int, ...]  # params: set from the checked values at construction
    eps: float | None

    def __init__(self, normalized_shape: Any, eps: float | None = None, **options: Any) -> None:
        """``normalized_shape`` as torch takes it: a list or tuple of sizes, or an int ``n`` for ``(n,)``
        (``torch.nn.RMSNorm(n)``); the spec checks the sizes (each positive) at construction."""
        if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
            normalized_shape = (normalized_shape,)
        super().__init__(normalized_shape=normalized_shape, eps=eps, **options)

    def forward(self, x: Any, weight: Any = None) -> Any:
        return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.eps)


class GroupNormKernel(KernelInterface):
    """GroupNorm over ``[N, C, *]``; called as ``launch`` declares."""

    op = "GroupNormFwdOp"

    @launch_signature
    def launch(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
               eps: float) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class GroupNormFwdOp(Op):
    """``torch.nn.functional.group_norm``; weight and bias are present together or not at all."""

    interfaces = (GroupNormKernel,)
    num_groups: int
    eps: float

    def __init__(self, num_groups: int, eps: float = 1e-05, **options: Any) -> None:
        super().__init__(num_groups=num_groups, eps=eps, **options)

    def specialisation(self, interface: type[KernelInterface], env: dict[str, Any]) -> dict[str, Any]:
        """Channels, groups and the spatial size (not the spatial shape: a kernel sees it flat)."""
        return {"C": env["C"], "num_groups": env["num_groups"], "spatial": math.prod(env["R"])}

    def forward(self, x: Any, weight: Any = None, bias: Any = None) -> Any:
        return self.launch(GroupNormKernel, x, weight, bias, self.num_groups, self.eps)
