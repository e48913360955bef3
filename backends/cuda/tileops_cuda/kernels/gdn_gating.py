"""GDN gating as a TileLang kernel: ``g = -exp(A_log) · softplus(a + dt_bias)`` (float32) and
``beta = sigmoid(b)`` (b's dtype), per token and value head.

Pure streaming over ``[M, NV]`` tiles: a and b read once (strided rows, so slices of the
fused ba projection are read in place), g and beta written once; A_log and dt_bias are a
few hundred bytes that stay in L1. softplus is torch's (beta 1, threshold 20: ``x`` above
20, ``log1p(exp(x))`` below). Specialised on NV and the four dtypes; M and the row strides
are dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, arch_refusal, compile_once

__all__ = ["GDNGatingBuildKey", "build_gdn_gating", "gdn_gating_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
#: Elements of one program's tile: 128 threads x 8 values (one 16-byte bf16 vector each) x 4.
_TILE_ELEMS = 4096
_THREADS = 128


@dataclass(frozen=True)
class GDNGatingBuildKey:
    """Build identity: the projections' dtype (a and b share it), A_log's and dt_bias's, and NV."""

    dtype: str
    a_log_dtype: str
    dt_bias_dtype: str
    heads: int
    arch: str = "sm_90"


def _rows_per_program(key: GDNGatingBuildKey) -> int:
    return max(1, _TILE_ELEMS // key.heads)


def gdn_gating_refusal(key: GDNGatingBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    name = "GDNGating TileLang kernel"
    for what, dtype in (("a/b", key.dtype), ("A_log", key.a_log_dtype), ("dt_bias", key.dt_bias_dtype)):
        if dtype not in _DTYPES:
            return f"{name}: {what} dtype {dtype} is not one of {_DTYPES}; use the reference"
    vec = 16 // ELEM_BYTES[key.dtype]
    if key.heads % vec:
        return f"{name}: NV={key.heads} must be a multiple of {vec} (16-byte vectors of a and b); use the reference"
    if key.heads > _TILE_ELEMS:
        return f"{name}: NV={key.heads} is more than one program's {_TILE_ELEMS} elements; use the reference"
    return arch_refusal(name, key.arch)


def _program(key: GDNGatingBuildKey):
    import tilelang.language as T

    NV, dt, f32 = key.heads, key.dtype, "float32"
    vec = 16 // ELEM_BYTES[dt]
    BM = _rows_per_program(key)
    M = T.dynamic("M")
    SA, SB = T.dynamic("SA"), T.dynamic("SB")

    @T.prim_func
    def gdn_gating(a: T.StridedTensor((M, NV), (SA, 1), dt), b: T.StridedTensor((M, NV), (SB, 1), dt),
                   A_log: T.Tensor((NV,), key.a_log_dtype), dt_bias: T.Tensor((NV,), key.dt_bias_dtype),
                   g: T.Tensor((M, NV), f32), beta: T.Tensor((M, NV), dt)):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SA % vec == 0)
        T.assume(SB % vec == 0)
        with T.Kernel(T.ceildiv(M, BM), threads=_THREADS) as bx:
            # Rows past M (the last program's tile) are guarded by TileLang's safe-access pass.
            for i, j in T.Parallel(BM, NV):
                x = T.cast(a[bx * BM + i, j], f32) + T.cast(dt_bias[j], f32)
                softplus = T.if_then_else(x > T.float32(20), x, T.log1p(T.exp(x)))
                g[bx * BM + i, j] = -T.exp(T.cast(A_log[j], f32)) * softplus
                s = T.cast(b[bx * BM + i, j], f32)
                beta[bx * BM + i, j] = T.cast(T.float32(1) / (T.float32(1) + T.exp(-s)), dt)

    return gdn_gating


def build_gdn_gating(key: GDNGatingBuildKey) -> Compiled:
    """Compile once per process; ``.fn(a2d, b2d, A_log, dt_bias, g2d, beta2d)`` launches it (2-D
    row views, M positive). ValueError with the refusal reason."""
    return compile_once(("gdn_gating", key), gdn_gating_refusal(key), lambda: _program(key), key.arch)
