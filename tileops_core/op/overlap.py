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
(:func:`traced_overlapping_argument`, and eager's rule for one tensor on :func:`traced_stand_in`):
there functionalization has not yet given a written input a copy of its own, which it later does
(``aot_eager`` would compute what eager refuses). One sharing eager accepts is refused there too,
where torch's compile gets it wrong (:func:`traced_argument_torch_mistraces`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Collection, Sequence

import torch

__all__ = ["EXPANDED_LIMIT", "expanded_beyond_limit", "extents_of", "hint_of", "overlapping_argument",
           "overlaps_itself", "traced_argument_torch_mistraces", "traced_overlapping_argument", "traced_stand_in"]

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


def traced_stand_in(t: torch.Tensor) -> torch.Tensor:
    """A ``meta`` tensor with a fake tensor's sizes and strides, symbolic values at their hints (the
    traced call's own): eager's rule for one written tensor (:func:`overlaps_itself`) decides on it as
    on the caller's tensor, and its message shows the caller's strides. It touches no memory (its
    extent is 0), so no rule between arguments applies to it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    _, shape, stride, _ = _hinted_span(t)
    with unset_fake_temporarily():
        return torch.empty_strided(shape, stride, dtype=t.dtype, device="meta")


def traced_argument_torch_mistraces(values: Sequence[Any], written: int, mutated: Collection[int]) -> int | None:
    """The argument sharing a storage with the written input ``values[written]``, without a common
    element (:func:`traced_overlapping_argument` passed them), that torch's compile of dynamic shapes
    gets wrong (None: none does); ``values``: the fake tensors of a trace, ``mutated``: the indices of
    the written inputs.

    AOTAutograd (torch 2.13, ``_aot_autograd/runtime_wrappers.py`` ``merge_view_inputs``) merges the
    inputs of a graph that share a storage, one of them written, into one base, unless its analysis of
    their symbolic extents (``compute_overlapping_inputs``) tells them apart, which it cannot for
    interleaved views. It then rebuilds each of them from that base with the sizes, strides and offset
    of the trace, and the proxy tracer rebuilds a symbolic value it has not seen from its expression
    (``proxy_tensor._build_proxy_for_sym_expr``): a product of three or more factors (``s0*s1*s2``, the
    outer stride of a view of a 4-d buffer) becomes one ``operator.mul`` node with three arguments,
    which the graph's code runs as ``s0*s1`` (``aot_eager``: a wrong stride, wrong results) and Inductor
    refuses ("mul expected 2 arguments, got 3"). Static shapes are compared exactly and not merged.

    Only the graph's inputs are merged (views made inside the compiled function are traced from their
    base, which is), and a written input that is its base or a slice of it is rebuilt from the slice
    bounds alone (``auto_functionalize.try_use_slice``): what this rule reads is what the merge puts in
    the graph and what decides the elements read (:func:`_rebuilt_from`). A call no compile gets wrong
    is not refused; one that Inductor alone fails to compile keeps torch's error.
    """
    mine = values[written]
    storage = mine.untyped_storage()._cdata
    for j, v in enumerate(values):
        if j == written or v is None or v.untyped_storage()._cdata != storage:
            continue
        pair = ((written, mine), (j, v))
        if not any(isinstance(n, torch.SymInt) for _, t in pair for n in _metadata(t)):
            continue  # static shapes: torch compares the extents exactly and does not merge
        shape_env = getattr(mine.fake_mode, "shape_env", None)
        with shape_env.suppress_guards() if shape_env is not None else contextlib.nullcontext():
            if not _torch_cannot_separate(mine, v):
                continue
            if any(_from_caller(t) and _has_long_product(_rebuilt_from(t, i in mutated)) for i, t in pair):
                return j
    return None


def _metadata(t: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's sizes, strides and storage offset."""
    return (*t.shape, *t.stride(), t.storage_offset())


