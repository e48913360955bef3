"""What an op's time is compared with: baselines built from the very call being benchmarked.

A baseline is timed in the same run as the op, interleaved with it, on the same inputs:

``ref``
    The reference implementation called directly: the op's general (fallback) kernel,
    the one the reference backend registers (for an op with a ``ref_api``, that API with
    float32 accumulation; for ``ref_api: none`` ops, the reference semantics such as
    ``tileops_cpu_ref.rgdr``), given exactly the arguments the op passes its kernel, with
    no op layer in between. On the CPU, where the selected kernel *is* the reference,
    the ratio is the cost of the op layer.
``torch.compile``
    The same reference function compiled with ``torch.compile`` (compiled once, before
    timing): what a user would get by compiling the reference instead of using the op.
``eager``
    The op itself, called eagerly: on CUDA timed by events around eager launches rather
    than by graph replay, which shows what launch and host overhead cost; on the CPU the
    op is always timed eagerly, so the ratio is 1 up to noise.
``none``
    No baseline.

The arguments the op passes its kernel are recorded by running the op once with a
recording wrapper in place of the kernel its plan caches (:func:`capture_launches`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import TileOpsError
from ..kernels import registry
from ..kernels.archs import arch_matches
from ..kernels.interface import CallSpec, KernelInterface

__all__ = ["BASELINES", "Launch", "capture_launches", "reference_implementation", "make_baseline"]

BASELINES = ("ref", "torch.compile", "eager", "none")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of an op call: the interface, its call spec and the arguments given."""

    interface: type[KernelInterface]
    call: CallSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def capture_launches(op: Any, args: Sequence[Any]) -> list[Launch]:
    """Call ``op(*args)`` once and record every kernel launch it makes (and its arguments).

    The kernels the op's plan holds for these arguments are wrapped for that one call and
    put back afterwards. The op should have been called with arguments of this shape
    before (the bench has, outside timing); if its plan holds no kernel yet, it is called
    once more first, so that it does.
    """
    plan = op.last_plan
    if plan is None or not any(plan.bound.values()):
        op(*args)
        plan = op.last_plan
    launches: list[Launch] = []

    def recorder(interface: type[KernelInterface], launcher: Callable[..., Any]) -> Callable[..., Any]:
        def record(*a: Any) -> Any:
            launches.append(Launch(interface, plan.call_specs[interface], a, {}))
            return launcher(*a)
        return record

    originals = {target: dict(bound) for target, bound in plan.bound.items()}
    directs = {target: bound.direct for target, bound in plan.bound.items()}
    for target, bound in plan.bound.items():
        bound.direct = None  # the recorded call goes through forward and the launchers wrapped here
        for interface, launcher in originals[target].items():
            bound[interface] = recorder(interface, launcher)
    try:
        op(*args)
    finally:
        for target, bound in plan.bound.items():
            bound.update(originals.get(target, {}))
            bound.direct = directs.get(target)
    if not launches:
        raise TileOpsError(f"{type(op).__name__}: the call launched no kernel, so there is nothing to compare with")
    return launches


def reference_implementation(interface: type[KernelInterface], call: CallSpec) -> type[KernelInterface]:
    """The general implementation of ``interface`` that serves ``call`` (the reference)."""
    for impl in registry.implementations(interface):
        if not impl.general:
            continue
        if "*" not in impl.devices and call.device_type not in impl.devices:
            continue
        if not arch_matches(impl.supported_archs, call.arch):
            continue
        if impl.refusal(call) is None:
            return impl
    raise TileOpsError(f"{call.op}: no general (reference) implementation of {interface.__name__} serves "
                       f"{call.device_type}/{call.arch}; is the reference backend (tileops-cpu-ref) installed?")


def _reference_call(launches: Sequence[Launch], compile_it: bool) -> Callable[[], Any]:
    steps = []
    for launch in launches:
        impl = reference_implementation(launch.interface, launch.call)
        fn = impl.entry_for(launch.call).build()
        if compile_it:
            import torch

            fn = torch.compile(fn, dynamic=False)
        steps.append((fn, launch.args, launch.kwargs))
    if len(steps) == 1:
        fn, a, kw = steps[0]
        return lambda: fn(*a, **kw)
    return lambda: [fn(*a, **kw) for fn, a, kw in steps]


def make_baseline(kind: str, op: Any, args_sets: Sequence[Sequence[Any]]) -> tuple[list[Callable[[], Any]], bool]:
    """One baseline call per rotated input set, and whether it may be captured in a CUDA graph."""
    if kind == "eager":
        return [functools.partial(op, *a) for a in args_sets], False
    if kind in ("ref", "torch.compile"):
        if kind == "torch.compile":
            import torch._dynamo

            # Each case compiles afresh: dynamo stops compiling a function after recompile_limit (8) graphs
            # and runs it eagerly from then on, and the reference kernels share wrapper functions, so a
            # long run's later cases timed eager code as "torch.compile" (found in review).
            torch._dynamo.reset()
        calls = [_reference_call(capture_launches(op, a), kind == "torch.compile") for a in args_sets]
        return calls, True
    raise TileOpsError(f"unknown baseline {kind!r} (known: {', '.join(BASELINES)})")
