"""The kernel interface of the plugin's new op, apart from the op class.

Kernels import only this module, so the plugin's hook can list its kernels without
importing the op class; the op module is imported by TileOPs after the plugin's specs are
visible, and its class binds to its spec at definition.
"""

from __future__ import annotations

from tileops_core.kernels import KernelInterface

__all__ = ["SquaredReluKernel"]


class SquaredReluKernel(KernelInterface):
    """``kernel(x) -> y`` with ``y = relu(x) ** 2``."""

    op = "SquaredReluFwdOp"
