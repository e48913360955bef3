"""Inputs a kernel writes must not share memory with any other argument, nor with themselves.

Seed 000 step 7 forbids an output sharing storage with an input; a mutated input (a state
pool, a KV cache) is an output too. Written through while another argument reads the same
bytes, the result depends on the kernel's order of work (RGDR with ``value`` a view into the
state slot it writes gave results 0.13 off). And a mutated input that overlaps itself (an
expanded view) has elements written more than once. Both are refused with a ``CheckError``
naming the declaration, on every call, cold or warm.

Views of one buffer that do not overlap (a state pool and a conv pool carved out of one
arena, as serving systems allocate them, or interleaved parts of one buffer) are fine: the
check compares byte ranges, and where two ranges meet, the bytes themselves. The common call costs one ``data_ptr()`` per argument and a few
comparisons: the byte extents are fixed by sizes and strides, which a matched call shares
with the call its matcher was made for (:func:`extents_of` runs once per matcher). Only when
two ranges meet are the bytes compared exactly.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["EXPANDED_LIMIT", "expanded_beyond_limit", "extents_of", "overlapping_argument", "overlaps_itself"]


def _extent(t: Any) -> int:
    """Bytes from ``t.data_ptr()`` to just past its last element (0: no memory is touched, as on
    ``meta``)."""
    if t is None or not t.numel() or t.is_meta:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def extents_of(values: Sequence[Any]) -> tuple[int, ...]:
    """The byte extent of every argument (see :func:`_extent`); depends on sizes and strides only."""
    return tuple(_extent(v) for v in values)


def overlaps_itself(t: torch.Tensor) -> bool:
    """Whether some element of ``t`` is also another of its elements (an expanded view)."""
    return t.numel() > 1 and torch._debug_has_internal_overlap(t) == 1  # 0: no, 2: too hard to tell


def overlapping_argument(values: Sequence[Any], written: int, extents: Sequence[int]) -> int | None:
    """The first argument whose memory overlaps argument ``written`` (None: none does)."""
    size = extents[written]
    if not size:
        return None
    lo = values[written].data_ptr()
    hi = lo + size
    for j, v in enumerate(values):
        if j == written or not extents[j] or v is None:
            continue
        p = v.data_ptr()
        if p < hi and lo < p + extents[j] and _exactly_overlap(values[written], v):
            return j
    return None


#: Above this many bytes touched (both tensors together), overlap is decided without listing
#: the bytes: torch's own analysis, which may answer "overlap" for interleaved views.
_EXACT_LIMIT = 1 << 26


def _exactly_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte ranges meet: do elements? Interleaved views (q/k/v split out of one projection, a
    pool and its side data as parts of one row) have meeting ranges and no common byte. Up to
    :data:`_EXACT_LIMIT` bytes the bytes each touches are listed and compared; beyond it,
    torch's analysis decides (conservative: it may report interleaved views as overlapping)."""
    if a.numel() * a.element_size() + b.numel() * b.element_size() > _EXACT_LIMIT:
        from torch._C._dynamo.guards import compute_overlapping_tensors

        return bool(compute_overlapping_tensors([a, b], False))
    return bool(torch.isin(_bytes_of(a), _bytes_of(b)).any())


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """Every byte address ``t`` touches (int64, on the CPU)."""
    offsets = torch.zeros((), dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride()):
        offsets = offsets.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    size = t.element_size()
    starts = offsets.reshape(-1, 1) * size + t.data_ptr()
    return (starts + torch.arange(size, dtype=torch.int64)).reshape(-1)


#: A stride-0 (expanded) input is read densely by kernels that need contiguous data, and by
#: torch itself in most reference kernels: above this many dense bytes, and 16 times its real
#: memory, the call is refused up front instead of asking the allocator for the dense size.
EXPANDED_LIMIT = 1 << 28


def expanded_beyond_limit(t: Any) -> tuple[int, int] | None:
    """``(dense bytes, real bytes)`` of an expanded ``t`` too costly to materialise, else None."""
    if t is None or 0 not in t.stride():
        return None
    dense = t.numel() * t.element_size()
    real = _extent(t)
    if dense > EXPANDED_LIMIT and dense > 16 * real:
        return dense, real
    return None
