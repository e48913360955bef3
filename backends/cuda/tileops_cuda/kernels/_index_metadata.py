"""How the TileLang programs read index metadata that may be 64-bit: slots, slot mappings, expert
ids, lengths and prefix sums arrive as int32 or int64 (the specs allow both), and every program
does its token and row arithmetic in int32.

A 64-bit entry made int32 before it is tested wraps: ``2**32 + k`` becomes ``k``, a real slot,
so a padding entry that the contents checks (off) would have refused reads and writes another
sequence's row, in bounds and silently. So an entry is clipped (:func:`clip_tokens`) or range-tested
(:func:`index_or_padding`, :func:`narrowed_index`) in its own dtype first, and only then made
int32. For int32 metadata the compare is the one the program made before: the same code.

Expressions, not macros: each returns a TileLang expression the caller places. tilelang is
imported inside them, never at module import.
"""

from typing import Any

__all__ = ["clip_tokens", "index_or_padding", "narrowed_index"]


def clip_tokens(value: Any, Tn: Any, lo: int = 0) -> Any:
    """``min(max(value, lo), T)`` in the metadata's own dtype, then int32: the specs' ``clip`` (a
    64-bit entry past int32 is clipped, never wrapped)."""
    import tilelang.language as T

    return T.cast(T.min(T.max(value, T.cast(lo, value.dtype)), T.cast(Tn, value.dtype)), "int32")


def index_or_padding(value: Any, bound: Any) -> Any:
    """``value`` (an index as the metadata holds it) as int32 where it lies in ``[0, bound)``, else
    -1: padding, which the caller never reads or writes through. Compared in the metadata's own
    dtype, so a 64-bit index never wraps onto a real one."""
    import tilelang.language as T

    return T.if_then_else(T.And(value >= 0, value < T.cast(bound, value.dtype)), T.cast(value, "int32"), -1)


def narrowed_index(value: Any, bound: Any) -> Any:
    """``value`` as int32 for a caller that tests ``0 <= index < bound`` itself: int32 metadata as it
    is (the caller's test is then the whole compare, its code unchanged), a wider index through
    :func:`index_or_padding` (outside ``[0, bound)``: -1, which the caller's test reads as padding)."""
    return value if str(value.dtype) == "int32" else index_or_padding(value, bound)
