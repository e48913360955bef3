"""RMSNorm as a TileLang kernel: ``y = x * rsqrt(mean(x**2, -1) + eps) * weight``.

One program normalises ``rows`` rows held entirely in registers (fp32 math), so ``x`` is
read once and ``y`` written once: the bytes floor. Specialised on dtype, hidden size and
weight presence; the number of rows is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, compile_once, programs_at_registers, row_plan, row_refusal

__all__ = ["RMSNormBuildKey", "build_rmsnorm", "rmsnorm_refusal"]

@dataclass(frozen=True)
class RMSNormBuildKey:
    """Build identity: element dtype (x, weight and y share it), hidden size, weight presence."""

    dtype: str
    hidden: int
    has_weight: bool = True
    arch: str = "sm_90"


def _plan(key: RMSNormBuildKey) -> tuple[int, int, int] | None:
    """Row layout: 16-bit rows aim at 32 values (16 registers) per thread, fp32 at 16."""
    vec = 16 // ELEM_BYTES[key.dtype]
    wide = ELEM_BYTES[key.dtype] == 2
    return row_plan(key.hidden, vec, 64 if wide else 48, 32 if wide else 16)


def rmsnorm_refusal(key: RMSNormBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    return row_refusal("RMSNorm TileLang kernel", key.dtype, "hidden", key.hidden, key.arch, lambda: _plan(key),
                       "at most 48 fp32 / 64 16-bit values per thread, 1024 threads")


def _program(key: RMSNormBuildKey):
    import tilelang.language as T

    N, dt, f32 = key.hidden, key.dtype, "float32"
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, NP, BM = plan
    M = T.dynamic("M")

    @T.macro
    def body(X, W, Y, eps):
        with T.Kernel(T.ceildiv(M, BM), threads=threads) as bx:
            T.annotate_min_blocks_per_sm(programs_at_registers(threads, 56))  # <= 56 registers: occupancy
            # The row stays in registers in its own dtype (a 16-bit row packs two values per
            # register, so twice the bytes are in flight per thread); math is fp32.
            xr = T.alloc_fragment((BM, NP), dt)
            sq = T.alloc_fragment((BM, NP), f32)
            rs = T.alloc_fragment((BM,), f32)
            # Columns past N (padding to whole vectors per thread) read as 0: no effect on the sum.
            for i, j in T.Parallel(BM, NP):
                xr[i, j] = T.if_then_else(j < N, X[bx * BM + i, j], T.cast(0, dt))
            for i, j in T.Parallel(BM, NP):
                sq[i, j] = T.cast(xr[i, j], f32) * T.cast(xr[i, j], f32)
            T.reduce_sum(sq, rs, dim=1)
            for i in T.Parallel(BM):
                rs[i] = T.rsqrt(rs[i] / T.float32(N) + eps)
            for i, j in T.Parallel(BM, NP):
                if j < N:
                    if key.has_weight:
                        Y[bx * BM + i, j] = T.cast((T.cast(xr[i, j], f32) * rs[i]) * T.cast(W[j], f32), dt)
                    else:
                        Y[bx * BM + i, j] = T.cast(T.cast(xr[i, j], f32) * rs[i], dt)

    x_t = T.Tensor((M, N), dt)
    w_t = T.Tensor((N,), dt)
    y_t = T.Tensor((M, N), dt)
    if key.has_weight:

        @T.prim_func
        def rmsnorm(x: x_t, weight: w_t, y: y_t, eps: T.float32):
            body(x, weight, y, eps)

    else:

        @T.prim_func
        def rmsnorm(x: x_t, y: y_t, eps: T.float32):
            body(x, None, y, eps)

    return rmsnorm


def build_rmsnorm(key: RMSNormBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x2d, [weight,] y2d, eps)`` launches it (x2d and y2d
    ``[M, hidden]`` contiguous, M positive). ValueError with the refusal reason."""
    return compile_once(("rmsnorm", key), rmsnorm_refusal(key), lambda: _program(key), key.arch)
