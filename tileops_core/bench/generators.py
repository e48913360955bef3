"""Workload generators: named functions that fill in what a workload row does not write.

A row names its generator (``generator: rgdr_decode``, or ``{name: ..., <arg>: ...}``).
The generator reads the row, returns the index values the row leaves out (``T`` from
``B`` and ``tokens_per_seq``, say) and the *contents* of metadata tensors (sequence
lengths, slot indices) that random data cannot stand in for. Generators are registered
by name (by the op modules that need them, or by plugins), never looked up by importing
a path written in the manifest.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..errors import TileOpsError

__all__ = ["Generated", "register_generator", "get_generator", "generator_names"]


@dataclass
class Generated:
    """What a generator contributes: index values and metadata tensors (on the CPU)."""

    indices: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


Generator = Callable[[Mapping[str, Any], torch.Generator], Generated]

_lock = threading.Lock()
_generators: dict[str, Generator] = {}


def register_generator(name: str) -> Callable[[Generator], Generator]:
    """Decorator: register ``fn(row, rng) -> Generated`` under ``name``."""

    def decorate(fn: Generator) -> Generator:
        with _lock:
            existing = _generators.get(name)
            if existing is not None and existing is not fn:
                raise TileOpsError(f"workload generator {name!r} is registered twice "
                                   f"({existing.__module__} and {fn.__module__})")
            _generators[name] = fn
        return fn

    return decorate


def get_generator(name: str) -> Generator:
    with _lock:
        fn = _generators.get(name)
    if fn is None:
        raise TileOpsError(f"no workload generator named {name!r} (known: {', '.join(sorted(_generators)) or 'none'})")
    return fn


def generator_names() -> list[str]:
    with _lock:
        return sorted(_generators)
