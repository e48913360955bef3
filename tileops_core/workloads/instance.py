"""What instantiating a workload row gives: plain data, no tensors.

A :class:`RowInstance` is the row made concrete: what ``__init__`` receives, which inputs are
passed, every present input's and every output's shape, the index values, and one
:class:`DTypeCase` per ``dtypes`` entry, each holding the entry it was made from (so an entry
is never paired with another entry's dtypes). The validator checks it; the benchmarks make
random tensors of it; roofline formulas read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..lang.tensor_meta import TensorMeta
from ..spec.nodes import WorkloadRow

__all__ = ["DTypeCase", "GeneratedMeta", "RowFinding", "RowInstance"]


@dataclass(frozen=True)
class RowFinding:
    """Something wrong with a row, by validator rule: the validator reports it with the row's location,
    the benchmarks raise it (when it leaves nothing to run)."""

    rule: str
    message: str
    fix: str | None = None
    key: str = ""


@dataclass(frozen=True)
class GeneratedMeta:
    """What a workload generator contributed, as plain data: index values and tensor shapes.

    (A generated tensor's dtype is not the row's: the benchmark casts it to the dtype the
    row's ``dtypes`` entry gives, like every other input.)
    """

    indices: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class DTypeCase:
    """One ``dtypes`` entry of a row (None when the row has no ``dtypes``) and the dtype name of
    every tensor it determines."""

    entry: Any
    dtypes: dict[str, str]

    @property
    def name(self) -> str:
        """``default``, ``float16`` or ``x=float16,w=float32``: how reports name the case."""
        if self.entry is None:
            return "default"
        if isinstance(self.entry, Mapping):
            return ",".join(f"{k}={v}" for k, v in self.entry.items())
        return str(self.entry)


@dataclass
class RowInstance:
    """A row made concrete: construction values, input and output shapes, indices, dtype cases."""

    row: WorkloadRow
    construct: dict[str, Any]  # params (normalised, defaults filled) and static dims: what __init__ receives
    present: frozenset[str]
    shapes: dict[str, tuple[int, ...]]  # present inputs
    outputs: dict[str, tuple[int, ...]]
    cases: list[DTypeCase]  # the entries that instantiate, in the row's order
    env: dict[str, Any]  # construction values, static dims, indices and lets

    @property
    def dtypes(self) -> list[dict[str, str]]:
        """The dtypes of each case (in the order of :attr:`cases`)."""
        return [c.dtypes for c in self.cases]

    def metas(self, case: DTypeCase) -> dict[str, TensorMeta]:
        """Every present tensor (inputs and outputs) of one case as a :class:`TensorMeta`."""
        return {n: TensorMeta(s, case.dtypes.get(n)) for n, s in {**self.shapes, **self.outputs}.items()}
