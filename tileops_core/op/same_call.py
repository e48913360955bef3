"""The fast check that a call has exactly the tensor metadata of the plan's first call.

The plan key is built from Python attribute reads, about four per tensor: on an op with ten
tensor arguments that alone costs more host time than launching the kernel. When an
instance is called again with tensors like those of its last call (the common case: every
decode step of a layer), one C++ check answers the same question for all of them at once:
torch's own ``TensorGuards`` (what ``torch.compile`` guards tensors with) compares dtype,
device, sizes, strides, ``requires_grad`` and dispatch keys. It is stricter than the key
(strides rather than contiguity), so a hit means the key is the same; a miss only means
the key is built and looked up as usual. Where torch lacks that check, or it does not
behave as expected on this build, no matcher is made and every call builds the key. A nested
tensor never reaches the check (:func:`_any_nested`): torch's guard aborts the process on one.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Protocol, Sequence, cast

import torch

from .alloc import contiguous_strides
from .overlap import extents_of

__all__ = ["Matcher", "make_matcher", "make_output_matcher"]


class Matcher(Protocol):
    """``matches(values) -> bool``: the values have the metadata of the call the plan was made
    for. ``extents``: each argument's byte extent on such calls (sizes and strides fix it), what
    the overlap check of mutated inputs reads on a matched call (:mod:`.overlap`);
    ``check_written``: that check for the matched calls of a plan with mutated inputs, which the
    plan attaches (None until then)."""

    extents: tuple[int, ...]
    check_written: Callable[[Sequence[Any]], None] | None

    def __call__(self, vals: Sequence[Any], /) -> bool: ...


def _load_guards() -> Any:
    try:
        from torch._C._dynamo.guards import TensorGuards as guards
    except ImportError:
        return None
    TensorGuards: Any = guards  # its stub declares keyword arguments only; it takes the tensors positionally
    try:  # it must accept the same metadata and refuse another shape, dtype or stride
        a, b = torch.empty(2, 3), torch.empty(2, 3)
        guard = TensorGuards(a, dynamic_dims_sizes=[[2, 3]], dynamic_dims_strides=[[3, 1]])
        ok = (guard.check(b) and not guard.check(torch.empty(2, 4)) and not guard.check(torch.empty(3, 2).t())
              and not guard.check(torch.empty(2, 3, dtype=torch.float64)))
    except Exception:
        return None
    return TensorGuards if ok else None


_TensorGuards = _load_guards()


def _guards_check_outputs() -> bool:
    """Whether a guard with unchecked strides (None) serves step 7 on this build: it must accept
    any strides and still refuse another layout, device, dtype, shape or tensor type."""
    if _TensorGuards is None:
        return False
    try:
        guard = _TensorGuards(torch.empty(0), dynamic_dims_sizes=[[2, 3]], dynamic_dims_strides=[[None, None]])
        x = torch.empty(2, 3)
        return (guard.check(x) and guard.check(torch.empty(3, 2).t()) and not guard.check(x.to_sparse())
                and not guard.check(torch.empty(2, 3, device="meta")) and not guard.check(x.double())
                and not guard.check(x[None]) and not guard.check(None))
    except Exception:
        return False


_OUTPUT_GUARDS = _guards_check_outputs()


def make_matcher(values: Sequence[Any]) -> Matcher | None:
    """A matcher for calls whose arguments have the metadata of ``values``, or None (no fast check)."""
    if _TensorGuards is None:
        return None
    absent = tuple(i for i, v in enumerate(values) if v is None)
    # torch's guard answers False for any call that passes one tensor object twice, so a call like
    # op(x, w, w) would never match and would rebuild its key and matcher every time: the guard
    # takes each object once, and the matcher asks that a call repeat the same positions.
    first: dict[int, int] = {}
    present = tuple(i for i, v in enumerate(values) if v is not None and first.setdefault(id(v), i) == i)
    repeats = tuple((i, first[id(v)]) for i, v in enumerate(values) if v is not None and first[id(v)] != i)
    tensors = [values[i] for i in present]
    if not tensors or not all(isinstance(t, torch.Tensor) and t.layout is torch.strided for t in tensors):
        return None
    try:
        guard = _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                              dynamic_dims_strides=[list(t.stride()) for t in tensors])
    except Exception:  # a tensor torch's guard does not take: the key path serves it
        return None
    check = guard.check
    n = len(values)
    pick: Callable[[Sequence[Any]], Any]
    if not absent and not repeats:  # every argument a distinct tensor: the values go to the check as they are

        def matches_all(vals: Sequence[Any]) -> bool:
            if len(vals) != n:
                return False
            try:  # (:func:`_any_nested` written out: this is every warm call's first step)
                for t in vals:
                    if t.is_nested:
                        return False
            except AttributeError:
                return False
            return check(*vals)
        return _with_extents(matches_all, values)
    if len(present) == 1:
        only = present[0]

        def pick(vals: Sequence[Any]) -> tuple[Any, ...]:
            return (vals[only],)
    else:
        pick = itemgetter(*present)  # a tuple of the present arguments, each object once

    def matches(vals: Sequence[Any]) -> bool:
        if len(vals) != n:
            return False
        for i in absent:
            if vals[i] is not None:
                return False
        for i, j in repeats:
            if vals[i] is not vals[j]:
                return False
        picked = pick(vals)
        return not _any_nested(picked) and check(*picked)
    return _with_extents(matches, values)


def _any_nested(tensors: Sequence[Any]) -> bool:
    """True where torch's guard must not be given ``tensors``: it reads the sizes of each, and a nested
    tensor of the strided layout has none; its C++ error then aborts the process (torch 2.13; found in
    review: a warm op called with one died without a traceback). Such a call misses the matcher and the
    plan's checks refuse it. Anything but a tensor counts as well: the guard refuses it too."""
    try:
        for t in tensors:
            if t.is_nested:
                return True
    except AttributeError:
        return True
    return False


def _with_extents(matches: Callable[[Sequence[Any]], bool], values: Sequence[Any]) -> Matcher:
    """``matches`` as a :class:`Matcher` for calls like ``values`` (no written-input check attached yet)."""
    setattr(matches, "extents", extents_of(values))
    setattr(matches, "check_written", None)
    return cast(Matcher, matches)


def make_output_matcher(shape: Sequence[int], dtype: torch.dtype, device: torch.device,
                        contiguous: bool) -> Callable[[Any], bool] | None:
    """``matches(result) -> bool`` for step 7's metadata of one fresh output, in one C++ check; or None.

    True only for a plain strided tensor (no subclass) of exactly ``shape``, ``dtype`` and
    ``device``, with the contiguous strides where ``contiguous`` (its strides unchecked
    otherwise), that does not require grad: everything step 7 asks of a fresh output but its
    storage. The five attribute reads and comparisons it replaces cost about 0.3 µs a call, the
    check 0.13. False says nothing: the caller checks field by field. The guard compares
    dispatch keys, so a call in another dispatch state than the one it was made in (inference
    mode, below autograd in a compiled call's implementation) never matches it.
    """
    if not _OUTPUT_GUARDS or not all(type(n) is int for n in shape):  # (a symbolic size: no guard on it here)
        return None
    sizes = list(shape)
    strides: list[int | None] = list(contiguous_strides(tuple(sizes))) if contiguous else [None] * len(sizes)
    try:
        guard = _TensorGuards(torch.empty(0, dtype=dtype, device=device), dynamic_dims_sizes=[sizes],
                              dynamic_dims_strides=[strides])
    except Exception:  # a device or dtype torch's guard does not take: the field checks serve
        return None
    return cast(Callable[[Any], bool], guard.check)
