"""Zero-centred RMSNorm as a TileLang kernel, optionally with the residual add fused.

``y = (h · rsqrt(mean(h², -1) + eps)) · (1 + w)`` in float32, rounded once (Qwen3NextRMSNorm's
order); ``h = x``, or with a residual ``h = round(x + r)``, written back into ``r``. x and r
are strided rows (any row stride that is a whole number of 16-byte vectors), so a chunk of a
projection is read in place. Specialised on dtype, hidden size and the residual; the number
of rows and the row strides are dynamic.

The block shape is part of the build key (the registered kernel takes it from
``block_shapes.BLOCK_SHAPES``; ``bench/layer_ops_sweep.py`` sweeps it):

* one pass (``passes=1``): a program's rows stay in registers (``_common.row_plan``), so x and
  r are read once and y and r written once, the bytes floor;
* two passes (``passes=2``): the first sums squares chunk by chunk (writing r where fused),
  the second reads the rows again (from L1/L2: a program's rows were just read) to write y.
  Few registers a thread, so more programs fit on an SM;
* a persistent grid (``programs=P``): P programs stride over the row groups; the weight is
  loaded once per program and, in one pass, a program's next rows are loaded before this
  group's reduction and stores, so its loads are always in flight.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import (ELEM_BYTES, Compiled, compile_once, dependent_launch, dependent_launch_refusal,
                      inverse_rms_macro, programs_at_registers, row_plan, row_refusal)

__all__ = ["ZeroCentredRMSNormBuildKey", "build_zero_centred_rmsnorm",
           "zero_centred_rmsnorm_refusal"]


@dataclass(frozen=True)
class ZeroCentredRMSNormBuildKey:
    """Build identity: element dtype (x, residual, weight and y share it), hidden size, residual,
    and the block shape (fields after ``arch``; see the module docstring)."""

    dtype: str
    hidden: int
    has_residual: bool = False
    arch: str = "sm_90"
    #: Threads per program and rows per program; 0 leaves the choice to ``row_plan`` (one
    #: pass) or to 256 threads and 1 row (two passes).
    threads: int = 0
    rows: int = 0
    passes: int = 1
    #: Programs of a persistent grid; 0 launches one program per row group.
    programs: int = 0
    #: The weight loaded with x (off the reduction's path); False reads it in the output loop
    #: (the kernel as first measured). A persistent grid always loads it once per program.
    early_weight: bool = True
    #: Registers per thread the launch bounds aim at (minimum programs an SM); 0 sets none.
    registers: int = 56
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: ZeroCentredRMSNormBuildKey) -> tuple[int, int, int] | None:
    """``(threads, padded row, rows per program)``. One pass: RMSNorm's layout, 16-bit rows aim
    at 32 values per thread, fp32 at 16. Two passes: a chunk is one 16-byte vector per thread
    (the padded row is a whole number of chunks)."""
    wide = ELEM_BYTES[key.dtype] == 2
    vec = _vec(key.dtype)
    if key.passes == 1:
        return row_plan(key.hidden, vec, 64 if wide else 48, 32 if wide else 16, key.threads, key.rows)
    threads, rows = key.threads or 256, key.rows or 1
    if threads not in (64, 128, 256, 512, 1024) or (threads * vec) % (rows * vec):
        return None
    chunk = threads * vec // rows
    return threads, -(-key.hidden // chunk) * chunk, rows


def zero_centred_rmsnorm_refusal(key: ZeroCentredRMSNormBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, "ZeroCentredRMSNorm TileLang kernel", key.arch,
                                      "drop dependent_launch")
    if reason is not None:
        return reason
    name = "ZeroCentredRMSNorm TileLang kernel"
    if key.passes not in (1, 2) or key.programs < 0 or key.registers < 0:
        return (f"{name}: passes={key.passes} must be 1 or 2, programs={key.programs} and "
                f"registers={key.registers} at least 0; use the block shapes table's values")
    return row_refusal(name, key.dtype, "hidden", key.hidden, key.arch, lambda: _plan(key),
                       "one pass: at most 48 fp32 / 64 16-bit values per thread, 1024 threads; two passes: "
                       "rows per program dividing threads x one vector")


def _program(key: ZeroCentredRMSNormBuildKey):
    import tilelang.language as T

    N, dt, f32, vec = key.hidden, key.dtype, "float32", _vec(key.dtype)
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, NP, BM = plan
    # Two passes walk the row in chunks of one vector per thread.
    CW = NP if key.passes == 1 else threads * vec // BM
    NC = NP // CW
    P, fused = key.programs, key.has_residual
    M = T.dynamic("M")
    SX = T.dynamic("SX")
    SR = T.dynamic("SR")

    def h_of(X, R, row, col):
        """h at (row, col) in its dtype: x, or round(x + r)."""
        if fused:
            return T.cast(T.cast(X[row, col], f32) + T.cast(R[row, col], f32), dt)
        return X[row, col]

    def h_again(X, R, row, col):
        """h read a second time: r as just written (the program's own stores, ordered before
        by the reduction's barrier), or x again."""
        return R[row, col] if fused else X[row, col]

    def chunks():
        """The two-pass chunk loop, unrolled where short so a pass's loads are all in flight."""
        return T.unroll(NC) if NC <= 16 else T.serial(NC)

    def w_at(W, wr, i, j):
        """The weight from its register copy, or read where it is used (``early_weight`` off)."""
        return W[j] if wr is None else wr[i, j]

    @T.macro
    def load_rows(X, R, hr, row0):
        # Columns past N (padding to whole vectors per thread) read as 0: no effect on the sum.
        for i, j in T.Parallel(BM, NP):
            hr[i, j] = T.if_then_else(j < N, h_of(X, R, row0 + i, j), T.cast(0, dt))

    @T.macro
    def load_weight(W, wr):
        for i, j in T.Parallel(BM, CW):
            wr[i, j] = T.if_then_else(j < N, W[j], T.cast(0, dt))

    inverse_rms = inverse_rms_macro(BM, CW, N)

    @T.macro
    def one_pass(X, R, W, Y, eps, hr, wr, sq, rs, row0):
        if fused:  # the rounded sum back into r
            for i, j in T.Parallel(BM, NP):
                if j < N:
                    R[row0 + i, j] = hr[i, j]
        inverse_rms(hr, sq, rs, eps)
        for i, j in T.Parallel(BM, NP):
            if j < N:
                Y[row0 + i, j] = T.cast(
                    (T.cast(hr[i, j], f32) * rs[i]) * (T.float32(1) + T.cast(w_at(W, wr, i, j), f32)), dt)

    @T.macro
    def two_pass(X, R, W, Y, eps, cr, sq, rs, row0):
        T.clear(sq)
        for c in chunks():
            for i, j in T.Parallel(BM, CW):
                cr[i, j] = T.if_then_else(c * CW + j < N, h_of(X, R, row0 + i, c * CW + j), T.cast(0, dt))
            if fused:
                for i, j in T.Parallel(BM, CW):
                    if c * CW + j < N:
                        R[row0 + i, c * CW + j] = cr[i, j]
            for i, j in T.Parallel(BM, CW):
                sq[i, j] += T.cast(cr[i, j], f32) * T.cast(cr[i, j], f32)
        T.reduce_sum(sq, rs, dim=1)
        for i in T.Parallel(BM):
            rs[i] = T.rsqrt(rs[i] / T.float32(N) + eps)
        for c in chunks():
            for i, j in T.Parallel(BM, CW):
                if c * CW + j < N:
                    Y[row0 + i, c * CW + j] = T.cast(
                        (T.cast(h_again(X, R, row0 + i, c * CW + j), f32) * rs[i])
                        * (T.float32(1) + T.cast(W[c * CW + j], f32)), dt)

    @T.macro
    def body(X, R, W, Y, eps):
        groups = T.ceildiv(M, BM)
        with T.Kernel(groups if P == 0 else T.min(groups, P), threads=threads) as bx:
            if key.registers:
                T.annotate_min_blocks_per_sm(programs_at_registers(threads, key.registers))
            dependent_launch(key.dependent_launch)
            # h stays in its own dtype (HF normalises the rounded sum); math is fp32.
            rs = T.alloc_fragment((BM,), f32)
            sq = T.alloc_fragment((BM, CW), f32)
            if key.passes == 2:
                cr = T.alloc_fragment((BM, CW), dt)
                if P == 0:
                    two_pass(X, R, W, Y, eps, cr, sq, rs, bx * BM)
                else:
                    for it in T.serial(T.ceildiv(groups - bx, P)):
                        two_pass(X, R, W, Y, eps, cr, sq, rs, (bx + it * P) * BM)
            elif P == 0:
                hr = T.alloc_fragment((BM, NP), dt)
                load_rows(X, R, hr, bx * BM)
                if key.early_weight:
                    wr = T.alloc_fragment((BM, NP), dt)  # (1 + w)'s w: off the reduction's path
                    load_weight(W, wr)
                    one_pass(X, R, W, Y, eps, hr, wr, sq, rs, bx * BM)
                else:
                    one_pass(X, R, W, Y, eps, hr, None, sq, rs, bx * BM)
            else:
                hr = T.alloc_fragment((BM, NP), dt)
                nx = T.alloc_fragment((BM, NP), dt)  # the next group's rows, in flight meanwhile
                wr = T.alloc_fragment((BM, NP), dt)
                load_weight(W, wr)
                load_rows(X, R, hr, bx * BM)
                for it in T.serial(T.ceildiv(groups - bx, P)):
                    if bx + (it + 1) * P < groups:
                        load_rows(X, R, nx, (bx + (it + 1) * P) * BM)
                    one_pass(X, R, W, Y, eps, hr, wr, sq, rs, (bx + it * P) * BM)
                    T.copy(nx, hr)

    x_t = T.StridedTensor((M, N), (SX, 1), dt)
    r_t = T.StridedTensor((M, N), (SR, 1), dt)
    w_t = T.Tensor((N,), dt)
    y_t = T.Tensor((M, N), dt)
    if fused:

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
