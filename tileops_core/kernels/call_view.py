"""Typed views of a call spec, so that a backend reads ``view.num_k_heads``, not ``call.dims["NK"]``.

An interface that wants its backends to read the call spec by attribute declares a frozen
dataclass subclassing :class:`CallView`, one field per entry, each saying where it comes
from (:func:`dim`, :func:`flag`, :func:`dtype`, optional or not)::

    @dataclass(frozen=True)
    class RMSNormCall(CallView):
        x_dtype: str = dtype("x")
        normalized_shape: tuple[int, ...] = dim("N")
        has_weight: bool = flag("has_weight")

``RMSNormCall.of(call)`` reads it once (kernels call it where they form their build key or
refusal, which selection caches per call spec, never per call). A name the call spec lacks
is an error naming the view, the interface and the entry, instead of a bare ``KeyError``
deep in a backend. Every view carries the call's ``device_type`` and ``arch``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from .interface import CallSpec

__all__ = ["CallView", "dim", "dtype", "flag"]

_FROM = "tileops_call_view"
V = TypeVar("V", bound="CallView")


def _entry(table: str, key: str, optional: bool) -> Any:
    return dataclasses.field(metadata={_FROM: (table, key, optional)})


def dim(name: str, optional: bool = False) -> Any:
    """A field read from ``call.dims[name]`` (an index the interface specialises on)."""
    return _entry("dims", name, optional)


def flag(name: str, optional: bool = False) -> Any:
    """A field read from ``call.flags[name]`` (a presence flag, a bool or enum param)."""
    return _entry("flags", name, optional)


def dtype(name: str, optional: bool = False) -> Any:
    """A field read from ``call.dtypes[name]`` (a tensor's dtype name; optional: None when absent)."""
    return _entry("dtypes", name, optional)


@dataclass(frozen=True)
class CallView:
    """Base of the typed views: the calling device's type and arch, and :meth:`of`."""

    device_type: str = dataclasses.field(metadata={_FROM: ("call", "device_type", False)})
    arch: str = dataclasses.field(metadata={_FROM: ("call", "arch", False)})

    @classmethod
    def of(cls: type[V], call: CallSpec) -> V:
        """The view of ``call``; a required entry it lacks is a KeyError naming view, interface and entry."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            table, key, optional = f.metadata[_FROM]
            if table == "call":
                values[f.name] = getattr(call, key)
                continue
            entries = getattr(call, table)
            if key in entries:
                values[f.name] = entries[key]
            elif optional:
                values[f.name] = None
            else:
                raise KeyError(f"{cls.__name__}: the call spec of {call.op}.{call.interface} has no {table} "
                               f"entry {key!r} (fields: {sorted(entries)})")
        return cls(**values)
