"""Host overhead of an op call, and RMSNorm through the op versus PyTorch directly.

Run: ``python benchmarks/op_overhead.py`` (``--quick`` for a short smoke run).

Two comparisons; every figure is the median over ``--repeats`` timed loops of many calls
in one process, after warm-up calls (the plan and the kernel of the shape exist):

* ``ReciprocalFwdOp`` (its manifest spec, an in-script interface) on a no-op kernel that
  returns a preallocated output, versus calling that no-op directly. The difference is what
  the op layer costs per call: binding, the plan key and lookup, kernel dispatch, step 7's
  output check. Target: under 5 µs.
* ``RMSNormFwdOp`` on the CPU reference kernel versus ``torch.nn.functional.rms_norm``
  directly, ``[8, 4096]`` float32 with a weight. Target: ratio at most 1.5. The op is the
  catalogue's ``tileops_core.ops.normalization.RMSNormFwdOp`` with the ``tileops_cpu_ref``
  kernel registered through the plugin loader when both are installed; otherwise an
  in-script op and kernel around ``F.rms_norm`` (the table says which).

The machine may be shared and noisy: the spread (min..max of the loop means) is printed
next to each median. Exit status 0 when both targets are met.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from tileops_core.kernels import BackendInfo, KernelEntry, KernelInterface, launch_signature, registry
from tileops_core.op import Op

OVERHEAD_TARGET_US = 5.0
RATIO_TARGET = 1.5
BACKEND = "bench_script"


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def time_per_call(fn: Callable[[], Any], calls: int, repeats: int, clock: str) -> tuple[float, float, float]:
    """(median, min, max) over ``repeats`` loops of the mean µs per call over ``calls`` calls.

    ``clock`` is ``wall`` (perf_counter) or ``cpu`` (this thread's CPU time: time spent
    descheduled while other processes run does not count; contention still does).
    """
    now = CLOCKS[clock]
    for _ in range(min(calls, 200)):
        fn()
    loops = []
    for _ in range(repeats):
        start = now()
        for _ in range(calls):
            fn()
        loops.append((now() - start) / calls * 1e6)
    return statistics.median(loops), min(loops), max(loops)


class NoopKernel(KernelInterface):
    """The launch site of the benchmark's ReciprocalFwdOp."""

    op = "ReciprocalFwdOp"

    @launch_signature
    def launch(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration, checked when the no-op kernel is built


class ReciprocalFwdOp(Op):
    """``ReciprocalFwdOp`` bound to its manifest entry, launching :class:`NoopKernel`."""

    interfaces = (NoopKernel,)

    def __init__(self) -> None:
        super().__init__()

    def forward(self, input: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.launch(NoopKernel, input, out)


class ScriptRMSNormKernel(KernelInterface):
    """The launch site of the fallback RMSNormFwdOp (when the catalogue or cpu_ref is absent)."""

    op = "RMSNormFwdOp"

    @launch_signature
    def launch(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
               eps: float | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration, checked when the script kernel is built


def _script_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
                     eps: float | None) -> torch.Tensor:
    return F.rms_norm(x, normalized_shape, weight, eps)


def _general(interface: type[KernelInterface], fn: Callable[..., Any]) -> type[KernelInterface]:
    return type(f"Script{interface.__name__}", (interface,), {
        "devices": ("*",), "general": True,
        "entry_for": classmethod(lambda cls, call: KernelEntry((cls.__name__,), lambda: fn))})


def rms_norm_op_class() -> tuple[type[Op], str]:
    """The catalogue's RMSNormFwdOp on the plugin-registered reference, else an in-script one."""
    try:
        from tileops_core.ops.normalization import RMSNormFwdOp as Catalogue  # type: ignore[import-not-found]
        from tileops_core.plugins import load_plugins
    except ImportError:
        Catalogue = None  # type: ignore[assignment]
    if Catalogue is not None:
        load_plugins()
        if "cpu_ref" in registry.backends():
            return Catalogue, "tileops_cpu_ref (plugin), catalogue op"
    registry.register_kernel(_general(ScriptRMSNormKernel, _script_rms_norm), BACKEND)

    class RMSNormFwdOp(Op):
        interfaces = (ScriptRMSNormKernel,)

        def __init__(self, normalized_shape: Any, eps: float | None = None) -> None:
            super().__init__(normalized_shape=normalized_shape, eps=eps)

        def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
            return self.launch(ScriptRMSNormKernel, x, weight, self.normalized_shape, self.eps)

    return RMSNormFwdOp, "in-script kernel around F.rms_norm"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-call op overhead and RMSNorm op/direct ratio.")
    parser.add_argument("--calls", type=int, default=20000, help="calls per timed loop (no-op)")
    parser.add_argument("--rms-calls", type=int, default=2000, help="calls per timed loop (RMSNorm)")
    parser.add_argument("--repeats", type=int, default=15, help="timed loops; their median is reported")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (same for both sides)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: this thread's CPU time (default; robust on a shared machine), wall: perf_counter")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rms_calls, args.repeats = 2000, 200, 5
    torch.set_num_threads(args.threads)

    with registry.use_registry(registry.Registry()):  # the script's kernels vanish with this registry
        registry.register_backend(BackendInfo(BACKEND, description="op_overhead.py in-script kernels"))
        x_small = torch.randn(8, 4096)
        prepared = torch.empty_like(x_small)

        def noop(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
            return prepared

        registry.register_kernel(_general(NoopKernel, noop), BACKEND)
        op = ReciprocalFwdOp()
        assert op(x_small) is prepared
        direct = time_per_call(lambda: noop(x_small, None), args.calls, args.repeats, args.clock)
        through = time_per_call(lambda: op(x_small), args.calls, args.repeats, args.clock)

        rms_cls, rms_source = rms_norm_op_class()
        x, w = torch.randn(8, 4096), torch.randn(4096)
        rms = rms_cls([4096], eps=1e-6)
        torch.testing.assert_close(rms(x, w), F.rms_norm(x, [4096], w, 1e-6))
        rms_direct = time_per_call(lambda: F.rms_norm(x, [4096], w, 1e-6), args.rms_calls, args.repeats, args.clock)
        rms_op = time_per_call(lambda: rms(x, w), args.rms_calls, args.repeats, args.clock)

    overhead = through[0] - direct[0]
    ratio = rms_op[0] / rms_direct[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.clock} clock; median of {args.repeats} loops of "
          f"{args.calls} (no-op) / {args.rms_calls} (RMSNorm) calls")
    print(f"{'case':44} {'median':>11} {'min..max':>16}  note")
    rows = [
        ("no-op kernel called directly", direct, " µs", ""),
        ("ReciprocalFwdOp on the no-op kernel", through, " µs", ""),
        ("per-call op overhead", None, " µs", f"target < {OVERHEAD_TARGET_US:g} µs: "
                                            f"{'met' if overhead < OVERHEAD_TARGET_US else 'MISSED'}"),
        ("F.rms_norm [8, 4096] fp32 + weight, directly", rms_direct, " µs", ""),
        ("RMSNormFwdOp [8, 4096] fp32 + weight", rms_op, " µs", rms_source),
        ("ratio op / direct", None, "   ", f"target <= {RATIO_TARGET:g}: {'met' if ratio <= RATIO_TARGET else 'MISSED'}"),
    ]
    for name, figures, unit, note in rows:
        if figures is None:
            value = overhead if "overhead" in name else ratio
            print(f"{name:44} {value:>8.2f}{unit} {'':>16}  {note}")
        else:
            med, lo, hi = figures
            print(f"{name:44} {med:>8.2f}{unit} {f'{lo:.2f}..{hi:.2f}':>16}  {note}")
    return 0 if overhead < OVERHEAD_TARGET_US and ratio <= RATIO_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
