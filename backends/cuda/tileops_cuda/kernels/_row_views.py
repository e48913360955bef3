"""Views of strided inputs as the row layouts the strided kernels read, without a copy.

The gated-delta-net kernels take ``T.StridedTensor`` rows: the last axis contiguous, the
other strides free (runtime values), assumed to be whole 16-byte vectors so loads stay
vectorised. A slice of a fused projection or a chunk of q_proj's output is such a view
and is read in place. Anything else (a last axis that is not contiguous, strides that are
not whole vectors, leading axes that do not collapse into one stride, a misaligned start)
is copied once into a contiguous tensor, which always qualifies. torch loads lazily.

The launchers of programs that take packed tensors (``T.Tensor``) give them ``t`` where
``t.is_contiguous() and not t.data_ptr() % 16``, else :func:`packed` (``t.contiguous()`` alone
returns a contiguous ``t`` at a misaligned start as it is). They write that test in line, on the
hot path of every call, rather than call a helper: an aligned tensor costs one ``data_ptr()``
more than ``.contiguous()`` did, and no frame.
"""

from __future__ import annotations

from typing import Any

__all__ = ["packed", "readable", "row_view", "head_view"]

_VECTOR_BYTES = 16


def readable(t: Any) -> bool:
    """Whether the strided kernels can read ``t`` in place: last axis contiguous, every other
    stride a whole number of 16-byte vectors (axes of size 1 are never stepped along, so
    their strides do not count), the start 16-byte aligned.

    A contiguous tensor whose rows are whole vectors answers without reading its strides (each
    is a product of trailing sizes, the last axis's among them): the common call, a decode
    step's activations, costs a few attribute reads instead of a pass over the strides."""
    elems = _VECTOR_BYTES // t.element_size()
    if t.data_ptr() % _VECTOR_BYTES:
        return False
    shape = t.shape
    if shape and shape[-1] % elems == 0 and t.is_contiguous() and t.numel():  # (empty: any strides)
        return True
    # A strided view (a slice of a fused projection, the common non-contiguous call): the strides read
    # once and walked in a plain loop, half the cost of a comprehension and ``all`` over a generator.
    strides = t.stride()
    if strides and strides[-1] != 1:
        return False
    for s, n in zip(strides[:-1], shape[:-1]):
        if n > 1 and s % elems:
            return False
    return True


def packed(t: Any) -> Any:
    """A fresh packed copy of ``t``, which the allocator places 16-byte aligned: ``t.contiguous()`` returns
    a contiguous ``t`` itself, misaligned start and all (found in review: a one-token slice of a projection
    at an odd offset reached the programs' 16-byte loads as it was, a misaligned-address fault on the GPU)."""
    return t.clone() if t.is_contiguous() else t.contiguous()


def row_view(t: Any, width: int) -> tuple[Any, bool]:
    """``t`` as ``[rows, width]`` read in place where it can be, else a contiguous copy.

    Returns ``(view, copied)``: a caller that writes the view copies it back when ``copied``.
    """
    view = _view(t, (-1, width))
    if view is not None and readable(view):
        return view, False
    return packed(t).view(-1, width), True


def head_view(t: Any, width: int) -> tuple[Any, bool]:
    """``t`` (``[*S, width]``) as ``[outer, heads, width]``: the axis before the last is the
    head axis, everything before it collapses into one. A 2-D ``[M, width]`` is one outer row
    of M heads, so ``[T, NV*DV]`` column slices and ``[T, NV, DV]`` head slices both read in place."""
    if t.dim() == 1:
        shape: tuple[int, ...] = (1, 1, width)
    elif t.dim() == 2:
        shape = (1, t.shape[0], width)
    else:
        shape = (-1, t.shape[-2], width)
    view = _view(t, shape)
    if view is not None and readable(view):
        return view, False
    return packed(t).view(shape), True


def _view(t: Any, shape: tuple[int, ...]) -> Any:
    if t.dim() == len(shape) and t.shape[1:] == shape[1:]:
        return t  # already that shape (the leading -1): no new view, the call's most common case
    try:
        return t.view(*shape)  # (unpacked: torch parses a tuple argument at half the speed)
    except RuntimeError:  # leading axes that do not collapse into one stride
        return None
