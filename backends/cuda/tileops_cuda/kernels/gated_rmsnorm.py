"""Gated RMSNorm (norm before gate) as a TileLang kernel: one pass over x and the gate.

Per row of D (one head): ``n = round(x · rsqrt(mean(x², -1) + eps))``, ``p = round(w · n)``,
``y = round(p · silu(gate))``: Qwen3NextRMSNormGated's three roundings to the input dtype
(all exact no-ops in float32), math in float32. Rows stay in registers (``row_plan``), so x
and the gate are read once and y written once. x and the gate are ``[outer, heads, D]``
strided views (``_row_views.head_view``): a gate sliced out of the fused qkvz projection is
read in place. A program holds BM heads of one outer row (grid: outer rows x head blocks).
Specialised on dtype and D; the row counts and strides are dynamic. A 2-D ``[M, D]`` input is
one outer row of M heads, so M is bounded by 65535 head blocks (over a million rows at D=128).
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, compile_once, row_plan, row_refusal

__all__ = ["GatedRMSNormBuildKey", "build_gated_rmsnorm", "gated_rmsnorm_refusal"]

@dataclass(frozen=True)
class GatedRMSNormBuildKey:
    """Build identity: element dtype (x, gate, weight and y share it) and the head size D."""

    dtype: str
    width: int
    arch: str = "sm_90"
    #: Threads per program and heads per program; 0 leaves the choice to ``row_plan`` (sweep
    #: parameters, ``bench/layer_ops_sweep.py``).
    threads: int = 0
    rows: int = 0


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: GatedRMSNormBuildKey) -> tuple[int, int, int] | None:
    """Two register rows per value (x, gate): 16-bit rows aim at 16 values per thread, fp32 at 8."""
    wide = ELEM_BYTES[key.dtype] == 2
    return row_plan(key.width, _vec(key.dtype), 32 if wide else 24, 16 if wide else 8, key.threads, key.rows)


def gated_rmsnorm_refusal(key: GatedRMSNormBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    return row_refusal("GatedRMSNorm TileLang kernel", key.dtype, "D", key.width, key.arch, lambda: _plan(key),
                       "at most 24 fp32 / 32 16-bit values of each input per thread, 1024 threads")


def _program(key: GatedRMSNormBuildKey):
    import tilelang.language as T

    D, dt, f32, vec = key.width, key.dtype, "float32", _vec(key.dtype)
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, DP, BM = plan
    A = T.dynamic("A")  # outer rows (tokens)
    H = T.dynamic("H")  # heads per outer row
    SXA, SXH = T.dynamic("SXA"), T.dynamic("SXH")
    SGA, SGH = T.dynamic("SGA"), T.dynamic("SGH")

    @T.prim_func
    def gated_rmsnorm(x: T.StridedTensor((A, H, D), (SXA, SXH, 1), dt),
                      gate: T.StridedTensor((A, H, D), (SGA, SGH, 1), dt),
                      weight: T.Tensor((D,), dt), y: T.Tensor((A, H, D), dt), eps: T.float32):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SXA % vec == 0)
        T.assume(SXH % vec == 0)
        T.assume(SGA % vec == 0)
        T.assume(SGH % vec == 0)
        # One program: BM heads (by) of one outer row (bx), so no row index is ever divided;
        # the outer rows run along grid x, which holds 2^31 - 1 of them (grid y holds 65535).
        with T.Kernel(A, T.ceildiv(H, BM), threads=threads) as (bx, by):
            T.annotate_min_blocks_per_sm(max(1, 65536 // (threads * 64)))
            xr = T.alloc_fragment((BM, DP), dt)
            gr = T.alloc_fragment((BM, DP), dt)
            wr = T.alloc_fragment((BM, DP), dt)  # the weight, loaded with x: off the reduction's path
            sq = T.alloc_fragment((BM, DP), f32)
            rs = T.alloc_fragment((BM,), f32)
            # Columns past D (padding to whole vectors per thread) read as 0: no effect on the
            # sum, never stored. Heads past H (the last program of a row) index past the head
            # axis, which TileLang's safe-access pass guards (as in RMSNorm's last partial block).
            for i, j in T.Parallel(BM, DP):
                xr[i, j] = T.if_then_else(j < D, x[bx, by * BM + i, j], T.cast(0, dt))
                gr[i, j] = T.if_then_else(j < D, gate[bx, by * BM + i, j], T.cast(0, dt))
            for i, j in T.Parallel(BM, DP):
                wr[i, j] = T.if_then_else(j < D, weight[j], T.cast(0, dt))
            for i, j in T.Parallel(BM, DP):
                sq[i, j] = T.cast(xr[i, j], f32) * T.cast(xr[i, j], f32)
            T.reduce_sum(sq, rs, dim=1)
            for i in T.Parallel(BM):
                rs[i] = T.rsqrt(rs[i] / T.float32(D) + eps)
            for i, j in T.Parallel(BM, DP):
                if j < D:
                    normed = T.cast(T.cast(xr[i, j], f32) * rs[i], dt)
                    weighted = T.cast(T.cast(wr[i, j], f32) * T.cast(normed, f32), dt)
                    z = T.cast(gr[i, j], f32)
                    y[bx, by * BM + i, j] = T.cast(T.cast(weighted, f32) * (z / (T.float32(1) + T.exp(-z))), dt)

    return gated_rmsnorm


def build_gated_rmsnorm(key: GatedRMSNormBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x3d, gate3d, weight, y3d, eps)`` launches it (``[outer,
    heads, D]`` views, not empty). ValueError with the refusal reason."""
    return compile_once(("gated_rmsnorm", key), gated_rmsnorm_refusal(key), lambda: _program(key), key.arch)
