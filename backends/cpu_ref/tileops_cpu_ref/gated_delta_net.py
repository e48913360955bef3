"""Reference math of the Gated DeltaNet layer's norms and gating, with HF's rounding order.

Each function is what a careful torch programmer writes for the fast path: float32 math
on upcast inputs, rounded to the input dtype exactly where Qwen3-Next's HF modules round
(``Qwen3NextRMSNorm``, ``Qwen3NextRMSNormGated``, ``Qwen3NextGatedDeltaNet.forward``), so
a model patched with these ops gives HF's bits, not merely HF's values within a tolerance.

The norm is written out as ``F.rms_norm`` computes it (``x * rsqrt(mean(x·x) + eps)``, the
same bits) with ``eps`` and ``1`` as 0-dim tensors: at decode sizes ``F.rms_norm``'s own
dispatch and the wrapping of its Python numbers cost more than the arithmetic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .constants import constant

__all__ = ["zero_centred_rms_norm", "fused_add_zero_centred_rms_norm", "gated_rms_norm", "gdn_decay", "gdn_gating"]


def _rms_normalised(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x²) + eps)`` over the last axis in x's dtype: ``F.rms_norm(x, eps=eps)``'s bits."""
    return x * (x * x).mean(-1, keepdim=True).add_(constant(eps, x.dtype)).rsqrt_()


def zero_centred_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rmsnorm(x) · (1 + weight)`` over the last axis in float32, rounded once to x's dtype."""
    normed = _rms_normalised(x.float(), eps)
    w = weight.float()
    return (normed * w.add(constant(1.0, w.dtype))).to(x.dtype)


def fused_add_zero_centred_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                    eps: float) -> torch.Tensor:
    """``residual += x`` (rounded once, as HF's ``residual + hidden_states``), then the
    zero-centred norm of the rounded sum."""
    residual.add_(x)
    return zero_centred_rms_norm(residual, weight, eps)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``(weight · rmsnorm(x)) · silu(gate)`` over the last axis.

    HF's order: the float32 norm is rounded to x's dtype, multiplied by the weight in that
    dtype (a second rounding), then by ``silu(gate)`` in float32 and rounded once more.
    """
    normed = _rms_normalised(x.float(), eps).to(x.dtype)
    return ((weight * normed) * F.silu(gate.float())).to(x.dtype)


def gdn_decay(a: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """``g = -exp(A_log) · softplus(a + dt_bias)`` in float32."""
    g = F.softplus(a.float() + dt_bias.float())
    return g.mul_(-torch.exp(A_log.float()))  # in place on the fresh softplus result


def gdn_gating(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor,
               dt_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``g`` (:func:`gdn_decay`) in float32; ``beta = sigmoid(b)`` computed in float32, rounded to b's dtype."""
    return gdn_decay(a, A_log, dt_bias), torch.sigmoid(b.float()).to(b.dtype)
