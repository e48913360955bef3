"""Which kernel would serve an op for a module's shapes on its device, asked before patching.

The op plans the call as it would at run time (steps 1-5 on small example tensors of the
module's dtype and device; no kernel is built or run), and the selection rule answers for
each of its interfaces. A module whose op no kernel serves is left as it was.
"""

from __future__ import annotations

from typing import Any

from ...errors import TileOpsError
from ...kernels.select import select_kernel
from ...kernels.targets import current_target
from ...op.base import Op

__all__ = ["Serving", "serving"]


class Serving:
    """The answer for one op and call: the kernel (``Kernel [backend]``) or why none serves it."""

    def __init__(self, kernel: str | None, reason: str, general: bool = False) -> None:
        self.kernel = kernel
        self.reason = reason
        #: Every kernel chosen is a general (reference) one: it wins nothing over the torch code it replaces.
        self.general = general

    @property
    def ok(self) -> bool:
        return self.kernel is not None


def serving(op: Op, *args: Any) -> Serving:
    """Plan ``op(*args)`` and select a kernel for each interface; never runs one."""
    try:
        plan = op.plan_for(*args)
    except TileOpsError as exc:
        return Serving(None, f"{type(op).__name__} refuses the module's call: {exc}")
    target = current_target(op.target)
    kernels, general = [], True
    for interface in op.definition().interfaces:
        selection = select_kernel(interface, plan.call_specs[interface], target)
        if selection.chosen is None:
            dropped = "; ".join(f"{c.impl.qualname()}: {c.reason}" for c in selection.candidates) or "no candidates"
            return Serving(None, f"no kernel serves {type(op).__name__} here ({dropped})")
        kernels.append(f"{selection.chosen.__name__} [{selection.chosen_backend}]")
        general = general and selection.chosen.general
    return Serving(", ".join(kernels), "", general)
