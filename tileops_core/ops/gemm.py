"""Matrix products: batched, general (with transposes) and linear."""

from __future__ import annotations

from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = ["BmmKernel", "BmmFwdOp", "GemmKernel", "GemmFwdOp", "LinearKernel", "LinearFwdOp"]


class BmmKernel(KernelInterface):
    """``d = a @ b`` per batch; called as ``launch`` declares."""

    op = "BmmFwdOp"
    specialise_on = ("N", "K")

    @launch_signature
    def launch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class BmmFwdOp(Op):
    """``torch.bmm``."""

    interfaces = (BmmKernel,)

    def forward(self, a: Any, b: Any) -> Any:
        return self.launch(BmmKernel, a, b)


class GemmKernel(KernelInterface):
    """``d = op(a) @ op(b)``; the transpose flags are also in the call spec's flags."""

    op = "GemmFwdOp"
    specialise_on = ("N", "K")

    @launch_signature
    def launch(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class GemmFwdOp(Op):
    """``d = op(a) @ op(b)``, op transposing when its flag is set."""

    interfaces = (GemmKernel,)
    trans_a: bool  # params: set from the checked values at construction
    trans_b: bool

    def __init__(self, trans_a: bool = False, trans_b: bool = True, **options: Any) -> None:
        super().__init__(trans_a=trans_a, trans_b=trans_b, **options)

    def forward(self, a: Any, b: Any) -> Any:
        return self.launch(GemmKernel, a, b, self.trans_a, self.trans_b)


class LinearKernel(KernelInterface):
    """``output = input @ weight.T + bias``; called as ``launch`` declares."""

    op = "LinearFwdOp"
    specialise_on = ("in_features", "out_features")

    @launch_signature
    def launch(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class LinearFwdOp(Op):
    """``torch.nn.functional.linear`` with in/out features promised at construction."""

    interfaces = (LinearKernel,)

    def __init__(self, *, in_features: int, out_features: int, **options: Any) -> None:
        super().__init__(in_features=in_features, out_features=out_features, **options)

    def forward(self, input: Any, weight: Any, bias: Any = None) -> Any:
        return self.launch(LinearKernel, input, weight, bias)
