"""One op instance per class and construction arguments, for the modules of one ``apply_tileops``.

Why: an op instance plans each call shape once (steps 1-5, its kernels bound) and keeps that plan
for itself. The layers of a model call ops of the same construction with the same shapes, so one
instance a layer planned every new prompt length once a layer: a 48-layer Qwen3.5-MoE spent about
70 ms of host time on the 345 plans of each new length (CPU, forty-fifth session), where one
instance for all the layers plans each shape once. Nothing the ops hold is a layer's own: weights
and caches are call arguments.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["OpPool"]

_Op = TypeVar("_Op")


class OpPool:
    """The op instances the adapters of one model share, made on first request."""

    def __init__(self) -> None:
        self._ops: dict[tuple[Any, ...], Any] = {}

    def get(self, cls: type[_Op], role: str = "", **params: Any) -> _Op:
        """The pool's instance of ``cls(**params)`` for ``role`` (the arguments are hashable: numbers,
        strings, tuples). ``role`` keeps apart the modules of one construction that a layer calls with
        other shapes (an attention's q/k norms beside the layer norms, where those modules are patched):
        an instance called with one shape keeps its last plan's matcher; alternating shapes, it would look
        its plans up by key at every change."""
        key = (cls, role, *sorted(params.items()))
        op = self._ops.get(key)
        if op is None:
            op = self._ops[key] = cls(**params)
        return op

    def __len__(self) -> int:
        return len(self._ops)
