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

A compiled call is checked on the fake tensors of its trace as well
(:func:`traced_overlapping_argument`): there functionalization has not yet given a written input
a copy of its own, which it later does (``aot_eager`` would compute what eager refuses).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["EXPANDED_LIMIT", "expanded_beyond_limit", "extents_of", "overlapping_argument", "overlaps_itself",
           "traced_overlapping_argument"]

#: Where a tensor's elements lie: (first byte, sizes, strides in elements, bytes per element).
_Span = tuple[int, tuple[int, ...], tuple[int, ...], int]


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
    mine = values[written]
    lo = mine.data_ptr()
    hi = lo + size
    for j, v in enumerate(values):
        if j == written or not extents[j] or v is None:
            continue
        p = v.data_ptr()
        if p < hi and lo < p + extents[j] and _exactly_overlap(mine, v, _span(mine), _span(v)):
            return j
    return None


def traced_overlapping_argument(values: Sequence[Any], written: int) -> int | None:
    """:func:`overlapping_argument` on the fake tensors a trace passes the compile boundary's fake
    implementation (dynamo's fakes share a storage where the caller's tensors do).

    Fake tensors have no data pointer: bytes are counted from the start of the storage they share,
    with symbolic sizes read at their hints (the traced call's own sizes, without adding a guard),
    so the verdict is the eager call's for the same tensors.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    mine = values[written]
    storage = mine.untyped_storage()._cdata
    span = _hinted_span(mine)
    size = _span_extent(span)
    if not size:
        return None
    for j, v in enumerate(values):
        if j == written or v is None or v.untyped_storage()._cdata != storage:
            continue
        theirs = _hinted_span(v)
        extent = _span_extent(theirs)
        if extent and theirs[0] < span[0] + size and span[0] < theirs[0] + extent:
            with unset_fake_temporarily():  # the bytes are listed in real tensors, not traced
                if _exactly_overlap(mine, v, span, theirs):
                    return j
    return None


def _span(t: torch.Tensor) -> _Span:
    return t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size()


def _hinted_span(t: torch.Tensor) -> _Span:
    """The span of a fake tensor within its storage, symbolic values at their hints."""
    hint = _hint_function()
    size = t.element_size()
    return (hint(t.storage_offset()) * size, tuple(hint(n) for n in t.shape), tuple(hint(n) for n in t.stride()),
            size)


def _hint_function() -> Any:
    """``symbolic_shapes.optimization_hint``, named ``hint_int`` before torch 2.13 (the H200's torch 2.11 has
    only that name: importing the new one failed every compiled call with a mutated input there)."""
    from torch.fx.experimental import symbolic_shapes

    return getattr(symbolic_shapes, "optimization_hint", None) or getattr(symbolic_shapes, "hint_int")


def _span_extent(span: _Span) -> int:
    """Bytes from a span's first byte to just past its last element (0: it has no element)."""
    _, shape, stride, size = span
    if 0 in shape:
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, stride)) + 1) * size


#: Above this many bytes touched (both tensors together), overlap is decided without listing
#: the bytes: torch's own analysis, which may answer "overlap" for interleaved views.
_EXACT_LIMIT = 1 << 26


def _exactly_overlap(a: torch.Tensor, b: torch.Tensor, span_a: _Span, span_b: _Span) -> bool:
    """Byte ranges meet: do elements? Interleaved views (q/k/v split out of one projection, a
    pool and its side data as parts of one row) have meeting ranges and no common byte. Up to
    :data:`_EXACT_LIMIT` bytes the bytes each touches are listed and compared; beyond it,
    torch's analysis decides (conservative: it may report interleaved views as overlapping;
    on symbolic fake tensors it guards on the sizes it reads, so a retrace decides again)."""
    if _span_bytes(span_a) + _span_bytes(span_b) > _EXACT_LIMIT:
        from torch._C._dynamo.guards import compute_overlapping_tensors

        symbolic = not all(type(n) is int for t in (a, b) for n in (*t.shape, *t.stride(), t.storage_offset()))
        return bool(compute_overlapping_tensors([a, b], symbolic))
    return bool(torch.isin(_bytes_of(span_a), _bytes_of(span_b)).any())


def _span_bytes(span: _Span) -> int:
    """How many bytes a span's elements hold (its numel times its element size)."""
    n = 1
    for size in span[1]:
        n *= size
    return n * span[3]


def _bytes_of(span: _Span) -> torch.Tensor:
    """Every byte address a span touches (int64, on the CPU)."""
    first, shape, strides, size = span
    offsets = torch.zeros((), dtype=torch.int64)
    for n, stride in zip(shape, strides):
        offsets = offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * stride
    starts = offsets.reshape(-1, 1) * size + first
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
