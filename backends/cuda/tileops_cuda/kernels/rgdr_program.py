"""The RGDR decode step as a TileLang program: one PrimFunc per build key and tiling.

Host-side decisions (the build key, tilings and the schedule, refusals, the launcher)
live in :mod:`tileops_cuda.kernels.rgdr`; this module only writes the kernel. Semantics
are those of ``tileops_cpu_ref.rgdr.recurrent_gated_delta_rule`` (RGDR.md).

Kernel shape (why it looks like this; numbers in backends/cuda/NOTES.md):

* Tiled layout: one program per (sequence, value head, tile of ``BV`` value rows). The
  ``[BV, DK]`` state tile is read once, kept in registers (16-bit states stay packed: they
  are re-quantised every token, so registers lose nothing) for all tokens of the sequence,
  and written once per token: the kernel moves ``B*(1+T_b)`` state tiles, the bytes floor.
* Streaming layout: one program per (sequence, key head) or a runtime share of its
  ``GRP*DV`` rows; rows of the state evolve independently, so the program streams
  ``BV``-row chunks through registers, the next chunk's state loading while the current one
  runs every token. The metadata chain and q/k staging are paid once per program.
* Inside a program a state row belongs to ``threads_per_row`` consecutive lanes, each owning
  16-byte runs interleaved across the lanes (coalesced); both row dot products end in xor
  shuffles: no shared memory or barrier per token.
* Tokens are staged in chunks: q and k (l2-normalised and scaled once), values, beta, decays
  and slots in one burst, overlapping the state load; the first slot is loaded without
  waiting for the sequence length, so the chain to the state is two round trips.
* Nothing depends on B or T at compile time: both are dynamic shapes; the prefix sum of
  ``lengths``-style metadata is computed in the kernel.
* Unchecked metadata is followed by the rule every backend follows
  (``tileops_cpu_ref.rgdr.clipped_bounds``): spans clipped into ``[0, T)`` end to end, slots
  outside the pool are padding, and the uncovered head and tail are zeroed by the programs of
  the first and last sequence (``rgdr_pieces``).

tilelang is imported inside :func:`rgdr_program`, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations,
# which name closure variables, at decoration time.

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ._common import ELEM_BYTES as _ELEM_BYTES
from ._common import annotate_pass_configs, dependent_launch
from .rgdr_pieces import L2NORM_EPS, pow2_at_most, rgdr_pieces

if TYPE_CHECKING:
    from .rgdr import RGDRBuildKey, RGDRTiling

__all__ = ["L2NORM_EPS", "rgdr_program", "rgdr_signature"]


def rgdr_program(key: "RGDRBuildKey", tiling: "RGDRTiling") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The TileLang PrimFunc for ``key`` laid out by ``tiling``."""
    import tilelang.language as T

    f32, i32 = "float32", "int32"
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    GRP = NV // NK
    THREADS, TPR, R = tiling.threads, tiling.threads_per_row, tiling.rows_per_thread
    speculate = tiling.speculate
    P = rgdr_pieces(key, THREADS, TPR, R, speculate, tiling.reduce_rows, tiling.unpack_bits, tiling.row_deltas,
                    tiling.stage_live_warps)
    ROWS, C, EPT, SV, GV, NWARP, PS, col = P.ROWS, P.C, P.EPT, P.SV, P.GV, P.NWARP, P.PS, P.col  # see rgdr_pieces
    BV = tiling.block_v
    NVT = DV // BV
    lengths_style = key.seq_lens_style == "lengths"
    has_g, gk_form = key.has_g, key.gk_form
    scalar_decay, vector_decay = P.scalar_decay, P.vector_decay
    rdt = key.state_dtype  # registers hold the state in its own dtype: a 16-bit state is exact there

    Tn, S, BM, NA = T.dynamic("T"), T.dynamic("S"), T.dynamic("BM"), T.dynamic("NA")
    NB = BM if lengths_style else BM - 1

    def token_trips(L, base):
        """Trips of a staged chunk's token loop: the chunk's live tokens (``exact_tokens``), or
        the whole chunk, each trip guarded by :func:`live_token`."""
        return T.min(C, L - base) if tiling.exact_tokens else C

    def live_token(L, base, c2):
        """Whether trip ``c2`` of that loop runs a token (always, with ``exact_tokens``)."""
        return True if tiling.exact_tokens else base + c2 < L

    @T.macro
    def body_tiled(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        annotate_pass_configs(tiling.unchecked_index)  # in bounds by construction: RGDRTiling
        with T.Kernel(NV * NVT, NB, threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            dependent_launch(tiling.dependent_launch)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            h = bx // NVT
            vt = bx % NVT
            hk = h // GRP

            red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s = P.token_buffers(BV)
            Sx, kq, xq, xk, dvec, pacc, acc = P.token_registers()  # Sx: the running state
            if speculate:
                # The decode layout's guess, issued before the metadata resolves: sequence `by`
                # is token `by` alone. Its inputs' and its slot's loads first, then its state
                # (which waits for the slot only), then the q/k arithmetic meanwhile.
                live_g = rg == 0 and by < Tn
                slot_g = T.alloc_var(i32)
                P.read_slot(slots, T.min(by, Tn - 1), S, slot_g)
                if P.warp_live(0, 1, tid):  # the guess stages one token: row group 0's
                    P.load_dvec(gk, by, live_g, h, lane, dvec)
                    P.load_qk(query, key_, by, live_g, hk, lane, xq, xk)
                P.stage_values(value, beta, slots, g, gk, Tn, S, tid, h, vt * BV, BV, by, T.min(1, Tn - by), 0,
                               v_s, b_s, d_s, sl_s, w_s)  # fmt: skip
                P.load_rows(state, Sx, slot_g, slot_g >= 0, h, vt * BV, rg, lane)
                if P.warp_live(0, 1, tid):
                    P.finish_qk(scale, live_g, lane, rg, xq, xk, qk_s)
                    P.store_dvec(live_g, lane, rg, dvec, dv_s)
                start, L, acc_n = P.sequence_bounds(seq_meta, nacc, Tn, by, tid, red)
                if P.guess_missed(start, L, by):  # the general path from here, the guess discarded
                    slot0 = T.alloc_var(i32)
                    P.read_slot(slots, T.max(T.min(start + acc_n - 1, Tn - 1), 0), S, slot0)
                    P.load_rows(state, Sx, slot0, slot0 >= 0 and L > 0, h, vt * BV, rg, lane)
            else:
                start, L, slot0 = P.sequence_first_slot(seq_meta, nacc, slots, Tn, S, by, tid, red)
                # -- initial state: zeros if padding (an empty sequence skips everything below)
                P.load_rows(state, Sx, slot0, slot0 >= 0 and L > 0, h, vt * BV, rg, lane)

            if L > 0:
                for ch in T.serial(T.ceildiv(L, C)):
                    base = ch * C
                    if P.guess_missed(start, L, by):  # a hit is one token, staged above
                        T.sync_threads()  # the previous chunk's staging buffers are free
                        P.stage_chunk(query, key_, value, beta, slots, g, gk, scale, Tn, S, tid, lane, rg, hk, h,
                                      vt * BV, BV, start, L, base, xq, xk, dvec, qk_s, v_s, b_s, d_s, sl_s, w_s,
                                      dv_s)  # fmt: skip
                    T.sync_threads()
                    # -- the recurrence, token by token, state in registers -------------------
                    for c2 in T.serial(token_trips(L, base)):
                        if live_token(L, base, c2):
                            if vector_decay:
                                for cc in T.unroll(EPT // SV):
                                    for e in T.vectorized(SV):
                                        dvec[cc * SV + e] = dv_s[c2, col(cc, lane, SV, e)]
                            P.token_step(state, out, Sx, kq, xq, dvec, pacc, acc, qk_s, v_s, sl_s, w_s, c2, lane, rg, h,
                                         vt * BV, 0, start + base + c2, b_s[c2],
                                         d_s[c2] if scalar_decay else T.float32(1))  # fmt: skip
            P.zero_uncovered(out, Tn, NB, by, tid, start, L, h * DV + vt * BV, BV)

    NCH = GRP * DV // BV  # row chunks of one key-head group (stream mode)
    GR = GRP * DV  # rows of one key-head group
    VV = pow2_at_most(GR, 16 // _ELEM_BYTES[key.input_dtype])  # value staging vector width

    @T.macro
    def stage_group(value, beta, slots, g, gk, tid, hk, start, L, base, v_s, b_s, d_s, sl_s, w_s, dv_s):
        """Stream layout: tokens ``base .. base + C`` of the sequence for the whole key-head
        group but q and k (:func:`rgdr_pieces.stage_qk`): values, beta, decays, slots and
        write flags."""
        for it in T.unroll((C * GR // VV + THREADS - 1) // THREADS):
            for e in T.vectorized(VV):
                idx = (it * THREADS + tid) * VV + e
                if idx < C * GR and base + idx // GR < L:
                    v_s[idx // GR, idx % GR] = T.cast(
                        value[start + base + idx // GR, hk * GRP + (idx % GR) // DV, (idx % GR) % DV], f32
                    )
        for it in T.unroll((C * GRP + THREADS - 1) // THREADS):
            idx = it * THREADS + tid
            if idx < C * GRP and base + idx // GRP < L:
                tt = start + base + idx // GRP
                hh = hk * GRP + idx % GRP
                b_s[idx // GRP, idx % GRP] = T.cast(beta[tt, hh], f32)
                if scalar_decay:
                    if has_g and gk_form == "scalar":
                        d_s[idx // GRP, idx % GRP] = T.exp(g[tt, hh]) * T.exp(gk[tt, hh])
                    elif has_g:
                        d_s[idx // GRP, idx % GRP] = T.exp(g[tt, hh])
                    else:
                        d_s[idx // GRP, idx % GRP] = T.exp(gk[tt, hh])
        if vector_decay:
            for it in T.unroll((C * GRP * DK // GV + THREADS - 1) // THREADS):
                for e in T.vectorized(GV):
                    idx = (it * THREADS + tid) * GV + e
                    if idx < C * GRP * DK and base + idx // (GRP * DK) < L:
                        dv_s[idx // (GRP * DK), (idx // DK) % GRP, idx % DK] = T.exp(
                            gk[start + base + idx // (GRP * DK), hk * GRP + (idx // DK) % GRP, idx % DK]
                        )
        if tid < C and base + tid < L:
            P.stage_slot(slots, Tn, S, start + base + tid, tid, base + tid + 1 >= L, sl_s, w_s)

    @T.macro
    def load_chunk(state, Sx, slot, live, hk, rc, rg, lane):
        """Stream layout: this thread's rows of row chunk ``rc`` of key-head group ``hk`` of
        slot ``slot`` into ``Sx``, zeros unless ``live``."""
        for r in T.unroll(R):
            for cc in T.unroll(EPT // SV):
                for e in T.vectorized(SV):
                    Sx[r, cc * SV + e] = T.if_then_else(
                        live,
                        state[slot, hk * GRP + T.truncdiv(rc * BV, DV), T.truncmod(rc * BV, DV) + r * ROWS + rg,
                              col(cc, lane, SV, e)],
                        T.cast(0, rdt),
                    )  # fmt: skip

    @T.macro
    def run_chunk(query, key_, value, beta, state, slots, g, gk, out, scale, Sa, Sb, kq, xq, xk, dvec, pacc, acc,
                  qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, pg, ci, rc: T.Ref, hl: T.Ref, h: T.Ref, v0: T.Ref):  # fmt: skip
        """Stream layout: row chunk ``c_lo + ci`` (its state in ``Sa``) through every token of the
        sequence, the next chunk's state loading into ``Sb`` meanwhile. ``pg`` carries the
        program's values (a namespace: a macro argument would be bound to a copy, and the
        registered programs' CUDA would change)."""
        rc = pg.c_lo + ci
        hl = T.truncdiv(rc * BV, DV)
        h = pg.hk * GRP + hl
        v0 = T.truncmod(rc * BV, DV)
        # Prefetch: the next chunk's state is in flight while this one runs.
        for r in T.unroll(R):
            for cc in T.unroll(EPT // SV):
                for e in T.vectorized(SV):
                    if tiling.flat_rows:
                        Sb[r, cc * SV + e] = T.if_then_else(
                            pg.slot >= 0 and ci + 1 < pg.nch,
                            pg.state_rows[pg.slot, pg.hk * GR + (rc + 1) * BV + r * ROWS + pg.rg,
                                          col(cc, pg.lane, SV, e)],
                            T.cast(0, rdt),
                        )  # fmt: skip
                    else:
                        Sb[r, cc * SV + e] = T.if_then_else(
                            pg.slot >= 0 and ci + 1 < pg.nch,
                            state[pg.slot, pg.hk * GRP + T.truncdiv((rc + 1) * BV, DV),
                                  T.truncmod((rc + 1) * BV, DV) + r * ROWS + pg.rg, col(cc, pg.lane, SV, e)],
                            T.cast(0, rdt),
                        )  # fmt: skip
        for tc in T.serial(pg.ntc):
            base = tc * C
            # Stage a token chunk: once per program when the sequence fits one chunk
            # (a speculative program's hit is one token, staged above).
            if pg.ntc > 1 or ci == 0:
                if P.guess_missed(pg.start, pg.L, pg.by):
                    T.sync_threads()
                    if P.warp_live(base, pg.L, pg.tid):
                        P.stage_qk(query, key_, scale, pg.start + base + pg.rg, base + pg.rg < pg.L, pg.hk, pg.lane,
                                   pg.rg, xq, xk, qk_s)  # fmt: skip
                    stage_group(value, beta, slots, g, gk, pg.tid, pg.hk, pg.start, pg.L, base, v_s, b_s, d_s, sl_s,
                                w_s, dv_s)  # fmt: skip
                    T.sync_threads()

            # -- the recurrence on this chunk's rows, token by token --------------
            for c2 in T.serial(token_trips(pg.L, base)):
                if live_token(pg.L, base, c2):
                    if vector_decay:
                        for cc in T.unroll(EPT // SV):
                            for e in T.vectorized(SV):
                                dvec[cc * SV + e] = dv_s[c2, hl, col(cc, pg.lane, SV, e)]
                    P.token_step(state, out, Sa, kq, xq, dvec, pacc, acc, qk_s, v_s, sl_s, w_s, c2, pg.lane, pg.rg,
                                 h, v0, rc * BV, pg.start + base + c2, b_s[c2, hl],
                                 d_s[c2, hl] if scalar_decay else T.float32(1))  # fmt: skip

    @T.macro
    def body_stream(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        annotate_pass_configs(tiling.unchecked_index)  # in bounds by construction: RGDRTiling
        with T.Kernel(NK * splits, NB, threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            dependent_launch(tiling.dependent_launch)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            # Materialised once: with `splits` a runtime value, TileLang would otherwise expand
            # these floor divisions at every use.
            hk = T.alloc_var(i32)
            c_lo = T.alloc_var(i32)
            nch = T.alloc_var(i32)
            hk = T.truncdiv(bx, splits)
            c_lo = T.truncmod(bx, splits) * T.truncdiv(NCH + splits - 1, splits)
            nch = T.max(T.min(NCH - c_lo, T.truncdiv(NCH + splits - 1, splits)), 0)

            red = T.alloc_shared((NWARP,), i32)
            qk_s = T.alloc_shared((C, 2, DK), f32)
            v_s = T.alloc_shared((C, GR), f32)
            b_s = T.alloc_shared((C, GRP), f32)
            d_s = T.alloc_shared((C, GRP), f32)
            sl_s = T.alloc_shared((C,), i32)
            w_s = T.alloc_shared((C,), i32)
            dv_s: Any = T.alloc_shared((C, GRP, DK), f32) if vector_decay else None  # read only when vector_decay

            Sa, kq, xq, xk, dvec, pacc, acc = P.token_registers()  # Sa: the chunk being run
            Sb = T.alloc_local((R, EPT), rdt)  # the next chunk, loading meanwhile
            state_rows = T.reshape(state, (S, NV * DV, DK)) if tiling.flat_rows else None  # RGDRTiling.flat_rows
            if speculate:
                # The decode layout's guess, as in the tiled layout (there).
                slot = T.alloc_var(i32)
                P.read_slot(slots, T.min(by, Tn - 1), S, slot)
                if P.warp_live(0, 1, tid):
                    P.load_qk(query, key_, by, rg == 0 and by < Tn, hk, lane, xq, xk)
                stage_group(value, beta, slots, g, gk, tid, hk, by, T.min(1, Tn - by), 0, v_s, b_s, d_s, sl_s, w_s,
                            dv_s)  # fmt: skip
                load_chunk(state, Sa, slot, slot >= 0 and nch > 0, hk, c_lo, rg, lane)
                if P.warp_live(0, 1, tid):
                    P.finish_qk(scale, rg == 0 and by < Tn, lane, rg, xq, xk, qk_s)
                start, L, acc_n = P.sequence_bounds(seq_meta, nacc, Tn, by, tid, red)
                if P.guess_missed(start, L, by):  # the general path from here, the guess discarded
                    P.read_slot(slots, T.max(T.min(start + acc_n - 1, Tn - 1), 0), S, slot)
                    load_chunk(state, Sa, slot, slot >= 0 and L > 0 and nch > 0, hk, c_lo, rg, lane)
                T.sync_threads()  # a hit's staging is complete
            else:
                start, L, slot = P.sequence_first_slot(seq_meta, nacc, slots, Tn, S, by, tid, red)
                # first chunk of this program's rows (written out: through `load_chunk` the
                # bound arguments cost this layout 4 registers)
                for r in T.unroll(R):
                    for cc in T.unroll(EPT // SV):
                        for e in T.vectorized(SV):
                            Sa[r, cc * SV + e] = T.if_then_else(
                                slot >= 0 and L > 0 and nch > 0,
                                state[slot, hk * GRP + T.truncdiv(c_lo * BV, DV),
                                      T.truncmod(c_lo * BV, DV) + r * ROWS + rg, col(cc, lane, SV, e)],
                                T.cast(0, rdt),
                            )  # fmt: skip
            ntc = T.ceildiv(L, C)
            if L > 0:
                rc = T.alloc_var(i32)
                hl = T.alloc_var(i32)
                h = T.alloc_var(i32)
                v0 = T.alloc_var(i32)
                pg = SimpleNamespace(tid=tid, lane=lane, rg=rg, by=by, hk=hk, c_lo=c_lo, nch=nch, start=start, L=L,
                                     slot=slot, ntc=ntc, state_rows=state_rows)  # fmt: skip
                if tiling.pingpong:
                    # Two chunks a trip, the buffers swapping roles: no copy of the prefetched chunk.
                    for cp in T.serial(T.ceildiv(nch, 2)):
                        run_chunk(query, key_, value, beta, state, slots, g, gk, out, scale, Sa, Sb, kq, xq, xk, dvec,
                                  pacc, acc, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, pg, 2 * cp, rc, hl, h,
                                  v0)  # fmt: skip
                        if 2 * cp + 1 < nch:
                            run_chunk(query, key_, value, beta, state, slots, g, gk, out, scale, Sb, Sa, kq, xq, xk,
                                      dvec, pacc, acc, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, pg, 2 * cp + 1, rc, hl, h,
                                      v0)  # fmt: skip
                else:
                    for ci in T.serial(nch):
                        run_chunk(query, key_, value, beta, state, slots, g, gk, out, scale, Sa, Sb, kq, xq, xk, dvec,
                                  pacc, acc, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s, pg, ci, rc, hl, h, v0)  # fmt: skip
                        for r in T.unroll(R):
                            for i in T.unroll(EPT):
                                Sa[r, i] = Sb[r, i]
            P.zero_uncovered(out, Tn, NB, by, tid, start, L, hk * GR + c_lo * BV, nch * BV)

    if tiling.stream:
        body = body_stream  # noqa: F811 - the streaming layout replaces the tiled one
    else:
        body = body_tiled

    return rgdr_signature(T, key, body, Tn, S, BM, NA)


def rgdr_signature(T: Any, key: "RGDRBuildKey", body: Any, Tn: Any, S: Any, BM: Any, NA: Any) -> Any:
    """The PrimFunc over ``body`` (a macro taking every tensor, None for absent ones, then
    ``out``, ``scale``, ``splits``), its signature carrying only the tensors ``key`` uses.
    Every RGDR layout shares it, so one launcher calls any of them."""
    f32, i32 = "float32", "int32"
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    idt, sdt = key.input_dtype, key.state_dtype
    has_g, gk_form, has_acc = key.has_g, key.gk_form, key.accepted_dtype is not None
    vector_decay = gk_form == "vector"

    # The signature carries only the tensors this key uses. Each parameter needs its own
    # annotation object: TileLang binds one buffer per annotation instance.
    q_t = T.Tensor((Tn, NK, DK), idt)
    k_t = T.Tensor((Tn, NK, DK), idt)
    v_t = T.Tensor((Tn, NV, DV), idt)
    o_t = T.Tensor((Tn, NV, DV), idt)
    b_t = T.Tensor((Tn, NV), idt)
    s_t = T.Tensor((S, NV, DV, DK), sdt)
    m_t = T.Tensor((BM,), key.seq_lens_dtype)
    i_t = T.Tensor((Tn,), key.slot_dtype)
    g_t = T.Tensor((Tn, NV), f32)
    gk_t = T.Tensor((Tn, NV, DK), f32) if vector_decay else T.Tensor((Tn, NV), f32)
    a_t = T.Tensor((NA,), key.accepted_dtype or i32)

    # TileLang reads the signature from annotations, so each presence pattern is its own
    # function; all share `body`.
    if has_g and gk_form and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, gk: gk_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits)

    elif has_g and gk_form:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, gk: gk_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, gk, None, out, scale, splits)

    elif has_g and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, None, nacc, out, scale, splits)

    elif has_g:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, None, None, out, scale, splits)

    elif gk_form and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 gk: gk_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, gk, nacc, out, scale, splits)

    elif gk_form:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 gk: gk_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, gk, None, out, scale, splits)

    elif has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, None, nacc, out, scale, splits)

    else:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, None, None, out, scale, splits)

    return rgdr
