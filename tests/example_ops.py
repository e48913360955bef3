"""The six worked examples of seed 001 as in-test ops, for the ``test_op_*`` files.

One kernel interface and one op class per example (named as its manifest key), plain
PyTorch reference kernels for them, and the helpers the op tests share. Defined once:
each op class definition registers its own ``torch.library`` custom op (a second class of
the same name gets a ``_2`` suffix), so the test files import these rather than define
their own. A file that needs a different op class (another ``__init__``, another interface)
keeps that variant to itself, with the interfaces from here.

The kernels are registered by each test (``fake_backend`` fixture in ``conftest.py``), whose
registry snapshot is restored afterwards; nothing here registers a kernel.
"""

from __future__ import annotations

import textwrap
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from tileops_core.errors import CheckError
from tileops_core.kernels import KernelInterface
from tileops_core.op import Op

__all__ = [
    "BmmKernel", "GemmKernel", "RMSNormKernel", "GroupNormKernel", "SSDDecodeKernel", "ReciprocalKernel",
    "BmmFwdOp", "GemmFwdOp", "RMSNormFwdOp", "GroupNormFwdOp", "SSDDecodeFwdOp", "ReciprocalFwdOp",
    "REFERENCE_KERNELS", "ssd_reference", "reciprocal_reference", "recording",
    "at", "failure", "rand", "ssd_args", "probe_specs",
]

# -- interfaces and op classes ------------------------------------------------------------------------


class BmmKernel(KernelInterface):
    op = "BmmFwdOp"


class BmmFwdOp(Op):
    interfaces = (BmmKernel,)

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return self.launch(BmmKernel, a, b)


class GemmKernel(KernelInterface):
    op = "GemmFwdOp"


class GemmFwdOp(Op):
    interfaces = (GemmKernel,)

    def __init__(self, trans_a=False, trans_b=True):
        super().__init__(trans_a=trans_a, trans_b=trans_b)

    def forward(self, a, b):
        return self.launch(GemmKernel, a, b, self.trans_a, self.trans_b)


class RMSNormKernel(KernelInterface):
    op = "RMSNormFwdOp"


class RMSNormFwdOp(Op):
    interfaces = (RMSNormKernel,)

    def __init__(self, normalized_shape, eps=None):
        super().__init__(normalized_shape=normalized_shape, eps=eps)

    def forward(self, x, weight=None):
        return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.eps)


class GroupNormKernel(KernelInterface):
    op = "GroupNormFwdOp"


class GroupNormFwdOp(Op):
    interfaces = (GroupNormKernel,)

    def __init__(self, num_groups, eps=1e-5):
        super().__init__(num_groups=num_groups, eps=eps)

    def forward(self, x, weight=None, bias=None):
        return self.launch(GroupNormKernel, x, weight, bias, self.num_groups, self.eps)


class SSDDecodeKernel(KernelInterface):
    op = "SSDDecodeFwdOp"


class SSDDecodeFwdOp(Op):
    interfaces = (SSDDecodeKernel,)

    def __init__(self):
        super().__init__()

    def forward(self, A, dt, x, B_in, C_in, state):
        return self.launch(SSDDecodeKernel, A, dt, x, B_in, C_in, state)


class ReciprocalKernel(KernelInterface):
    op = "ReciprocalFwdOp"


class ReciprocalFwdOp(Op):
    interfaces = (ReciprocalKernel,)

    def __init__(self):
        super().__init__()

    def forward(self, input, out=None):
        return self.launch(ReciprocalKernel, input, out)


# -- reference kernels (the PyTorch functions) ------------------------------------------------------


def ssd_reference(A, dt, x, B_in, C_in, state):
    """One SSD decode step: ``state`` is updated in place, the output returned."""
    group = torch.arange(A.shape[0]) // (A.shape[0] // B_in.shape[1])
    b, c = B_in[:, group].float(), C_in[:, group].float()
    state.mul_(torch.exp(dt[..., None] * A)).add_(dt[..., None] * x.float()[..., None] * b[:, :, None, :])
    return (state * c[:, :, None, :]).sum(-1)


def reciprocal_reference(input, out=None):
    result = torch.reciprocal(input)
    return result if out is None else out.copy_(result)


#: A kernel per interface, with the interface's argument order (as the op classes launch it).
REFERENCE_KERNELS: dict[type[KernelInterface], Callable[..., Any]] = {
    BmmKernel: torch.bmm,
    GemmKernel: lambda a, b, ta, tb: (a.T if ta else a) @ (b.T if tb else b),
    RMSNormKernel: lambda x, w, shape, eps: F.rms_norm(x, shape, w, eps),
    GroupNormKernel: lambda x, w, b, groups, eps: F.group_norm(x, groups, w, b, eps),
    SSDDecodeKernel: ssd_reference,
    ReciprocalKernel: reciprocal_reference,
}


def recording(runs: list[str], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that first appends ``label`` to ``runs`` (which kernels ran, in order)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        runs.append(label)
        return fn(*args, **kwargs)
    return run


# -- helpers -----------------------------------------------------------------------------------------


def at(decl) -> str:
    """`` (file:line)`` of a declaration, as messages end."""
    return f" ({decl.loc.where()})"


def failure(call) -> str:
    """The text of the ``CheckError`` that ``call()`` raises."""
    with pytest.raises(CheckError) as info:
        call()
    return str(info.value)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def ssd_args(b=2, h=4, p=3, n=5, g=2, x_dtype=torch.float16):
    """Valid ``SSDDecodeFwdOp`` arguments (A, dt, x, B_in, C_in, state)."""
    return (rand(h, p, n), rand(b, h, p).abs(), rand(b, h, p, dtype=x_dtype), rand(b, g, n, dtype=x_dtype),
            rand(b, g, n, dtype=x_dtype), rand(b, h, p, n))


# -- test-only specs ---------------------------------------------------------------------------------

_PROBE_HEAD = '  family: probe\n  ref_api: "none"\n  status: spec-only\n  signature:\n'
_PROBE_TAIL = '  workloads: []\n  roofline: {flops: "1", bytes: "1"}\n  source: {}\n'


def probe_specs(**signatures: str) -> str:
    """Manifest text (for ``extra_manifest``) of test-only ops in the family ``probe``, in the order given.

    ``Name=yaml``: the YAML under the op's ``signature:`` key; the rest of each entry is the
    same for every probe (no reference API, spec-only, no workloads, a nominal roofline).
    """
    text = "\n"
    for name, yaml in signatures.items():
        signature = textwrap.indent(textwrap.dedent(yaml).strip("\n"), "    ")
        text += f"{name}:\n{_PROBE_HEAD}{signature}\n{_PROBE_TAIL}"
    return text
