"""A model's eager decode step on the CUDA backend's launchers, on a CPU: host time per op, nothing compiled.

The H200's eager Qwen3.5-MoE step spends 2.8-3.4 ms a step in TileOPs' call path against 0.42 ms
of kernels (``benchmarks/hf_gpu_decode.py``): on a GPU host a decode step is host-bound, and
the host time is Python. This runs that Python on a CPU: a tiny random-init model
(``tileops_core.integrations.transformers._tiny``) moved onto TileOPs with every module served,
every TileLang class registered for the ``cpu`` device, and every compiled function a no-op
(:mod:`tileops_cuda.stand_ins`), so each op call runs the core's call path and its launcher's
glue (views, workspaces, schedules) and launches nothing. The outputs are garbage (contents
checks off, as in serving); only time counts. Per op class: calls a step and host µs a call
(wall time inside ``Op.__call__``, medians over ``--rounds`` rounds of ``--steps`` steps under
``no_grad``), and the step's total.
Read the figures relative to each other: a GPU host is 2-3x slower a Python operation.

    python benchmarks/model_host_path.py [--model qwen3_5_moe] [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Any, Iterator

import torch

from tileops_core.kernels import BackendInfo, registry
from tileops_core.op.base import Op


def _nothing(*args: Any) -> None:
    """The compiled function stood in for: the launch's host code runs, no kernel does."""


@contextlib.contextmanager
def _no_contents_checks() -> Iterator[None]:
    """Ops made within read no tensor contents (as in serving; the stand-ins' outputs are garbage)."""
    saved = os.environ.get("TILEOPS_CHECK_CONTENTS")
    os.environ["TILEOPS_CHECK_CONTENTS"] = "0"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TILEOPS_CHECK_CONTENTS"]
        else:
            os.environ["TILEOPS_CHECK_CONTENTS"] = saved


@contextlib.contextmanager
def _cpu_multiprocessors() -> Iterator[None]:
    """Launchers that plan by the GPU's SM count ask torch.cuda for it; on a CPU, an H200's 132."""
    real = torch.cuda.get_device_properties
    h200 = SimpleNamespace(multi_processor_count=132)
    torch.cuda.get_device_properties = lambda device=None: h200  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.get_device_properties = real  # type: ignore[assignment]


def measure(model_type: str, steps: int, rounds: int) -> tuple[float, dict[str, tuple[int, float]]]:
    """``(host µs a step, {op class: (calls a step, host µs a call)})`` (module docstring)."""
    from tileops_core.integrations.transformers import apply_tileops, cache_kwargs, cache_of
    from tileops_core.integrations.transformers._tiny import tiny_model
    from tileops_cuda import registered
    from tileops_cuda.stand_ins import on_cpu, stood_in

    with stood_in(_nothing), _cpu_multiprocessors(), _no_contents_checks(), registry.use_registry(registry.Registry()):
        registry.register_backend(BackendInfo("model_host_path", description="benchmarks/model_host_path.py stand-ins"))
        for impl in registered.KERNELS:
            registry.register_kernel(on_cpu(impl), "model_host_path")
        model = tiny_model(model_type, seed=0)
        apply_tileops(model, every_module=True)
        with torch.no_grad():
            cache = cache_of(model(input_ids=torch.randint(1, model.config.vocab_size, (1, 8)), use_cache=True))
            ids = torch.ones(1, 1, dtype=torch.long)  # the logits are garbage: a fixed next token

            def step() -> None:
                model(input_ids=ids, use_cache=True, **cache_kwargs(model, cache))

            for _ in range(3):
                step()
            spent: dict[str, float] = collections.defaultdict(float)
            calls: collections.Counter[str] = collections.Counter()
            depth = [0]
            original = Op.__call__

            def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
                if depth[0]:  # an op inside an op counts in the outer one
                    return original(self, *args, **kwargs)
                depth[0] += 1
                start = time.perf_counter()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    spent[type(self).__name__] += time.perf_counter() - start
                    calls[type(self).__name__] += 1
                    depth[0] -= 1

            per_round, per_op = [], collections.defaultdict(list)
            Op.__call__ = timed  # type: ignore[method-assign]
            try:
                for _ in range(rounds):
                    spent.clear()
                    calls.clear()
                    start = time.perf_counter()
                    for _ in range(steps):
                        step()
                    per_round.append((time.perf_counter() - start) / steps)
                    for name, s in spent.items():
                        per_op[name].append((calls[name] // steps, s / calls[name]))
            finally:
                Op.__call__ = original  # type: ignore[method-assign]
    ops = {name: (rows[0][0], statistics.median(r[1] for r in rows) * 1e6) for name, rows in per_op.items()}
    return statistics.median(per_round) * 1e6, ops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen3_5_moe", choices=("qwen3_5_moe", "qwen3_5", "qwen3_next"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    step_us, ops = measure(a.model, a.steps, a.rounds)
    inside = sum(n * us for n, us in ops.values())
    print(f"{a.model} (tiny), torch {torch.__version__}, 1 thread; host µs a decode step {step_us:.0f}, "
          f"inside ops {inside:.0f} (median of {a.rounds} rounds of {a.steps} steps)")
    print(f"{'op':34s} {'calls':>5s} {'µs a call':>10s} {'µs a step':>10s}")
    for name, (n, us) in sorted(ops.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"{name:34s} {n:5d} {us:10.1f} {n * us:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
