"""Gated RMSNorm (norm before gate) as a TileLang kernel: one pass over x and the gate.

Per row of D (one head): ``n = round(x · rsqrt(mean(x², -1) + eps))``, ``p = round(w · n)``,
``y = round(p · silu(gate))``: Qwen3NextRMSNormGated's three roundings to the input dtype
(all exact no-ops in float32), math in float32. Rows stay in registers (``row_plan``), so x
and the gate are read once and y written once. x and the gate are ``[outer, heads, D]``
strided views (``_row_views.head_view``): a gate sliced out of the fused qkvz projection is
read in place. A program holds BM heads of one outer row (grid: outer rows x head blocks).
Specialised on dtype and D; the row counts and strides are dynamic. A 2-D ``[M, D]`` input is
one outer row of M heads, so M is bounded by 65535 head blocks (over a million rows at D=128).

The block shape is part of the build key (the registered kernel takes it from
``block_shapes.BLOCK_SHAPES``; ``bench/layer_ops_sweep.py`` sweeps it): threads and heads per
program, the weight loaded with x or where it is used, the registers the launch bounds aim at,
an approximate SiLU, and a persistent grid (``programs=P``: P programs stride over the (outer row, head block)
pairs, loading the weight once and each next pair's x and gate before this pair's reduction).
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import (ELEM_BYTES, Compiled, compile_once, dependent_launch, dependent_launch_refusal,
                      inverse_rms_macro, programs_at_registers, row_plan, row_refusal)

__all__ = ["GatedRMSNormBuildKey", "build_gated_rmsnorm", "gated_rmsnorm_refusal"]

@dataclass(frozen=True)
class GatedRMSNormBuildKey:
    """Build identity: element dtype (x, gate, weight and y share it) and the head size D."""

    dtype: str
    width: int
    arch: str = "sm_90"
    #: Threads per program and heads per program; 0 leaves the choice to ``row_plan``.
    threads: int = 0
    rows: int = 0
    #: Programs of a persistent grid; 0 launches one program per (outer row, head block).
    programs: int = 0
    #: The weight loaded with x (off the reduction's path); False reads it where it is used
    #: (the kernel as first measured). A persistent grid always loads it once per program.
    early_weight: bool = True
    #: Registers per thread the launch bounds aim at (minimum programs an SM); 0 sets none.
    registers: int = 64
    #: SiLU with the approximate exp and reciprocal (~1e-6 relative, within every dtype's
    #: tolerance) instead of IEEE expf and division: the output loop's math is ~40 instructions
    #: an element, near the memory time at 4k x 32 x 128.
    fast_silu: bool = False
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: GatedRMSNormBuildKey) -> tuple[int, int, int] | None:
    """Two register rows per value (x, gate): 16-bit rows aim at 16 values per thread, fp32 at 8."""
    wide = ELEM_BYTES[key.dtype] == 2
    return row_plan(key.width, _vec(key.dtype), 32 if wide else 24, 16 if wide else 8, key.threads, key.rows)


def gated_rmsnorm_refusal(key: GatedRMSNormBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, "GatedRMSNorm TileLang kernel", key.arch,
                                      "drop dependent_launch")
    if reason is not None:
        return reason
    if key.programs < 0 or key.registers < 0:
        return (f"GatedRMSNorm TileLang kernel: programs={key.programs} and registers={key.registers} must be at "
                f"least 0; use the block shapes table's values")
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

    P = key.programs
    inverse_rms = inverse_rms_macro(BM, DP, D)

    @T.macro
    def load_heads(x, gate, xr, gr, a, h0):
        # Columns past D (padding to whole vectors per thread) read as 0: no effect on the sum,
        # never stored. Heads past H (the last program of a row) index past the head axis,
        # which TileLang's safe-access pass guards (as in RMSNorm's last partial block).
        for i, j in T.Parallel(BM, DP):
            xr[i, j] = T.if_then_else(j < D, x[a, h0 + i, j], T.cast(0, dt))
            gr[i, j] = T.if_then_else(j < D, gate[a, h0 + i, j], T.cast(0, dt))

    @T.macro
    def load_weight(weight, wr):
        for i, j in T.Parallel(BM, DP):
            wr[i, j] = T.if_then_else(j < D, weight[j], T.cast(0, dt))

    def silu(z):
        if key.fast_silu:
            return z * T.fast_rcp(T.float32(1) + T.__exp(-z))
        return z / (T.float32(1) + T.exp(-z))

    def w_at(weight, wr, i, j):
        """The weight from its register copy, or read where it is used (``early_weight`` off)."""
        return weight[j] if wr is None else wr[i, j]

    @T.macro
    def normalise(weight, y, eps, xr, gr, wr, sq, rs, a, h0):
        inverse_rms(xr, sq, rs, eps)
        for i, j in T.Parallel(BM, DP):
            if j < D:
                normed = T.cast(T.cast(xr[i, j], f32) * rs[i], dt)
                weighted = T.cast(T.cast(w_at(weight, wr, i, j), f32) * T.cast(normed, f32), dt)
                z = T.cast(gr[i, j], f32)
                y[a, h0 + i, j] = T.cast(T.cast(weighted, f32) * silu(z), dt)

    @T.prim_func
    def gated_rmsnorm(x: T.StridedTensor((A, H, D), (SXA, SXH, 1), dt),
                      gate: T.StridedTensor((A, H, D), (SGA, SGH, 1), dt),
                      weight: T.Tensor((D,), dt), y: T.Tensor((A, H, D), dt), eps: T.float32):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SXA % vec == 0)
        T.assume(SXH % vec == 0)
        T.assume(SGA % vec == 0)
        T.assume(SGH % vec == 0)
        if P == 0:
            # One program: BM heads (by) of one outer row (bx), so no row index is ever divided;
            # the outer rows run along grid x, which holds 2^31 - 1 of them (grid y holds 65535).
            with T.Kernel(A, T.ceildiv(H, BM), threads=threads) as (bx, by):
                if key.registers:
                    T.annotate_min_blocks_per_sm(programs_at_registers(threads, key.registers))
                dependent_launch(key.dependent_launch)
                xr = T.alloc_fragment((BM, DP), dt)
                gr = T.alloc_fragment((BM, DP), dt)
                sq = T.alloc_fragment((BM, DP), f32)
                rs = T.alloc_fragment((BM,), f32)
                load_heads(x, gate, xr, gr, bx, by * BM)
                if key.early_weight:
                    wr = T.alloc_fragment((BM, DP), dt)  # loaded with x: off the reduction's path
                    load_weight(weight, wr)
                    normalise(weight, y, eps, xr, gr, wr, sq, rs, bx, by * BM)
                else:
                    normalise(weight, y, eps, xr, gr, None, sq, rs, bx, by * BM)
        else:
            HB = T.ceildiv(H, BM)
            with T.Kernel(T.min(A * HB, P), threads=threads) as bx:
                if key.registers:
                    T.annotate_min_blocks_per_sm(programs_at_registers(threads, key.registers))
                dependent_launch(key.dependent_launch)
                xr = T.alloc_fragment((BM, DP), dt)
                gr = T.alloc_fragment((BM, DP), dt)
                xn = T.alloc_fragment((BM, DP), dt)  # the next pair's heads, in flight meanwhile
                gn = T.alloc_fragment((BM, DP), dt)
                wr = T.alloc_fragment((BM, DP), dt)
                sq = T.alloc_fragment((BM, DP), f32)
                rs = T.alloc_fragment((BM,), f32)
                load_weight(weight, wr)
                load_heads(x, gate, xr, gr, bx // HB, bx % HB * BM)
                for it in T.serial(T.ceildiv(A * HB - bx, P)):
                    q = bx + it * P
                    if q + P < A * HB:
                        load_heads(x, gate, xn, gn, (q + P) // HB, (q + P) % HB * BM)
                    normalise(weight, y, eps, xr, gr, wr, sq, rs, q // HB, q % HB * BM)
                    T.copy(xn, xr)
                    T.copy(gn, gr)

    return gated_rmsnorm


def build_gated_rmsnorm(key: GatedRMSNormBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x3d, gate3d, weight, y3d, eps)`` launches it (``[outer,
    heads, D]`` views, not empty). ValueError with the refusal reason."""
    return compile_once(("gated_rmsnorm", key), gated_rmsnorm_refusal(key), lambda: _program(key), key.arch)