def _torch_cannot_separate(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether AOTAutograd's analysis of symbolic extents finds that ``a`` and ``b`` may overlap (the
    function its ``compute_overlapping_inputs`` calls, as it calls it). Where this torch has no such function
    (it is private; older ones analysed extents in Python), the answer is yes: a refusal, never a wrong result."""
    try:
        from torch._C._dynamo.guards import compute_overlapping_tensors

        return len(compute_overlapping_tensors([a, b], True)) > 1
    except (ImportError, TypeError):
        return True


def _from_caller(t: torch.Tensor) -> bool:
    """Whether a fake tensor is an input of the graph dynamo is tracing (one of the caller's tensors)
    rather than made by an op inside the compiled function. Where torch does not say (no dynamo trace,
    another torch), every tensor counts as the caller's: a refusal, never a wrong result."""
    from torch._dynamo import symbolic_convert

    tx = getattr(getattr(symbolic_convert, "tls", None), "current_tx", None)
    graphargs = getattr(getattr(tx, "output", None), "graphargs", None)
    if graphargs is None:
        return True
    return any(getattr(a, "fake_tensor", None) is t for a in graphargs)


def _rebuilt_from(t: torch.Tensor, written: bool) -> tuple[Any, ...]:
    """The symbolic values the merge puts in the graph to rebuild ``t`` from its base and that decide
    which elements it reads: the sizes, the strides of axes longer than one (a wrong stride of a length-1
    axis addresses the same elements: ``aot_eager`` computes such a call right, Inductor fails to compile
    it with torch's error) and the offset; for a written input that is its base or a slice of it, the
    slice bounds."""
    if written and t._base is not None:
        try:
            from torch._higher_order_ops.auto_functionalize import is_alias, try_use_slice
        except ImportError:  # another torch: the sizes, strides and offset (a refusal, never a wrong result)
            return _metadata(t)
        if is_alias(t._base, t):
            return ()
        sliced = try_use_slice(t._base, t)
        if sliced is not None:
            return tuple(sliced[1:])
    strides = (s for n, s in zip(t.shape, t.stride()) if not (type(n) is int and n == 1))
    return (*t.shape, *strides, t.storage_offset())


def _has_long_product(values: Sequence[Any]) -> bool:
    """Whether a symbolic value's expression holds a product of three or more factors (what the proxy
    tracer rebuilds as a two-argument ``operator.mul`` given three)."""
    pending = [v.node.expr for v in values if isinstance(v, torch.SymInt)]
    while pending:  # the expression trees (sympy), walked through their ``args``
        expr = pending.pop()
        if expr.is_Mul and len(expr.args) > 2:
            return True
        pending.extend(expr.args)
    return False


def _span(t: torch.Tensor) -> _Span:
    return t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size()


def _hinted_span(t: torch.Tensor) -> _Span:
    """The span of a fake tensor within its storage, symbolic values at their hints."""
    size = t.element_size()
    return (hint_of(t.storage_offset()) * size, tuple(hint_of(n) for n in t.shape),
            tuple(hint_of(n) for n in t.stride()), size)


def hint_of(value: Any) -> int:
    """The concrete value a symbolic int stands for in this trace (a plain int as it is).

    A backed symbol carries its hint on its node, and so does every expression built from backed symbols:
    read there, no torch function is called, whose name and deprecations move between releases (torch 2.11
    has ``hint_int``, deprecated in favour of ``size_hint``; 2.13 has ``optimization_hint`` and deprecates
    ``size_hint``; a FutureWarning on every compiled call was the H200's). Only an unbacked symbol (no hint on
    its node) asks the release's own function, by whichever name it has."""
    if not isinstance(value, torch.SymInt):
        return int(value)
    node_hint = value.node.hint
    if node_hint is not None:
        return int(node_hint)
    from torch.fx.experimental import symbolic_shapes

    release_hint = getattr(symbolic_shapes, "optimization_hint", None) or getattr(symbolic_shapes, "hint_int")
    return int(release_hint(value))


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
