"""The RGDR decode step with the state block staged in shared memory: one PrimFunc per build
key and staged tiling.

Why a second layout (numbers in backends/cuda/NOTES.md): the register-tiled layout of
:mod:`.rgdr_program` keeps the state tile in registers, so a program holds at most ~8 KB of
state and an SM ~6-8 programs: ~50 KB of state in flight per SM behind a chain of three
dependent loads (lengths, slot, state). At T_b=1 the program is mostly that chain, and the
issue-16 rows sit at 53-77 % of the copy ceiling with bf16 state. Here a program owns a
``[BV, DK]`` state block of one (sequence, value head) — up to the whole head — and loads
it into shared memory in one go (``cp.async`` by default, so the bytes in flight cost no
registers), up to ~200 KB per SM; registers hold only ``rows_in_flight`` rows per thread
while they run the tokens.

Per program: the sequence's span (shared piece), the first accepted token's slot, the
block's load issued, the first token chunk staged while it lands (shared piece), then per
pass of ``rows_in_flight`` rows per thread: rows from shared memory into registers, every
staged token through :func:`rgdr_pieces`'s ``token_step`` (the same gates, l2 norm,
rounding order and per-token slot writes as the tiled layout), the running rows back to
shared memory when more token chunks follow. A padding first slot starts from zeros.

tilelang is imported inside :func:`rgdr_staged_program`, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from .rgdr_pieces import rgdr_pieces
from .rgdr_program import rgdr_signature

if TYPE_CHECKING:
    from .rgdr import RGDRBuildKey
    from .rgdr_staged import RGDRStagedTiling

__all__ = ["rgdr_staged_program"]


def rgdr_staged_program(key: "RGDRBuildKey", tiling: "RGDRStagedTiling") -> Any:
    """The TileLang PrimFunc for ``key`` laid out by the staged ``tiling``."""
    import tilelang.language as T

    f32, i32 = "float32", "int32"
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    GRP = NV // NK
    THREADS, TPR, RB = tiling.threads, tiling.threads_per_row, tiling.rows_in_flight
    P = rgdr_pieces(key, THREADS, TPR, RB)
    ROWS, C, EPT, SV, col = P.ROWS, P.C, P.EPT, P.SV, P.col
    BV = tiling.block_v
    NVT = DV // BV
    NPASS = BV // (RB * ROWS)  # passes of rows_in_flight rows per thread over the block
    sdt = key.state_dtype
    load = tiling.load
    vector_decay = P.vector_decay

    Tn, S, BM, NA = T.dynamic("T"), T.dynamic("S"), T.dynamic("BM"), T.dynamic("NA")
    NB = BM if key.seq_lens_style == "lengths" else BM - 1
    ZV = (BV * DK) // (THREADS * SV)  # state vectors per thread of the block (zero fill, plain load)

    @T.macro
    def body(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        with T.Kernel(NV * NVT, NB, threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            h = bx // NVT
            vt = bx % NVT
            hk = h // GRP

            S_s = T.alloc_shared((BV, DK), sdt)  # the state block, in the state dtype
            red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s = P.token_buffers(BV)
            Sx, kq, xq, xk, dvec, pacc, acc = P.token_registers()  # Sx: the rows running now
            start, L, slot0 = P.sequence_first_slot(seq_meta, nacc, slots, Tn, by, tid, red)

            # The span's scratch may share shared memory with the block: every thread has
            # read it before anything lands there.
            T.sync_threads()
            if L > 0:
                # -- the state block into shared memory; zeros for a padding first slot --------
                if slot0 >= 0:
                    if load == "async":
                        T.async_copy(state[slot0, h, vt * BV : vt * BV + BV, 0:DK], S_s)
                    else:
                        for i in T.unroll(ZV):
                            for e in T.vectorized(SV):
                                S_s[(i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e] = state[
                                    slot0, h, vt * BV + (i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e
                                ]  # fmt: skip
                else:
                    for i in T.unroll(ZV):
                        for e in T.vectorized(SV):
                            S_s[(i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e] = T.cast(0, sdt)
                for ch in T.serial(T.ceildiv(L, C)):
                    base = ch * C
                    T.sync_threads()  # the previous chunk's staging buffers are free
                    P.stage_chunk(query, key_, value, beta, slots, g, gk, scale, Tn, tid, lane, rg, hk, h, vt * BV, BV,
                                  start, L, base, xq, xk, dvec, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s)  # fmt: skip
                    if load == "async":
                        T.ptx_wait_group(0)  # the block has landed (a no-op after the first chunk)
                    T.sync_threads()
                    for p in T.serial(NPASS):
                        # rows p*RB*ROWS + r*ROWS + rg of the block: each thread reads and
                        # writes back only its own rows and columns, so no barrier per pass.
                        for r in T.unroll(RB):
                            for cc in T.unroll(EPT // SV):
                                for e in T.vectorized(SV):
                                    Sx[r, cc * SV + e] = S_s[p * RB * ROWS + r * ROWS + rg, col(cc, lane, SV, e)]
                        for c2 in T.serial(C):
                            if base + c2 < L:
                                if vector_decay:
                                    for cc in T.unroll(EPT // SV):
                                        for e in T.vectorized(SV):
                                            dvec[cc * SV + e] = dv_s[c2, col(cc, lane, SV, e)]
                                P.token_step(state, out, Sx, kq, xq, dvec, pacc, acc, qk_s, v_s, sl_s, w_s, c2, lane,
                                             rg, h, vt * BV + p * RB * ROWS, p * RB * ROWS, start + base + c2, b_s[c2],
                                             d_s[c2] if P.scalar_decay else T.float32(1))  # fmt: skip
                        if base + C < L:  # more token chunks follow: keep the running rows
                            for r in T.unroll(RB):
                                for cc in T.unroll(EPT // SV):
                                    for e in T.vectorized(SV):
                                        S_s[p * RB * ROWS + r * ROWS + rg, col(cc, lane, SV, e)] = Sx[r, cc * SV + e]

    return rgdr_signature(T, key, body, Tn, S, BM, NA)
