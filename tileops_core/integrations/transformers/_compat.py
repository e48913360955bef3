"""Where the transformers versions TileOPs supports differ in what a caller passes and reads.

From 5.2x a model's forward takes its decode cache as ``cache`` and returns it as
``output.cache``; 5.17 (what the GPU machine has) says ``past_key_values`` in both places, and a
GatedDeltaNet mixer takes ``cache_params``. The integration, its tests and the benchmarks ask
here instead of naming either.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_keyword", "cache_kwargs", "cache_of"]


@functools.lru_cache(maxsize=256)
def cache_keyword(forward: Any, new: str = "cache", old: str = "past_key_values") -> str:
    """The keyword ``forward`` takes its cache under: ``new`` where it has it, else ``old`` (once per
    function: ``inspect.signature`` costs more than a tiny model's decode step spends in some ops,
    and ``cache_kwargs`` asks on every step)."""
    return new if new in inspect.signature(forward).parameters else old


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` for a call of ``model`` (``model(ids, **cache_kwargs(model, cache))``)."""
    return {cache_keyword(type(model).forward): cache}


def cache_of(output: Any) -> Any:
    """The cache a forward returned (``output.cache``, or ``output.past_key_values`` before 5.2x)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
