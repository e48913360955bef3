"""0-dim tensors for the constants of the reference math (``eps``, ``1``, a scale).

On the CPU a tiny op costs about a microsecond, and an op with a Python number operand
(``x + eps``) more than twice that: torch wraps the number into a fresh tensor on every
call. A kernel that runs at decode sizes therefore takes its constants as 0-dim tensors,
made once per value and dtype. A 0-dim operand broadcasts and takes part in type promotion
like the number it holds (it never widens a tensor of its own kind), and a 0-dim CPU tensor
is accepted beside tensors of any device, so the math is unchanged. The value is held in
the dtype of the tensor it meets, as torch holds a Python number for that op.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["constant"]


@functools.lru_cache(maxsize=256)
def constant(value: float, dtype: torch.dtype) -> torch.Tensor:
    """``value`` as a 0-dim CPU tensor of ``dtype`` (shared: never write to it)."""
    return torch.tensor(value, dtype=dtype)
