"""Which kernel would serve an op for a module's shapes on its device, asked before patching.

The op plans the call as it would at run time (steps 1-5 on small example tensors of the
module's dtype and device; no kernel is built or run), and the selection rule answers for
each of its interfaces. A module whose op no kernel serves is left as it was.

The calls planned while ``apply_tileops`` runs are recorded (:func:`recording_calls`): their
build identities are those of the model's real calls (kernels specialise on module sizes, never
on token counts), so :func:`build_kernels` can compile them all at once, in parallel, before
the first forward would compile them one after another.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from contextvars import ContextVar
from typing import Any, Iterator

from ...errors import TileOpsError
from ...kernels.interface import CallSpec, KernelInterface
from ...kernels.registry import active
from ...kernels.select import choose_kernel, select_kernel
from ...kernels.targets import Target, current_target
from ...op.base import Op

__all__ = ["KernelCall", "Serving", "build_kernels", "recording_calls", "serving"]

#: One planned kernel call: the interface, its call spec and the target it was selected under.
KernelCall = tuple[type[KernelInterface], CallSpec, Target | None]

_RECORDING: ContextVar[list[KernelCall] | None] = ContextVar("tileops_recorded_calls", default=None)


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


def serving(op: Op, *args: Any, record: bool = True) -> Serving:
    """Plan ``op(*args)`` and select a kernel for each interface; never runs one. ``record=False``:
    the answer only explains why a module stays as it was (not a call the model will make)."""
    try:
        plan = op.plan_for(*args)
    except TileOpsError as exc:
        return Serving(None, f"{type(op).__name__} refuses the module's call: {exc}")
    target = current_target(op.target)
    kernels, general, chosen = [], True, []
    for interface in op.definition().interfaces:
        call = plan.call_specs[interface]
        selection = select_kernel(interface, call, target)
        if selection.chosen is None:
            dropped = "; ".join(f"{c.impl.qualname()}: {c.reason}" for c in selection.candidates) or "no candidates"
            return Serving(None, f"no kernel serves {type(op).__name__} here ({dropped})")
        kernels.append(f"{selection.chosen.__name__} [{selection.chosen_backend}]")
        general = general and selection.chosen.general
        chosen.append((interface, call, target))
    recorded = _RECORDING.get()
    if recorded is not None and record:
        recorded += chosen
    return Serving(", ".join(kernels), "", general)


@contextlib.contextmanager
def recording_calls() -> Iterator[list[KernelCall]]:
    """Within the block, every call :func:`serving` finds a kernel for is appended to the list yielded."""
    calls: list[KernelCall] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


def build_kernels(calls: list[KernelCall], workers: int | None = None) -> list[str]:
    """Build the kernel of every call in ``calls`` now, in threads (TileLang's lowering releases the
    GIL and nvcc is a subprocess); each build identity once. Returns the failures, one line each:
    calls no kernel serves, and builds that failed even where the next kernel then served (found in
    review: those were contained by selection and returned as no failure). Nothing is counted in the
    dispatch statistics (no op's plan binds a kernel here)."""
    distinct = list(dict.fromkeys(calls))
    if not distinct:
        return []
    registry = active()
    before = {str(f) for f in registry.failures()}

    def build(call: KernelCall) -> str | None:
        try:
            choose_kernel(*call, count=False)
        except TileOpsError as exc:
            return f"{call[1].op}: {exc}"
        return None

    workers = workers or min(len(distinct), os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(workers, "tileops-model-build") as pool:
        failed = [f for f in pool.map(build, distinct) if f is not None]
    return failed + [str(f) for f in registry.failures() if str(f) not in before and "build failed" in str(f)]
