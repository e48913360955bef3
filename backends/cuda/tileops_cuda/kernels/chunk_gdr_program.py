"""The chunked gated delta rule (ChunkGatedDeltaRuleFwdOp) as three TileLang programs.

Host-side decisions (the build key, refusals, the work buffers, the launcher) live in
:mod:`tileops_cuda.kernels.chunk_gdr`; semantics are ``manifest/gated_delta_prefill.yaml``'s
and the algebra is the reference's (``tileops_cpu_ref.chunk_gdr``): per chunk of ``C = 64``
tokens and value head, with ``G`` the running sum of ``g`` from the chunk start,
``A_ij = β_i e^{G_i−G_j} k_i·k_j`` (``j < i``), ``Tinv = (I + A)⁻¹``,
``W = Tinv (β e^G K)``, ``U = Tinv (β V)``; the state ``h = Sᵀ`` (``[DK, DV]``) then runs
``D = U − W h``, ``h ← e^{G_last} h + Kᵀ (e^{G_last−G} ⊙ D)``, and the output is
``O = (e^G ⊙ Q) h + (tril(e^{G_i−G_j}) ⊙ Q Kᵀ) D``, scaled.

The programs, in launch order (one CUDA stream, nothing synchronises):

0. ``meta``: one program. From ``cu_seqlens`` and the slots in their own integer dtypes, the
   int32 metadata the others read: ``cu``, the prefix sums as the spec reads them
   (``cummax(clip(cu_seqlens))``: valid metadata as it is, unchecked metadata laid end to end
   inside ``[0, T)``, each entry clipped in its own dtype), the slots as int32 (a 64-bit slot past
   int32 as -1, padding, never wrapped onto a real slot) and the chunk table ``cc`` (one launch
   where torch took five: a max-scan and a prefix sum over the sequences in blocks of
   ``META_THREADS``, each block two warp-shuffle scans and three barriers); and zeros in ``out``
   for the tokens no sequence covers (none for valid metadata).
1. ``wy``: one program per (chunk, value head). Loads the chunk's k, v, g, β (rows past the
   sequence's end are zero), forms the cumulative decays and, with in-kernel l2 norm, the
   key rows' inverse norms (applied as row/column scales, so k itself is never rounded
   after normalising), builds ``A`` in float32, inverts ``I + A`` in float32 (16×16
   diagonal blocks by forward substitution, one column per thread, then the off-diagonal
   blocks row block by row block), and writes ``W``, ``U``, the keys the state walk needs,
   ``k̂_i e^{G_last−G_i}`` (bf16, FLA's precision), the cumulative decays and the key scales
   (float32).
2. ``state``: one program per (sequence, value head, ``BV`` columns of ``h``): the only
   sequential part. Reads the initial state from the sequence's pool slot (zeros where it
   has none), walks the sequence's chunks storing ``h`` before each chunk (bf16) and
   ``D`` (bf16), and writes the final state, rounded once, back to the slot. Every load in
   the walk is a whole tile of a chunk-major buffer, so ``T.Pipelined`` prefetches the next
   chunk's while this one computes (``key.stages``).
3. ``output``: one program per (chunk, value head, ``BV`` output columns), independent
   of each other: ``O`` from q, k, the stored ``h`` and ``D``; rows past the sequence's end
   are not stored.

Varlen: ``cc [B + 1]`` (made on the device by ``meta``) holds the prefix sums of each
sequence's chunk count; chunk ``c`` belongs to the last sequence ``b`` with ``cc[b] <= c``
(a binary search of ``nbits`` halving steps from ``top``, the largest power of two <= B).
Grids are sized by the bound ``NC = (T + 63 B) // 64`` on the chunk count (the clipped lengths
are >= 0 and sum to at most T, whatever the metadata held), so nothing
waits for the metadata on the host; programs past ``cc[B]`` compute on zero rows and store
nothing anyone reads. Work buffers are laid out by chunk (``[NC, C, NV, D]``), so every
program reads and writes whole 64-row tiles. Nothing depends on B, T or the pool size at
compile time.

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._common import block_scan_macro, uncovered_rows_macro
from ._index_metadata import clip_tokens, narrowed_index
from .rgdr_program import L2NORM_EPS

if TYPE_CHECKING:
    from .chunk_gdr import ChunkGDRBuildKey

__all__ = ["CHUNK", "META_THREADS", "THREADS", "chunk_gdr_meta_program", "chunk_gdr_output_program",
           "chunk_gdr_state_program", "chunk_gdr_wy_program", "output_block_v", "state_block_v"]

#: Tokens per chunk (flash-linear-attention's and the reference's value).
CHUNK = 64
#: Threads per program, every kernel.
THREADS = 128
#: Threads of the metadata program (sequences summed a block at a time).
META_THREADS = 256
#: Rows of the diagonal blocks the inverse starts from.
_SUB = 16
#: The slots an int32 holds: the metadata program makes a wider slot past them -1 (padding) rather than wrap it
#: onto a real one; the state program's own ``0 <= slot < S`` test reads the rest (no pool size reaches ``meta``).
_INT32_SLOTS = 2**31 - 1


def state_block_v(head_v_dim: int) -> int:
    """Columns of ``h`` per state program: 32 keeps a single long sequence on ~NV·DV/32 SMs."""
    return 32


def output_block_v(head_v_dim: int) -> int:
    """Output columns per output program: all of them up to 128 (Q Kᵀ is then formed once)."""
    return head_v_dim if head_v_dim <= 128 else 64


def _lookup_macro(T: Any, C: int) -> Any:
    """A TileLang macro: chunk ``bc`` -> ``meta[0]`` its first token, ``meta[1]`` its valid rows
    (0 for a program past the last chunk, whose loads are then all masked)."""
    i32 = "int32"

    @T.macro
    def lookup(cu, cc, bc, top, nbits, NB, meta):
        meta[2] = 0  # the sequence: the last b < NB with cc[b] <= bc
        meta[3] = top  # the search step
        for _ in T.serial(nbits):
            if meta[2] + meta[3] < NB:
                if cc[meta[2] + meta[3]] <= bc:
                    meta[2] = meta[2] + meta[3]
            meta[3] = meta[3] // 2
        b = meta[2]
        meta[0] = cu[b] + (bc - cc[b]) * C
        meta[1] = T.if_then_else(bc < cc[NB], T.max(T.min(cu[b + 1] - meta[0], C), 0), 0)
        meta[0] = T.if_then_else(meta[1] > 0, meta[0], T.cast(0, i32))

    return lookup


def _inverse_norms_macro(T: Any, C: int, D: int) -> Any:
    """A TileLang macro: ``dst[i] = factor · (1 / ||tile[i]|| if l2norm else 1)`` (float32, eps as
    the reference's l2 norm)."""
    f32 = "float32"

    @T.macro
    def inverse_norms(tile, sq, ss, dst, l2norm, factor):
        for i, d in T.Parallel(C, D):
            sq[i, d] = T.cast(tile[i, d], f32) * T.cast(tile[i, d], f32)
        T.reduce_sum(sq, ss, dim=1)
        for i in T.Parallel(C):
            dst[i] = T.if_then_else(l2norm != 0, T.rsqrt(ss[i] + T.float32(L2NORM_EPS)), T.float32(1)) * factor

    return inverse_norms


def _masked_rows_macro(T: Any, C: int, D: int, dt: str) -> Any:
    """A TileLang macro: ``dst[i, :] = src[t0 + i, head, :]`` for ``i < n``, zeros below."""

    @T.macro
    def masked_rows(src, t0, head, n, dst):
        for i, d in T.Parallel(C, D):
            dst[i, d] = T.if_then_else(i < n, src[t0 + i, head, d], T.cast(0, dt))

    return masked_rows


def chunk_gdr_meta_program(key: "ChunkGDRBuildKey") -> Any:
    """Kernel 0: ``(cu_seqlens, slots, cu, slots32, cc, out)``, one program of ``META_THREADS``.

    ``cu`` is the prefix sums as the spec reads them, ``cummax(clip(cu_seqlens))`` with ``clip(x) =
    min(max(x, 0), T)`` (``T`` is ``out``'s rows): each entry clipped in its own dtype, so an int64 one
    past int32 never wraps, then made int32. Valid metadata (from 0, non-decreasing, to T) is its own
    ``cu``; unchecked metadata lays the sequences end to end inside ``[0, T)``, as RGDR's
    ``clipped_bounds`` does, so every length ``cu[b + 1] - cu[b]`` is >= 0 and the chunk table fits the
    grids' bound. ``slots32`` the slots as int32 (a 64-bit one past int32: -1). ``cc[0] = 0`` and
    ``cc[b + 1] = cc[b] + floor((cu[b + 1] - cu[b] + 63) / 64)``. The sequences are read a block of
    ``META_THREADS`` at a time: a max-scan of the clipped entries (a barrier more), a sum-scan of the chunk
    counts, and every thread carries the running maximum and total to the next block. Then the tokens
    no sequence covers, ``[0, cu[0])`` and ``[cu[B], T)`` (none for valid metadata), get zero outputs,
    one 16-byte vector a thread and step: the other programs write only the sequences' rows."""
    import tilelang.language as T

    i32, TH, C, dt = "int32", META_THREADS, CHUNK, key.input_dtype
    NV, DV = key.num_v_heads, key.head_v_dim
    BM, NS, Tn = T.dynamic("BM"), T.dynamic("NS"), T.dynamic("T")
    block_scan, block_max_scan = block_scan_macro(TH), block_scan_macro(TH, T.max)
    zero_rows = uncovered_rows_macro(TH, (NV, DV), dt)

    @T.prim_func
    def chunk_gdr_meta(
        cu_seqlens: T.Tensor((BM,), key.cu_dtype),
        slots: T.Tensor((NS,), key.slot_dtype),
        cu: T.Tensor((BM,), i32),
        slots32: T.Tensor((NS,), i32),
        cc: T.Tensor((BM,), i32),
        out: T.Tensor((Tn, NV, DV), dt),
    ):
        with T.Kernel(1, threads=TH) as _:
            tid = T.get_thread_binding()
            wsum = T.alloc_shared((TH // 32,), i32)
            wmax = T.alloc_shared((TH // 32,), i32)
            carry = T.alloc_var(i32)  # the chunks of the earlier blocks' sequences
            high = T.alloc_var(i32)  # the clipped maximum of the earlier blocks' entries
            part = T.alloc_local((1,), i32)
            start = T.alloc_local((1,), i32)
            carry = 0
            high = 0
            if tid == 0:
                cc[0] = 0
            for r in T.serial(T.ceildiv(BM, TH)):
                b = r * TH + tid
                part[0] = 0
                start[0] = 0
                if b < BM:
                    start[0] = clip_tokens(cu_seqlens[b], Tn)
                if b < NS:
                    slots32[b] = narrowed_index(slots[b], _INT32_SLOTS)  # past int32: -1, padding
                block_max_scan(start, wmax, tid)  # of the clipped entries
                start[0] = T.max(start[0], high)  # cu[b]: where sequence b starts
                if b < BM:
                    cu[b] = start[0]
                if b + 1 < BM:  # its length: max(clip(cu_seqlens[b + 1]), cu[b]) - cu[b]
                    part[0] = T.floordiv(T.max(clip_tokens(cu_seqlens[b + 1], Tn), start[0]) - start[0] + (C - 1), C)
                block_scan(part, wsum, tid)  # of the chunk counts
                if b + 1 < BM:
                    cc[b + 1] = carry + part[0]
                for w in T.unroll(TH // 32):  # the block's maximum and total, the same in every thread
                    high = T.max(high, wmax[w])
                    carry = carry + wsum[w]
                T.sync_threads()  # every thread has read wmax and wsum before the next block writes them
            # -- zeros for the tokens no sequence covers: [0, cu[0]) then [cu[B], T), cu[B] = high --------
            zero_rows(out, clip_tokens(cu_seqlens[0], Tn), high, tid)

    return chunk_gdr_meta


def chunk_gdr_wy_program(key: "ChunkGDRBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """Kernel 1: ``(key, value, g, beta, cu, cc, w, u, kf, gcum, kscale, top, nbits, l2norm)``."""
    import tilelang.language as T

    f32, i32, dt = "float32", "int32", key.input_dtype
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    GRP, C, TH, SUB = NV // NK, CHUNK, THREADS, _SUB
    NSUB = C // SUB
    Tn, BM, NC = (T.dynamic(n) for n in ("T", "BM", "NC"))
    NB = BM - 1
    lookup = _lookup_macro(T, C)
    inverse_norms = _inverse_norms_macro(T, C, DK)
    k_rows, v_rows = _masked_rows_macro(T, C, DK, dt), _masked_rows_macro(T, C, DV, dt)

    @T.prim_func
    def chunk_gdr_wy(
        key_: T.Tensor((Tn, NK, DK), dt),
        value: T.Tensor((Tn, NV, DV), dt),
        g: T.Tensor((Tn, NV), f32),
        beta: T.Tensor((Tn, NV), dt),
        cu: T.Tensor((BM,), i32),
        cc: T.Tensor((BM,), i32),
        w: T.Tensor((NC, C, NV, DK), dt),
        u: T.Tensor((NC, C, NV, DV), dt),
        kf: T.Tensor((NC, C, NV, DK), dt),
        gcum: T.Tensor((NV, NC, C), f32),
        kscale: T.Tensor((NV, NC, C), f32),
        top: T.int32,
        nbits: T.int32,
        l2norm: T.int32,
    ):
        with T.Kernel(NC, NV, threads=TH) as (bc, bh):
            tid = T.get_thread_binding()
            meta = T.alloc_local((4,), i32)
            K_s = T.alloc_shared((C, DK), dt)
            V_s = T.alloc_shared((C, DV), dt)
            g_s = T.alloc_shared((C,), f32)
            gc_s = T.alloc_shared((C,), f32)
            b_s = T.alloc_shared((C,), f32)
            rk_s = T.alloc_shared((C,), f32)
            sk_s = T.alloc_shared((C,), f32)
            fk_s = T.alloc_shared((C,), f32)
            sq = T.alloc_fragment((C, DK), f32)
            ss = T.alloc_fragment((C,), f32)
            KK = T.alloc_fragment((C, C), f32)
            A_s = T.alloc_shared((C, C), f32)
            Ti_s = T.alloc_shared((C, C), f32)
            R_s = T.alloc_shared((SUB, C), f32)
            Tk_s = T.alloc_shared((C, C), dt)
            Tv_s = T.alloc_shared((C, C), dt)
            W_f = T.alloc_fragment((C, DK), f32)
            U_f = T.alloc_fragment((C, DV), f32)
            W_o = T.alloc_shared((C, DK), dt)
            U_o = T.alloc_shared((C, DV), dt)
            col = T.alloc_local((SUB,), f32)
            acc = T.alloc_var(f32)
            run = T.alloc_var(f32)

            lookup(cu, cc, bc, top, nbits, NB, meta)
            t0 = meta[0]
            n = meta[1]
            # -- the chunk's rows (zero past the sequence's end), decays, write strengths ------
            k_rows(key_, t0, bh // GRP, n, K_s)
            v_rows(value, t0, bh, n, V_s)
            for i in T.Parallel(C):
                g_s[i] = T.if_then_else(i < n, g[t0 + i, bh], T.float32(0))
                b_s[i] = T.if_then_else(i < n, T.cast(beta[t0 + i, bh], f32), T.float32(0))
            T.sync_threads()
            if tid == 0:  # 64 additions in order, as the reference's cumsum
                run = T.float32(0)
                for i in T.serial(C):
                    run = run + g_s[i]
                    gc_s[i] = run
            inverse_norms(K_s, sq, ss, rk_s, l2norm, T.float32(1))
            T.sync_threads()
            for i in T.Parallel(C):
                sk_s[i] = b_s[i] * rk_s[i] * T.exp(gc_s[i])
                fk_s[i] = rk_s[i] * T.exp(gc_s[C - 1] - gc_s[i])
                gcum[bh, bc, i] = gc_s[i]
                kscale[bh, bc, i] = rk_s[i]
            # the state kernel's keys, scaled by their decay to the chunk's end: k̂_i e^{G_last−G_i}
            for i, k in T.Parallel(C, DK):
                kf[bc, i, bh, k] = T.cast(T.cast(K_s[i, k], f32) * fk_s[i], dt)
            # -- A = strictly lower (β_i e^{G_i−G_j} k̂_i·k̂_j), float32 ------------------------
            T.gemm(K_s, K_s, KK, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                A_s[i, j] = T.if_then_else(
                    i > j, KK[i, j] * (b_s[i] * rk_s[i] * rk_s[j]) * T.exp(gc_s[i] - gc_s[j]), T.float32(0))
                Ti_s[i, j] = T.float32(0)
            T.sync_threads()
            # -- (I + A)⁻¹: diagonal 16×16 blocks, one column per thread ------------------------
            if tid < C:
                blk = tid // SUB
                c = tid % SUB
                for r in T.unroll(SUB):
                    col[r] = T.float32(0)
                for r in T.unroll(SUB):
                    acc = T.float32(0)
                    for m in T.unroll(SUB):  # A is zero on and above the diagonal, col[m >= r] is 0
                        acc = acc + A_s[blk * SUB + r, blk * SUB + m] * col[m]
                    col[r] = T.if_then_else(r == c, T.float32(1), -acc)
                for r in T.unroll(SUB):
                    Ti_s[blk * SUB + r, blk * SUB + c] = col[r]
            T.sync_threads()
            # -- then block row I: Tinv[I, :I] = −Tinv[I, I] · (A[I, :I] · Tinv[:I, :I]) --------
            for I in T.unroll(1, NSUB):
                for e in T.serial(T.ceildiv(SUB * SUB * I, TH)):
                    idx = e * TH + tid
                    if idx < SUB * SUB * I:
                        r = idx // (SUB * I)
                        cj = idx % (SUB * I)
                        acc = T.float32(0)
                        for m in T.serial(SUB * I):
                            acc = acc + A_s[SUB * I + r, m] * Ti_s[m, cj]
                        R_s[r, cj] = acc
                T.sync_threads()
                for e in T.serial(T.ceildiv(SUB * SUB * I, TH)):
                    idx = e * TH + tid
                    if idx < SUB * SUB * I:
                        r = idx // (SUB * I)
                        cj = idx % (SUB * I)
                        acc = T.float32(0)
                        for m in T.unroll(SUB):
                            acc = acc + Ti_s[SUB * I + r, SUB * I + m] * R_s[m, cj]
                        Ti_s[SUB * I + r, cj] = -acc
                T.sync_threads()
            # -- W = Tinv diag(β e^G r_k) K,  U = Tinv diag(β) V (bf16 operands, fp32 sums) -----
            for i, j in T.Parallel(C, C):
                Tk_s[i, j] = T.cast(Ti_s[i, j] * sk_s[j], dt)
                Tv_s[i, j] = T.cast(Ti_s[i, j] * b_s[j], dt)
            T.gemm(Tk_s, K_s, W_f, clear_accum=True)
            T.gemm(Tv_s, V_s, U_f, clear_accum=True)
            T.copy(W_f, W_o)
            T.copy(U_f, U_o)
            T.copy(W_o, w[bc, 0:C, bh, 0:DK])
            T.copy(U_o, u[bc, 0:C, bh, 0:DV])

    return chunk_gdr_wy


def chunk_gdr_state_program(key: "ChunkGDRBuildKey") -> Any:
    """Kernel 2: ``(w, u, kf, gcum, cu, cc, slots, has_init, pool, h, d, use_init)``."""
    import tilelang.language as T

    f32, i32, dt, sdt = "float32", "int32", key.input_dtype, key.state_dtype
    NV, DK, DV = key.num_v_heads, key.head_k_dim, key.head_v_dim
    C, TH = CHUNK, THREADS
    BV = state_block_v(DV)
    BM, NC, S, NH = (T.dynamic(n) for n in ("BM", "NC", "S", "NH"))
    NB = BM - 1

    @T.prim_func
    def chunk_gdr_state(
        w: T.Tensor((NC, C, NV, DK), dt),
        u: T.Tensor((NC, C, NV, DV), dt),
        kf: T.Tensor((NC, C, NV, DK), dt),
        gcum: T.Tensor((NV, NC, C), f32),
        cu: T.Tensor((BM,), i32),
        cc: T.Tensor((BM,), i32),
        slots: T.Tensor((NB,), i32),
        has_init: T.Tensor((NH,), "uint8"),
        pool: T.Tensor((S, NV, DV, DK), sdt),
        h: T.Tensor((NC, NV, DK, DV), dt),
        d: T.Tensor((NC, C, NV, DV), dt),
        use_init: T.int32,
    ):
        with T.Kernel(DV // BV, NV, NB, threads=TH) as (bv, bh, bb):
            v0 = bv * BV
            h_f = T.alloc_fragment((DK, BV), f32)
            h_s = T.alloc_shared((DK, BV), dt)
            S_s = T.alloc_shared((BV, DK), f32)
            W_s = T.alloc_shared((C, DK), dt)
            U_s = T.alloc_shared((C, BV), dt)
            K_s = T.alloc_shared((C, DK), dt)
            g_s = T.alloc_shared((C,), f32)
            D_f = T.alloc_fragment((C, BV), f32)
            D_s = T.alloc_shared((C, BV), dt)
            c0 = cc[bb]
            nch = cc[bb + 1] - c0
            L = cu[bb + 1] - cu[bb]
            slot = slots[bb]
            live = slot >= 0 and slot < S
            reads = live and use_init != 0 and has_init[T.min(bb, NH - 1)] != 0
            # -- the initial state, transposed into h = Sᵀ (zeros without one) -------------------
            for v, k in T.Parallel(BV, DK):
                S_s[v, k] = T.if_then_else(reads, T.cast(pool[T.max(slot, 0), bh, v0 + v, k], f32), T.float32(0))
            for k, v in T.Parallel(DK, BV):
                h_f[k, v] = S_s[v, k]
            for j in T.Pipelined(nch, num_stages=key.stages):
                # every load is a whole tile of the chunk-major buffers: the next chunk's are in
                # flight while this one computes
                T.copy(w[c0 + j, 0:C, bh, 0:DK], W_s)
                T.copy(u[c0 + j, 0:C, bh, v0 : v0 + BV], U_s)
                T.copy(kf[c0 + j, 0:C, bh, 0:DK], K_s)
                T.copy(gcum[bh, c0 + j, 0:C], g_s)
                T.copy(h_f, h_s)
                T.copy(h_s, h[c0 + j, bh, 0:DK, v0 : v0 + BV])
                # D = U − W h (stored for the output kernel), then h ← e^{G_last} h + K̃ᵀ D
                T.gemm(W_s, h_s, D_f, clear_accum=True)
                for i, v in T.Parallel(C, BV):
                    D_s[i, v] = T.cast(T.cast(U_s[i, v], f32) - D_f[i, v], dt)
                T.copy(D_s, d[c0 + j, 0:C, bh, v0 : v0 + BV])
                for k, v in T.Parallel(DK, BV):
                    h_f[k, v] = h_f[k, v] * T.exp(g_s[C - 1])  # padded rows add 0 to the running sum
                T.gemm(K_s, D_s, h_f, transpose_A=True)
            # -- the final state, rounded once, into the slot (none for padding or no tokens) ---
            for k, v in T.Parallel(DK, BV):
                S_s[v, k] = h_f[k, v]
            for v, k in T.Parallel(BV, DK):
                if live and L > 0:
                    pool[T.max(slot, 0), bh, v0 + v, k] = T.cast(S_s[v, k], sdt)

    return chunk_gdr_state


def chunk_gdr_output_program(key: "ChunkGDRBuildKey") -> Any:
    """Kernel 3: ``(query, key, gcum, kscale, h, d, cu, cc, out, top, nbits, l2norm, scale)``."""
    import tilelang.language as T

    f32, i32, dt = "float32", "int32", key.input_dtype
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    GRP, C, TH = NV // NK, CHUNK, THREADS
    BV = output_block_v(DV)
    Tn, BM, NC = (T.dynamic(n) for n in ("T", "BM", "NC"))
    NB = BM - 1
    lookup = _lookup_macro(T, C)
    inverse_norms = _inverse_norms_macro(T, C, DK)
    rows = _masked_rows_macro(T, C, DK, dt)

    @T.prim_func
    def chunk_gdr_output(
        query: T.Tensor((Tn, NK, DK), dt),
        key_: T.Tensor((Tn, NK, DK), dt),
        gcum: T.Tensor((NV, NC, C), f32),
        kscale: T.Tensor((NV, NC, C), f32),
        h: T.Tensor((NC, NV, DK, DV), dt),
        d: T.Tensor((NC, C, NV, DV), dt),
        cu: T.Tensor((BM,), i32),
        cc: T.Tensor((BM,), i32),
        out: T.Tensor((Tn, NV, DV), dt),
        top: T.int32,
        nbits: T.int32,
        l2norm: T.int32,
        scale: T.float32,
    ):
        with T.Kernel(NC, NV, DV // BV, threads=TH) as (bc, bh, bv):
            v0 = bv * BV
            meta = T.alloc_local((4,), i32)
            Q_s = T.alloc_shared((C, DK), dt)
            K_s = T.alloc_shared((C, DK), dt)
            H_s = T.alloc_shared((DK, BV), dt)
            D_s = T.alloc_shared((C, BV), dt)
            P_s = T.alloc_shared((C, C), dt)
            gc_s = T.alloc_shared((C,), f32)
            rk_s = T.alloc_shared((C,), f32)
            rq_s = T.alloc_shared((C,), f32)
            sq = T.alloc_fragment((C, DK), f32)
            ss = T.alloc_fragment((C,), f32)
            QK = T.alloc_fragment((C, C), f32)
            O_f = T.alloc_fragment((C, BV), f32)
            O_s = T.alloc_shared((C, BV), dt)

            lookup(cu, cc, bc, top, nbits, NB, meta)
            t0 = meta[0]
            n = meta[1]
            rows(query, t0, bh // GRP, n, Q_s)
            rows(key_, t0, bh // GRP, n, K_s)
            for i in T.Parallel(C):
                gc_s[i] = gcum[bh, bc, i]
                rk_s[i] = kscale[bh, bc, i]
            T.copy(h[bc, bh, 0:DK, v0 : v0 + BV], H_s)
            T.copy(d[bc, 0:C, bh, v0 : v0 + BV], D_s)
            inverse_norms(Q_s, sq, ss, rq_s, l2norm, scale)
            T.gemm(Q_s, H_s, O_f, clear_accum=True)
            T.gemm(Q_s, K_s, QK, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                P_s[i, j] = T.cast(
                    T.if_then_else(i >= j, QK[i, j] * rk_s[j] * T.exp(gc_s[i] - gc_s[j]), T.float32(0)), dt)
            for i, v in T.Parallel(C, BV):
                O_f[i, v] = O_f[i, v] * T.exp(gc_s[i])
            T.gemm(P_s, D_s, O_f)
            for i, v in T.Parallel(C, BV):
                O_s[i, v] = T.cast(O_f[i, v] * rq_s[i], dt)
            for i, v in T.Parallel(C, BV):  # whole 16-byte runs of a row; rows of the next sequence are not ours
                if i < n:
                    out[t0 + i, bh, v0 + v] = O_s[i, v]

    return chunk_gdr_output
