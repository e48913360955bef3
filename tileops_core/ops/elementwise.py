"""Element-wise ops."""

from __future__ import annotations

from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = ["ReciprocalKernel", "ReciprocalFwdOp"]


class ReciprocalKernel(KernelInterface):
    """``1 / input``, called as ``launch`` declares; writes into ``out`` when it is given."""

    op = "ReciprocalFwdOp"

    @launch_signature
    def launch(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class ReciprocalFwdOp(Op):
    """``torch.reciprocal``: integer inputs give float32 (promote_int_to_float)."""

    interfaces = (ReciprocalKernel,)

    def forward(self, input: Any, out: Any = None) -> Any:
        return self.launch(ReciprocalKernel, input, out)
