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

    i32 = "int32"
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
    K = tiling.seqs_per_program
    NBUF = 1 if K == 1 else 2
    lengths_style = key.seq_lens_style == "lengths"
    has_acc = key.accepted_dtype is not None

    @T.macro
    def load_block(state, S_s, buf, slot, h, vt, tid):
        """The state block of ``slot`` (zeros for a padding slot) into ``S_s[buf]``: one
        ``cp.async`` group, or plain 16-byte loads; a padding slot commits an empty group so
        that every load issued counts as one group."""
        if slot >= 0:
            if load == "async":
                T.async_copy(state[slot, h, vt * BV : vt * BV + BV, 0:DK], S_s[buf, 0:BV, 0:DK])
            else:
                for i in T.unroll(ZV):
                    for e in T.vectorized(SV):
                        S_s[buf, (i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e] = state[
                            slot, h, vt * BV + (i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e
                        ]  # fmt: skip
        else:
            for i in T.unroll(ZV):
                for e in T.vectorized(SV):
                    S_s[buf, (i * THREADS + tid) * SV // DK, ((i * THREADS + tid) * SV) % DK + e] = T.cast(0, sdt)
            if load == "async":
                T.ptx_commit_group()

    @T.macro
    def run_sequence(query, key_, value, beta, state, slots, g, gk, out, scale, S_s, buf, start, L, tid, lane, rg, h, vt,
                     hk, red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, Sx, kq, xq, xk, dvec, pacc, acc, wait_here):  # fmt: skip
        """Every token of one sequence on the block in ``S_s[buf]``; ``wait_here``: the block's
        load is the only one in flight, waited for once the first token chunk is staged."""
        for ch in T.serial(T.ceildiv(L, C)):
            base = ch * C
            T.sync_threads()  # the previous chunk's staging buffers are free
            P.stage_chunk(query, key_, value, beta, slots, g, gk, scale, Tn, tid, lane, rg, hk, h, vt * BV, BV,
                          start, L, base, xq, xk, dvec, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s)  # fmt: skip
            if wait_here and load == "async":
                T.ptx_wait_group(0)  # the block has landed (a no-op after the first chunk)
            T.sync_threads()
            for p in T.serial(NPASS):
                # rows p*RB*ROWS + r*ROWS + rg of the block: each thread reads and writes
                # back only its own rows and columns.
                for r in T.unroll(RB):
                    for cc in T.unroll(EPT // SV):
                        for e in T.vectorized(SV):
                            Sx[r, cc * SV + e] = S_s[buf, p * RB * ROWS + r * ROWS + rg, col(cc, lane, SV, e)]
                for c2 in T.serial(C):
                    if base + c2 < L:
                        if vector_decay:
                            for cc in T.unroll(EPT // SV):
                                for e in T.vectorized(SV):
                                    dvec[cc * SV + e] = dv_s[c2, col(cc, lane, SV, e)]
                        P.token_step(state, out, Sx, kq, xq, dvec, pacc, acc, qk_s, v_s, sl_s, w_s, c2, lane, rg, h,
                                     vt * BV + p * RB * ROWS, p * RB * ROWS, start + base + c2, b_s[c2],
                                     d_s[c2] if P.scalar_decay else T.float32(1))  # fmt: skip
                if base + C < L:  # more token chunks follow: keep the running rows
                    for r in T.unroll(RB):
                        for cc in T.unroll(EPT // SV):
                            for e in T.vectorized(SV):
                                S_s[buf, p * RB * ROWS + r * ROWS + rg, col(cc, lane, SV, e)] = Sx[r, cc * SV + e]

    @T.macro
    def body(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        with T.Kernel(NV * NVT, T.ceildiv(NB, K), threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            h = bx // NVT
            vt = bx % NVT
            hk = h // GRP

            S_s = T.alloc_shared((NBUF, BV, DK), sdt)  # the state block(s), in the state dtype
            red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s = P.token_buffers(BV)
            Sx, kq, xq, xk, dvec, pacc, acc = P.token_registers()  # Sx: the rows running now
            start, L, slot0 = P.sequence_first_slot(seq_meta, nacc, slots, Tn, by * K, tid, red)
            work = (query, key_, value, beta, state, slots, g, gk, out, scale, S_s)
            regs = (tid, lane, rg, h, vt, hk, red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, Sx, kq, xq, xk, dvec, pacc, acc)

            # The span's scratch may share shared memory with the blocks: every thread has
            # read it before anything lands there.
            T.sync_threads()
            if K == 1:
                if L > 0:
                    load_block(state, S_s, 0, slot0, h, vt, tid)
                    run_sequence(*work, 0, start, L, *regs, True)
            else:
                # K consecutive sequences, double-buffered: the next one's metadata, slot and
                # block load are issued before this one runs (its start is this start + L).
                cs = T.alloc_var(i32)
                cl = T.alloc_var(i32)
                ns = T.alloc_var(i32)
                nl = T.alloc_var(i32)
                cs = start
                cl = L
                load_block(state, S_s, 0, T.if_then_else(L > 0, slot0, -1), h, vt, tid)
                for k in T.serial(K):
                    nb = by * K + k + 1
                    T.sync_threads()  # the other buffer's sequence is done with it
                    if k + 1 < K:
                        if lengths_style:
                            ns = cs + cl
                            nl = T.if_then_else(nb < NB, T.cast(seq_meta[T.min(nb, NB - 1)], i32), 0)
                        else:
                            ns = T.cast(seq_meta[T.min(nb, NB - 1)], i32)
                            nl = T.if_then_else(nb < NB, T.cast(seq_meta[T.min(nb, NB - 1) + 1], i32) - ns, 0)
                        nacc_n = T.cast(nacc[T.min(nb, NB - 1)], i32) if has_acc else 1
                        nslot = T.cast(slots[T.max(T.min(ns + nacc_n - 1, Tn - 1), 0)], i32)
                        load_block(state, S_s, (k + 1) % 2, T.if_then_else(nl > 0, nslot, -1), h, vt, tid)
                        if load == "async":
                            T.ptx_wait_group(1)  # this sequence's block; the next one's stays in flight
                    else:
                        if load == "async":
                            T.ptx_wait_group(0)
                    if cl > 0:
                        run_sequence(*work, k % 2, cs, cl, *regs, False)
                    cs = ns
                    cl = nl

    return rgdr_signature(T, key, body, Tn, S, BM, NA)
