"""Which registered TileLang kernels launch as programmatic dependents: every one that can.

Why: a CUDA-graph decode step runs about a hundred short kernels back to back, and the gaps between
them are launch and block scheduling. A kernel built with ``dependent_launch``
(``kernels._common.dependent_launch``) overlaps its launch and block scheduling with the previous
kernel's tail, and every memory access still follows that kernel's end, so the bits are the plain
program's. Measured on the whole step, not kernel by kernel (some, alone, tie or lose a little): the
Qwen3.5-MoE decode step at real layer sizes, B=1, every module on TileOPs, in one H200 run
(session-2026-12-04e, ``run.sh depstep``): the CUDA-graph step 0.384 ms with every key plain, 0.334 ms
with every key that has the field dependent, the same logits. So the registered keys launch so.

:func:`registered_key` is what ``TileLangImpl.key`` returns: the class's ``program_key`` with the
field (and the field of its skinny tiling) set as :data:`DEPENDENT_LAUNCH` says, and off where the
arch has no programmatic dependent launch (the same program launched plainly, as
``_common.launchable_on`` does for the block-shapes table). :func:`dependent_launches` switches it for a ``with`` block: the A/B of
``bench/dependent_step.py`` and ``tests/test_dependent_step_gpu.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

from .kernels._common import DEPENDENT_LAUNCH_ARCHS

__all__ = ["DEPENDENT_LAUNCH", "dependent_launches", "registered_key", "with_dependent_launch"]

#: Whether registered keys launch as programmatic dependents (the module docstring's measurement).
#: Changed only by :func:`dependent_launches`.
DEPENDENT_LAUNCH = True


def with_dependent_launch(key: Any, on: bool) -> Any:
    """``key`` with ``dependent_launch`` set to ``on`` where it has the field, and in its
    ``skinny_tiling``; any other key unchanged."""
    if not dataclasses.is_dataclass(key) or isinstance(key, type):
        return key
    names = {f.name for f in dataclasses.fields(key)}
    changes: dict[str, Any] = {}
    if "dependent_launch" in names:
        changes["dependent_launch"] = on
    if "skinny_tiling" in names:
        changes["skinny_tiling"] = dataclasses.replace(getattr(key, "skinny_tiling"), dependent_launch=on)
    return dataclasses.replace(key, **changes) if changes else key


def registered_key(key: Any) -> Any:
    """``key`` as the registered classes build it: :func:`with_dependent_launch`, on where
    :data:`DEPENDENT_LAUNCH` says so and the key's arch has the launch, off elsewhere."""
    return with_dependent_launch(key, DEPENDENT_LAUNCH and getattr(key, "arch", None) in DEPENDENT_LAUNCH_ARCHS)


@contextlib.contextmanager
def dependent_launches(on: bool) -> Iterator[None]:
    """Within the block, registered keys launch as dependents exactly when ``on``; the active
    registry's selections are forgotten on entry and exit (a call spec selected before would keep
    its kernel). Plans and kernels made inside keep their keys after it. Not for concurrent use."""
    from tileops_core.kernels.select import clear_caches

    global DEPENDENT_LAUNCH
    saved = DEPENDENT_LAUNCH
    DEPENDENT_LAUNCH = on
    clear_caches()
    try:
        yield
    finally:
        DEPENDENT_LAUNCH = saved
        clear_caches()
