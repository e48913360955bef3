"""The pieces of a Gated DeltaNet layer around its recurrent core, and their kernel interfaces.

``ZeroCentredRMSNormFwdOp`` (the decoder layer's norm) and
``FusedAddZeroCentredRMSNormFwdOp`` (the same with the residual add fused),
``GatedRMSNormFwdOp`` (the norm of the attention output, before the SiLU gate) and
``GDNGatingFwdOp`` (g and beta for :class:`~.linear_attention.RecurrentGatedDeltaRuleFwdOp`).
Their specs are in ``manifest/gated_delta_net.yaml``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = [
    "ZeroCentredRMSNormKernel", "ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormKernel",
    "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormKernel", "GatedRMSNormFwdOp",
    "GDNGatingKernel", "GDNGatingFwdOp",
]


class _RMSNormEpsOp(Op):
    """The param the three norms of the layer take: eps inside the square root (1e-6, Qwen3-Next's)."""

    abstract = True
    eps: float  # a param: set from the checked value at construction

    def __init__(self, eps: float = 1e-06, **options: Any) -> None:
        super().__init__(eps=eps, **options)


class ZeroCentredRMSNormKernel(KernelInterface):
    """``output = rmsnorm(x) · (1 + weight)``; called as ``launch`` declares."""

    op = "ZeroCentredRMSNormFwdOp"
    specialise_on = ("N",)

    @launch_signature
    def launch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class ZeroCentredRMSNormFwdOp(_RMSNormEpsOp):
    """``x̂ · (1 + weight)`` over the last axis (Gemma / Qwen3-Next RMSNorm).

    The weight is passed as the checkpoint stores it (zero-centred); ``1 + weight`` is formed
    inside the kernel in float32, never by the caller.
    """

    interfaces = (ZeroCentredRMSNormKernel,)

    def forward(self, x: Any, weight: Any) -> Any:
        return self.launch(ZeroCentredRMSNormKernel, x, weight, self.eps)


class FusedAddZeroCentredRMSNormKernel(KernelInterface):
    """Writes ``x + residual`` into ``residual`` and normalises that sum; called as ``launch`` declares."""

    op = "FusedAddZeroCentredRMSNormFwdOp"
    specialise_on = ("N",)

    @launch_signature
    def launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class FusedAddZeroCentredRMSNormFwdOp(_RMSNormEpsOp):
    """The residual add and the zero-centred RMSNorm in one pass: ``residual`` becomes
    ``x + residual`` (in place) and the op returns its norm times ``1 + weight``."""

    interfaces = (FusedAddZeroCentredRMSNormKernel,)

    def forward(self, x: Any, residual: Any, weight: Any) -> Any:
        return self.launch(FusedAddZeroCentredRMSNormKernel, x, residual, weight, self.eps)


class GatedRMSNormKernel(KernelInterface):
    """``output = (weight · rmsnorm(x)) · silu(gate)``; called as ``launch`` declares."""

    op = "GatedRMSNormFwdOp"
    specialise_on = ("D",)

    @launch_signature
    def launch(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class GatedRMSNormFwdOp(_RMSNormEpsOp):
    """RMSNorm over the last axis, then the weight, then the SiLU gate, in one pass."""

    interfaces = (GatedRMSNormKernel,)

    def forward(self, x: Any, gate: Any, weight: Any) -> Any:
        return self.launch(GatedRMSNormKernel, x, gate, weight, self.eps)


class GDNGatingKernel(KernelInterface):
    """``(g, beta)``: ``g = -exp(A_log) · softplus(a + dt_bias)`` in float32, ``beta = sigmoid(b)``
    in b's dtype; called as ``launch`` declares."""

    op = "GDNGatingFwdOp"
    specialise_on = ("NV",)

    @launch_signature
    def launch(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor,
               dt_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # a declaration: kernels implement it


class GDNGatingFwdOp(Op):
    """The gates of a Gated DeltaNet layer from its a/b projections (returns ``(g, beta)``)."""

    interfaces = (GDNGatingKernel,)

    def forward(self, a: Any, b: Any, A_log: Any, dt_bias: Any) -> Any:
        return self.launch(GDNGatingKernel, a, b, A_log, dt_bias)
