"""Per-call workspaces of a launcher (partials, tile maps, activations between its kernels), allocated
in the cheapest form torch has for the device.

Why: ``torch.empty(shape, dtype=, device=)`` parses its arguments on every call, about 2.4 µs on a
CPU core and more on a GPU host's, and a MoE or attention launch makes two or three such
workspaces a call: at a decode step that is host time of the order of the kernels' own. The
core's :func:`tileops_core.op.alloc.fresh_allocator` allocates a fixed shape through torch's
``empty_strided_*`` forms (the same tensor, where they give it); a decode loop repeats its shapes,
so an allocator made once per (shape, dtype, device) serves every later call. torch loads with the
first launcher, never at import.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["workspace_allocator"]

#: Allocators one launcher keeps (serving batches vary; past this the cache starts again).
_MAX_SHAPES = 256


def workspace_allocator() -> Callable[[tuple[int, ...], Any, Any], Any]:
    """``empty(shape, dtype, device)``: a new contiguous uninitialised tensor, through an allocator
    made on the first call of each (shape, dtype, device). One per launcher (its own cache)."""
    from tileops_core.op.alloc import fresh_allocator  # torch with it: at a launcher's build, never at import

    made: dict[tuple[Any, ...], Callable[[], Any]] = {}

    def empty(shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        key = (shape, dtype, device)
        alloc = made.get(key)
        if alloc is None:
            if len(made) >= _MAX_SHAPES:
                made.clear()
            alloc = made[key] = fresh_allocator(shape, dtype, device)
        return alloc()

    return empty

