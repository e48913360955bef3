"""TileLang pieces both RGDR program layouts share: where a sequence starts, the staging of
a chunk of tokens, and one token's update of register-held state rows.

Each piece is a ``T.macro`` made by :func:`rgdr_pieces` for one build key and thread shape
(lanes per row ``TPR``, ``THREADS`` threads, ``R`` rows per thread), so the tiled and the
streaming layouts (:mod:`.rgdr_program`) compute the same gates, l2 norm, rounding order,
write-skipping rule and unchecked-metadata rule from one text (RGDR.md).

Thread shape, as in both layouts: a state row belongs to ``TPR`` consecutive lanes, each
owning ``DK / TPR`` columns in 16-byte runs interleaved across the lanes (:func:`col`); row
group ``rg = tid // TPR`` holds rows ``r * ROWS + rg``; row dot products end in xor
shuffles. A staging burst stages ``C = THREADS // TPR`` tokens: row group ``rg`` stages
token ``base + rg``.

tilelang is imported inside :func:`rgdr_pieces`, never at module import.
"""

# No `from __future__ import annotations`: TileLang reads the macros' annotations (T.Ref).

from types import SimpleNamespace
from typing import TYPE_CHECKING

from ._common import ELEM_BYTES as _ELEM_BYTES
from ._index_metadata import clip_tokens, index_or_padding

if TYPE_CHECKING:
    from .rgdr import RGDRBuildKey

__all__ = ["L2NORM_EPS", "pow2_at_most", "rgdr_pieces"]

#: The epsilon of the in-kernel q/k l2 normalisation (the reference's value).
L2NORM_EPS = 1e-6


def pow2_at_most(n: int, cap: int) -> int:
    """The largest power of two that divides ``n`` and is at most ``cap``."""
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


