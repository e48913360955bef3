"""Every registered TileLang kernel launched as a programmatic dependent, for a measurement and its test.

Why: a CUDA-graph decode step runs about a hundred short kernels back to back, and the gaps between them
are launch and block scheduling (the Qwen3.5-MoE step: 0.341 ms of kernels in a 0.400-0.443 ms step,
backends/cuda/NOTES.md). Each kernel that can (its build key has ``dependent_launch``; the skinny
programs' tilings too) overlaps its launch with the previous kernel's tail when built so, and computes
the same bits (every access still follows the previous kernel). Whether the step gains is measured on
the whole step (``bench/dependent_step.py``), and a GPU test checks the bits
(``tests/test_dependent_step_gpu.py``); where it gains, the fields go into the registered keys.

:func:`all_dependent` patches, for the time of a ``with`` block, every registered class's ``key`` and
the linear's skinny tiling, and forgets the active registry's selections on entry and exit (a call spec
selected before would otherwise keep its plain kernel); plans and kernels made inside keep the dependent
keys after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

__all__ = ["all_dependent", "dependent_key"]


def dependent_key(key: Any) -> Any:
    """``key`` with ``dependent_launch`` set where it has the field (and in its ``skinny_tiling``)."""
    if not dataclasses.is_dataclass(key) or isinstance(key, type):
        return key
    names = {f.name for f in dataclasses.fields(key)}
    changes: dict[str, Any] = {}
    if "dependent_launch" in names:
        changes["dependent_launch"] = True
    if "skinny_tiling" in names:
        changes["skinny_tiling"] = dataclasses.replace(getattr(key, "skinny_tiling"), dependent_launch=True)
    return dataclasses.replace(key, **changes) if changes else key


@contextlib.contextmanager
def all_dependent() -> Iterator[list[str]]:
    """Within the block, every registered class's key through :func:`dependent_key` and the linear's
    skinny program at ``SkinnyLinearTiling(dependent_launch=True)``; yields the classes patched."""
    from tileops_core.kernels.select import clear_caches

    from . import registered
    from .kernels import linear
    from .kernels.skinny_linear import SkinnyLinearTiling

    saved = {impl: impl.__dict__.get("key") for impl in registered.KERNELS}
    build_skinny = linear.build_skinny_linear
    for impl in registered.KERNELS:
        original = impl.key

        def key(cls: Any, call: Any, _original: Any = original) -> Any:
            return dependent_key(_original(call))

        setattr(impl, "key", classmethod(key))
    setattr(linear, "build_skinny_linear",
            lambda key, tiling=None: build_skinny(key, SkinnyLinearTiling(dependent_launch=True)))
    clear_caches()
    try:
        yield [impl.__name__ for impl in registered.KERNELS]
    finally:
        clear_caches()
        setattr(linear, "build_skinny_linear", build_skinny)
        for impl, own in saved.items():
            if own is None:
                delattr(impl, "key")  # the inherited key again
            else:
                setattr(impl, "key", own)
