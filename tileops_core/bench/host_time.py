"""Host time per call: the op's eager call, the raw kernel launch under it, and torch's own op.

On an accelerator the framework's cost is host time: a small decode kernel runs for a few
microseconds, and a call that takes longer than that to launch leaves the device idle.
For one case this measures, in the same run and on the same inputs:

* ``op``: an eager op call (key, plan lookup, launcher, kernel, step 7);
* ``launch``: the kernels the op's plan chose, called directly with the arguments the op
  gave them (outputs preallocated for a ``writes_outputs`` kernel) — the floor;
* ``torch``: torch's eager equivalent of the op (``F.rms_norm``, ``F.softmax``, ...), where
  one exists (:mod:`.torch_eager`).

Each figure is the median over ``repeats`` loops of ``calls`` back-to-back calls timed by
the host clock, after warm-up. On a CUDA device the loop starts after a synchronize and
does not synchronize inside: what is timed is how long the host takes to enqueue a call
(loops are short enough that the launch queue never fills and throttles them).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..kernels.select import choose_kernel
from ..kernels.targets import current_target
from .baselines import capture_launches
from .torch_eager import torch_equivalent

__all__ = ["HostTimes", "measure_host_times", "time_host"]


@dataclass(frozen=True)
class HostTimes:
    """Median host seconds per call of the op, of its raw kernel launches, and of torch's op."""

    op_s: float
    launch_s: float
    torch_s: float | None
    torch_api: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"op_s": self.op_s, "launch_s": self.launch_s, "torch_s": self.torch_s, "torch_api": self.torch_api}


def time_host(fn: Callable[[], Any], device: torch.device, calls: int = 100, repeats: int = 31,
              warmup: int = 20, loop_s: float = 0.005) -> float:
    """Median host seconds per call of ``fn`` over ``repeats`` loops of at most ``calls`` calls
    (fewer when a call is slow: a loop lasts about ``loop_s``, and at least one call)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    sync()
    one = (time.perf_counter() - t0) / max(warmup, 1)
    calls = max(1, min(calls, int(loop_s / max(one, 1e-9))))
    per_call = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls)
    sync()
    return statistics.median(per_call)


def raw_launch(op: Any, args: Sequence[Any]) -> Callable[[], None]:
    """The kernels that served ``op(*args)``, as one callable with the launch arguments bound."""
    launches = capture_launches(op, args)
    plan = op.last_plan
    target = current_target(op.target)
    steps = []
    for launch in launches:
        impl, kernel = choose_kernel(launch.interface, launch.call, target)
        outs: tuple[Any, ...] = ()
        if getattr(impl, "writes_outputs", False) and plan.fresh_outputs:
            outs = tuple(torch.empty(s, dtype=d, device=plan.device)
                         for s, d in zip(plan.fresh_shapes, plan.fresh_dtypes))
        steps.append((kernel, (*launch.args, *outs), launch.kwargs))
    if len(steps) == 1:
        kernel, a, kw = steps[0]
        return (lambda: kernel(*a, **kw)) if kw else (lambda: kernel(*a))

    def all_steps() -> None:
        for kernel, a, kw in steps:
            kernel(*a, **kw)
    return all_steps


def measure_host_times(op: Any, args: Sequence[Any], device: torch.device) -> HostTimes:
    """Host time per call of the op, its raw launch and torch's equivalent, on ``args``."""
    args = tuple(args)
    op(*args)  # planned, selected, built
    launch = raw_launch(op, args)
    equivalent = torch_equivalent(op, args)
    subjects: list[Callable[[], Any]] = [lambda: op(*args), launch]
    if equivalent is not None:
        subjects.append(equivalent[1])
    # Interleaved rounds, so a slow phase of the machine hits every subject alike.
    rounds = [[time_host(s, device, repeats=7) for s in subjects] for _ in range(5)]
    med = [statistics.median(r[i] for r in rounds) for i in range(len(subjects))]
    return HostTimes(med[0], med[1], med[2] if equivalent is not None else None,
                     equivalent[0] if equivalent is not None else None)
