"""State-space model decode steps."""

from __future__ import annotations

from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = ["SSDDecodeKernel", "SSDDecodeFwdOp"]


class SSDDecodeKernel(KernelInterface):
    """The SSD decode step, called as ``launch`` declares; writes ``state`` in place."""

    op = "SSDDecodeFwdOp"
    specialise_on = ("H", "P", "N", "G")
    needs_contiguous = True

    @launch_signature
    def launch(A: torch.Tensor, dt: torch.Tensor, x: torch.Tensor, B_in: torch.Tensor, C_in: torch.Tensor,
               state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class SSDDecodeFwdOp(Op):
    """One Mamba2 decode step; the state is a mutated input, only ``y_out`` is returned."""

    interfaces = (SSDDecodeKernel,)

    def forward(self, A: Any, dt: Any, x: Any, B_in: Any, C_in: Any, state: Any) -> Any:
        return self.launch(SSDDecodeKernel, A, dt, x, B_in, C_in, state)
