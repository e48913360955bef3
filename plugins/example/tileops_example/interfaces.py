"""The kernel interface of the plugin's new op, apart from the op class.

Kernels import only this module, so the plugin's hook can list its kernels without
importing the op class; the op module is imported by TileOPs after the plugin's specs are
visible, and its class binds to its spec at definition.
"""

from __future__ import annotations

import torch

from tileops_core.kernels import KernelInterface, launch_signature

__all__ = ["SquaredReluKernel"]


class SquaredReluKernel(KernelInterface):
    """The squared ReLU, ``relu(x) ** 2``, element-wise.

    Its launch signature is what ``SquaredReluFwdOp.forward`` passes to
    ``self.launch(SquaredReluKernel, ...)``; every kernel of it is checked against it when
    registered (and, for a launcher made per build, when built).
    """

    op = "SquaredReluFwdOp"

    @launch_signature
    def launch(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it
