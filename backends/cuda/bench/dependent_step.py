"""A model's decode step with every TileLang kernel that can launch as a programmatic dependent doing so.

Why: a CUDA-graph decode step of the Qwen3.5-MoE model runs about a hundred short kernels back to back
(0.341 ms of kernels in a 0.400-0.443 ms step, 2026-12-04d): the gaps between them are launch and block
scheduling. A kernel built with ``dependent_launch`` (``kernels._common.dependent_launch``) overlaps its
launch with the previous kernel's tail; alone, one such kernel gains nothing measurable (conv, routing), so
the question is the whole step's. This runs ``benchmarks/hf_gpu_decode.py`` (its arguments as given) with
every registered kernel's build key that has the field set to it (and the skinny programs' tilings:
``MoESkinnyTiling.dependent_launch``, ``SkinnyLinearTiling.dependent_launch``); run the same command
without ``--dependent`` beside it for the registered keys. The outputs are the same bits by construction
(every access still follows the previous kernel); the script's own equality and logits checks say so.

    python backends/cuda/bench/dependent_step.py [--dependent] -- <hf_gpu_decode.py arguments>
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[3]


def launch_everything_as_a_dependent() -> list[str]:
    """Patch (this process) every registered TileLang class's ``key`` and the linear's skinny tiling;
    returns the classes whose keys changed."""
    from tileops_cuda import registered
    from tileops_cuda.kernels import linear
    from tileops_cuda.kernels.skinny_linear import SkinnyLinearTiling

    changed = []
    for impl in registered.KERNELS:
        original = impl.key

        def key(cls: Any, call: Any, _original: Any = original) -> Any:
            k = _original(call)
            if not dataclasses.is_dataclass(k):
                return k
            names = {f.name for f in dataclasses.fields(k)}
            changes: dict[str, Any] = {}
            if "dependent_launch" in names:
                changes["dependent_launch"] = True
            if "skinny_tiling" in names:
                changes["skinny_tiling"] = dataclasses.replace(k.skinny_tiling, dependent_launch=True)
            return dataclasses.replace(k, **changes) if changes else k

        setattr(impl, "key", classmethod(key))
        changed.append(impl.__name__)
    skinny = linear.build_skinny_linear
    linear.build_skinny_linear = lambda key, tiling=None: skinny(key, SkinnyLinearTiling(dependent_launch=True))
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dependent", action="store_true", help="every kernel that can, as a programmatic dependent")
    a, rest = p.parse_known_args(argv)
    rest = [x for x in rest if x != "--"]
    if a.dependent:
        print(f"dependent launch on the keys of {len(launch_everything_as_a_dependent())} registered classes "
              "and the skinny linear's tiling", flush=True)
    sys.path.insert(0, str(_ROOT / "benchmarks"))
    import hf_gpu_decode

    return hf_gpu_decode.main(rest)


if __name__ == "__main__":
    sys.exit(main())
