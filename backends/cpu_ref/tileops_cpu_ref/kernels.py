"""The general reference kernels: PyTorch ops with float32 accumulation, on any device.

Each class implements one core interface, declares ``general = True`` (it serves every
call; specialised kernels beat it) and ``devices = ("*",)`` (PyTorch runs it wherever the
tensors are). Half-precision inputs are computed in float32 and rounded once at the end.
``KERNELS`` is what the plugin registers.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from tileops_core.kernels import CallSpec, KernelEntry
from tileops_core.ops.activation import SiluAndMulKernel
from tileops_core.ops.elementwise import ReciprocalKernel
from tileops_core.ops.gemm import BmmKernel, GemmKernel, LinearKernel
from tileops_core.ops.linear_attention import RGDRKernel
from tileops_core.ops.mamba import SSDDecodeKernel
from tileops_core.ops.normalization import GroupNormKernel, RMSNormKernel
from tileops_core.ops.reduction import SoftmaxKernel, SumKernel

from .rgdr import recurrent_gated_delta_rule
from .ssd import ssd_decode

__all__ = ["KERNELS"]

_LOW = (torch.float16, torch.bfloat16)


def _acc(t: torch.Tensor | None) -> torch.Tensor | None:
    """Upcast half precision to float32 for accumulation."""
    return t.float() if t is not None and t.dtype in _LOW else t


class _Reference:
    """Declarations shared by every reference kernel."""

    devices = ("*",)
    supported_archs = ("*",)
    general = True

    #: The kernel function; one build identity per interface (PyTorch needs no compilation).
    fn: Callable[..., Any]

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        return KernelEntry(("torch", cls.__name__), lambda: cls.fn)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
              eps: float | None) -> torch.Tensor:
    if eps is None:
        eps = torch.finfo(x.dtype).eps  # PyTorch's default: the input dtype's epsilon
    return F.rms_norm(_acc(x), normalized_shape, _acc(weight), eps).to(x.dtype)


class RefRMSNorm(_Reference, RMSNormKernel):
    fn = staticmethod(_rms_norm)


def _group_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
                eps: float) -> torch.Tensor:
    return F.group_norm(_acc(x), num_groups, _acc(weight), _acc(bias), eps).to(x.dtype)


class RefGroupNorm(_Reference, GroupNormKernel):
    fn = staticmethod(_group_norm)


def _softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None) -> torch.Tensor:
    out_dtype = dtype or x.dtype
    src = x.to(out_dtype) if dtype is not None else x
    return torch.softmax(_acc(src), dim).to(out_dtype)


class RefSoftmax(_Reference, SoftmaxKernel):
    fn = staticmethod(_softmax)


def _sum(x: torch.Tensor, dim: Any, keepdim: bool, dtype: torch.dtype | None) -> torch.Tensor:
    out_dtype = dtype or x.dtype
    acc = torch.float64 if out_dtype == torch.float64 else torch.float32
    if dim is None:
        result = torch.sum(x, dtype=acc)
        if keepdim:
            result = result.reshape((1,) * x.dim())
    else:
        result = torch.sum(x, dim=dim, keepdim=keepdim, dtype=acc)
    return result.to(out_dtype)


class RefSum(_Reference, SumKernel):
    fn = staticmethod(_sum)


def _reciprocal(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    src = x if x.is_floating_point() else x.to(torch.float32)
    result = torch.reciprocal(_acc(src)).to(src.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out


class RefReciprocal(_Reference, ReciprocalKernel):
    fn = staticmethod(_reciprocal)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = _acc(x).chunk(2, dim=-1)
    return (F.silu(gate) * up).to(x.dtype)


class RefSiluAndMul(_Reference, SiluAndMulKernel):
    fn = staticmethod(_silu_and_mul)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(_acc(a), _acc(b)).to(a.dtype)


class RefBmm(_Reference, BmmKernel):
    fn = staticmethod(_bmm)


def _gemm(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool) -> torch.Tensor:
    lhs = _acc(a.t() if trans_a else a)
    rhs = _acc(b.t() if trans_b else b)
    return torch.matmul(lhs, rhs).to(a.dtype)


class RefGemm(_Reference, GemmKernel):
    fn = staticmethod(_gemm)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(_acc(x), _acc(weight), _acc(bias)).to(x.dtype)


class RefLinear(_Reference, LinearKernel):
    fn = staticmethod(_linear)


def _ssd(A: torch.Tensor, dt: torch.Tensor, x: torch.Tensor, B_in: torch.Tensor, C_in: torch.Tensor,
         state: torch.Tensor) -> torch.Tensor:
    return ssd_decode(A, dt, x, B_in, C_in, state, torch.float32)


class RefSSDDecode(_Reference, SSDDecodeKernel):
    fn = staticmethod(_ssd)


def _rgdr(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
          actual_seq_lengths: torch.Tensor, ssm_state_indices: torch.Tensor, g: torch.Tensor | None,
          gk: torch.Tensor | None, num_accepted_tokens: torch.Tensor | None, scale: float | None,
          seq_lens_style: str, use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
    return recurrent_gated_delta_rule(
        query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk, num_accepted_tokens,
        scale=scale, seq_lens_style=seq_lens_style, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        compute_dtype=torch.float32,
    )


class RefRGDR(_Reference, RGDRKernel):
    fn = staticmethod(_rgdr)


KERNELS = (
    RefRMSNorm, RefGroupNorm, RefSoftmax, RefSum, RefReciprocal, RefSiluAndMul, RefBmm, RefGemm, RefLinear,
    RefSSDDecode, RefRGDR,
)