def rgdr_pieces(key: "RGDRBuildKey", threads: int, tpr: int, rows: int,  # noqa: C901 - one set of macros
                speculate: bool = False, reduce_rows: str = "butterfly", unpack_bits: bool = False,
                row_deltas: bool = False, stage_live_warps: bool = False) -> SimpleNamespace:
    """The shared macros for ``key`` on ``threads`` threads, ``tpr`` lanes per state row and
    ``rows`` rows per thread (see the module docstring); also the derived sizes.
    ``speculate``: the program guesses the decode layout (:func:`guess_missed`).
    ``reduce_rows``: how a token's row sums cross the lanes (``RGDRTiling.reduce_rows``).
    ``unpack_bits``, ``row_deltas``, ``stage_live_warps``: ``RGDRTiling``'s fields of those names."""
    import tilelang.language as T

    f32, i32 = "float32", "int32"
    DK, DV = key.head_k_dim, key.head_v_dim
    THREADS, TPR, R = threads, tpr, rows
    ROWS = THREADS // TPR
    C = ROWS
    EPT = DK // TPR  # columns per lane
    SV = pow2_at_most(EPT, 16 // _ELEM_BYTES[key.state_dtype])  # state vector width
    IV = pow2_at_most(EPT, 16 // _ELEM_BYTES[key.input_dtype])  # q/k vector width
    GV = pow2_at_most(EPT, 4)  # gk (fp32) vector width
    NWARP = THREADS // 32
    PS = max(1, min(4, EPT // 4))  # partial sums per dot product (shortens the add chain)
    NSH = TPR.bit_length() - 1  # xor-shuffle rounds: offsets TPR/2 .. 1
    sdt, idt = key.state_dtype, key.input_dtype
    lengths_style = key.seq_lens_style == "lengths"
    has_g, gk_form, has_acc, l2 = key.has_g, key.gk_form, key.accepted_dtype is not None, key.use_qk_l2norm
    scalar_decay = has_g or gk_form == "scalar"
    vector_decay = gk_form == "vector"
    requant = sdt != f32
    transpose = reduce_rows == "transpose"
    LOGR = R.bit_length() - 1  # transposed rounds: each halves the rows a lane carries
    SPAN = TPR // R if transpose else 1  # lanes of a row that end a transposed reduction on one row

    def col(cc, lane, vec, e):
        """Column of element ``cc*vec + e`` of a lane: 16-byte runs interleaved across lanes."""
        return (cc * TPR + lane) * vec + e

    def state_f32(Sx, r, e):
        """fp32 value of state element ``Sx[r, e]``."""
        return T.cast(Sx[r, e], f32)

    def pair_f32(Sx, r, e2, half):
        """``RGDRTiling.unpack_bits`` (bf16 state): fp32 value of state element ``Sx[r, 2 * e2 + half]`` from the
        bits of the 32-bit word holding the pair. A bf16 is the upper half of its fp32, so the low element is
        the word shifted up 16 bits and the high one the word with its low half cleared: one integer
        instruction each, where the cast takes two for the high one. The same value, bit for bit."""
        word = T.view(Sx, (R, EPT // 2), "uint32")[r, e2]
        if half == 0:
            return T.reinterpret(T.shift_left(word, T.uint32(16)), f32)
        return T.reinterpret(T.bitwise_and(word, T.uint32(0xFFFF0000)), f32)

    def decayed(Sx, r, e, dsc, dvec, e2=None, half=0):
        """fp32 value of state element ``Sx[r, e]`` after this token's decays (same op order each time); read
        as element ``half`` of pair ``e2`` (:func:`pair_f32`) when ``e2`` is given."""
        v = state_f32(Sx, r, e) if e2 is None else pair_f32(Sx, r, e2, half)
        if scalar_decay:
            v = v * dsc
        if vector_decay:
            v = v * dvec[e]
        return v

    def warp_live(base, L, tid):
        """Whether this thread's warp stages a live token's q and k (row group ``rg`` stages token ``base + rg``;
        a warp's first row group is ``32 * warp // TPR``): with ``stage_live_warps`` the staging of q and k
        runs in those warps only (a warp-uniform branch; the others' rows of ``qk_s`` are never read), else
        always (no branch is emitted)."""
        return base + (tid // 32) * 32 // TPR < L if stage_live_warps else True

    @T.macro
    def read_slot(slots, i, S, slot: T.Ref):
        """``slot = index_or_padding(slots[i], S)`` (a slot outside ``[0, S)`` is padding, -1) from one
        load whose value nothing waits for until ``slot`` is used (``index_or_padding`` of ``slots[i]``
        inline reloads the index inside the branch its own test opens, a second dependent load)."""
        raw = T.alloc_var(slots.dtype)
        raw = slots[i]
        slot = index_or_padding(raw, S)  # noqa: F841 - a T.Ref

    @T.macro
    def sequence_span(seq_meta, nacc, Tn, by, tid, red, start: T.Ref, L: T.Ref, acc_n: T.Ref):
        """``start``, length ``L`` and accepted count of sequence ``by`` as every backend
        follows metadata, unchecked included (``tileops_cpu_ref.rgdr.clipped_bounds``): lengths
        clipped to ``[0, T]`` and summed saturating at T; prefix sums clipped to ``[0, T]``,
        sequence b starting at the largest of ``cu[0..b]``; the accepted count clipped to
        ``[1, L]``. Spans are then disjoint and inside ``[0, T)``, and valid metadata is read
        as written. Every int32 intermediate stays below 2T (the launcher refuses T >= 2**30).
        Latency is the cost at small B: L (or the end) and the accepted count load beside the
        block-wide sum (lengths) or maximum (prefix sums), so the chain to the state load stays
        two round trips; sequence 0 (all of B=1) needs no reduction: its start is 0 (lengths)
        or ``clip(cu[0])``, loaded with the rest, and the barrier is skipped (the branch is
        uniform over the block)."""
        L = clip_tokens(seq_meta[by] if lengths_style else seq_meta[by + 1], Tn)  # noqa: F841 - a T.Ref
        acc_n = clip_tokens(nacc[by], Tn, 1) if has_acc else 1  # noqa: F841 - a T.Ref
        start = 0 if lengths_style else clip_tokens(seq_meta[by], Tn)
        if by > 0:
            part = T.alloc_var(i32)
            part = 0  # the identity of both reductions (every operand is clipped to >= 0)
            if lengths_style:
                for it in T.serial(T.ceildiv(by, THREADS)):
                    if it * THREADS + tid < by:
                        part = T.min(part + clip_tokens(seq_meta[it * THREADS + tid], Tn), Tn)
                for off in T.unroll(5):
                    part = T.min(part + T.shfl_xor(part, 16 >> off), Tn)
            else:
                for it in T.serial(T.ceildiv(by, THREADS)):  # cu[by] itself is loaded above
                    if it * THREADS + tid < by:
                        part = T.max(part, clip_tokens(seq_meta[it * THREADS + tid], Tn))
                for off in T.unroll(5):
                    part = T.max(part, T.shfl_xor(part, 16 >> off))
            if tid % 32 == 0:
                red[tid // 32] = part
            T.sync_threads()
            for w in T.unroll(NWARP):
                if lengths_style:
                    start = T.min(start + red[w], Tn)
                else:
                    start = T.max(start, red[w])
        if lengths_style:
            L = T.min(start + L, Tn) - start
        else:
            L = T.max(L - start, 0)
        acc_n = T.min(acc_n, L)

    def first_slot(slots, Tn, S, start, acc_n):
        """The slot of a sequence's first accepted token, the initial state, -1 when that is
        padding (the index is clamped: an empty sequence is skipped by the caller's ``L > 0``)."""
        return index_or_padding(slots[T.max(T.min(start + acc_n - 1, Tn - 1), 0)], S)

    @T.macro
    def sequence_bounds(seq_meta, nacc, Tn, by, tid, red):
        """``(start, L, acc_n)`` of sequence ``by`` in variables (:func:`sequence_span`)."""
        start = T.alloc_var(i32)
        L = T.alloc_var(i32)
        acc_n = T.alloc_var(i32)
        sequence_span(seq_meta, nacc, Tn, by, tid, red, start, L, acc_n)
        return start, L, acc_n

    @T.macro
    def sequence_first_slot(seq_meta, nacc, slots, Tn, S, by, tid, red):
        """``(start, L, slot0)`` of sequence ``by``: its span (:func:`sequence_span`) and
        :func:`first_slot`."""
        start, L, acc_n = sequence_bounds(seq_meta, nacc, Tn, by, tid, red)
        slot0 = first_slot(slots, Tn, S, start, acc_n)
        return start, L, slot0

    def guess_missed(start, L, by):
        """Whether sequence ``by`` is not token ``by`` alone (the decode layout a speculative
        program guessed: a hit has ``start == by`` and ``L == 1``, so its first accepted token
        is ``by`` whatever the accepted count says). Always true without speculation, so the
        general path's code is emitted unconditionally."""
        return T.Or(start != by, L != 1) if speculate else True

    @T.macro
    def zero_rows(out, t0, t1, tid, r0, nr):
        """``out[t0:t1]`` zeroed on flat value rows ``r0 .. r0 + nr`` (a loop of no trips when
        ``t1 <= t0``, the case of all checked metadata)."""
        for it in T.serial(T.ceildiv(T.max(t1 - t0, 0) * nr, THREADS)):
            idx = it * THREADS + tid
            if idx < (t1 - t0) * nr:
                r = r0 + T.truncmod(idx, nr)  # all non-negative: truncated division is floor division
                out[t0 + T.truncdiv(idx, nr), T.truncdiv(r, DV), T.truncmod(r, DV)] = T.cast(0, idt)

    @T.macro
    def zero_uncovered(out, Tn, NB, by, tid, start, L, r0, nr):
        """Tokens no sequence covers (only unchecked metadata leaves any) get zeros: the spans
        tile one range, so these are a head before sequence 0, zeroed by its programs, and a
        tail after sequence ``NB - 1``, zeroed by its programs, each on its own ``nr`` value
        rows from flat row ``r0`` (value head ``r // DV``, row ``r % DV``)."""
        if by == 0:
            zero_rows(out, 0, start, tid, r0, nr)
        if by == NB - 1:
            zero_rows(out, start + L, Tn, tid, r0, nr)

    @T.macro
    def token_buffers(BV):
        """The shared buffers of a token chunk staged for one value head's ``BV`` rows (see
        :func:`stage_chunk`), and the span's scratch: ``(red, qk_s, v_s, b_s, d_s, sl_s, w_s,
        dv_s)``, ``dv_s`` None without per-column decay."""
        red = T.alloc_shared((NWARP,), i32)
        qk_s = T.alloc_shared((C, 2, DK), f32)
        v_s = T.alloc_shared((C, BV), f32)
        b_s = T.alloc_shared((C,), f32)
        d_s = T.alloc_shared((C,), f32)
        sl_s = T.alloc_shared((C,), i32)
        w_s = T.alloc_shared((C,), i32)
        dv_s = T.alloc_shared((C, DK), f32) if vector_decay else None
        return red, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s

    @T.macro
    def token_registers():
        """A thread's registers for the token step: ``(Sx, kq, xq, xk, dvec, pacc, acc)``, the
        ``R`` state rows in the state dtype (a 16-bit state is exact there: it is re-quantised
        every token), ``dvec`` None without per-column decay."""
        Sx = T.alloc_local((R, EPT), sdt)
        kq = T.alloc_local((EPT,), f32)
        xq = T.alloc_local((EPT,), f32)
        xk = T.alloc_local((EPT,), f32)
        dvec = T.alloc_local((EPT,), f32) if vector_decay else None
        pacc = T.alloc_local((R, PS), f32)
        acc = T.alloc_local((R,), f32)
        return Sx, kq, xq, xk, dvec, pacc, acc

    @T.macro
    def load_rows(state, Sx, slot, live, h, row0, rg, lane):
        """This thread's ``R`` rows of value head ``h`` of pool slot ``slot`` from value row
        ``row0`` (rows ``row0 + r * ROWS + rg``) into ``Sx``, zeros unless ``live``."""
        for r in T.unroll(R):
            for cc in T.unroll(EPT // SV):
                for e in T.vectorized(SV):
                    Sx[r, cc * SV + e] = T.if_then_else(
                        live, state[slot, h, row0 + r * ROWS + rg, col(cc, lane, SV, e)], T.cast(0, sdt)
                    )

    @T.macro
    def load_qk(query, key_, tok, live, hk, lane, xq, xk):
        """This lane's q and k columns of token ``tok`` (zeros unless ``live``) into registers:
        the loads of :func:`stage_qk`, which a caller may issue before other loads."""
        for cc in T.unroll(EPT // IV):
            for e in T.vectorized(IV):
                xq[cc * IV + e] = T.if_then_else(live, T.cast(query[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0))
                xk[cc * IV + e] = T.if_then_else(live, T.cast(key_[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0))

    @T.macro
    def finish_qk(scale, live, lane, rg, xq, xk, qk_s):
        """The arithmetic of :func:`stage_qk` on the registers :func:`load_qk` filled."""
        fq = T.alloc_var(f32)
        fk = T.alloc_var(f32)
        fq = scale
        fk = T.float32(1)
        if l2:
            ssq = T.alloc_var(f32)
            ssk = T.alloc_var(f32)
            ssq = 0.0
            ssk = 0.0
            for e in T.unroll(EPT):
                ssq = ssq + xq[e] * xq[e]
                ssk = ssk + xk[e] * xk[e]
            for s in T.unroll(NSH):
                ssq = ssq + T.shfl_xor(ssq, TPR >> (s + 1))
                ssk = ssk + T.shfl_xor(ssk, TPR >> (s + 1))
            fq = T.rsqrt(ssq + T.float32(L2NORM_EPS)) * scale
            fk = T.rsqrt(ssk + T.float32(L2NORM_EPS))
        if live:
            for cc in T.unroll(EPT // IV):
                for e in T.vectorized(IV):
                    qk_s[rg, 0, col(cc, lane, IV, e)] = xq[cc * IV + e] * fq
                    qk_s[rg, 1, col(cc, lane, IV, e)] = xk[cc * IV + e] * fk

    @T.macro
    def stage_qk(query, key_, scale, tok, live, hk, lane, rg, xq, xk, qk_s):
        """Row group ``rg`` stages token ``tok`` (when ``live``): q and k, l2-normalised
        (when the key says so) and q scaled, once per token, into ``qk_s[rg]``."""
        load_qk(query, key_, tok, live, hk, lane, xq, xk)
        finish_qk(scale, live, lane, rg, xq, xk, qk_s)

    @T.macro
    def stage_slot(slots, Tn, S, tt, i, last, sl_s, w_s):
        """Token ``tt``'s slot into ``sl_s[i]`` and whether it is written into ``w_s[i]``
        (``last``: it is its sequence's last token). Padding (a slot outside ``[0, S)``) is not
        written; nor is a slot the next token of the sequence writes again: nothing reads it
        in between, so the final contents are identical."""
        sl = index_or_padding(slots[tt], S)
        sl_s[i] = sl
        nxt = T.if_then_else(last, -1, index_or_padding(slots[T.min(tt + 1, Tn - 1)], S))
        w_s[i] = T.if_then_else(sl >= 0 and sl != nxt, 1, 0)

    @T.macro
    def load_dvec(gk, tok, live, h, lane, dvec):
        """Per-column decays of token ``tok`` for this lane (ones unless ``live``; nothing
        without per-column decay)."""
        if vector_decay:
            for cc in T.unroll(EPT // GV):
                for e in T.vectorized(GV):
                    dvec[cc * GV + e] = T.if_then_else(live, T.exp(gk[tok, h, col(cc, lane, GV, e)]), T.float32(1))

    @T.macro
    def store_dvec(live, lane, rg, dvec, dv_s):
        """:func:`load_dvec`'s registers into row group ``rg``'s staging row."""
        if vector_decay:
            if live:
                for cc in T.unroll(EPT // GV):
                    for e in T.vectorized(GV):
                        dv_s[rg, col(cc, lane, GV, e)] = dvec[cc * GV + e]

    @T.macro
    def stage_values(value, beta, slots, g, gk, Tn, S, tid, h, v_row0, BV, start, L, base, v_s, b_s, d_s, sl_s, w_s):
        """The rest of :func:`stage_chunk`: values of rows ``v_row0 .. v_row0 + BV``, beta,
        scalar decays, slots and write flags of tokens ``base .. base + C``."""
        for it in T.unroll((C * BV + THREADS - 1) // THREADS):
            idx = it * THREADS + tid
            if idx < C * BV and base + idx // BV < L:
                v_s[idx // BV, idx % BV] = T.cast(value[start + base + idx // BV, h, v_row0 + idx % BV], f32)
        if tid < C and base + tid < L:
            tt = start + base + tid
            b_s[tid] = T.cast(beta[tt, h], f32)
            if scalar_decay:
                if has_g and gk_form == "scalar":
                    d_s[tid] = T.exp(g[tt, h]) * T.exp(gk[tt, h])
                elif has_g:
                    d_s[tid] = T.exp(g[tt, h])
                else:
                    d_s[tid] = T.exp(gk[tt, h])
            stage_slot(slots, Tn, S, tt, tid, base + tid + 1 >= L, sl_s, w_s)

    @T.macro
    def stage_chunk(query, key_, value, beta, slots, g, gk, scale, Tn, S, tid, lane, rg, hk, h, v_row0, BV, start, L,
                    base, xq, xk, dvec, qk_s, v_s, b_s, d_s, sl_s, w_s, dv_s):  # fmt: skip
        """Stage tokens ``base .. base + C`` of the sequence for value head ``h``: q and k
        (:func:`stage_qk`), values of rows ``v_row0 .. v_row0 + BV``, beta, decays, slots
        and write flags (:func:`stage_slot`). The caller syncs before (buffers free) and
        after (staged)."""
        tok = start + base + rg
        live = base + rg < L
        if warp_live(base, L, tid):
            load_dvec(gk, tok, live, h, lane, dvec)
            stage_qk(query, key_, scale, tok, live, hk, lane, rg, xq, xk, qk_s)
            store_dvec(live, lane, rg, dvec, dv_s)
        stage_values(value, beta, slots, g, gk, Tn, S, tid, h, v_row0, BV, start, L, base, v_s, b_s, d_s, sl_s, w_s)

    @T.macro
    def fold_partials(pacc, acc, r):
        """Row ``r``'s ``PS`` partial sums of this lane into ``acc[r]``."""
        acc[r] = pacc[r, 0]
        for p in T.unroll(PS - 1):
            acc[r] = acc[r] + pacc[r, p + 1]

    @T.macro
    def lane_allreduce(acc):
        """Each row's sum over its ``TPR`` lanes (xor shuffles: every lane gets the total)."""
        for r in T.unroll(R):
            for s in T.unroll(NSH):
                acc[r] = acc[r] + T.shfl_xor(acc[r], TPR >> (s + 1))

    @T.macro
    def halve_rows(acc, lane, m, half):
        """One transposed round at xor offset ``m``: of its ``2 * half`` row partials a lane keeps
        the upper half when its lane bit ``m`` is set (else the lower), sends its partner the
        other half and adds what it receives: ``own + partner's``, the butterfly's operands."""
        for j in T.unroll(half):
            up = T.bitwise_and(lane, m) != 0
            acc[j] = T.if_then_else(up, acc[j + half], acc[j]) + T.shfl_xor(
                T.if_then_else(up, acc[j], acc[j + half]), m
            )

    @T.macro
    def transpose_reduce(acc, lane):
        """Each row's sum over its ``TPR`` lanes, transposed: afterwards ``acc[0]`` holds the total
        of row ``lane // SPAN`` (bit for bit the butterfly's: same additions, same operands)."""
        if LOGR >= 1:
            halve_rows(acc, lane, TPR >> 1, R >> 1)
        if LOGR >= 2:
            halve_rows(acc, lane, TPR >> 2, R >> 2)
        if LOGR >= 3:
            halve_rows(acc, lane, TPR >> 3, R >> 3)
        for s in T.unroll(NSH - LOGR):
            acc[0] = acc[0] + T.shfl_xor(acc[0], (TPR >> LOGR) >> (s + 1))

    @T.macro
    def row_totals(acc, lane):
        """Every lane gets all ``R`` row totals in ``acc`` (the k-dot's, which every lane needs)."""
        if transpose:
            transpose_reduce(acc, lane)
            tot = T.alloc_var(f32)
            tot = acc[0]
            for r in T.unroll(R):
                acc[r] = T.shfl_sync(tot, r * SPAN, TPR)
        else:
            lane_allreduce(acc)

    @T.macro
    def row_deltas_to_lanes(acc, lane, bt, v_s, c2, s_row0, rg):
        """``RGDRTiling.row_deltas``: every lane gets all ``R`` rows' deltas ``beta * (v - S k)`` in ``acc``.
        The transposed reduction ends each row's k-dot total on the lanes that own the row; they compute
        its delta and the deltas come back with ``rows`` indexed shuffles, where :func:`row_totals` hands
        back the totals and every lane computes every row's delta. The same operands: the same bits."""
        transpose_reduce(acc, lane)
        own = T.alloc_var(f32)
        own = bt * (v_s[c2, s_row0 + (lane // SPAN) * ROWS + rg] - acc[0])
        for r in T.unroll(R):
            acc[r] = T.shfl_sync(own, r * SPAN, TPR)

    @T.macro
    def store_state(state, Sx, sl_s, w_s, c2, lane, rg, h, v_row0):
        """This thread's rows of staged token ``c2``'s state into its slot, if it writes one."""
        if w_s[c2] != 0:
            for r in T.unroll(R):
                for cc in T.unroll(EPT // SV):
                    for e in T.vectorized(SV):
                        state[sl_s[c2], h, v_row0 + r * ROWS + rg, col(cc, lane, SV, e)] = Sx[r, cc * SV + e]

    @T.macro
    def token_step(state, out, Sx, kq, xq, dvec, pacc, acc, qk_s, v_s, sl_s, w_s, c2, lane, rg, h, v_row0, s_row0,
                   out_tok, bt, dsc):  # fmt: skip
        """Staged token ``c2`` on this thread's ``R`` rows ``v_row0 + r * ROWS + rg`` (staged
        values at ``s_row0 + r * ROWS + rg``), state ``Sx`` in registers in its own dtype,
        beta ``bt``, scalar decay ``dsc``, per-column decays in ``dvec`` (the caller loads
        them): decay, ``d = beta * (v - S k)``, ``S += d k``, ``out = S q`` from the updated
        state before it is re-quantised (RGDR.md), and the token's slot write if it has one
        (a speculative program issues it before the output's lane reduction, so the store's
        latency overlaps the shuffles; the others after)."""
        for cc in T.unroll(EPT // SV):
            for e in T.vectorized(SV):
                kq[cc * SV + e] = qk_s[c2, 1, col(cc, lane, SV, e)]
        for r in T.unroll(R):
            for p in T.unroll(PS):
                pacc[r, p] = 0.0
            if unpack_bits:  # the same sums in the same order, a pair of columns a trip
                for e2 in T.unroll(EPT // 2):
                    pacc[r, (2 * e2) % PS] = pacc[r, (2 * e2) % PS] + decayed(Sx, r, 2 * e2, dsc, dvec, e2, 0) * kq[
                        2 * e2]
                    pacc[r, (2 * e2 + 1) % PS] = pacc[r, (2 * e2 + 1) % PS] + decayed(
                        Sx, r, 2 * e2 + 1, dsc, dvec, e2, 1) * kq[2 * e2 + 1]
            else:
                for e in T.unroll(EPT):
                    if requant:
                        # 16-bit state stays packed in registers; the decayed value
                        # is recomputed (bit-identically) for the update below.
                        pacc[r, e % PS] = pacc[r, e % PS] + decayed(Sx, r, e, dsc, dvec) * kq[e]
                    else:
                        Sx[r, e] = decayed(Sx, r, e, dsc, dvec)
                        pacc[r, e % PS] = pacc[r, e % PS] + Sx[r, e] * kq[e]
            fold_partials(pacc, acc, r)
        if row_deltas:
            row_deltas_to_lanes(acc, lane, bt, v_s, c2, s_row0, rg)
        else:
            row_totals(acc, lane)
        for cc in T.unroll(EPT // SV):
            for e in T.vectorized(SV):
                xq[cc * SV + e] = qk_s[c2, 0, col(cc, lane, SV, e)]
        for r in T.unroll(R):
            dl = acc[r] if row_deltas else bt * (v_s[c2, s_row0 + r * ROWS + rg] - acc[r])
            for p in T.unroll(PS):
                pacc[r, p] = 0.0
            if unpack_bits:  # each pair's word written whole, once both halves are rounded
                for e2 in T.unroll(EPT // 2):
                    lo = decayed(Sx, r, 2 * e2, dsc, dvec, e2, 0) + dl * kq[2 * e2]
                    pacc[r, (2 * e2) % PS] = pacc[r, (2 * e2) % PS] + lo * xq[2 * e2]
                    hi = decayed(Sx, r, 2 * e2 + 1, dsc, dvec, e2, 1) + dl * kq[2 * e2 + 1]
                    pacc[r, (2 * e2 + 1) % PS] = pacc[r, (2 * e2 + 1) % PS] + hi * xq[2 * e2 + 1]
                    T.view(Sx, (R, EPT // 2), "uint32")[r, e2] = T.call_extern(
                        "uint32", "__pack_nv_bfloat162", T.cast(lo, sdt), T.cast(hi, sdt))
            else:
                for e in T.unroll(EPT):
                    if requant:
                        # The output reads the updated state before it is re-quantised; the
                        # recurrence continues from the rounded value (RGDR.md).
                        nv = decayed(Sx, r, e, dsc, dvec) + dl * kq[e]
                        pacc[r, e % PS] = pacc[r, e % PS] + nv * xq[e]
                        Sx[r, e] = T.cast(nv, sdt)
                    else:
                        Sx[r, e] = Sx[r, e] + dl * kq[e]
                        pacc[r, e % PS] = pacc[r, e % PS] + Sx[r, e] * xq[e]
            fold_partials(pacc, acc, r)
        if speculate:  # the decode program's stores leave before the output's shuffles
            store_state(state, Sx, sl_s, w_s, c2, lane, rg, h, v_row0)
        if transpose:  # each row's total ends on SPAN lanes: the first writes it
            transpose_reduce(acc, lane)
            if lane % SPAN == 0:
                out[out_tok, h, v_row0 + (lane // SPAN) * ROWS + rg] = T.cast(acc[0], idt)
        else:
            lane_allreduce(acc)
            if lane == 0:
                for r in T.unroll(R):
                    out[out_tok, h, v_row0 + r * ROWS + rg] = T.cast(acc[r], idt)
        if not speculate:
            store_state(state, Sx, sl_s, w_s, c2, lane, rg, h, v_row0)

    return SimpleNamespace(
        col=col, decayed=decayed, sequence_span=sequence_span, sequence_first_slot=sequence_first_slot,
        zero_uncovered=zero_uncovered, token_buffers=token_buffers, token_registers=token_registers,
        stage_qk=stage_qk, stage_slot=stage_slot, stage_chunk=stage_chunk, token_step=token_step,
        first_slot=first_slot, read_slot=read_slot, sequence_bounds=sequence_bounds,
        guess_missed=guess_missed, warp_live=warp_live, load_rows=load_rows, load_qk=load_qk, finish_qk=finish_qk,
        load_dvec=load_dvec, store_dvec=store_dvec, stage_values=stage_values,
        ROWS=ROWS, C=C, EPT=EPT, SV=SV, IV=IV, GV=GV, NWARP=NWARP, PS=PS, NSH=NSH,
        vector_decay=vector_decay, scalar_decay=scalar_decay,
    )  # fmt: skip
