"""Torch's own eager op for each catalogue op, as the host-time comparison calls it.

The question a user asks of the framework on an accelerator is whether calling the op costs
more host time than calling torch directly. Each entry maps an op instance and its call
arguments to the torch call that computes the same thing (on the same tensors, with the
op's params), and names it for the report. Ops torch has no single call for (RGDR, the SSD
step) have no entry.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = ["torch_equivalent"]

Adapter = Callable[[Any, Sequence[Any]], Callable[[], Any]]


def _rms_norm(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, weight = a[0], a[1] if len(a) > 1 else None
    shape, eps = list(op.normalized_shape), op.eps
    return lambda: F.rms_norm(x, shape, weight, eps)


def _group_norm(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, weight, bias = (list(a) + [None, None])[:3]
    groups, eps = op.num_groups, op.eps
    return lambda: F.group_norm(x, groups, weight, bias, eps)


def _softmax(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, dim, dtype = a[0], op.dim, op.dtype
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return lambda: F.softmax(x, dim, dtype=dt)


def _sum(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, dim, keepdim, dtype = a[0], op.dim, op.keepdim, op.dtype
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dim is None:
        return lambda: torch.sum(x, dtype=dt)
    return lambda: torch.sum(x, dim, keepdim=keepdim, dtype=dt)


def _silu_and_mul(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x = a[0]
    n = x.shape[-1] // 2
    return lambda: F.silu(x[..., :n]) * x[..., n:]


def _bmm(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, y = a[0], a[1]
    return lambda: torch.bmm(x, y)


def _gemm(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x = a[0].t() if op.trans_a else a[0]
    y = a[1].t() if op.trans_b else a[1]
    return lambda: torch.matmul(x, y)


def _linear(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x, weight, bias = (list(a) + [None])[:3]
    return lambda: F.linear(x, weight, bias)


def _reciprocal(op: Any, a: Sequence[Any]) -> Callable[[], Any]:
    x = a[0]
    return lambda: torch.reciprocal(x)


_TABLE: dict[str, tuple[str, Adapter]] = {
    "RMSNormFwdOp": ("F.rms_norm", _rms_norm),
    "GroupNormFwdOp": ("F.group_norm", _group_norm),
    "SoftmaxFwdOp": ("F.softmax", _softmax),
    "SumFwdOp": ("torch.sum", _sum),
    "SiluAndMulFwdOp": ("F.silu(x[..., :N]) * x[..., N:]", _silu_and_mul),
    "BmmFwdOp": ("torch.bmm", _bmm),
    "GemmFwdOp": ("torch.matmul", _gemm),
    "LinearFwdOp": ("F.linear", _linear),
    "ReciprocalFwdOp": ("torch.reciprocal", _reciprocal),
}


def torch_equivalent(op: Any, args: Sequence[Any]) -> tuple[str, Callable[[], Any]] | None:
    """``(name, call)`` of torch's eager equivalent of ``op(*args)``, or None when torch has none."""
    entry = _TABLE.get(type(op).__name__)
    if entry is None:
        return None
    name, adapt = entry
    return name, adapt(op, args)
