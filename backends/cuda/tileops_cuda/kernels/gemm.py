"""GEMM (and bmm / linear) for fp16/bf16 as a TileLang kernel on Hopper tensor cores.

``C = op(A) @ op(B)`` with fp32 accumulation and C in the input dtype; ``op`` transposes
when ``trans_a`` / ``trans_b`` is set (A stored ``[K, M]``, B stored ``[N, K]`` — the
latter is ``F.linear``'s weight layout). Multi-stage shared-memory pipeline feeding
``T.gemm`` (wgmma on sm_90), C staged through shared memory for wide stores, block
rasterisation for L2 reuse. Specialised on dtype, flags, N and K; M (and the batch) are
dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass, replace

from ._common import Compiled, arch_refusal, compile_once

__all__ = ["GemmBuildKey", "GemmTiling", "build_gemm", "gemm_refusal", "default_gemm_tiling"]

_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class GemmBuildKey:
    """Build identity. ``batched`` adds a leading dynamic batch dim to A, B and C."""

    dtype: str
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    batched: bool = False
    arch: str = "sm_90"
    #: The linear's skinny program (:mod:`.skinny_linear`) launches as a programmatic dependent
    #: (``_common.dependent_launch``). The GEMM's own warp-specialised programs launch plainly:
    #: :func:`build_gemm` compiles them from the key without it.
    dependent_launch: bool = False


@dataclass(frozen=True)
class GemmTiling:
    """Program tile and pipeline depth."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    stages: int = 3
    threads: int = 256
    swizzle_panel: int = 10


def default_gemm_tiling(key: GemmBuildKey) -> GemmTiling:
    """128x256x64, 3 stages, two consumer warpgroups: the usual Hopper bf16 tile."""
    return GemmTiling()


def gemm_refusal(key: GemmBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"GEMM TileLang kernel: dtype {key.dtype} is not one of {_DTYPES}; use torch.matmul"
    if key.n % 8 or key.k % 8:
        return (
            f"GEMM TileLang kernel: N={key.n} and K={key.k} must be multiples of 8 (16-byte rows for "
            "the bulk copies); use torch.matmul"
        )
    return arch_refusal("GEMM TileLang kernel", key.arch, ("sm_90", "sm_90a"))


def _program(key: GemmBuildKey, tiling: GemmTiling):
    import tilelang.language as T

    N, K, dt, f32 = key.n, key.k, key.dtype, "float32"
    BM, BN, BK = tiling.block_m, tiling.block_n, tiling.block_k
    M, NB = T.dynamic("M"), T.dynamic("NB")
    ta, tb = key.trans_a, key.trans_b
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    a_tile = (BK, BM) if ta else (BM, BK)
    b_tile = (BN, BK) if tb else (BK, BN)

    @T.macro
    def tile(A, B, C, bx, by, bz):
        A_s = T.alloc_shared(a_tile, dt)
        B_s = T.alloc_shared(b_tile, dt)
        C_l = T.alloc_fragment((BM, BN), f32)
        C_s = T.alloc_shared((BM, BN), dt)
        T.use_swizzle(panel_size=tiling.swizzle_panel)
        T.clear(C_l)
        for kk in T.Pipelined(T.ceildiv(K, BK), num_stages=tiling.stages):
            # Explicit slices so one body serves 2-D and batched 3-D operands.
            if ta:
                if key.batched:
                    T.copy(A[bz, kk * BK : (kk + 1) * BK, by * BM : (by + 1) * BM], A_s)
                else:
                    T.copy(A[kk * BK : (kk + 1) * BK, by * BM : (by + 1) * BM], A_s)
            else:
                if key.batched:
                    T.copy(A[bz, by * BM : (by + 1) * BM, kk * BK : (kk + 1) * BK], A_s)
                else:
                    T.copy(A[by * BM : (by + 1) * BM, kk * BK : (kk + 1) * BK], A_s)
            if tb:
                if key.batched:
                    T.copy(B[bz, bx * BN : (bx + 1) * BN, kk * BK : (kk + 1) * BK], B_s)
                else:
                    T.copy(B[bx * BN : (bx + 1) * BN, kk * BK : (kk + 1) * BK], B_s)
            else:
                if key.batched:
                    T.copy(B[bz, kk * BK : (kk + 1) * BK, bx * BN : (bx + 1) * BN], B_s)
                else:
                    T.copy(B[kk * BK : (kk + 1) * BK, bx * BN : (bx + 1) * BN], B_s)
            T.gemm(A_s, B_s, C_l, transpose_A=ta, transpose_B=tb)
        T.copy(C_l, C_s)
        if key.batched:
            T.copy(C_s, C[bz, by * BM : (by + 1) * BM, bx * BN : (bx + 1) * BN])
        else:
            T.copy(C_s, C[by * BM : (by + 1) * BM, bx * BN : (bx + 1) * BN])

    if key.batched:

        @T.prim_func
        def gemm_fwd(A: T.Tensor((NB, *a_shape), dt), B: T.Tensor((NB, *b_shape), dt), C: T.Tensor((NB, M, N), dt)):
            with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), NB, threads=tiling.threads) as (bx, by, bz):
                tile(A, B, C, bx, by, bz)

    else:

        @T.prim_func
        def gemm_fwd(A: T.Tensor(a_shape, dt), B: T.Tensor(b_shape, dt), C: T.Tensor((M, N), dt)):
            with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=tiling.threads) as (bx, by):
                tile(A, B, C, bx, by, 0)

    return gemm_fwd


def build_gemm(key: GemmBuildKey, tiling: GemmTiling | None = None) -> Compiled:
    """Compile once per process; ``.fn(a, b, c)`` launches it (contiguous, laid out as the key
    says, c non-empty). ValueError with the refusal reason."""
    tiling = tiling or default_gemm_tiling(key)
    key = replace(key, dependent_launch=False)  # the GEMM's programs launch plainly (GemmBuildKey)
    # Warp specialisation (setmaxnreg) and wgmma need the arch-specific sm_90a target.
    target = "sm_90a" if key.arch in ("sm_90", "sm_90a") else key.arch
    return compile_once(("gemm", key, tiling), gemm_refusal(key), lambda: _program(key, tiling), target)
