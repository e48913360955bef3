"""The causal conv1d kernels as TileLang programs: the decode step and the two varlen passes.

Host-side decisions (build keys, refusals, the launchers) live in
:mod:`tileops_cuda.kernels.conv1d`; semantics are ``manifest/conv.yaml``'s (the reference is
``tileops_cpu_ref.conv``). Shared layout:

* A thread owns ``VC`` consecutive channels (one 16-byte vector of ``x``). The pool is passed
  flat, ``[S, D * (W - 1)]``, so the thread's windows are ``VC * (W - 1)`` consecutive elements
  (``W - 1`` 16-byte vectors, channel-major: element ``i * (W - 1) + k`` is channel ``c0 + i``,
  tap ``k``) and its weights ``VC * W`` consecutive elements of the flat ``[D * W]`` weight.
* ``x`` is a strided ``[T, D]`` view (row stride ``XS``, unit channel stride): a slice of the
  projection output is read in place. ``out`` is contiguous.
* float32 math; bias and SiLU in float32; one rounding to the output dtype.
* Nothing depends on B, T or the pool size at compile time.

Decode: one program per (channel block, sequence), plus one row of programs that writes zeros
to the tokens no sequence covers (only unchecked metadata leaves any). A program reads its
sequence's initial window into registers, then runs its tokens in order, writing each
token's window to its slot (skipped when the next token writes the same slot).

Varlen: pass A, one program per (channel block, tile of ``BT`` tokens), computes every output
(a token's owner found by a binary search over cu_seqlens; a token within ``W - 1`` of its
sequence's start reads the initial window) and never writes the pool; pass B, one program
per (channel block, sequence), then writes each final window. Two passes because the programs
reading a sequence's initial window and the one that could write its final window are
different programs with no order between them.

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey

__all__ = ["THREADS", "TOKENS_PER_PROGRAM", "conv_update_program", "conv_varlen_out_program",
           "conv_varlen_state_program"]

THREADS = 128
#: Tokens per varlen pass-A program (their x rows are loaded into registers at once).
TOKENS_PER_PROGRAM = 16


def _lanes(dtype: str) -> int:
    return 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]


def conv_update_program(key: "ConvUpdateBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The decode PrimFunc: ``(x, pool, weight, bias, seq_meta, slots, nacc, out)``; absent
    optional inputs are passed as one-element dummies the program never reads."""
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH = THREADS
    NCB = (D + TH * VC - 1) // (TH * VC)
    lengths_style = key.seq_lens_style == "lengths"
    has_acc = key.accepted_dtype is not None
    Tn, XS, S, BM, NA, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NA", "NBIAS"))
    NB = BM if lengths_style else BM - 1

    @T.prim_func
    def conv_update(
        x: T.StridedTensor((Tn, D), (XS, 1), dt),
        pool: T.Tensor((S, D * W1), dt),
        weight: T.Tensor((D * W,), dt),
        bias: T.Tensor((NBIAS,), dt),
        seq_meta: T.Tensor((BM,), key.seq_lens_dtype),
        slots: T.Tensor((Tn,), key.slot_dtype),
        nacc: T.Tensor((NA,), key.accepted_dtype or i32),
        out: T.Tensor((Tn, D), dt),
    ):
        with T.Kernel(NCB, NB + 1, threads=TH) as (bx, by):
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            red = T.alloc_shared((TH // 32,), i32)
            start = T.alloc_var(i32)
            end = T.alloc_var(i32)
            s = T.alloc_var(i32)
            L = T.alloc_var(i32)
            acc_n = T.alloc_var(i32)
            slot0 = T.alloc_var(i32)
            lo = T.alloc_var(i32)
            wv = T.alloc_local((VC * W,), dt)
            bv = T.alloc_local((VC,), dt)
            sv = T.alloc_local((VC * W1,), dt)  # the running window, channel-major
            xc = T.alloc_local((VC,), dt)
            accv = T.alloc_local((VC,), f32)
            ov = T.alloc_local((VC,), dt)
            zero = T.alloc_local((VC,), dt)
            # -- where sequence `by` starts and ends (for by == NB: the end of the last one) -----
            if lengths_style:
                part = T.alloc_var(i32)
                part = 0
                for it in T.serial(T.ceildiv(by, TH)):
                    if it * TH + tid < by:
                        part = part + T.cast(seq_meta[it * TH + tid], i32)
                for off in T.unroll(5):
                    part = part + T.shfl_xor(part, 16 >> off)
                if tid % 32 == 0:
                    red[tid // 32] = part
                T.sync_threads()
                start = 0
                for w in T.unroll(TH // 32):
                    start = start + red[w]
                end = start + T.if_then_else(by < NB, T.cast(seq_meta[T.max(T.min(by, NB - 1), 0)], i32), 0)
            else:
                start = T.cast(seq_meta[by], i32)
                end = T.cast(seq_meta[T.min(by + 1, NB)], i32)
            s = T.max(T.min(start, Tn), 0)
            L = T.max(T.min(end, Tn), s) - s
            for e in T.vectorized(VC):
                zero[e] = T.cast(0, dt)

            if c0 < D:
                if by < NB:
                    # -- the initial window: the slot of the first accepted token, zeros if padding --
                    acc_n = T.max(T.min(T.cast(nacc[T.min(by, NA - 1)], i32), L), 1) if has_acc else 1
                    slot0 = T.if_then_else(L > 0, T.cast(slots[T.max(T.min(s + acc_n - 1, Tn - 1), 0)], i32), -1)
                    for p in T.unroll(W1):
                        for e in T.vectorized(VC):
                            sv[p * VC + e] = T.if_then_else(
                                slot0 >= 0 and slot0 < S, pool[T.max(slot0, 0), c0 * W1 + p * VC + e], T.cast(0, dt)
                            )
                    for p in T.unroll(W):
                        for e in T.vectorized(VC):
                            wv[p * VC + e] = weight[c0 * W + p * VC + e]
                    if key.has_bias:
                        for e in T.vectorized(VC):
                            bv[e] = bias[c0 + e]
                    for j in T.serial(L):
                        t = s + j
                        for e in T.vectorized(VC):
                            xc[e] = x[t, c0 + e]
                        for i in T.unroll(VC):
                            accv[i] = T.cast(bv[i], f32) if key.has_bias else T.float32(0)
                            for k in T.unroll(W1):
                                accv[i] = accv[i] + T.cast(wv[i * W + k], f32) * T.cast(sv[i * W1 + k], f32)
                            accv[i] = accv[i] + T.cast(wv[i * W + W1], f32) * T.cast(xc[i], f32)
                            if key.silu:
                                accv[i] = accv[i] / (T.float32(1) + T.exp(-accv[i]))
                            ov[i] = T.cast(accv[i], dt)
                        for e in T.vectorized(VC):
                            out[t, c0 + e] = ov[e]
                        for i in T.unroll(VC):
                            for k in T.unroll(W1 - 1):
                                sv[i * W1 + k] = sv[i * W1 + k + 1]
                            sv[i * W1 + W1 - 1] = xc[i]
                        sl = T.cast(slots[t], i32)
                        # A slot the next token of this sequence writes again is skipped: nothing
                        # reads it in between, so the final contents are identical.
                        nxt = T.if_then_else(j + 1 < L, T.cast(slots[T.min(t + 1, Tn - 1)], i32), -1)
                        if sl >= 0 and sl < S and sl != nxt:
                            for p in T.unroll(W1):
                                for e in T.vectorized(VC):
                                    pool[sl, c0 * W1 + p * VC + e] = sv[p * VC + e]
                else:
                    # -- zeros for the tokens outside [first start, last end): for this row of
                    # programs `s` is where the last sequence ends (see the bounds above) --------
                    lo = 0 if lengths_style else T.max(T.min(T.cast(seq_meta[0], i32), Tn), 0)
                    for t in T.serial(lo):
                        for e in T.vectorized(VC):
                            out[t, c0 + e] = zero[e]
                    for t in T.serial(Tn - s):
                        for e in T.vectorized(VC):
                            out[s + t, c0 + e] = zero[e]

    return conv_update


def conv_varlen_out_program(key: "ConvVarlenBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """Varlen pass A: ``(x, pool, weight, bias, cu, slots, has_init, out, top, nbits)``; every output
    row written, the pool only read. ``top`` is the largest power of two <= B (0 when B == 0) and
    ``nbits`` its bit length: the binary search's step and step count."""
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH, BT = THREADS, TOKENS_PER_PROGRAM
    NCB = (D + TH * VC - 1) // (TH * VC)
    Tn, XS, S, BM, NI, NH, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NI", "NH", "NBIAS"))
    NB = BM - 1

    @T.prim_func
    def conv_varlen_out(
        x: T.StridedTensor((Tn, D), (XS, 1), dt),
        pool: T.Tensor((S, D * W1), dt),
        weight: T.Tensor((D * W,), dt),
        bias: T.Tensor((NBIAS,), dt),
        cu: T.Tensor((BM,), key.cu_dtype),
        slots: T.Tensor((NI,), key.slot_dtype),
        has_init: T.Tensor((NH,), "uint8"),
        out: T.Tensor((Tn, D), dt),
        top: T.int32,
        nbits: T.int32,
    ):
        with T.Kernel(NCB, T.ceildiv(Tn, BT), threads=TH) as (bx, by):
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            t0 = by * BT
            owner = T.alloc_shared((BT,), i32)
            first = T.alloc_shared((BT,), i32)
            pos = T.alloc_var(i32)
            step = T.alloc_var(i32)
            wv = T.alloc_local((VC * W,), dt)
            bv = T.alloc_local((VC,), dt)
            xs = T.alloc_local((BT * VC,), dt)  # the tile's rows, all loads in flight at once
            xw = T.alloc_local((W1 * VC,), dt)  # the window before the current token, tap-major
            accv = T.alloc_local((VC,), f32)
            ov = T.alloc_local((VC,), dt)
            # -- each token's sequence: the last b with cu[b] <= t, if it covers t --------------
            if tid < BT:
                t = t0 + tid
                pos = 0
                step = top
                for _ in T.serial(nbits):  # halving steps from the largest power of two <= B
                    if pos + step < NB:
                        if T.cast(cu[pos + step], i32) <= t:
                            pos = pos + step
                    step = step // 2
                covered = NB > 0 and t < Tn
                lo = T.cast(cu[T.min(pos, NB)], i32)
                hi = T.cast(cu[T.min(pos + 1, NB)], i32)
                owner[tid] = T.if_then_else(covered and lo <= t and t < hi and lo >= 0, pos, -1)
                first[tid] = lo
            T.sync_threads()

            if c0 < D:
                for p in T.unroll(W):
                    for e in T.vectorized(VC):
                        wv[p * VC + e] = weight[c0 * W + p * VC + e]
                if key.has_bias:
                    for e in T.vectorized(VC):
                        bv[e] = bias[c0 + e]
                for k in T.unroll(W1):
                    for e in T.vectorized(VC):
                        xw[k * VC + e] = T.if_then_else(t0 - W1 + k >= 0, x[T.max(t0 - W1 + k, 0), c0 + e],
                                                        T.cast(0, dt))
                for j in T.unroll(BT):
                    for e in T.vectorized(VC):
                        xs[j * VC + e] = T.if_then_else(t0 + j < Tn, x[T.min(t0 + j, Tn - 1), c0 + e], T.cast(0, dt))
                for j in T.unroll(BT):
                    t = t0 + j
                    b = owner[j]
                    sb = first[j]
                    if b >= 0 and t - sb < W1:
                        # A head token: taps before the sequence start come from its initial window
                        # (they stay right for the following tokens of the same sequence).
                        slot = T.cast(slots[b], i32)
                        for k in T.unroll(W1):
                            if t - W1 + k < sb:
                                for i in T.unroll(VC):
                                    if key.has_init:
                                        # window entry W - 1 + (u - start) of row u = t - (W - 1) + k
                                        xw[k * VC + i] = T.if_then_else(
                                            has_init[b] != 0 and slot >= 0 and slot < S,
                                            pool[T.max(slot, 0), (c0 + i) * W1 + t + k - sb], T.cast(0, dt),
                                        )
                                    else:
                                        xw[k * VC + i] = T.cast(0, dt)
                    for i in T.unroll(VC):
                        accv[i] = T.cast(bv[i], f32) if key.has_bias else T.float32(0)
                        for k in T.unroll(W1):
                            accv[i] = accv[i] + T.cast(wv[i * W + k], f32) * T.cast(xw[k * VC + i], f32)
                        accv[i] = accv[i] + T.cast(wv[i * W + W1], f32) * T.cast(xs[j * VC + i], f32)
                        if key.silu:
                            accv[i] = accv[i] / (T.float32(1) + T.exp(-accv[i]))
                        ov[i] = T.cast(accv[i], dt)
                    if t < Tn:
                        for e in T.vectorized(VC):
                            out[t, c0 + e] = T.if_then_else(b >= 0, ov[e], T.cast(0, dt))
                    for k in T.unroll(W1 - 1):
                        for i in T.unroll(VC):
                            xw[k * VC + i] = xw[(k + 1) * VC + i]
                    for i in T.unroll(VC):
                        xw[(W1 - 1) * VC + i] = xs[j * VC + i]

    return conv_varlen_out


def conv_varlen_state_program(key: "ConvVarlenBuildKey") -> Any:
    """Varlen pass B: ``(x, pool, cu, slots, has_init)``; each non-empty sequence with a valid
    slot writes its final window (its last W - 1 inputs, from the initial window where short)."""
    import tilelang.language as T

    i32, dt = "int32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH = THREADS
    NCB = (D + TH * VC - 1) // (TH * VC)
    Tn, XS, S, BM, NI, NH = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NI", "NH"))
    NB = BM - 1

    @T.prim_func
    def conv_varlen_state(
        x: T.StridedTensor((Tn, D), (XS, 1), dt),
        pool: T.Tensor((S, D * W1), dt),
        cu: T.Tensor((BM,), key.cu_dtype),
        slots: T.Tensor((NI,), key.slot_dtype),
        has_init: T.Tensor((NH,), "uint8"),
    ):
        with T.Kernel(NCB, NB, threads=TH) as (bx, by):
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            s = T.alloc_var(i32)
            e_ = T.alloc_var(i32)
            nv = T.alloc_local((VC * W1,), dt)  # the final window, channel-major like the pool
            xr = T.alloc_local((VC,), dt)
            s = T.max(T.min(T.cast(cu[by], i32), Tn), 0)
            e_ = T.max(T.min(T.cast(cu[by + 1], i32), Tn), s)
            slot = T.cast(slots[by], i32)
            if c0 < D and e_ > s and slot >= 0 and slot < S:
                for k in T.unroll(W1):
                    u = e_ - W1 + k
                    if u >= s:
                        for e in T.vectorized(VC):
                            xr[e] = x[u, c0 + e]
                        for i in T.unroll(VC):
                            nv[i * W1 + k] = xr[i]
                    else:
                        # read before this thread writes the same elements below
                        for i in T.unroll(VC):
                            if key.has_init:
                                nv[i * W1 + k] = T.if_then_else(has_init[by] != 0, pool[slot, (c0 + i) * W1 + W1 + u - s],
                                                                T.cast(0, dt))
                            else:
                                nv[i * W1 + k] = T.cast(0, dt)
                for p in T.unroll(W1):
                    for e in T.vectorized(VC):
                        pool[slot, c0 * W1 + p * VC + e] = nv[p * VC + e]

    return conv_varlen_state
