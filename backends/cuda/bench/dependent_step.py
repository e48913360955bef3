"""A model's decode step with the registered kernels launched as programmatic dependents, or with none so.

Why: a CUDA-graph decode step of the Qwen3.5-MoE model runs about a hundred short kernels back to back: the
gaps between them are launch and block scheduling. A kernel built with ``dependent_launch``
(``kernels._common.dependent_launch``) overlaps its launch with the previous kernel's tail; alone, one such
kernel gains little or nothing (conv, routing), so the question is the whole step's. This runs
``benchmarks/hf_gpu_decode.py`` (its arguments as given) with the registered keys (every kernel that can,
dependent: ``tileops_cuda.launch_policy``), or with ``--plain`` every key's field off; run both beside each
other. The outputs are the same bits by construction (every access still follows the previous kernel); the
script's own equality and logits checks say so, and ``tests/test_dependent_step_gpu.py`` checks the bits.

    python backends/cuda/bench/dependent_step.py [--plain] -- <hf_gpu_decode.py arguments>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plain", action="store_true", help="no kernel as a programmatic dependent")
    a, rest = p.parse_known_args(argv)
    rest = [x for x in rest if x != "--"]
    sys.path.insert(0, str(_ROOT / "benchmarks"))
    import hf_gpu_decode

    from tileops_cuda.launch_policy import dependent_launches

    with dependent_launches(not a.plain):  # the whole run: its plans and kernels are made inside
        print(f"registered keys {'plain' if a.plain else 'dependent where they can'}", flush=True)
        return hf_gpu_decode.main(rest)


if __name__ == "__main__":
    sys.exit(main())
