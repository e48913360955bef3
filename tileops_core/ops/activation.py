"""Gated activations."""

from __future__ import annotations

from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = ["SiluAndMulKernel", "SiluAndMulFwdOp"]


class SiluAndMulKernel(KernelInterface):
    """``out = silu(x[..., :N]) * x[..., N:]``; called as ``launch`` declares."""

    op = "SiluAndMulFwdOp"
    specialise_on = ("N",)

    @launch_signature
    def launch(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class SiluAndMulFwdOp(Op):
    """The SwiGLU gate: the last axis holds gate and up halves (even length)."""

    interfaces = (SiluAndMulKernel,)

    def forward(self, x: Any) -> Any:
        return self.launch(SiluAndMulKernel, x)
