"""The CUDA backend's eager host path on a CPU: the decode step's ops with their compiled functions stood in for.

Issue 15 asks for an op's eager host time at or below torch's own op on the GPU. What the
framework adds to a launch is plain Python: the core's call path (matcher, step 5's checks,
selection's bound launcher, output allocation, step 7) and the CUDA backend's launch closures
(``registered.py``, ``rgdr.py``). This runs exactly that code on the CPU: the TileLang classes
are registered for the ``cpu`` device with their build functions replaced by ones whose
compiled function does nothing, and the decode step's ops (RMSNorm -> RGDR -> SiluAndMul, B=1,
Qwen3.5 heads) are called as the bench calls them. No kernel runs, so every figure is host time.

Per op: the op's call, and its launcher called directly with a preallocated output (what is
left when the core costs nothing). Figures are the median over ``--repeats`` loops of this
thread's CPU time per call; read them relative to each other (a GPU host is slower per
Python operation, often 2-3x).

With ``--compiled``, one more row: the same decode step under ``torch.compile(fullgraph=True)``
with no op decomposed (policy ``none``: each op stays the custom op at the compile boundary), so
what the compiled step adds to the eager one is read against the same stand-ins.

    python benchmarks/host_path.py [--calls 20000] [--repeats 15] [--compiled]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from typing import Any, Callable

import torch

from tileops_core.bench.decode_step import DecodeStepConfig, _Step
from tileops_core.kernels import BackendInfo, registry
from tileops_core.kernels.compile_policy import use_decompose_policy
from tileops_core.kernels.select import kernel_for


def _nothing(*args: Any) -> None:
    """The compiled function stood in for: the launch's host code runs, no kernel does."""


def time_per_call(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    """Median over ``repeats`` loops of this thread's CPU µs per call (after warm-up calls)."""
    for _ in range(min(calls, 200)):
        fn()
    loops = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        loops.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(loops)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--compiled", action="store_true", help="also the step under torch.compile(fullgraph=True)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    from tileops_cuda import registered
    from tileops_cuda.stand_ins import on_cpu, stood_in

    with stood_in(_nothing):
        with registry.use_registry(registry.Registry()):
            registry.register_backend(BackendInfo("host_path", description="benchmarks/host_path.py stand-ins"))
            for impl in (registered.TileLangRMSNorm, registered.TileLangRGDR, registered.TileLangSiluAndMul):
                registry.register_kernel(on_cpu(impl), "host_path")
            # Under "none" a compiled step keeps every op the custom op (eager calls never read the policy).
            policy = use_decompose_policy("none", "host_path.py --compiled") if a.compiled else contextlib.nullcontext()
            with policy:
                rows = _rows(DecodeStepConfig(B=1), a.calls, a.repeats, a.compiled)
    print(f"torch {torch.__version__}, 1 thread, CPU time; median of {a.repeats} loops of {a.calls} calls")
    print(f"{'op (B=1, Qwen3.5 heads)':34s} {'op µs':>8s} {'launcher µs':>12s} {'core µs':>8s}")
    for name, through, direct in rows:
        core = "" if direct is None else f"{through - direct:8.2f}"
        print(f"{name:34s} {through:8.2f} {'' if direct is None else f'{direct:12.2f}'} {core}")
    return 0


def _rows(cfg: DecodeStepConfig, calls: int, repeats: int, compiled: bool) -> list[tuple[str, float, float | None]]:
    s = _Step(cfg, torch.device("cpu"), seed=0)
    h = s.norm(s.x, s.weight)
    value = h.view(s.shape)
    o = s.rgdr(s.q, s.k, value, s.beta, s.state, s.lengths, s.slots, s.g)
    gate_up = o.view(cfg.B, -1)
    act = s.act(gate_up)
    for op in (s.norm, s.rgdr, s.act):  # the stand-ins serve, not the reference
        plan = op.last_plan
        kernels = plan.bound[None].kernels.values() if plan is not None else ()
        assert plan is not None and all(k.__module__ == "tileops_cuda.stand_ins" for k in kernels)

    def launcher(op: Any) -> Callable[..., Any]:
        return kernel_for(*next(iter(op.last_plan.call_specs.items())))

    norm, rgdr, silu = launcher(s.norm), launcher(s.rgdr), launcher(s.act)
    out_n, out_r, out_a = torch.empty_like(h), torch.empty_like(o), torch.empty_like(act)
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any] | None]] = [
        ("RMSNormFwdOp [1, 4096] bf16", lambda: s.norm(s.x, s.weight),
         lambda: norm(s.x, s.weight, s.norm.normalized_shape, s.norm.eps, out_n)),
        ("RecurrentGatedDeltaRuleFwdOp B=1", lambda: s.rgdr(s.q, s.k, value, s.beta, s.state, s.lengths, s.slots, s.g),
         lambda: rgdr(s.q, s.k, value, s.beta, s.state, s.lengths, s.slots, s.g, None, None, s.rgdr.scale,
                      s.rgdr.seq_lens_style, s.rgdr.use_qk_l2norm_in_kernel, out_r)),
        ("SiluAndMulFwdOp [1, 8192] bf16", lambda: s.act(gate_up), lambda: silu(gate_up, out_a)),
        ("the decode step (3 ops, 2 views)", lambda: s.step(s.x, s.state), None),
    ]
    if compiled:  # (main holds the decomposition policy "none" around all of this: the graph is guarded on it)
        step = torch.compile(s.step, fullgraph=True)
        cases.append(("the decode step compiled, fullgraph", lambda: step(s.x, s.state), None))
    return [(name, time_per_call(op, calls, repeats), None if direct is None else time_per_call(direct, calls, repeats))
            for name, op, direct in cases]


if __name__ == "__main__":
    sys.exit(main())
