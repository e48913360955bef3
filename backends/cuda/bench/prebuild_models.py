"""Compile, in one process and in parallel, every TileLang kernel the GPU tests' tiny models plan.

Why: ``tests/test_transformers_static_decode_gpu.py`` and ``backends/cuda/tests/test_dependent_step_gpu.py``
build their models' kernels inside each pytest worker, so on a fresh GPU machine six workers compile the
same thirty-odd kernels at once, and the section's time goes to that (2026-12-04e: 230 s were not enough
for the first static-decode test to finish). TileLang's disk cache spans processes: built once here, the
workers load them. Each model type (random init, the GPU tests' head sizes, bf16 on the GPU), with and
without every module on TileOPs, is moved onto TileOPs and its planned kernel calls built through
``build_kernels`` (threads); ``--plain`` builds them a second time with every key's ``dependent_launch``
off, as the dependent-step test's plain half does.

    python backends/cuda/bench/prebuild_models.py [--plain] [--device cuda] [model_type ...]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import torch


def main(argv: list[str] | None = None) -> int:
    from tileops_core.integrations.transformers import apply_tileops, build_kernels
    from tileops_core.integrations.transformers._tiny import GPU_HEAD_SIZES, TINY_MODEL_TYPES, tiny_model
    from tileops_cuda.launch_policy import dependent_launches

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", help=f"of {', '.join(TINY_MODEL_TYPES)}; all when none is named")
    p.add_argument("--plain", action="store_true", help="also every kernel with dependent_launch off")
    p.add_argument("--device", default="cuda", help="where the models go (cpu: the plumbing alone, nothing built)")
    a = p.parse_args(argv)
    a.models = a.models or list(TINY_MODEL_TYPES)
    if set(a.models) - set(TINY_MODEL_TYPES):
        p.error(f"unknown model types {sorted(set(a.models) - set(TINY_MODEL_TYPES))}")
    started = time.perf_counter()
    calls = []
    for model_type in a.models:
        base = tiny_model(model_type, seed=0, **GPU_HEAD_SIZES).to(a.device, torch.bfloat16)
        for every_module in (False, True):
            calls += apply_tileops(copy.deepcopy(base), every_module=every_module).kernel_calls
    failed = []
    for dependent in (True, False) if a.plain else (True,):
        with dependent_launches(dependent):
            failed += build_kernels(calls)
    for line in failed:
        print(f"build failed: {line}", flush=True)
    print(f"built the kernels of {len(dict.fromkeys(calls))} distinct calls of {', '.join(a.models)} "
          f"({'plain and dependent' if a.plain else 'registered keys'}) in {time.perf_counter() - started:.0f} s, "
          f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
