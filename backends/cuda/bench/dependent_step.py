"""A model's decode step with every TileLang kernel that can launch as a programmatic dependent doing so.

Why: a CUDA-graph decode step of the Qwen3.5-MoE model runs about a hundred short kernels back to back
(0.341 ms of kernels in a 0.400-0.443 ms step, 2026-12-04d): the gaps between them are launch and block
scheduling. A kernel built with ``dependent_launch`` (``kernels._common.dependent_launch``) overlaps its
launch with the previous kernel's tail; alone, one such kernel gains nothing measurable (conv, routing), so
the question is the whole step's. This runs ``benchmarks/hf_gpu_decode.py`` (its arguments as given) with
every registered kernel's build key that has the field set to it (and the skinny programs' tilings:
``tileops_cuda.all_dependent``); run the same command
without ``--dependent`` beside it for the registered keys. The outputs are the same bits by construction
(every access still follows the previous kernel); the script's own equality and logits checks say so.

    python backends/cuda/bench/dependent_step.py [--dependent] -- <hf_gpu_decode.py arguments>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dependent", action="store_true", help="every kernel that can, as a programmatic dependent")
    a, rest = p.parse_known_args(argv)
    rest = [x for x in rest if x != "--"]
    sys.path.insert(0, str(_ROOT / "benchmarks"))
    import hf_gpu_decode

    if not a.dependent:
        return hf_gpu_decode.main(rest)
    from tileops_cuda.all_dependent import all_dependent

    with all_dependent() as patched:  # the whole run: its plans and kernels are made inside
        print(f"dependent launch on the keys of {len(patched)} registered classes and the skinny linear's tiling",
              flush=True)
        return hf_gpu_decode.main(rest)


if __name__ == "__main__":
    sys.exit(main())
