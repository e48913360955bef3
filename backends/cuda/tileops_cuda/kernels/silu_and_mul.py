"""SiluAndMul as a TileLang kernel: ``x [M, 2N] -> silu(x[:, :N]) * x[:, N:]`` (fp32 math).

Pure streaming: each element of ``x`` read once, each output written once, 16-byte
accesses. Specialised on dtype and N; M is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, compile_once, row_refusal

__all__ = ["SiluAndMulBuildKey", "build_silu_and_mul", "silu_and_mul_refusal"]

@dataclass(frozen=True)
class SiluAndMulBuildKey:
    """Build identity: dtype and the output width N (the input is ``[M, 2N]``)."""

    dtype: str
    width: int
    arch: str = "sm_90"


def _plan(key: SiluAndMulBuildKey) -> tuple[int, int, int]:
    """(threads, rows, cols) of one program's output tile: 4 vectors of 16 bytes per thread."""
    vec = 16 // ELEM_BYTES[key.dtype]
    threads = 128
    cols = 1
    while cols * 2 <= key.width and key.width % (cols * 2) == 0 and cols < threads * vec:
        cols *= 2
    rows = max(1, threads * vec * 4 // cols)
    return threads, rows, cols


def silu_and_mul_refusal(key: SiluAndMulBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    return row_refusal("SiluAndMul TileLang kernel", key.dtype, "N", key.width, key.arch)


def _program(key: SiluAndMulBuildKey):
    import tilelang.language as T

    N, dt, f32 = key.width, key.dtype, "float32"
    threads, BM, BN = _plan(key)
    M = T.dynamic("M")
    fast = dt != "float32"

    @T.prim_func
    def silu_and_mul_fwd(x: T.Tensor((M, 2 * N), dt), y: T.Tensor((M, N), dt)):
        # One grid axis, column tiles varying fastest: ceil(M / BM) row tiles may pass grid y's 65535.
        with T.Kernel(T.ceildiv(M, BM) * (N // BN), threads=threads) as b:
            bx, by = b % (N // BN), b // (N // BN)
            for i, j in T.Parallel(BM, BN):
                a = T.cast(x[by * BM + i, bx * BN + j], f32)
                b = T.cast(x[by * BM + i, N + bx * BN + j], f32)
                if fast:
                    # 16-bit outputs: the approximate exp / reciprocal (~2 ulp of fp32) are far
                    # below the output rounding and keep the kernel memory-bound.
                    y[by * BM + i, bx * BN + j] = T.cast(a * T.fast_rcp(T.float32(1) + T.__exp(-a)) * b, dt)
                else:
                    y[by * BM + i, bx * BN + j] = T.cast(a / (T.float32(1) + T.exp(-a)) * b, dt)

    return silu_and_mul_fwd


def build_silu_and_mul(key: SiluAndMulBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x2d, y2d)`` launches it (x2d ``[M, 2N]``, y2d ``[M, N]``,
    contiguous, M positive). ValueError with the refusal reason."""
    return compile_once(("silu_and_mul", key), silu_and_mul_refusal(key), lambda: _program(key), key.arch)
