"""The plugin's kernels: one for an existing core interface, one for the plugin's own op.

``ExampleRMSNormLastAxis`` shows how a backend narrows what it serves: it declares where it
runs (``devices``), refuses every call outside its region with a reason that
``tileops explain`` and selection errors print, and names the implementation it replaces
(``preferred_over``, as a ``module:QualName`` string so this module need not import the
reference backend). ``RefSquaredRelu`` is the general kernel of the new op.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tileops_core.kernels import CallSpec, KernelEntry
from tileops_core.ops.normalization import RMSNormCall, RMSNormKernel

from .interfaces import SquaredReluKernel

__all__ = ["ExampleRMSNormLastAxis", "RefSquaredRelu", "KERNELS"]


def _rms_norm_last_axis(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: Any,
                        eps: float | None) -> torch.Tensor:
    if eps is None:
        eps = torch.finfo(x.dtype).eps  # PyTorch's default, as in the spec
    y = x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


class ExampleRMSNormLastAxis(RMSNormKernel):
    """RMSNorm over one trailing axis in float32, in a single fused expression, on the CPU."""

    devices = ("cpu",)
    supported_archs = ("*",)
    general = False
    preferred_over = ("tileops_cpu_ref.kernels:RefRMSNorm",)

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        view = RMSNormCall.of(call)  # the call spec, typed (no string keys)
        if view.x_dtype != "float32":
            return f"x is {view.x_dtype}: this kernel computes in the input dtype, so it serves float32 only"
        if len(view.normalized_shape) != 1:
            return (f"normalized_shape {view.normalized_shape} has more than one axis: this kernel reduces the "
                    "last axis only")
        return None

    @classmethod
    def launchers(cls) -> dict[str, Callable[..., Any]]:
        """Checked against RMSNormKernel's launch signature when the plugin registers it."""
        return {"launcher": _rms_norm_last_axis}

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        return KernelEntry(("example", "rms_norm_last_axis"), lambda: _rms_norm_last_axis)


def _squared_relu(x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x.float() if x.dtype in (torch.float16, torch.bfloat16) else x)
    return (y * y).to(x.dtype)


class RefSquaredRelu(SquaredReluKernel):
    """The general kernel of SquaredReluFwdOp: PyTorch ops, float32 math for half inputs, any device."""

    devices = ("*",)
    supported_archs = ("*",)
    general = True

    @classmethod
    def launchers(cls) -> dict[str, Callable[..., Any]]:
        return {"launcher": _squared_relu}

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        return KernelEntry(("example", "squared_relu"), lambda: _squared_relu)


#: What the plugin registers.
KERNELS = (ExampleRMSNormLastAxis, RefSquaredRelu)
