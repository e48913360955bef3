"""The causal conv1d kernels as TileLang programs: the decode step and the varlen prefill.

Host-side decisions (build keys, refusals, the launchers) live in
:mod:`tileops_cuda.kernels.conv1d`; semantics are ``manifest/conv.yaml``'s (the reference is
``tileops_cpu_ref.conv``). Shared layout:

* A thread owns ``VC`` consecutive channels (one 16-byte vector of ``x``). The pool is passed
  flat, ``[S, D * (W - 1)]``, so the thread's windows are ``VC * (W - 1)`` consecutive elements
  (``W - 1`` 16-byte vectors, channel-major: element ``i * (W - 1) + k`` is channel ``c0 + i``,
  tap ``k``) and its weights ``VC * W`` consecutive elements of the flat ``[D * W]`` weight.
* ``x`` is a strided ``[T, D]`` view (row stride ``XS``, unit channel stride): a slice of the
  projection output is read in place. ``out`` is contiguous.
* float32 math; bias and SiLU in float32 (``x · rcp(1 + exp(-x))`` with the approximate
  exp and reciprocal: ~1e-6 relative, far under every output dtype's tolerance); one
  rounding to the output dtype.
* Nothing depends on B, T or the pool size at compile time.

Decode: one program per (channel block, sequence), plus one row of programs that writes zeros
to the tokens no sequence covers (only unchecked metadata leaves any). A program reads its
sequence's initial window into registers, then runs its tokens in order, writing each
token's window to its slot (skipped when the next token writes the same slot).

Varlen: one program per (channel block, tile of ``tokens`` tokens), no per-sequence loop. Its
x rows (and the ``W - 1`` before the tile) are loaded as 16-byte vectors before the metadata
is known; a token's sequence is found by a binary search over cu_seqlens. A sequence's head
tokens (its first ``W - 1``, whose taps reach into the initial window) are all computed by
the program holding its first token, even past the tile's end (the next program skips
them), and that program writes the sequence's final window after the reads: each pool slot
is read and written by one thread per channel vector, in program order, so one launch
suffices (two programs reading and writing one slot would have no order between them).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey

__all__ = ["conv_update_program", "conv_varlen_program"]


def _lanes(dtype: str) -> int:
    return 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]


def _load_taps(key: "ConvUpdateBuildKey | ConvVarlenBuildKey") -> Any:
    """A macro loading a thread's weights (``VC * W``) and bias (``VC``) as 16-byte vectors;
    both programs issue it first, before anything that waits on metadata."""
    import tilelang.language as T

    VC, W = _lanes(key.dtype), key.width

    @T.macro
    def load_taps(weight, bias, wv, bv, c0):
        for p in T.unroll(W):
            for e in T.vectorized(VC):
                wv[p * VC + e] = weight[c0 * W + p * VC + e]
        if key.has_bias:
            for e in T.vectorized(VC):
                bv[e] = bias[c0 + e]

    return load_taps


def conv_update_program(key: "ConvUpdateBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The decode PrimFunc: ``(x, pool, weight, bias, seq_meta, slots, nacc, out)``; absent
    optional inputs are passed as one-element dummies the program never reads."""
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH = key.threads
    NCB = (D + TH * VC - 1) // (TH * VC)
    lengths_style = key.seq_lens_style == "lengths"
    has_acc = key.accepted_dtype is not None
    Tn, XS, S, BM, NA, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NA", "NBIAS"))
    NB = BM if lengths_style else BM - 1
    load_taps = _load_taps(key)

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
        T.assume(XS % VC == 0)  # the launcher passes only rows of whole 16-byte vectors
        with T.Kernel(NCB, NB + 1, threads=TH) as (bx, by):
            if key.registers:
                T.annotate_min_blocks_per_sm(max(1, 65536 // (TH * key.registers)))
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            red = T.alloc_shared((max(TH // 32, 1),), i32)
            own = T.alloc_var(i32)
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
            # Every load that does not depend on another is issued first: the chain
            # metadata -> slot -> window is the decode step's latency, paid once per program.
            if c0 < D:
                load_taps(weight, bias, wv, bv, c0)
            own = T.cast(seq_meta[T.max(T.min(by, BM - 1), 0)], i32)
            acc_n = T.cast(nacc[T.max(T.min(by, NA - 1), 0)], i32) if has_acc else 1
            if lengths_style:
                part = T.alloc_var(i32)
                part = 0
                for h in T.unroll(2):  # the first 2 * TH lengths: independent loads, all in flight
                    if h * TH + tid < by:
                        part = part + T.cast(seq_meta[h * TH + tid], i32)
                for it in T.serial(T.max(T.ceildiv(by, TH) - 2, 0)):
                    if (it + 2) * TH + tid < by:
                        part = part + T.cast(seq_meta[(it + 2) * TH + tid], i32)
                for off in T.unroll(5):
                    part = part + T.shfl_xor(part, 16 >> off)
                if tid % 32 == 0:
                    red[tid // 32] = part
                T.sync_threads()
                start = 0
                for w in T.unroll(max(TH // 32, 1)):
                    start = start + red[w]
                end = start + T.if_then_else(by < NB, own, 0)
            else:
                start = own
                end = T.cast(seq_meta[T.min(by + 1, NB)], i32)
            s = T.max(T.min(start, Tn), 0)
            L = T.max(T.min(end, Tn), s) - s
            for e in T.vectorized(VC):
                zero[e] = T.cast(0, dt)

            if c0 < D:
                if by < NB:
                    # -- the initial window: the slot of the first accepted token, zeros if padding --
                    acc_n = T.max(T.min(acc_n, L), 1)
                    slot0 = T.if_then_else(L > 0, T.cast(slots[T.max(T.min(s + acc_n - 1, Tn - 1), 0)], i32), -1)
                    for p in T.unroll(W1):
                        for e in T.vectorized(VC):
                            sv[p * VC + e] = T.if_then_else(
                                slot0 >= 0 and slot0 < S, pool[T.max(slot0, 0), c0 * W1 + p * VC + e], T.cast(0, dt)
                            )
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
                                accv[i] = accv[i] * T.fast_rcp(T.float32(1) + T.__exp(-accv[i]))
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


def conv_varlen_program(key: "ConvVarlenBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The varlen PrimFunc: ``(x, pool, weight, bias, cu, slots, has_init, out, top, nbits)``; every
    output row and every non-empty sequence's final window written. ``top`` is the largest
    power of two <= B (0 when B == 0) and ``nbits`` its bit length: the binary search's step
    and step count."""
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH, BT = key.threads, key.tokens
    E = W1 - 1  # tokens past the tile a program may compute: its sequences' head tokens
    NCB = (D + TH * VC - 1) // (TH * VC)
    Tn, XS, S, BM, NI, NH, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NI", "NH", "NBIAS"))
    NB = BM - 1
    load_taps = _load_taps(key)

    @T.prim_func
    def conv_varlen(
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
        T.assume(XS % VC == 0)  # the launcher passes only rows of whole 16-byte vectors
        with T.Kernel(NCB, T.ceildiv(Tn, BT), threads=TH) as (bx, by):
            if key.registers:
                T.annotate_min_blocks_per_sm(max(1, 65536 // (TH * key.registers)))
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            t0 = by * BT
            cus = T.alloc_shared((TH,), i32)  # cu_seqlens' first TH entries: the search's steps
            owner = T.alloc_shared((BT + E,), i32)
            first = T.alloc_shared((BT + E,), i32)
            last = T.alloc_shared((BT + E,), i32)
            pos = T.alloc_var(i32)
            step = T.alloc_var(i32)
            wv = T.alloc_local((VC * W,), dt)
            bv = T.alloc_local((VC,), dt)
            xs = T.alloc_local(((BT + E) * VC,), dt)  # the tile's rows (and head tokens past it)
            xw = T.alloc_local((W1 * VC,), dt)  # the window before the current token, tap-major
            accv = T.alloc_local((VC,), f32)
            ov = T.alloc_local((VC,), dt)
            xr = T.alloc_local((VC,), dt)
            nv = T.alloc_local((VC * W1,), dt)  # a final window, channel-major like the pool
            # -- 16-byte loads of everything that does not depend on the metadata, in flight
            # while the binary search below runs (window rows are also the previous program's:
            # mostly L2 hits) ------------------------------------------------------------------
            if c0 < D:
                load_taps(weight, bias, wv, bv, c0)
                for k in T.unroll(W1):
                    if t0 - W1 + k >= 0:
                        for e in T.vectorized(VC):
                            xw[k * VC + e] = x[t0 - W1 + k, c0 + e]
                    else:
                        for e in T.vectorized(VC):
                            xw[k * VC + e] = T.cast(0, dt)
                for j in T.unroll(BT):
                    if t0 + j < Tn:
                        for e in T.vectorized(VC):
                            xs[j * VC + e] = x[t0 + j, c0 + e]
                    else:
                        for e in T.vectorized(VC):
                            xs[j * VC + e] = T.cast(0, dt)
            # -- each token's sequence: the last b with cu[b] <= t, if it covers t. The first TH
            # entries of cu_seqlens come into shared memory in one parallel load, so the search's
            # dependent steps are shared-memory reads (global ones only past TH sequences) ------
            cus[tid] = T.cast(cu[T.min(tid, NB)], i32)
            T.sync_threads()
            if tid < BT + E:  # tokens + W - 2 <= threads (conv_refusal)
                t = t0 + tid
                pos = 0
                step = top
                for _ in T.serial(nbits):  # halving steps from the largest power of two <= B
                    if pos + step < NB:
                        if T.if_then_else(pos + step < TH, cus[T.min(pos + step, TH - 1)],
                                          T.cast(cu[pos + step], i32)) <= t:
                            pos = pos + step
                    step = step // 2
                covered = NB > 0 and t < Tn
                lo = T.if_then_else(pos < TH, cus[T.min(pos, TH - 1)], T.cast(cu[T.min(pos, NB)], i32))
                hi = T.if_then_else(pos + 1 < TH, cus[T.min(pos + 1, TH - 1)], T.cast(cu[T.min(pos + 1, NB)], i32))
                owner[tid] = T.if_then_else(covered and lo <= t and t < hi and lo >= 0, pos, -1)
                first[tid] = lo
                last[tid] = T.min(hi, Tn)  # metadata past T (unchecked) never reads past x
            T.sync_threads()

            # A sequence's head tokens (its first W - 1, whose taps reach into its initial
            # window) are all computed by the program holding its first token, even past the
            # tile's end, and skipped by the next program: the one program that reads a pool
            # slot is then the one that writes it (below), in that order.
            if c0 < D:
                for j in T.unroll(BT + E):
                    t = t0 + j
                    b = owner[j]
                    sb = first[j]
                    head = b >= 0 and t - sb < W1
                    mine = (j < BT and (b < 0 or t - sb >= W1 or sb >= t0)) or (
                        j >= BT and head and sb >= t0 and sb < t0 + BT)
                    if j >= BT:
                        if mine:
                            for e in T.vectorized(VC):
                                xs[j * VC + e] = x[t, c0 + e]
                        else:
                            for e in T.vectorized(VC):
                                xs[j * VC + e] = T.cast(0, dt)
                    if mine and head:
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
                    if mine:
                        for i in T.unroll(VC):
                            accv[i] = T.cast(bv[i], f32) if key.has_bias else T.float32(0)
                            for k in T.unroll(W1):
                                accv[i] = accv[i] + T.cast(wv[i * W + k], f32) * T.cast(xw[k * VC + i], f32)
                            accv[i] = accv[i] + T.cast(wv[i * W + W1], f32) * T.cast(xs[j * VC + i], f32)
                            if key.silu:
                                accv[i] = accv[i] * T.fast_rcp(T.float32(1) + T.__exp(-accv[i]))
                            ov[i] = T.if_then_else(b >= 0, T.cast(accv[i], dt), T.cast(0, dt))
                        if t < Tn:
                            for e in T.vectorized(VC):
                                out[t, c0 + e] = ov[e]
                    for k in T.unroll(W1 - 1):
                        for i in T.unroll(VC):
                            xw[k * VC + i] = xw[(k + 1) * VC + i]
                    for i in T.unroll(VC):
                        xw[(W1 - 1) * VC + i] = xs[j * VC + i]
                # -- the final window of each non-empty sequence starting in this tile: its
                # last W - 1 inputs, from its initial window where it is shorter (read before
                # this thread writes the same elements) ----------------------------------------
                for j in T.unroll(BT):
                    b = owner[j]
                    if b >= 0 and first[j] == t0 + j:
                        slot = T.cast(slots[b], i32)
                        if slot >= 0 and slot < S:
                            sb = first[j]
                            e_ = last[j]
                            for k in T.unroll(W1):
                                u = e_ - W1 + k
                                if u >= sb:
                                    for e in T.vectorized(VC):
                                        xr[e] = x[u, c0 + e]
                                    for i in T.unroll(VC):
                                        nv[i * W1 + k] = xr[i]
                                else:
                                    for i in T.unroll(VC):
                                        if key.has_init:
                                            nv[i * W1 + k] = T.if_then_else(
                                                has_init[b] != 0, pool[slot, (c0 + i) * W1 + W1 + u - sb], T.cast(0, dt))
                                        else:
                                            nv[i * W1 + k] = T.cast(0, dt)
                            for p in T.unroll(W1):
                                for e in T.vectorized(VC):
                                    pool[slot, c0 * W1 + p * VC + e] = nv[p * VC + e]

    return conv_varlen
