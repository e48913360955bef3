"""Zero-centred RMSNorm as a TileLang kernel, optionally with the residual add fused.

``y = (h · rsqrt(mean(h², -1) + eps)) · (1 + w)`` in float32, rounded once (Qwen3NextRMSNorm's
order); ``h = x``, or with a residual ``h = round(x + r)``, written back into ``r``. Rows stay
in registers (RMSNorm's layout, ``_common.row_plan``), so x and r are read once and y and r
written once: the bytes floor. x and r are strided rows (any row stride that is a whole
number of 16-byte vectors), so a chunk of a projection is read in place. Specialised on
dtype, hidden size and the residual; the number of rows and the row strides are dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, compile_once, row_plan, row_refusal

__all__ = ["ZeroCentredRMSNormBuildKey", "build_zero_centred_rmsnorm",
           "zero_centred_rmsnorm_refusal"]

@dataclass(frozen=True)
class ZeroCentredRMSNormBuildKey:
    """Build identity: element dtype (x, residual, weight and y share it), hidden size, residual."""

    dtype: str
    hidden: int
    has_residual: bool = False
    arch: str = "sm_90"
    #: Threads per program and rows per program; 0 leaves the choice to ``row_plan`` (sweep
    #: parameters, ``bench/layer_ops_sweep.py``).
    threads: int = 0
    rows: int = 0


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: ZeroCentredRMSNormBuildKey) -> tuple[int, int, int] | None:
    """Row layout as RMSNorm's: 16-bit rows aim at 32 values per thread, fp32 at 16."""
    wide = ELEM_BYTES[key.dtype] == 2
    return row_plan(key.hidden, _vec(key.dtype), 64 if wide else 48, 32 if wide else 16, key.threads, key.rows)


def zero_centred_rmsnorm_refusal(key: ZeroCentredRMSNormBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    return row_refusal("ZeroCentredRMSNorm TileLang kernel", key.dtype, "hidden", key.hidden, key.arch,
                       lambda: _plan(key), "at most 48 fp32 / 64 16-bit values per thread, 1024 threads")


def _program(key: ZeroCentredRMSNormBuildKey):
    import tilelang.language as T

    N, dt, f32, vec = key.hidden, key.dtype, "float32", _vec(key.dtype)
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, NP, BM = plan
    M = T.dynamic("M")
    SX = T.dynamic("SX")
    SR = T.dynamic("SR")

    @T.macro
    def body(X, R, W, Y, eps):
        with T.Kernel(T.ceildiv(M, BM), threads=threads) as bx:
            T.annotate_min_blocks_per_sm(max(1, 65536 // (threads * 56)))  # <= 56 registers: occupancy
            # h stays in registers in its own dtype (HF normalises the rounded sum); math is fp32.
            hr = T.alloc_fragment((BM, NP), dt)
            wr = T.alloc_fragment((BM, NP), dt)  # (1 + w)'s w, loaded with x: off the reduction's path
            sq = T.alloc_fragment((BM, NP), f32)
            rs = T.alloc_fragment((BM,), f32)
            # Columns past N (padding to whole vectors per thread) read as 0: no effect on the sum.
            if key.has_residual:
                for i, j in T.Parallel(BM, NP):
                    hr[i, j] = T.if_then_else(
                        j < N, T.cast(T.cast(X[bx * BM + i, j], f32) + T.cast(R[bx * BM + i, j], f32), dt),
                        T.cast(0, dt))
                for i, j in T.Parallel(BM, NP):
                    if j < N:
                        R[bx * BM + i, j] = hr[i, j]
            else:
                for i, j in T.Parallel(BM, NP):
                    hr[i, j] = T.if_then_else(j < N, X[bx * BM + i, j], T.cast(0, dt))
            for i, j in T.Parallel(BM, NP):
                wr[i, j] = T.if_then_else(j < N, W[j], T.cast(0, dt))
            for i, j in T.Parallel(BM, NP):
                sq[i, j] = T.cast(hr[i, j], f32) * T.cast(hr[i, j], f32)
            T.reduce_sum(sq, rs, dim=1)
            for i in T.Parallel(BM):
                rs[i] = T.rsqrt(rs[i] / T.float32(N) + eps)
            for i, j in T.Parallel(BM, NP):
                if j < N:
                    Y[bx * BM + i, j] = T.cast(
                        (T.cast(hr[i, j], f32) * rs[i]) * (T.float32(1) + T.cast(wr[i, j], f32)), dt)

    x_t = T.StridedTensor((M, N), (SX, 1), dt)
    r_t = T.StridedTensor((M, N), (SR, 1), dt)
    w_t = T.Tensor((N,), dt)
    y_t = T.Tensor((M, N), dt)
    if key.has_residual:

        @T.prim_func
        def zero_centred_rmsnorm(x: x_t, residual: r_t, weight: w_t, y: y_t, eps: T.float32):
            # The launcher passes only strides that are whole vectors (_row_views.readable).
            T.assume(SX % vec == 0)
            T.assume(SR % vec == 0)
            body(x, residual, weight, y, eps)

    else:

        @T.prim_func
        def zero_centred_rmsnorm(x: x_t, weight: w_t, y: y_t, eps: T.float32):
            T.assume(SX % vec == 0)
            body(x, None, weight, y, eps)

    return zero_centred_rmsnorm


def build_zero_centred_rmsnorm(key: ZeroCentredRMSNormBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x2d, [residual2d,] weight, y2d, eps)`` launches it (2-D row
    views, ``_row_views``; M positive). ValueError with the refusal reason."""
    return compile_once(("zero_centred_rmsnorm", key), zero_centred_rmsnorm_refusal(key), lambda: _program(key),
                        key.arch)
