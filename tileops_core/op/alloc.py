"""The allocation of a plan's fresh output, in the cheapest form torch has for its device.

A ``writes_outputs`` kernel gets its outputs from the plan (:mod:`.plan`): one allocation per
output per call, of a shape, dtype and device the plan fixed. ``torch.empty(*sizes, dtype=,
device=)`` parses its arguments on every call, which costs as much host time as a small
kernel's whole launch; torch's compiled graphs allocate through ``empty_strided_cpu`` /
``empty_strided_cuda`` (``torch._C._dynamo.guards``), which take sizes, strides and dtype
positionally and allocate on the current device. :func:`fresh_allocator` uses them where the
result is the same tensor ``torch.empty`` would give: the contiguous strides, the plan's device
(a CUDA call checks that the current device is the plan's, else it asks ``torch.empty``), and not
under ``torch.use_deterministic_algorithms``, where ``torch.empty`` fills the memory (the fast
forms do not). Where torch lacks them, or they do not behave as expected, ``torch.empty`` serves.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

__all__ = ["fresh_allocator", "contiguous_strides"]

_empty = torch.empty
_deterministic: Callable[[], bool] = torch._C._get_deterministic_algorithms


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides ``torch.empty(shape)`` gives (an axis of size 0 counts as 1, as torch counts it)."""
    strides = []
    n = 1
    for size in reversed(shape):
        strides.append(n)
        n *= max(size, 1)
    return tuple(reversed(strides))


def _checked(make: Any, device: torch.device) -> Any:
    """``make`` where it allocates what ``torch.empty`` would on ``device``, else None."""
    if make is None:
        return None
    try:
        t = make((2, 3), (3, 1), torch.float16)
    except Exception:  # not this build's signature: torch.empty serves
        return None
    ok = (isinstance(t, torch.Tensor) and t.shape == (2, 3) and t.stride() == (3, 1) and t.dtype is torch.float16
          and t.device == device and not t.requires_grad)
    return make if ok else None


def _fast_form(device_type: str) -> Any:
    guards = getattr(torch._C, "_dynamo", None)
    return getattr(getattr(guards, "guards", None), f"_empty_strided_{device_type}", None)


_CPU = torch.device("cpu")
_strided_cpu = _checked(_fast_form("cpu"), _CPU)
_strided_cuda: list[Any] = []  # checked on the first CUDA plan (the check allocates on the device)


def _cuda_form(device: torch.device) -> tuple[Any, Callable[[], int]] | None:
    """``empty_strided_cuda`` and the current-device query, where both behave; None otherwise."""
    if not _strided_cuda:
        get_device = getattr(torch._C, "_cuda_getDevice", None)
        form = None
        if get_device is not None and device.index is not None:
            try:
                current = torch.device("cuda", get_device())
            except Exception:
                current = None
            if current is not None:
                form = _checked(_fast_form("cuda"), current)
        _strided_cuda.append(None if form is None else (form, get_device))
    return _strided_cuda[0]


def fresh_allocator(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Callable[[], torch.Tensor]:
    """A function of no arguments returning a new contiguous tensor of ``shape``, ``dtype`` on ``device``."""
    sizes = tuple(shape)
    unpacked = sizes if sizes else ((),)  # torch.empty parses separate ints faster; 0-d: ()
    general = functools.partial(_empty, *unpacked, dtype=dtype, device=device)
    strides = contiguous_strides(sizes)
    if device.type == "cpu" and _strided_cpu is not None:
        strided_cpu = _strided_cpu

        def on_cpu() -> torch.Tensor:
            return general() if _deterministic() else strided_cpu(sizes, strides, dtype)
        return on_cpu
    cuda = _cuda_form(device) if device.type == "cuda" and device.index is not None else None
    if cuda is not None:
        strided_cuda, current_device = cuda
        index = device.index

        def on_cuda() -> torch.Tensor:
            if current_device() != index or _deterministic():
                return general()
            return strided_cuda(sizes, strides, dtype)
        return on_cuda
    return general
