"""The one place dtype names meet ``torch.dtype`` objects."""

from __future__ import annotations

import torch

from ..lang.dtypes import DTYPE_NAMES

__all__ = ["TORCH_DTYPES", "DTYPE_OF", "to_torch", "name_of"]

#: dtype name -> torch.dtype, for every name this torch knows.
TORCH_DTYPES: dict[str, torch.dtype] = {n: getattr(torch, n) for n in sorted(DTYPE_NAMES) if hasattr(torch, n)}
#: torch.dtype -> dtype name.
DTYPE_OF: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def to_torch(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


def name_of(dtype: torch.dtype) -> str:
    return DTYPE_OF.get(dtype) or str(dtype).removeprefix("torch.")
