"""The staged RGDR kernel (state block in shared memory): tilings, schedule, refusal, build.

The program is :mod:`.rgdr_staged_program`; the build key, the schedule rule and the launch
path are the register-tiled kernel's (:mod:`.rgdr`): a staged tiling is an
:class:`~.rgdr.RGDRTiling` with two more fields, its compiled function takes the same
arguments, so :class:`~.rgdr.RGDRLauncher` launches it unchanged. Which calls it serves
instead of the register-tiled kernel is decided by the kernel selection rule (the
registered class's refusal and ``preferred_over``), from :data:`STAGED_STATE_DTYPES`.
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES as _ELEM_BYTES
from ._common import cached_build, compile_prim_func
from .rgdr import RGDRBuildKey, RGDRLauncher, RGDRSchedule, RGDRTiling, rgdr_refusal
from .rgdr_pieces import pow2_at_most

__all__ = [
    "STAGED_LOADS",
    "STAGED_STATE_DTYPES",
    "RGDRStagedTiling",
    "build_rgdr_staged",
    "rgdr_staged_refusal",
    "staged_schedule",
    "staged_selection_refusal",
]

#: How a program brings its state block into shared memory: ``async`` (``cp.async``, 16 bytes
#: per thread-instruction, waited for after the first token chunk is staged), ``plain``
#: (16-byte loads through registers, all issued before the first store). TileLang's own
#: ``T.copy`` lowers to the plain form here: it takes a bulk (TMA) copy only where it can
#: prove the region in bounds, and the slot is data.
STAGED_LOADS = ("async", "plain")

#: State dtypes for which the selection rule chooses the staged kernel over the register-tiled
#: one. Empty until the H200 measures it faster and correct there (``bench/rgdr_sweep2.py``,
#: then ``bench_cuda.py --rgdr-kernels tiled,staged``; NOTES.md v7): the design targets 16-bit
#: state at T_b=1, where the tiled kernel loses most, so ("bfloat16", "float16") is the entry
#: to try first. Until then the kernel runs when built directly (tests, benchmarks).
STAGED_STATE_DTYPES: tuple[str, ...] = ()

#: Shared memory a program may ask for (the H200 gives a block up to 227 KB; leaving room
#: for two programs per SM at the largest block).
_SMEM_LIMIT = 110 * 1024


@dataclass(frozen=True)
class RGDRStagedTiling(RGDRTiling):
    """A staged layout: one program per (sequence, value head, block of ``block_v`` rows),
    the ``[block_v, DK]`` state block in shared memory, ``rows_in_flight`` rows per thread
    in registers at a time (``rows_per_thread`` in all), the block loaded by ``load`` (one of
    :data:`STAGED_LOADS`). ``seqs_per_program`` > 1: a program runs that many consecutive
    sequences, two blocks in shared memory, the next sequence's block loading while one runs."""

    rows_in_flight: int = 4
    load: str = "async"
    seqs_per_program: int = 1

    def smem_bytes(self, key: RGDRBuildKey) -> int:
        """Shared memory of one program: the state block and the staged token chunk."""
        c, dk = self.chunk, key.head_k_dim
        staged = c * 2 * dk * 4 + c * self.block_v * 4 + 4 * c * 4 + (c * dk * 4 if key.gk_form == "vector" else 0)
        blocks = 1 if self.seqs_per_program == 1 else 2
        return blocks * self.block_v * dk * _ELEM_BYTES[key.state_dtype] + staged + 64


