"""Device time of the memory-bound model ops' TileLang kernels against the copy ceiling.

For every non-tiny workload row of the ops named (default: all served here), the kernel the op
selects is timed on its own (the launch function the op calls, with the op's arguments and
outputs), and so is the reference implementation (torch on the GPU) for comparison. Each rep
is timed with CUDA events after the L2 is flushed (a 256 MiB write), medians over ``--reps``
reps after warm-up. The copy ceiling is measured in the same run: ``torch.mul(a, 1, out=b)``
on 1 GiB (bytes read plus written over its time). Bytes are the spec's roofline bytes; the
table gives GB/s and the percentage of the copy ceiling.

    python backends/cuda/bench/model_ops_bench.py [--ops QKNormRopeFwdOp,...] [--reps 50]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import torch

_BACKENDS = Path(__file__).resolve().parents[2]
for _p in (str(_BACKENDS / "cuda"), str(_BACKENDS / "cpu_ref")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.baselines import capture_launches, reference_implementation  # noqa: E402
from tileops_core.bench.roofline import roofline_of_row  # noqa: E402
from tileops_core.bench.workloads import instantiate  # noqa: E402
from tileops_core.kernels import select_kernel  # noqa: E402
from tileops_core.workloads import dtype_cases  # noqa: E402

OPS = ("QKNormRopeFwdOp", "SigmoidGateMulFwdOp", "MoETopKRoutingFwdOp",
       "MoEPermuteFwdOp", "MoEUnpermuteFwdOp")
_FLUSH_BYTES = 256 * 2**20


def time_reps(fn: Callable[[], Any], reps: int, flush: torch.Tensor, warmup: int = 5) -> float:
    """Median device time of ``fn`` in µs over ``reps`` calls, the L2 flushed before each."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for st, en in zip(starts, ends):
        flush.zero_()
        st.record()
        fn()
        en.record()
    torch.cuda.synchronize()
    return statistics.median(st.elapsed_time(en) for st, en in zip(starts, ends)) * 1e3


def copy_ceiling(reps: int, flush: torch.Tensor) -> float:
    """GB/s of ``torch.mul(a, 1, out=b)`` on 1 GiB (read plus write)."""
    a = torch.randn(2**28, device="cuda")
    b = torch.empty_like(a)
    us = time_reps(lambda: torch.mul(a, 1, out=b), reps, flush)
    return 2 * a.numel() * a.element_size() / us / 1e3


def bench_row(spec: Any, row: Any, case: Any, reps: int, flush: torch.Tensor) -> tuple[str, float, float, float]:
    """``(kernel name, kernel µs, reference µs, bytes)`` of one row's dtype case."""
    cls = getattr(importlib.import_module(spec.source["op"]), spec.name)
    inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(0))
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    op(*args)
    launch = capture_launches(op, args)[0]
    chosen = select_kernel(launch.interface, launch.call)
    outs = [torch.empty(s, dtype=d, device="cuda") for s, d in zip(op.last_plan.out_shapes, op.last_plan.out_dtypes)]
    fn = chosen.chosen.entry_for(launch.call).build()
    if getattr(chosen.chosen, "writes_outputs", False):
        kernel_us = time_reps(lambda: fn(*launch.args, *outs), reps, flush)
    else:
        kernel_us = time_reps(lambda: fn(*launch.args, **launch.kwargs), reps, flush)
    ref = reference_implementation(launch.interface, launch.call).entry_for(launch.call).build()
    ref_us = time_reps(lambda: ref(*launch.args, **launch.kwargs), reps, flush)
    return chosen.chosen.__name__, kernel_us, ref_us, float(roofline_of_row(spec, row, case).bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="include the tiny rows")
    a = parser.parse_args()
    flush = torch.empty(_FLUSH_BYTES // 4, device="cuda")
    ceiling = copy_ceiling(a.reps, flush)
    print(f"copy ceiling (torch.mul 1 GiB): {ceiling:.0f} GB/s   [{torch.cuda.get_device_name()}]", flush=True)
    print(f"{'op':22} {'row':32} {'kernel':26} {'µs':>9} {'GB/s':>7} {'%copy':>6} {'ref µs':>9} {'ref/kern':>8}")
    manifest = load_manifest()
    for name in a.ops.split(","):
        spec = manifest[name]
        for row in spec.workloads:
            if row.label.startswith("tiny") and not a.tiny:
                continue
            for case in dtype_cases(row):
                try:
                    kernel, us, ref_us, nbytes = bench_row(spec, row, case, a.reps, flush)
                except Exception as exc:  # reported in the table, the other rows still run
                    print(f"{name[:-5]:22} {row.label:32} ERROR {type(exc).__name__}: {exc}", flush=True)
                    continue
                gbs = nbytes / us / 1e3
                print(f"{name[:-5]:22} {row.label + '[' + str(case) + ']':32} {kernel:26} {us:9.2f} {gbs:7.0f} "
                      f"{100 * gbs / ceiling:6.1f} {ref_us:9.2f} {ref_us / us:8.2f}", flush=True)


if __name__ == "__main__":
    main()
