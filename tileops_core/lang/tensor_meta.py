"""The one description of a tensor without its data: what spec expressions read of a tensor.

Roofline formulas, shape rules and ``tileops explain`` read ``x.shape``, ``x.ndim``,
``x.dim()`` and ``x.itemsize`` of tensors that, at the time, are not allocated: a workload
row instantiated for the validator or a benchmark, an output whose shape a plan fixed, the
inputs a cached call plan remembers (keeping the tensors would keep their memory alive).
One class serves all of them. It imports no torch: the validator's instantiation names
dtypes (``"float16"``), the benchmarks and a call plan hold ``torch.dtype`` objects, and
both give the element size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ExprError

__all__ = ["ITEMSIZE", "TensorMeta"]

#: Bytes per element of each dtype name (what ``x.itemsize`` reads when the dtype is a name).
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
            "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "complex64": 8,
            "complex128": 16}


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """A tensor's shape, dtype (a dtype name, a ``torch.dtype``, or None when not yet known) and,
    for a call's tensors, device; no data."""

    shape: tuple[int, ...]
    dtype: Any = None  # str | torch.dtype | None (typed Any: this module must not import torch)
    device: Any = None  # torch.device | None

    @classmethod
    def of(cls, tensor: Any) -> "TensorMeta":
        """The metadata of a real (or meta, or fake) ``torch.Tensor``."""
        return cls(tuple(tensor.shape), tensor.dtype, tensor.device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        """``torch.Tensor.dim()``, for expressions written against tensors."""
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        """Bytes per element; an error (not a guess) when the dtype is not known."""
        if self.dtype is None:
            raise ExprError("the dtype of this tensor is not known on this row")
        if isinstance(self.dtype, str):
            return ITEMSIZE[self.dtype]
        return int(self.dtype.itemsize)

    def __repr__(self) -> str:
        dtype = self.dtype if self.dtype is None or isinstance(self.dtype, str) else \
            str(self.dtype).removeprefix("torch.")
        device = "" if self.device is None else f", {self.device}"
        return f"TensorMeta({list(self.shape)}, {dtype}{device})"
