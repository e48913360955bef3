"""Op classes for the validator's conformance corpus (``source: {op: corpus_ops}``).

Each class pairs with one ``*.yaml`` file of this directory and is written to be wrong in
exactly the way that file's ``# expect:`` marker says, and right in every other way.
"""

from __future__ import annotations

from typing import Any

from tileops_core.op.base import Op


class CorpusClassNameFwdop(Op):
    """Named with a lower-case 'op': the manifest key CorpusClassNameFwdOp must match exactly."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusInitFwdOp(Op):
    """The spec's eps defaults to 1e-5; this __init__ says 1e-6."""

    def __init__(self, eps: float = 1e-06, **options: Any) -> None:
        super().__init__(eps=eps, **options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusForwardFwdOp(Op):
    """forward takes its inputs in the wrong order."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, w: Any, x: Any) -> Any:
        return x


class CorpusInferenceFwdOp(Op):
    """Hands the base class twice the width it was given, so the checks infer another shape."""

    def __init__(self, width: int, **options: Any) -> None:
        super().__init__(width=2 * width, **options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusGeneratorFwdOp(Op):
    """Correct; its spec's row names an unregistered generator."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusBenchFwdOp(Op):
    """Correct; its benchmark (corpus_bench) does not read load_workloads."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusSchemaFwdOp(Op):
    """Correct Python; its list[float] param cannot appear in a torch.library schema."""

    def __init__(self, weights: Any = (1.0,), **options: Any) -> None:
        super().__init__(weights=weights, **options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusDTypesPairingFwdOp(Op):
    """Correct; its spec's row has a dtypes entry that is not a dtype name before one that is."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return x


class CorpusSizesFwdOp(Op):
    """Correct; its spec's row asks for a tensor of more bytes than an int64 counts."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return x
