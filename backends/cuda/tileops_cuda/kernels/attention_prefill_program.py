"""Causal varlen GQA prefill as TileLang programs: the cache write and the attention.

Host-side decisions live in :mod:`tileops_cuda.kernels.attention_prefill`; semantics are
``manifest/attention.yaml``'s ``AttentionPrefillFwdOp`` (the reference is
``tileops_cpu_ref.attention.attention_prefill``).

Every program reads the prompts' prefix sums as the spec reads ``cu_seqlens``: ``cummax(clip(cu_seqlens,
0, T))``, made by the tile-count program (or the launcher's torch path) before the others run, so
unchecked metadata (negative, decreasing, past T) gives each token at most one prompt; below, ``cu``
is those prefix sums.

Cache write: one program per (tile of ``TT`` tokens, key/value head); a thread copies 16-byte
vectors. Token ``t`` of sequence ``b`` (found by a binary search over ``cu``) goes to
flat cache row ``b · L + (t - cu[b])`` (contiguous) or ``slot_mapping[t]`` (paged; outside the
cache's rows: nothing, tested in slot_mapping's own dtype, so a 64-bit ``2**32 + k`` is padding, not row
``k``). The same programs write zeros to the outputs of tokens outside ``[cu[0], cu[B])``
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

The same attention with its pipeline written out (a producer warpgroup, barriers of its own,
asynchronous products) is :mod:`tileops_cuda.kernels.attention_prefill_warpspec`'s; it builds on
:func:`attention_entry`, :func:`causal_scaled_scores` and :func:`cache_rows_writer` here.

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._index_metadata import clip_tokens, narrowed_index
from .attention_decode_program import online_softmax_step, row_reciprocals

if TYPE_CHECKING:
    from .attention_prefill import PrefillBuildKey, PrefillTiling

__all__ = ["attention_entry", "cache_rows_writer", "causal_scaled_scores", "prefill_attention_program",
           "prefill_cache_program", "prefill_tile_counts_program"]


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
                            row = narrowed_index(slot_mapping[t], NL)
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


def prefill_tile_counts_program(key: "PrefillBuildKey", block_m: int) -> Any:
    """The tile-count PrimFunc ``(cu_seqlens, tile_cu, prompt_cu, tokens)``: ``prompt_cu`` the
    prefix sums as the spec reads them, ``cummax(clip(cu_seqlens))`` with ``clip(x) = min(max(x,
    0), tokens)`` (valid metadata unchanged; unchecked metadata laid end to end inside ``[0, T)``,
    as RGDR's ``clipped_bounds`` does), which the cache write and the attention read in place of
    ``cu_seqlens``; ``tile_cu[0] = 0`` and ``tile_cu[b + 1]`` the number of ``block_m``-token
    query tiles of prompts ``0 .. b`` by ``prompt_cu``: the prefix sums the attention's grid
    numbers its tiles by, made in one launch (the launcher's torch path takes about ten small
    kernels). One program of 1024 threads walks the entries 1024 at a time: a max-scan in shared
    memory clips them, each thread counts the tiles of the prompt ending at its entry, a sum-scan
    adds them up, and every thread carries the running maximum and total to the next chunk."""
    import tilelang.language as T

    i32, CH, LOG_CH = "int32", 1024, 10
    cu_t = key.cu_dtype
    BM1 = T.dynamic("BM1")

    def inclusive_scan(combine: Any) -> Any:
        """An in-place Hillis-Steele scan of 1024 non-negative values under ``combine``
        (identity 0), every thread synchronised after it."""

        @T.macro
        def scan(values: Any, tid: Any, below: Any):
            for s in T.serial(LOG_CH):
                T.sync_threads()
                below[0] = T.if_then_else(tid >= T.shift_left(1, s), values[tid - T.shift_left(1, s)], 0)
                T.sync_threads()
                values[tid] = combine(values[tid], below[0])
            T.sync_threads()

        return scan

    running_max, running_sum = inclusive_scan(T.max), inclusive_scan(lambda a, b: a + b)

    @T.prim_func
    def prefill_tile_counts(cu_seqlens: T.Tensor((BM1,), cu_t), tile_cu: T.Tensor((BM1,), i32),
                            prompt_cu: T.Tensor((BM1,), cu_t), tokens: T.int32):
        with T.Kernel(1, threads=CH):
            tid = T.get_thread_binding()
            ends = T.alloc_shared((CH,), i32)
            counts = T.alloc_shared((CH,), i32)
            below = T.alloc_local((1,), i32)
            top = T.alloc_local((1,), i32)  # the clipped maximum of the earlier chunks' entries
            carry = T.alloc_local((1,), i32)  # their tiles
            top[0] = 0
            carry[0] = 0
            for c in T.serial(T.ceildiv(BM1, CH)):
                j = c * CH + tid
                ends[tid] = T.if_then_else(j < BM1, clip_tokens(cu_seqlens[T.min(j, BM1 - 1)], tokens), 0)
                running_max(ends, tid, below)
                end = T.max(top[0], ends[tid])
                begin = T.if_then_else(tid > 0, T.max(top[0], ends[T.max(tid - 1, 0)]), top[0])
                counts[tid] = T.if_then_else(j > 0 and j < BM1, T.ceildiv(end - begin, block_m), 0)
                running_sum(counts, tid, below)
                if j < BM1:
                    prompt_cu[j] = T.cast(end, cu_t)
                    tile_cu[j] = carry[0] + counts[tid]
                top[0] = T.max(top[0], ends[CH - 1])
                carry[0] = carry[0] + counts[CH - 1]
                T.sync_threads()  # every thread has read ends[CH - 1] and counts[CH - 1] before the next chunk

    return prefill_tile_counts


def cache_rows_writer(key: "PrefillBuildKey", tiling: "PrefillTiling", threads: int) -> Any:
    """The TileLang macro ``write(tid, key_new, value_new, out, hq, h, start, length, q0, b, bx,
    cu_seqlens, slot_mapping, key_cache, value_cache, cache_len)`` run by ``threads`` threads of an
    attention program (``tid`` their index) that writes the caches itself: what the cache-write
    program does, split by the attention's tiles so each element has one writer.

    Key/value rows: the program of query tile ``q0`` (sequence ``b``) and query head ``hq`` owns
    the rows ``i`` of its tile with ``i % G == hq % G`` (``G`` query heads a kv head ``h``), so the
    G programs that read kv head ``h``'s diagonal tile write its 128 rows between them, each row
    once (the query tile that holds token t is the only one with t among its rows; a sequence's
    tokens are its query rows). A row goes where the cache-write program puts it (``slot_mapping``,
    negative or past the pool, in its own dtype: nothing; contiguous: ``b · cache_len + pos`` while ``pos <
    cache_len``). Outputs of tokens outside ``[cu[0], cu[B])``: the program whose grid index ``bx``
    is ``t // BM`` zeros head ``hq``'s row of token ``t`` (a token index, not a query tile: the
    grid has ``ceil(T / BM) + B - 1 >= ceil(T / BM)`` tiles, and no query tile covers such a
    token)."""
    import tilelang.language as T

    dt, i32 = key.dtype, "int32"
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    BM = tiling.block_m
    G = NQ // NKV
    VC = 16 // (2 if dt in ("float16", "bfloat16") else 4)
    VPR = D // VC  # 16-byte vectors a row
    ROWS = -(-BM // G)  # rows of its tile a program writes (at most)

    @T.macro
    def write(tid: Any, key_new: Any, value_new: Any, out: Any, hq: Any, h: Any, start: Any, length: Any, q0: Any,
              b: Any, bx: Any, cu_seqlens: Any, slot_mapping: Any, key_cache: Any, value_cache: Any, cache_len: Any):
        Tn, NL, BM1 = out.shape[0], key_cache.shape[0], cu_seqlens.shape[0]
        row = T.alloc_var(i32)
        for it in T.serial(T.ceildiv(ROWS * VPR, threads)):
            e = it * threads + tid
            i = (e // VPR) * G + hq % G
            c = (e % VPR) * VC
            if e < ROWS * VPR and i < BM and q0 + i < length:
                if key.paged:
                    row = narrowed_index(slot_mapping[start + q0 + i], NL)
                else:  # a prompt longer than its row writes nothing past the row
                    row = T.if_then_else(q0 + i < cache_len, b * cache_len + q0 + i, -1)
                if row >= 0 and row < NL:
                    for v in T.vectorized(VC):
                        key_cache[row, h, c + v] = key_new[start + q0 + i, h, c + v]
                    for v in T.vectorized(VC):
                        value_cache[row, h, c + v] = value_new[start + q0 + i, h, c + v]
        first = T.cast(cu_seqlens[0], i32)
        last = T.cast(cu_seqlens[BM1 - 1], i32)
        if bx * BM < first or bx * BM + BM > last:  # only unchecked metadata leaves such tokens
            for it in T.serial(T.ceildiv(BM * VPR, threads)):
                e = it * threads + tid
                t = bx * BM + e // VPR
                c = (e % VPR) * VC
                if e < BM * VPR and t < Tn and (t < first or t >= last):
                    for v in T.vectorized(VC):
                        out[t, hq, c + v] = T.cast(0, dt)

    return write


def causal_scaled_scores(rows: int, cols: int) -> Any:
    """The TileLang macro ``causal(acc_s, k0, r0, length, scale_log2)``: the scores of query
    rows ``r0 ..`` against keys ``k0 ..`` times ``scale_log2``, -inf for a key after its query
    or past the sequence's ``length``; only a tile that crosses the diagonal or the end is
    masked (the others are scaled only)."""
    import tilelang.language as T

    NEG = -T.infinity("float32")

    @T.macro
    def causal(acc_s: Any, k0: Any, r0: Any, length: Any, scale_log2: Any):
        if k0 + cols > r0 or k0 + cols > length:
            for i, j in T.Parallel(rows, cols):
                acc_s[i, j] = T.if_then_else(k0 + j <= r0 + i and k0 + j < length, acc_s[i, j] * scale_log2, NEG)
        else:
            for i, j in T.Parallel(rows, cols):
                acc_s[i, j] = acc_s[i, j] * scale_log2

    return causal


def _grid(heads_first: bool, tiles: Any, heads: Any) -> tuple[Any, Any]:
    """The grid's (x, y) axes from (query tiles, heads), or back: x varies fastest, so with
    ``heads_first`` the heads of one query tile are launched together."""
    return (heads, tiles) if heads_first else (tiles, heads)


def attention_entry(key: "PrefillBuildKey", tiling: "PrefillTiling", threads: int, body: Any) -> Any:
    """The attention PrimFunc both programs share: ``(query, key, value, cu_seqlens, tile_cu,
    out, scale_log2, nbits)``; ``tile_cu`` are the prefix sums of the sequences' query-tile
    counts (made on the device), ``nbits`` the bit length of B. With the key's ``cache_write``
    ``"attention"`` the caches follow ``tile_cu``: ``(..., tile_cu, slot_mapping, key_cache,
    value_cache, out, cache_len, scale_log2, nbits)`` (the cache-write program's). The grid is
    ``ceil(T / BM) + B - 1`` query tiles (every sequence's tiles fit) by ``NQ`` heads, tiles the
    fastest axis unless the key's ``grid`` is ``"heads"`` (then a tile's heads run together: the
    longest tiles of every head first, and the heads of one kv head read its key/value tiles back
    to back, from L2 after the first); each program finds its query tile, then runs the macro
    ``body(query, key, value, out, scale_log2, hq, h, start, length, q0, tiles, b, bx, cache)``
    (programs past ``tile_cu[B]`` get ``tiles = 0``: nothing to attend; ``b`` is the tile's
    sequence, ``bx`` the grid's tile index). ``cache`` is ``()`` or, when the program writes the
    caches, ``(cu_seqlens, slot_mapping, key_cache, value_cache, cache_len)``."""
    import tilelang.language as T

    dt, i32 = key.dtype, "int32"
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    BM, BN = tiling.block_m, tiling.block_n
    Tn, BM1, NL, NS = T.dynamic("T"), T.dynamic("BM1"), T.dynamic("NL"), T.dynamic("NS")
    search = last_at_or_below()

    heads_first = key.grid == "heads"

    @T.macro
    def tile(query: Any, key_new: Any, value_new: Any, cu_seqlens: Any, tile_cu: Any, out: Any, scale_log2: Any,
             nbits: Any, bx: Any, hq: Any, cache: Any):
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
        tiles = T.if_then_else(q0 < length, T.ceildiv(T.min(q0 + BM, length), BN), 0)
        body(query, key_new, value_new, out, scale_log2, hq, hq // (NQ // NKV), start, length, q0, tiles, b, bx,
             cache)

    grid = _grid(heads_first, T.ceildiv(Tn, BM) + BM1 - 1, NQ)
    if key.cache_write == "attention":
        @T.prim_func
        def prefill_attention_writing_caches(
            query: T.Tensor((Tn, NQ, D), dt),
            key_new: T.Tensor((Tn, NKV, D), dt),
            value_new: T.Tensor((Tn, NKV, D), dt),
            cu_seqlens: T.Tensor((BM1,), key.cu_dtype),
            tile_cu: T.Tensor((BM1,), i32),
            slot_mapping: T.Tensor((NS,), key.slot_dtype or i32),
            key_cache: T.Tensor((NL, NKV, D), dt),
            value_cache: T.Tensor((NL, NKV, D), dt),
            out: T.Tensor((Tn, NQ, D), dt),
            cache_len: T.int32,
            scale_log2: T.float32,
            nbits: T.int32,
        ):
            with T.Kernel(*grid, threads=threads) as (ax, ay):
                bx, hq = _grid(heads_first, ax, ay)
                tile(query, key_new, value_new, cu_seqlens, tile_cu, out, scale_log2, nbits, bx, hq,
                     (cu_seqlens, slot_mapping, key_cache, value_cache, cache_len))

        return prefill_attention_writing_caches

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
        with T.Kernel(*grid, threads=threads) as (ax, ay):
            bx, hq = _grid(heads_first, ax, ay)
            tile(query, key_new, value_new, cu_seqlens, tile_cu, out, scale_log2, nbits, bx, hq, ())

    return prefill_attention


def prefill_attention_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The attention (:func:`attention_entry`'s PrimFunc) as one TileLang ``T.Pipelined`` loop,
    which TileLang turns into a warp-specialised TMA pipeline; each product is waited for as
    it is issued."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    BM, BN = tiling.block_m, tiling.block_n
    NEG = -T.infinity(f32)
    softmax_step = online_softmax_step(BM, BN, D)
    inverted = row_reciprocals(BM)
    causal_scores = causal_scaled_scores(BM, BN)

    @T.macro
    def pipelined(query: Any, key_new: Any, value_new: Any, out: Any, scale_log2: Any, hq: Any, h: Any, start: Any,
                  length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
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

        T.copy(query[start + q0 : start + q0 + BM, hq, :], q_s)
        T.fill(acc_o, 0)
        T.fill(l_sum, 0)
        T.fill(m_cur, NEG)
        for k in T.Pipelined(tiles, num_stages=tiling.stages):
            k0 = k * BN
            T.copy(key_new[start + k0 : start + k0 + BN, h, :], k_s)
            T.clear(acc_s)
            T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            causal_scores(acc_s, k0, q0, length, scale_log2)
            softmax_step(acc_s, acc_p, acc_o, m_cur, m_prev, rescale, row_sum, l_sum)
            T.copy(value_new[start + k0 : start + k0 + BN, h, :], v_s)
            if k0 + BN > length:
                for i, d in T.Parallel(BN, D):
                    v_s[i, d] = T.if_then_else(k0 + i < length, v_s[i, d], T.cast(0, dt))
            T.gemm(acc_p, v_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
        if q0 < length:
            inverted(l_sum)
            for i, d in T.Parallel(BM, D):
                if q0 + i < length:
                    out[start + q0 + i, hq, d] = T.cast(acc_o[i, d] * l_sum[i], dt)

    return attention_entry(key, tiling, tiling.threads, pipelined)
