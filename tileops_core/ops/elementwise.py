"""Element-wise ops."""

from __future__ import annotations

from typing import Any

from ..kernels.interface import KernelInterface
from ..op.base import Op

__all__ = ["ReciprocalKernel", "ReciprocalFwdOp"]


class ReciprocalKernel(KernelInterface):
    """``kernel(input, out | None) -> output``; writes into ``out`` when it is given."""

    op = "ReciprocalFwdOp"


class ReciprocalFwdOp(Op):
    """``torch.reciprocal``: integer inputs give float32 (promote_int_to_float)."""

    interfaces = (ReciprocalKernel,)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, input: Any, *, out: Any = None) -> Any:
        return self.launch(ReciprocalKernel, input, out)
