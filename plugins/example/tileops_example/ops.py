"""The plugin's new op class; its spec is ``manifest/squared_relu.yaml`` (the class name is the key)."""

from __future__ import annotations

from typing import Any

from tileops_core.op.base import Op

from .interfaces import SquaredReluKernel

__all__ = ["SquaredReluFwdOp"]


class SquaredReluFwdOp(Op):
    """``relu(x) ** 2`` element-wise (the squared ReLU of Primer), any shape."""

    interfaces = (SquaredReluKernel,)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def forward(self, x: Any) -> Any:
        return self.launch(SquaredReluKernel, x)