def rgdr_staged_refusal(key: RGDRBuildKey, tiling: RGDRStagedTiling) -> str | None:
    """Why the staged program cannot be built for ``key`` with ``tiling`` (None: it can)."""
    reason = rgdr_refusal(key, RGDRTiling(tiling.threads, tiling.threads_per_row, tiling.rows_per_thread,
                                          tiling.min_blocks))  # fmt: skip
    if reason is not None:
        return reason.replace("RGDR TileLang kernel", "RGDR staged TileLang kernel").replace(
            "use the reference", "the register-tiled kernel or the reference serves it"
        )
    if tiling.stream:
        return "RGDR staged TileLang kernel: a staged tiling has no streaming form (stream=True); use RGDRTiling"
    if tiling.load not in STAGED_LOADS:
        return f"RGDR staged TileLang kernel: load={tiling.load!r} is not one of {STAGED_LOADS}"
    if tiling.seqs_per_program < 1:
        return f"RGDR staged TileLang kernel: seqs_per_program={tiling.seqs_per_program} must be at least 1"
    if tiling.rows_per_thread % tiling.rows_in_flight:
        return (
            f"RGDR staged TileLang kernel: rows_in_flight={tiling.rows_in_flight} must divide "
            f"rows_per_thread={tiling.rows_per_thread}"
        )
    sv = pow2_at_most(key.head_k_dim // tiling.threads_per_row, 16 // _ELEM_BYTES[key.state_dtype])
    if (tiling.block_v * key.head_k_dim) % (tiling.threads * sv):
        return (
            f"RGDR staged TileLang kernel: a [{tiling.block_v}, {key.head_k_dim}] state block is not whole "
            f"{sv}-element vectors per thread of {tiling.threads}; use the register-tiled kernel"
        )
    if tiling.smem_bytes(key) > _SMEM_LIMIT:
        return (
            f"RGDR staged TileLang kernel: {tiling.smem_bytes(key)} bytes of shared memory per program "
            f"(> {_SMEM_LIMIT}); use a smaller block_v"
        )
    return None


# The schedule rule, as data: state bytes -> (small, large, sequences from which large runs).
# Small batches want many small programs (latency), large ones whole-head blocks (bytes in
# flight per chain). A slot may name a register-tiled ``RGDRTiling`` where that layout is
# faster (the same launcher calls either). First guesses, to be replaced by the sweep's
# choice (NOTES.md).
_SCHEDULES: dict[int, tuple[RGDRTiling, RGDRTiling, int]] = {
    2: (RGDRStagedTiling(128, 16, 2, 8, rows_in_flight=2), RGDRStagedTiling(128, 16, 16, 4, rows_in_flight=4), 32),
    4: (RGDRStagedTiling(128, 16, 2, 8, rows_in_flight=2), RGDRStagedTiling(128, 16, 8, 4, rows_in_flight=4), 32),
}


def staged_schedule(key: RGDRBuildKey) -> RGDRSchedule:
    """The staged kernel's schedule for ``key``: a variant ``key`` cannot use falls back to the
    small tiling."""
    small, large, n = _SCHEDULES[_ELEM_BYTES[key.state_dtype]]
    if _tiling_refusal(key, large) is not None:
        large = small
    return RGDRSchedule(small, large, n)


def _tiling_refusal(key: RGDRBuildKey, tiling: RGDRTiling) -> str | None:
    """Why ``tiling`` (staged, or register-tiled in a staged schedule's slot) cannot be built."""
    if isinstance(tiling, RGDRStagedTiling):
        return rgdr_staged_refusal(key, tiling)
    return rgdr_refusal(key, tiling)


def staged_selection_refusal(key: RGDRBuildKey) -> str | None:
    """Why the kernel selection should not choose the staged kernel for ``key`` (None: it
    should, over the register-tiled one): a state dtype it was not measured faster on, or a
    schedule that cannot be built for ``key``."""
    if key.state_dtype not in STAGED_STATE_DTYPES:
        return (
            f"RGDR staged TileLang kernel: chosen only for state dtypes measured faster on the H200 "
            f"{STAGED_STATE_DTYPES}, the state is {key.state_dtype}; the register-tiled kernel serves it"
        )
    # The schedule's large tiling falls back to the small one where it cannot be built.
    return _tiling_refusal(key, _SCHEDULES[_ELEM_BYTES[key.state_dtype]][0])


def build_rgdr_staged(key: RGDRBuildKey, tiling: RGDRStagedTiling | RGDRSchedule | None = None) -> RGDRLauncher:
    """Compile (once per process) and return the launcher of the staged kernel.

    ``tiling`` pins one staged tiling or a schedule (benchmarks; a slot may hold a
    register-tiled tiling); by default :func:`staged_schedule`. Raises ValueError with the
    refusal reason when a tiling cannot be built for ``key``.
    """
    from .rgdr_program import rgdr_program
    from .rgdr_staged_program import rgdr_staged_program

    if tiling is None:
        schedule = staged_schedule(key)
    elif isinstance(tiling, RGDRStagedTiling):
        schedule = RGDRSchedule(tiling, tiling, 1 << 62)
    else:
        schedule = tiling
    for t in schedule.tilings():
        reason = _tiling_refusal(key, t)
        if reason is not None:
            raise ValueError(reason)

    def compile_one(t: Any) -> Any:
        # A schedule slot may hold a register-tiled tiling (rows where that layout is faster):
        # it compiles the register-tiled program, cached under the same identity as there.
        if not isinstance(t, RGDRStagedTiling):
            return cached_build(("rgdr-kernel", key, t), lambda: compile_prim_func(rgdr_program(key, t), key.arch))
        return cached_build(("rgdr-staged-kernel", key, t),
                            lambda: compile_prim_func(rgdr_staged_program(key, t), key.arch))  # fmt: skip

    def make() -> RGDRLauncher:
        import torch

        kernels = {t: compile_one(t) for t in schedule.tilings()}
        sm_count = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        return RGDRLauncher(key, schedule, kernels, sm_count)

    return cached_build(("rgdr-staged", key, schedule), make)
