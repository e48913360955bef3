"""Softmax and sum: reductions over axes of an arbitrary-rank input."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op

__all__ = [
    "SoftmaxKernel", "SoftmaxFwdOp", "SumKernel", "SumFwdOp", "reduction_extent", "reduced_axes_adjacent",
]


class SoftmaxKernel(KernelInterface):
    """Softmax along ``dim``, called as ``launch`` declares; ``N`` is the promised axis length."""

    op = "SoftmaxFwdOp"
    specialise_on = ("N", "dim")

    @launch_signature
    def launch(input: torch.Tensor, dim: int, dtype: str | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it (dtype by name: "float32")


class SoftmaxFwdOp(Op):
    """``torch.softmax(input, dim, dtype)`` with the softmax axis length promised at construction."""

    interfaces = (SoftmaxKernel,)
    dim: int  # params: set from the checked values at construction
    dtype: str | None

    def __init__(self, dim: int, dtype: Any = None, *, N: int, **options: Any) -> None:
        super().__init__(dim=dim, dtype=dtype, N=N, **options)

    def forward(self, input: Any) -> Any:
        # The dtype param as it is (a name): the one launch the op layer calls directly, no forward frame.
        return self.launch(SoftmaxKernel, input, self.dim, self.dtype)


class SumKernel(KernelInterface):
    """``torch.sum`` over ``dim``; called as ``launch`` declares."""

    op = "SumFwdOp"

    @launch_signature
    def launch(input: torch.Tensor, dim: int | tuple[int, ...] | None, keepdim: bool,
               dtype: str | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it (dtype by name: "float64")


def reduction_extent(shape: tuple[int, ...], dim: Any) -> tuple[int, int, int]:
    """(outer, reduced, inner) element counts when the reduced axes are contiguous, else
    (1, reduced, 1) with the reduced count only: enough to key a reduction kernel."""
    n = len(shape)
    if dim is None or (isinstance(dim, tuple) and not dim):
        return 1, math.prod(shape), 1
    axes = sorted({d % n if n else 0 for d in (dim if isinstance(dim, tuple) else (dim,))})
    reduced = math.prod(shape[a] for a in axes) if n else 1
    if axes == list(range(axes[0], axes[-1] + 1)):
        return math.prod(shape[: axes[0]]), reduced, math.prod(shape[axes[-1] + 1:])
    return 1, reduced, 1


def reduced_axes_adjacent(ndim: int, dim: Any) -> bool:
    """True when the reduced axes form one run (everything counts as one run)."""
    if dim is None or (isinstance(dim, tuple) and not dim) or ndim == 0:
        return True
    axes = sorted({d % ndim for d in (dim if isinstance(dim, tuple) else (dim,))})
    return axes == list(range(axes[0], axes[-1] + 1))


class SumFwdOp(Op):
    """``torch.sum(input, dim, keepdim, dtype)``; ``dim=None`` reduces everything.

    ``static_dims`` is empty (nothing can be promised), so the op keys its kernels on the
    reduction's (outer, reduced, inner) extent rather than the whole input shape.
    """

    interfaces = (SumKernel,)
    dim: int | tuple[int, ...] | None  # params: set from the checked values at construction
    keepdim: bool
    dtype: str | None

    def __init__(self, dim: Any = None, keepdim: bool = False, dtype: Any = None, **options: Any) -> None:
        super().__init__(dim=dim, keepdim=keepdim, dtype=dtype, **options)

    def specialisation(self, interface: type[KernelInterface], env: dict[str, Any]) -> dict[str, Any]:
        shape, dim = tuple(env["S"]), env["dim"]
        return {"extent": reduction_extent(shape, dim), "adjacent": reduced_axes_adjacent(len(shape), dim)}

    def forward(self, input: Any) -> Any:
        return self.launch(SumKernel, input, self.dim, self.keepdim, self.dtype)  # (as Softmax: one direct launch)
