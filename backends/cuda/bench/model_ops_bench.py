"""Device time of the memory-bound model ops' TileLang kernels against the copy ceiling.

For every non-tiny workload row of the ops named (default: all served here), the kernel the op
selects is timed on its own (the launch function the op calls, with the op's arguments and
outputs), and so is the reference implementation (torch on the GPU; ``torch µs``) for comparison. Each rep
is timed with CUDA events after the L2 is flushed (a 256 MiB write), medians over ``--reps``
reps after warm-up. The copy ceiling is measured in the same run: ``torch.mul(a, 1, out=b)``
on 1 GiB (bytes read plus written over its time). Bytes are the spec's roofline bytes; the
table gives GB/s and the percentage of the copy ceiling. Inputs are drawn on the GPU (an
expert bank at real size is gigabytes); the rows' routing metadata comes from their generators.

For the routed experts the best torch path is timed too: ``torch._grouped_mm`` for gate/up,
SiLU-and-multiply, ``torch._grouped_mm`` for down (its row: ``torch µs``, ``torch/kern``, and
the largest difference of the two outputs relative to the largest output element).

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
from tileops_core.bench.workloads import Instance, instantiate  # noqa: E402
from tileops_core.kernels import select_kernel  # noqa: E402
from tileops_core.workloads import dtype_cases  # noqa: E402
from tileops_core.workloads.generators import run_generator  # noqa: E402

OPS = ("QKNormRopeFwdOp", "SigmoidGateMulFwdOp", "MoETopKRoutingFwdOp",
       "MoEPermuteFwdOp", "MoEUnpermuteFwdOp", "MoEGroupedExpertsFwdOp", "MoESharedExpertFwdOp")
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


def gpu_inputs(spec: Any, row: Any, case: Any) -> tuple[Instance, list[Any]]:
    """The row's instance (shapes, dtypes, op arguments) and its call arguments on the GPU: the
    generator's tensors as it made them, every other input standard normal drawn on the GPU."""
    inst = instantiate(spec, row, case, meta_only=True)
    made = run_generator(row, torch.Generator().manual_seed(0)).tensors
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = []
    for t in spec.call_inputs:
        meta = inst.inputs.get(t.name)
        if meta is None:
            args.append(None)
        elif t.name in made:
            args.append(made[t.name].to(device="cuda", dtype=meta.dtype))
        else:
            args.append(torch.randn(meta.shape, device="cuda", generator=gen).to(meta.dtype))
    while args and args[-1] is None:
        args.pop()
    return inst, args


def torch_grouped_experts(x: Any, offsets: Any, gate_up: Any, down: Any) -> Any:
    """The best torch path for the routed experts: two ``torch._grouped_mm`` and SiLU-and-multiply."""
    ends = offsets[1:].to(torch.int32)
    gu = torch._grouped_mm(x, gate_up.transpose(1, 2), offs=ends)
    g, u = gu.chunk(2, dim=-1)
    act = (torch.nn.functional.silu(g.float()) * u.float()).to(x.dtype)
    return torch._grouped_mm(act, down.transpose(1, 2), offs=ends)


BEST_TORCH = {"MoEGroupedExpertsFwdOp": torch_grouped_experts}


def bench_row(spec: Any, row: Any, case: Any, reps: int, flush: torch.Tensor) -> dict[str, Any]:
    """Kernel name, kernel and reference µs, bytes (and the best torch path's µs and difference)."""
    cls = getattr(importlib.import_module(spec.source["op"]), spec.name)
    inst, args = gpu_inputs(spec, row, case)
    op = cls(**inst.op_kwargs)
    op(*args)
    launch = capture_launches(op, args)[0]
    chosen = select_kernel(launch.interface, launch.call)
    outs = [torch.empty(s, dtype=d, device="cuda") for s, d in zip(op.last_plan.out_shapes, op.last_plan.out_dtypes)]
    fn = chosen.chosen.entry_for(launch.call).build()
    if getattr(chosen.chosen, "writes_outputs", False):
        result = {"kernel_us": time_reps(lambda: fn(*launch.args, *outs), reps, flush)}
    else:
        result = {"kernel_us": time_reps(lambda: fn(*launch.args, **launch.kwargs), reps, flush)}
    result.update(kernel=chosen.chosen.__name__, bytes=float(roofline_of_row(spec, row, case).bytes))
    best = BEST_TORCH.get(spec.name)
    if best is not None:
        result["torch_us"] = time_reps(lambda: best(*args), reps, flush)
        got, want = op(*args), best(*args)
        result["diff"] = float((got.float() - want.float()).abs().max() / want.float().abs().max())
    else:
        ref = reference_implementation(launch.interface, launch.call).entry_for(launch.call).build()
        result["torch_us"] = time_reps(lambda: ref(*launch.args, **launch.kwargs), reps, flush)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="include the tiny rows")
    a = parser.parse_args()
    flush = torch.empty(_FLUSH_BYTES // 4, device="cuda")
    ceiling = copy_ceiling(a.reps, flush)
    print(f"copy ceiling (torch.mul 1 GiB): {ceiling:.0f} GB/s   [{torch.cuda.get_device_name()}]", flush=True)
    print(f"{'op':22} {'row':34} {'kernel':26} {'µs':>9} {'GB/s':>7} {'%copy':>6} {'torch µs':>9} {'torch/kern':>10}")
    manifest = load_manifest()
    for name in a.ops.split(","):
        spec = manifest[name]
        for row in spec.workloads:
            if row.label.startswith("tiny") and not a.tiny:
                continue
            for case in dtype_cases(row):
                label = f"{row.label}[{case}]"
                try:
                    r = bench_row(spec, row, case, a.reps, flush)
                except Exception as exc:  # reported in the table, the other rows still run
                    print(f"{name[:-5]:22} {label:34} ERROR {type(exc).__name__}: {exc}", flush=True)
                    continue
                gbs = r["bytes"] / r["kernel_us"] / 1e3
                diff = f"  max|diff|/max|torch| {r['diff']:.2e}" if "diff" in r else ""
                print(f"{name[:-5]:22} {label:34} {r['kernel']:26} {r['kernel_us']:9.2f} {gbs:7.0f} "
                      f"{100 * gbs / ceiling:6.1f} {r['torch_us']:9.2f} {r['torch_us'] / r['kernel_us']:10.2f}{diff}",
                      flush=True)


if __name__ == "__main__":
    main()
