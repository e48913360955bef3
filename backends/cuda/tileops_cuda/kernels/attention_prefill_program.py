"""Causal varlen GQA prefill as TileLang programs: the cache write and the attention.

Host-side decisions live in :mod:`tileops_cuda.kernels.attention_prefill`; semantics are
``manifest/attention.yaml``'s ``AttentionPrefillFwdOp`` (the reference is
``tileops_cpu_ref.attention.attention_prefill``).

Cache write: one program per (tile of ``TT`` tokens, key/value head); a thread copies 16-byte
vectors. Token ``t`` of sequence ``b`` (found by a binary search over ``cu_seqlens``) goes to
flat cache row ``b · L + (t - cu[b])`` (contiguous) or ``slot_mapping[t]`` (paged; negative:
nothing). The same programs write zeros to the outputs of tokens outside ``[cu[0], cu[B])``
(only unchecked metadata leaves any), so every output element is written by exactly one pass.

Attention: one program per (query tile of ``BM`` tokens, query head), the tiles of all
sequences numbered consecutively (their prefix sums made on the device; a program finds its
sequence by a binary search), so the grid, sized from T and B, needs nothing read on the host.
Key/value tiles of ``BN`` tokens stream through shared memory in a software pipeline (bulk
copies; warp-specialised TMA on sm_90) up to the diagonal; only tiles that
cross the diagonal or the sequence's end are masked, scores there -inf and value rows past
the end zeros (whatever the rows there hold stays out of the product). The online softmax is
float32 in the log2 domain (scores times ``scale · log2(e)`` before the running maximum); the
probabilities are rounded to the input dtype for the tensor-core product with V (as
FlashAttention does), the accumulator stays float32, the output is rounded once. Query tiles
are visited last-first (the last tile of a sequence has the most key tiles).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from .attention_decode_program import online_softmax_step

if TYPE_CHECKING:
    from .attention_prefill import PrefillBuildKey, PrefillTiling

__all__ = ["prefill_attention_program", "prefill_cache_program"]


def last_at_or_below() -> Any:
    """The TileLang macro ``search(prefix, count, x, nbits, found, step)``: ``found[0]`` (a
    one-element local buffer) becomes the largest ``b < count`` with ``prefix[b] <= x`` (``prefix`` non-decreasing,
    ``prefix[0] <= x``), by ``nbits + 1`` halving steps (``nbits`` the bit length of ``count``);
    ``step`` is scratch of the same kind. Which sequence holds token ``x`` (``prefix`` = cu_seqlens), or
    query tile ``x`` (``prefix`` = the prefix sums of the sequences' tile counts)."""
    import tilelang.language as T

    @T.macro
    def search(prefix: Any, count: Any, x: Any, nbits: Any, found: Any, step: Any):
        found[0] = 0
        step[0] = T.shift_left(1, nbits)
        for _ in T.serial(nbits + 1):
            if found[0] + step[0] < count and T.cast(prefix[T.min(found[0] + step[0], count - 1)], "int32") <= x:
                found[0] = found[0] + step[0]
            step[0] = T.shift_right(step[0], 1)

    return search


def prefill_cache_program(key: "PrefillBuildKey", tokens_per_program: int, threads: int) -> Any:
    """The cache-write PrimFunc: ``(key, value, cu_seqlens, slot_mapping, key_cache,
    value_cache, out, cache_len, nbits)``; ``slot_mapping`` is a one-element dummy for the
    contiguous layout; ``nbits`` is the bit length of B (the binary search's step count)."""
    import tilelang.language as T

    dt, i32 = key.dtype, "int32"
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    VC = 16 // (2 if dt in ("float16", "bfloat16") else 4)
    TT, TH = tokens_per_program, threads
    VPR = D // VC  # vectors a key/value row
    Tn, NL, BM1, NS = (T.dynamic(n) for n in ("T", "NL", "BM1", "NS"))
    search = last_at_or_below()

    @T.prim_func
    def prefill_cache(
        key_new: T.Tensor((Tn, NKV, D), dt),
        value_new: T.Tensor((Tn, NKV, D), dt),
        cu_seqlens: T.Tensor((BM1,), key.cu_dtype),
        slot_mapping: T.Tensor((NS,), key.slot_dtype or i32),
        key_cache: T.Tensor((NL, NKV, D), dt),
        value_cache: T.Tensor((NL, NKV, D), dt),
        out: T.Tensor((Tn, NQ * D), dt),
        cache_len: T.int32,
        nbits: T.int32,
    ):
        with T.Kernel(T.ceildiv(Tn, TT), NKV, threads=TH) as (bx, h):
            tid = T.get_thread_binding()
            b = T.alloc_local((1,), i32)
            step = T.alloc_local((1,), i32)
            row = T.alloc_var(i32)
            first = T.cast(cu_seqlens[0], i32)
            last = T.cast(cu_seqlens[BM1 - 1], i32)
            for it in T.serial(T.ceildiv(TT * VPR, TH)):
                e = it * TH + tid
                t = bx * TT + e // VPR
                c = (e % VPR) * VC
                if e < TT * VPR and t < Tn:
                    if t >= first and t < last:
                        search(cu_seqlens, BM1 - 1, t, nbits, b, step)  # the sequence holding t
                        if key.paged:
                            row = T.cast(slot_mapping[t], i32)
                        else:  # a prompt longer than its row writes nothing past the row
                            pos = t - T.cast(cu_seqlens[b[0]], i32)
                            row = T.if_then_else(pos < cache_len, b[0] * cache_len + pos, -1)
                        if row >= 0 and row < NL:
                            for v in T.vectorized(VC):
                                key_cache[row, h, c + v] = key_new[t, h, c + v]
                            for v in T.vectorized(VC):
                                value_cache[row, h, c + v] = value_new[t, h, c + v]
                    else:
                        for g in T.serial(NQ // NKV):
                            for v in T.vectorized(VC):
                                out[t, (h * (NQ // NKV) + g) * D + c + v] = T.cast(0, dt)

    return prefill_cache


def prefill_attention_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:  # noqa: C901
    """The attention PrimFunc: ``(query, key, value, cu_seqlens, tile_cu, out, scale_log2,
    nbits)``; ``tile_cu`` are the prefix sums of the sequences' query-tile counts (made on the
    device), ``nbits`` the bit length of B. The grid's first axis is ``ceil(T / BM) + B - 1``,
    every sequence's tiles fit in it; programs past ``tile_cu[B]`` return at once."""
    import tilelang.language as T

    dt, f32, i32 = key.dtype, "float32", "int32"
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    G = NQ // NKV
    BM, BN, TH = tiling.block_m, tiling.block_n, tiling.threads
    Tn, BM1 = T.dynamic("T"), T.dynamic("BM1")
    NEG = -T.infinity(f32)
    softmax_step = online_softmax_step(BM, BN, D)
    search = last_at_or_below()

    @T.prim_func
    def prefill_attention(
        query: T.Tensor((Tn, NQ, D), dt),
        key_new: T.Tensor((Tn, NKV, D), dt),
        value_new: T.Tensor((Tn, NKV, D), dt),
        cu_seqlens: T.Tensor((BM1,), key.cu_dtype),
        tile_cu: T.Tensor((BM1,), i32),
        out: T.Tensor((Tn, NQ, D), dt),
        scale_log2: T.float32,
        nbits: T.int32,
    ):
        with T.Kernel(T.ceildiv(Tn, BM) + BM1 - 1, NQ, threads=TH) as (bx, hq):
            q_s = T.alloc_shared((BM, D), dt)
            k_s = T.alloc_shared((BN, D), dt)
            v_s = T.alloc_shared((BN, D), dt)
            acc_s = T.alloc_fragment((BM, BN), f32)
            acc_p = T.alloc_fragment((BM, BN), dt)
            acc_o = T.alloc_fragment((BM, D), f32)
            m_cur = T.alloc_fragment((BM,), f32)
            m_prev = T.alloc_fragment((BM,), f32)
            rescale = T.alloc_fragment((BM,), f32)
            row_sum = T.alloc_fragment((BM,), f32)
            l_sum = T.alloc_fragment((BM,), f32)

            found = T.alloc_local((1,), i32)
            step = T.alloc_local((1,), i32)
            # Query tiles numbered across sequences, visited last-first (the last tile of a
            # sequence has the most key tiles); the grid has room for every sequence's partial tile.
            g = T.ceildiv(Tn, BM) + BM1 - 2 - bx
            search(tile_cu, BM1 - 1, g, nbits, found, step)
            b = found[0]
            start = T.cast(cu_seqlens[b], i32)
            length = T.if_then_else(g < tile_cu[BM1 - 1], T.cast(cu_seqlens[b + 1], i32) - start, 0)
            q0 = (g - tile_cu[b]) * BM
            h = hq // G
            tiles = T.if_then_else(q0 < length, T.ceildiv(T.min(q0 + BM, length), BN), 0)

            T.copy(query[start + q0 : start + q0 + BM, hq, :], q_s)
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, NEG)
            for k in T.Pipelined(tiles, num_stages=tiling.stages):
                k0 = k * BN
                T.copy(key_new[start + k0 : start + k0 + BN, h, :], k_s)
                T.clear(acc_s)
                T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                if k0 + BN > q0 or k0 + BN > length:
                    for i, j in T.Parallel(BM, BN):
                        acc_s[i, j] = T.if_then_else(k0 + j <= q0 + i and k0 + j < length, acc_s[i, j] * scale_log2,
                                                     NEG)
                else:
                    for i, j in T.Parallel(BM, BN):
                        acc_s[i, j] = acc_s[i, j] * scale_log2
                softmax_step(acc_s, acc_p, acc_o, m_cur, m_prev, rescale, row_sum, l_sum)
                T.copy(value_new[start + k0 : start + k0 + BN, h, :], v_s)
                if k0 + BN > length:
                    for i, d in T.Parallel(BN, D):
                        v_s[i, d] = T.if_then_else(k0 + i < length, v_s[i, d], T.cast(0, dt))
                T.gemm(acc_p, v_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            if q0 < length:
                for i, d in T.Parallel(BM, D):
                    if q0 + i < length:
                        out[start + q0 + i, hq, d] = T.cast(acc_o[i, d] / l_sum[i], dt)

    return prefill_attention
