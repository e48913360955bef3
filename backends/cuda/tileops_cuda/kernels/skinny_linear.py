"""``input @ weight.T`` for a few input rows (a decode step's linear layers) as a TileLang kernel.

Why a second program beside the wgmma GEMM (:mod:`.gemm`): at a decode step the input has one to
a few rows, so a linear layer is a read of its weight and nothing else (2 bytes an element, two
flops). The GEMM's 128 x 256 tile gives such a call ``N / 256`` programs: 8 for Qwen3.5's
2048-wide output projection, 48 for its 12288-wide input projection, on 132 SMs, each streaming
megabytes of weight through one pipeline. Here a warp owns one output feature and reads its
weight row once, 16 bytes a lane, ``SkinnyLinearTiling.unroll`` vectors a lane in flight; the
input's rows sit in shared memory (loaded once a program) and every row is a float32 dot product,
reduced across the warp. ``N / WARPS`` programs (256 for N = 2048), so every SM streams weight.

Layout: ``weight`` is ``[N, K]`` (``F.linear``'s), ``input`` ``[M, K]``, ``out`` ``[M, N]``, all
contiguous; ``K`` a multiple of 8 (16-byte rows, the GEMM's refusal). The program holds up to
``rows_for(key)`` input rows (4, fewer where ``K`` is long: the rows' shared memory stays under
``_SHARED_BYTES``); the launcher sends calls with more rows to the GEMM (:mod:`.linear`).
Why 4 (H200, ``bench/linear_decode_bench.py``, backends/cuda/NOTES.md, the decode step's seven
weight shapes): at one row this program reads the weight at 80-97% of the same-size copy,
1.07-1.61x ``F.linear`` and 1.5-5.2x the GEMM; at 4 rows it still beats the GEMM on every shape
(1.23-4.28x); a program of 8 rows lost to it at 8 on the widest (0.72x at N = 12288): its
instructions grow with the rows (a conversion and an FMA an element and row), the GEMM's do not.
(Rows staged in float32 instead, to save the conversions, were slower: the 32-byte shared loads a
lane conflict.)
M is dynamic; nothing is compiled per M. Float32 accumulation, one rounding to the output dtype;
the sum's order differs from the GEMM's (the tests bound both against float64).

tilelang is imported inside the builder, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, Compiled, compile_once, dependent_launch
from .gemm import GemmBuildKey, gemm_refusal

__all__ = ["SkinnyLinearTiling", "build_skinny_linear", "rows_for", "skinny_linear_refusal", "staged_row_dot",
           "stage_rows_macro", "weight_chunks"]

#: Shared memory a program gives the input rows (bytes): 64 KiB keeps three programs an SM.
_SHARED_BYTES = 64 * 1024
#: Input rows a program holds at most (the module docstring's "Why 4").
_MAX_ROWS = 4


@dataclass(frozen=True)
class SkinnyLinearTiling:
    """Warps a program (one output feature each) and the 16-byte weight vectors a lane loads
    before it computes on them."""

    warps: int = 8
    unroll: int = 8
    #: Issue the first weight chunk's loads before the rows are staged, so that the two reads'
    #: latencies overlap (a program's only chunk at K <= 2048 in bf16) instead of following one
    #: another across the staging barrier. Same sums in the same order: bit for bit the same
    #: results. Off: in CUDA graphs on the H200 (2026-12-04e, ``linear_decode_bench.py --graph``) it
    #: was ahead on 11 of 14 rows by up to 0.6 µs and behind on the rest.
    weights_first: bool = False
    #: Launched as a programmatic dependent of the stream's previous kernel
    #: (``_common.dependent_launch``): its launch and block scheduling overlap that kernel's tail, every
    #: memory access still after it, the same bits. A decode step launches this program two dozen times
    #: back to back with short kernels between. The linear sets it from its key's field
    #: (``GemmBuildKey.dependent_launch``).
    dependent_launch: bool = False


def rows_for(key: GemmBuildKey) -> int:
    """Input rows one program holds for ``key`` (0: none fit); calls with more go to the GEMM."""
    return min(_MAX_ROWS, _SHARED_BYTES // (key.k * ELEM_BYTES[key.dtype]))


def skinny_linear_refusal(key: GemmBuildKey) -> str | None:
    """Why this program cannot serve ``key`` (with the fix), or None."""
    reason = gemm_refusal(key)
    if reason is not None:
        return reason.replace("GEMM TileLang kernel", "Skinny linear TileLang kernel")
    if key.trans_a or not key.trans_b or key.batched:
        return ("Skinny linear TileLang kernel: only F.linear's layout (input [M, K], weight [N, K], no batch); "
                "use the GEMM")
    if rows_for(key) < 1:
        return f"Skinny linear TileLang kernel: K={key.k} leaves no input row in shared memory; use the GEMM"
    return None


def stage_rows_macro(rows: int, k: int, dtype: str, threads: int) -> Any:
    """The TileLang macro that copies rows ``[r0, min(r0 + rows, end))`` of a ``[*, k]`` tensor into
    the program's ``[rows, k]`` shared buffer, a 16-byte vector a thread a round (rows from ``end``
    on are left unwritten: every reader skips them), then the block's barrier (each warp reads
    every row, staged by all threads)."""
    import tilelang.language as T

    VEC = 16 // ELEM_BYTES[dtype]
    KV = k // VEC
    STAGE = -(-rows * KV // threads)

    @T.macro
    def stage_rows(src, dst, r0, end, tid):
        for r in T.unroll(STAGE):
            i = r * threads + tid
            m = i // KV
            if m < rows and r0 + m < end:
                for e in T.vectorized(VEC):
                    dst[m, (i % KV) * VEC + e] = src[r0 + m, (i % KV) * VEC + e]
        T.sync_threads()

    return stage_rows


def weight_chunks(rows: int, k: int, dtype: str, unroll: int) -> tuple[int, int, Any, Any]:
    """``(chunks, vectors a chunk, load_chunk, dot_chunk)``: the TileLang macros of a warp's dot
    products of one weight row with the staged rows, a chunk at a time. Lane ``l`` takes the row's
    16-byte vectors ``l, l + 32, ...``; ``load_chunk(w, row, wv, lane, c)`` loads chunk ``c``'s
    vectors into ``wv`` (zeros past the row's end), all before any is used;
    ``dot_chunk(x_s, acc, wv, av, lane, c, r0, end)`` adds ``Σ float(w[row, j]) · float(x_s[m, j])``
    over them to ``acc[m]`` for the staged rows ``m`` with ``r0 + m < end``. The warp's sum of
    ``acc`` is each row's dot product. A program that reads two weights loads both chunks before
    it computes on either (twice the bytes in flight)."""
    import tilelang.language as T

    f32 = "float32"
    VEC = 16 // ELEM_BYTES[dtype]
    KV = k // VEC
    PER = -(-KV // 32)
    U = min(unroll, PER)
    NCH = -(-PER // U)

    @T.macro
    def load_chunk(w, row, wv, lane, c):
        for u in T.unroll(U):
            if (c * U + u) * 32 + lane < KV:
                for e in T.vectorized(VEC):
                    wv[u * VEC + e] = w[row, ((c * U + u) * 32 + lane) * VEC + e]
            else:
                for e in T.vectorized(VEC):
                    wv[u * VEC + e] = T.cast(0, dtype)

    @T.macro
    def dot_chunk(x_s, acc, wv, av, lane, c, r0, end):
        for m in T.unroll(rows):
            if r0 + m < end:
                for u in T.unroll(U):
                    for e in T.vectorized(VEC):
                        av[e] = x_s[m, T.min((c * U + u) * 32 + lane, KV - 1) * VEC + e]
                    for e in T.unroll(VEC):
                        acc[m] = acc[m] + T.cast(wv[u * VEC + e], f32) * T.cast(av[e], f32)

    return NCH, U, load_chunk, dot_chunk


def staged_row_dot(rows: int, k: int, dtype: str, unroll: int, threads: int) -> Any:
    """The TileLang macro ``row_dot(w, row, src, x_s, acc, r0, end, tid, weights_first)`` of a warp:
    rows ``[r0, min(r0 + rows, end))`` of ``src`` staged into the shared ``x_s`` by the whole
    program (:func:`stage_rows_macro`), then ``acc[m]`` the dot product of weight row ``row`` with
    staged row ``m``, reduced across the warp (every lane holds it), a chunk at a time
    (:func:`weight_chunks`). With ``weights_first`` the first chunk's loads are issued before the
    staging, so the two reads' latencies overlap; the sums and their order are the same. Given
    ``w_alt`` (a warp-uniform ``alt``), the warps where ``alt`` holds read row ``row_alt`` of ``w_alt``
    instead (the MoE experts' gate/up split: gate rows to half the warps, up rows to the others)."""
    import tilelang.language as T

    VEC = 16 // ELEM_BYTES[dtype]
    stage = stage_rows_macro(rows, k, dtype, threads)
    NCH, U, load_chunk, dot_chunk = weight_chunks(rows, k, dtype, unroll)

    @T.macro
    def load(w, row, w_alt, row_alt, alt, wv, lane, c):
        if w_alt is None:
            load_chunk(w, row, wv, lane, c)
        elif alt:
            load_chunk(w_alt, row_alt, wv, lane, c)
        else:
            load_chunk(w, row, wv, lane, c)

    @T.macro
    def row_dot(w, row, src, x_s, acc, r0, end, tid, weights_first: bool, w_alt=None, row_alt=None, alt=False):
        lane = tid % 32
        wv = T.alloc_local((U * VEC,), dtype)
        av = T.alloc_local((VEC,), dtype)
        if weights_first:
            load(w, row, w_alt, row_alt, alt, wv, lane, 0)
        stage(src, x_s, r0, end, tid)
        for m in T.unroll(rows):
            acc[m] = T.float32(0)
        for c in T.serial(NCH):
            if not weights_first or c > 0:
                load(w, row, w_alt, row_alt, alt, wv, lane, c)
            dot_chunk(x_s, acc, wv, av, lane, c, r0, end)
        for m in T.unroll(rows):
            acc[m] = T.warp_reduce_sum(acc[m])

    return row_dot


def _program(key: GemmBuildKey, tiling: SkinnyLinearTiling):
    import tilelang.language as T

    N, K, dt, f32 = key.n, key.k, key.dtype, "float32"
    MR = rows_for(key)
    W = tiling.warps
    TH = 32 * W
    M = T.dynamic("M")
    row_dot = staged_row_dot(MR, K, dt, tiling.unroll, TH)

    @T.prim_func
    def skinny_linear(A: T.Tensor((M, K), dt), B: T.Tensor((N, K), dt), C: T.Tensor((M, N), dt)):
        with T.Kernel(T.ceildiv(N, W), T.ceildiv(M, MR), threads=TH) as (bx, by):
            dependent_launch(tiling.dependent_launch)
            tid = T.get_thread_binding()
            w = tid // 32
            lane = tid % 32
            n = bx * W + w
            row = T.min(n, N - 1)  # a warp past N reads a real row and stores nothing
            a_s = T.alloc_shared((MR, K), dt)
            acc = T.alloc_local((MR,), f32)
            # The input rows this program holds (rows past M are never read: skipped below).
            row_dot(B, row, A, a_s, acc, by * MR, M, tid, tiling.weights_first)
            if lane == 0 and n < N:
                for m in T.unroll(MR):
                    if by * MR + m < M:
                        C[by * MR + m, n] = T.cast(acc[m], dt)

    return skinny_linear


def build_skinny_linear(key: GemmBuildKey, tiling: SkinnyLinearTiling | None = None) -> Compiled:
    """Compile once per process; ``.fn(input, weight, out)`` launches it (contiguous, at most
    ``rows_for(key)`` input rows, none empty). ValueError with the refusal reason."""
    tiling = tiling or SkinnyLinearTiling()
    return compile_once(("skinny-linear", key, tiling), skinny_linear_refusal(key), lambda: _program(key, tiling),
                        key.arch)

