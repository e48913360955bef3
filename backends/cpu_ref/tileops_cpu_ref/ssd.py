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
    """Update ``state`` in place and return ``y_out`` (float32, or ``compute_dtype`` if wider).

    The state is touched three times (decay, update, read-out), in place when it is already
    contiguous in ``compute_dtype``; the only state-sized temporary is ``exp(dt * A)``. Heads share their
    group's ``B_in``/``C_in`` through a ``[batch, G, H // G · P, N]`` view, never a copy.
    """
    batch, H, P = dt.shape
    G, N = B_in.shape[1], B_in.shape[2]
    dt_c = dt.to(compute_dtype)
    in_place = state.dtype == compute_dtype and state.is_contiguous()
    work = state if in_place else state.to(compute_dtype).contiguous()
    work.mul_(torch.mul(dt_c.unsqueeze(-1), A.to(compute_dtype)).exp_())
    grouped = work.view(batch, G, H // G * P, N)
    grouped.addcmul_((dt_c * x.to(compute_dtype)).view(batch, G, -1, 1), B_in.to(compute_dtype).unsqueeze(2))
    y = torch.matmul(grouped, C_in.to(compute_dtype).unsqueeze(-1)).view(batch, H, P)
    if not in_place:
        state.copy_(work)
    out_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32
    return y.to(out_dtype)
