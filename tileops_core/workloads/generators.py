"""Workload generators: named functions that fill in what a workload row does not write.

A row names its generator (``generator: rgdr_decode``, or ``{name: ..., <arg>: ...}``).
The generator reads the row, returns the index values the row leaves out (``T`` from
``B`` and ``tokens_per_seq``, say) and the *contents* of metadata tensors (sequence
lengths, slot indices) that random data cannot stand in for. Generators are registered
by name (by the op modules that need them, or by plugins), never looked up by importing
a path written in the manifest.

The registry sits in the workloads layer, below the ops that register into it; it never
imports torch (the tensors a generator makes, and the ``torch.Generator`` it is given,
pass through it untouched).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..spec.named import NamedFunctions
from ..spec.nodes import WorkloadRow
from .instance import GeneratedMeta
from .keys import generator_args, generator_name

__all__ = ["Generated", "register_generator", "get_generator", "run_generator"]


@dataclass
class Generated:
    """What a generator contributes: index values and metadata tensors (on the CPU)."""

    indices: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)  # name -> torch.Tensor

    def meta(self) -> GeneratedMeta:
        """What the instantiator reads of it: the index values and the tensors' shapes."""
        return GeneratedMeta(dict(self.indices), {n: tuple(t.shape) for n, t in self.tensors.items()})


#: ``fn(row values, rng: torch.Generator) -> Generated``.
Generator = Callable[[Mapping[str, Any], Any], Generated]

_generators: NamedFunctions[Generator] = NamedFunctions(
    "workload generator", "the op's module or a plugin registers it with @register_generator")


def register_generator(name: str) -> Callable[[Generator], Generator]:
    """Decorator: register ``fn(row, rng) -> Generated`` under ``name``."""
    return _generators.register(name)


def get_generator(name: str) -> Generator:
    """The generator registered under ``name`` (an error that says who registers it, if none is)."""
    return _generators.get(name)


def run_generator(row: WorkloadRow, rng: Any) -> Generated:
    """Run the row's generator on its values (nothing, for a row without one)."""
    name = generator_name(row)
    if name is None:
        return Generated()
    return get_generator(name)(generator_args(row), rng)
