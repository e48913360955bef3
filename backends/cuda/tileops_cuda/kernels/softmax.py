"""Softmax over the last (contiguous) dim as a TileLang kernel.

Rows live in registers for the whole program (max, exp, sum, scale), so ``x`` is read once
and ``y`` written once. Other dims are refused: move the dim last (one copy) or use the
reference. Specialised on dtype and row length; the number of rows is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, compile_once, programs_at_registers, row_plan, row_refusal

__all__ = ["SoftmaxBuildKey", "build_softmax", "softmax_refusal"]

@dataclass(frozen=True)
class SoftmaxBuildKey:
    """Build identity: dtype (input and output) and the length of the softmax dim."""

    dtype: str
    length: int
    arch: str = "sm_90"


def softmax_refusal(key: SoftmaxBuildKey, dim: int = -1, ndim: int = 2, contiguous: bool = True) -> str | None:
    """Why this kernel cannot serve the call (with the fix), or None."""
    if dim not in (-1, ndim - 1):
        return f"Softmax TileLang kernel: dim={dim} is not the last dim; it handles only the last, contiguous dim"
    if not contiguous:
        return "Softmax TileLang kernel: input is not contiguous; call .contiguous() or use the reference"
    return row_refusal("Softmax TileLang kernel", key.dtype, "length", key.length, key.arch,
                       lambda: row_plan(key.length, 16 // ELEM_BYTES[key.dtype]),
                       "at most 48 values per thread, 1024 threads")


def _program(key: SoftmaxBuildKey):
    import tilelang.language as T

    N, dt, f32 = key.length, key.dtype, "float32"
    plan = row_plan(N, 16 // ELEM_BYTES[dt])
    assert plan is not None  # the refusal turned away every row no block holds
    threads, NP, BM = plan
    M = T.dynamic("M")
    LOG2E = 1.4426950408889634

    @T.prim_func
    def softmax_fwd(x: T.Tensor((M, N), dt), y: T.Tensor((M, N), dt)):
        with T.Kernel(T.ceildiv(M, BM), threads=threads) as bx:
            T.annotate_min_blocks_per_sm(programs_at_registers(threads, 56))  # <= 56 registers: occupancy
            xf = T.alloc_fragment((BM, NP), f32)
            mx = T.alloc_fragment((BM,), f32)
            sm = T.alloc_fragment((BM,), f32)
            # Padding columns read as -inf: they neither raise the max nor add to the sum.
            for i, j in T.Parallel(BM, NP):
                xf[i, j] = T.if_then_else(j < N, T.cast(x[bx * BM + i, j], f32), -T.infinity(f32))
            T.reduce_max(xf, mx, dim=1, clear=True)
            for i, j in T.Parallel(BM, NP):
                xf[i, j] = T.exp2((xf[i, j] - mx[i]) * LOG2E)
            T.reduce_sum(xf, sm, dim=1)
            for i in T.Parallel(BM):
                sm[i] = T.float32(1) / sm[i]
            for i, j in T.Parallel(BM, NP):
                if j < N:
                    y[bx * BM + i, j] = T.cast(xf[i, j] * sm[i], dt)

    return softmax_fwd


def build_softmax(key: SoftmaxBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x2d, y2d)`` launches it (``[M, length]`` contiguous, M
    positive). ValueError with the refusal reason."""
    return compile_once(("softmax", key), softmax_refusal(key), lambda: _program(key), key.arch)
