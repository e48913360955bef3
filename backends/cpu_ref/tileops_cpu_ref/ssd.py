"""Reference semantics of SSDDecodeFwdOp: one Mamba2 (SSD) decode step.

For batch b, head h (group g = h // (H // G)), head dim p and state dim n::

    dA = exp(dt[b, h, p] * A[h, p, n])
    state[b, h, p, n] = state[b, h, p, n] * dA + dt[b, h, p] * x[b, h, p] * B_in[b, g, n]
    y_out[b, h, p] = sum_n state[b, h, p, n] * C_in[b, g, n]      (with the updated state)

With ``compute_dtype=float32`` it is the CPU reference kernel; with float64 it is the
reference the other kernels are checked against.
"""

from __future__ import annotations

import torch

__all__ = ["ssd_decode"]


def ssd_decode(A: torch.Tensor, dt: torch.Tensor, x: torch.Tensor, B_in: torch.Tensor, C_in: torch.Tensor,
               state: torch.Tensor, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Update ``state`` in place and return ``y_out`` (float32, or ``compute_dtype`` if wider)."""
    H, G = A.shape[0], B_in.shape[1]
    group = H // G
    Bg = B_in.to(compute_dtype).repeat_interleave(group, dim=1)  # [B, H, N]
    Cg = C_in.to(compute_dtype).repeat_interleave(group, dim=1)
    dt_c = dt.to(compute_dtype)
    decay = torch.exp(dt_c.unsqueeze(-1) * A.to(compute_dtype).unsqueeze(0))  # [B, H, P, N]
    update = (dt_c * x.to(compute_dtype)).unsqueeze(-1) * Bg.unsqueeze(2)
    new_state = state.to(compute_dtype) * decay + update
    y = torch.einsum("bhpn,bhn->bhp", new_state, Cg)
    state.copy_(new_state.to(state.dtype))
    out_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32
    return y.to(out_dtype)
