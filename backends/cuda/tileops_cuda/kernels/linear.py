"""A linear layer's programs, and which one a call of M input rows runs.

Why three (H200, ``bench/linear_decode_bench.py``, backends/cuda/NOTES.md): a linear layer meets one
to a few rows at a decode step, eight to 64 at a batched decode step, thousands at prefill, and no
one tile serves all three.

* up to ``rows_for(key)`` rows (4): the skinny program (:mod:`.skinny_linear`), a warp an output
  feature, the weight read once at 80-97% of the same-size copy;
* up to ``DECODE_GEMM_ROWS`` (64): the GEMM with one consumer warpgroup and narrow programs,
  :func:`decode_gemm_tiling`. The prefill tile (128 x 256) gives such a call ``N / 256`` programs
  and ran 0.30-0.69x ``F.linear`` at 8-64 rows on every decode-step weight shape (2026-12-04d); the
  decode tiling 0.72-1.12x, the narrowest shapes (N <= 512) on 16-feature programs;
* more: the GEMM's registered tiling (:func:`.gemm.default_gemm_tiling`).

All three compile concurrently, so a layer's first call waits for the slowest, not for their sum.
tilelang is imported inside the builders, never at module import.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._common import Compiled, compile_many
from .gemm import GemmBuildKey, GemmTiling, build_gemm
from .skinny_linear import SkinnyLinearTiling, build_skinny_linear, rows_for, skinny_linear_refusal

__all__ = ["DECODE_GEMM_ROWS", "LinearPrograms", "build_linear_kernels", "decode_gemm_tiling"]

#: Calls of at most this many rows (past the skinny program's) run the GEMM's decode tiling.
DECODE_GEMM_ROWS = 64
#: Output features up to which the decode tiling's programs hold 16 of them (more programs for a
#: narrow weight: 1.04-1.12x ``F.linear`` at N = 64-512, where 64-feature programs ran 0.86-0.89x).
_NARROW_N = 512


def decode_gemm_tiling(key: GemmBuildKey) -> GemmTiling:
    """64-row tiles (one consumer warpgroup) and 64 output features a program, K tiles of 128 in 4
    stages; 16 features and K tiles of 256 where the weight has at most ``_NARROW_N`` rows."""
    if key.n <= _NARROW_N:
        return GemmTiling(block_m=64, block_n=16, block_k=256, stages=4, threads=128)
    return GemmTiling(block_m=64, block_n=64, block_k=128, stages=4, threads=128)


@dataclass(frozen=True)
class LinearPrograms:
    """The compiled programs of one key: ``skinny`` is None where that program refuses the key
    (``skinny_rows`` is then 0)."""

    gemm: Compiled
    decode_gemm: Compiled
    skinny: Compiled | None
    skinny_rows: int


def build_linear_kernels(key: GemmBuildKey) -> LinearPrograms:
    """The three programs of ``key``, compiled concurrently (the module docstring); the first
    failure is raised."""
    jobs = [lambda: build_gemm(key), lambda: build_gemm(key, decode_gemm_tiling(key))]
    has_skinny = skinny_linear_refusal(key) is None
    if has_skinny:
        jobs.append(lambda: build_skinny_linear(key, SkinnyLinearTiling(dependent_launch=key.dependent_launch)))
    built = compile_many(jobs)
    for b in built:
        if isinstance(b, BaseException):
            raise b
    skinny = built[2] if has_skinny else None
    return LinearPrograms(built[0], built[1], skinny, rows_for(key) if has_skinny else 0)
