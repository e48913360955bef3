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

:func:`prefill_attention_overlap_program` is the same attention with its pipeline written out
(a producer warpgroup, barriers of its own, asynchronous products) so that the softmax of one key
tile overlaps the P·V product of the previous one; the build key's ``program`` picks it.
With the key's ``cache_write`` ``"attention"`` its producer warpgroup also does the cache write's
job once its loads are issued (:func:`cache_rows_writer`), and the cache-write program is not launched.

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from .attention_decode_program import online_softmax_statistics, online_softmax_step

if TYPE_CHECKING:
    from .attention_prefill import PrefillBuildKey, PrefillTiling

__all__ = ["cache_rows_writer", "prefill_attention_overlap_program", "prefill_attention_program", "prefill_cache_program",
           "prefill_tile_counts_program"]


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


def prefill_tile_counts_program(key: "PrefillBuildKey", block_m: int) -> Any:
    """The tile-count PrimFunc ``(cu_seqlens, tile_cu)``: ``tile_cu[0] = 0`` and ``tile_cu[b + 1]``
    the number of ``block_m``-token query tiles of sequences ``0 .. b`` (a negative length counts
    none): the prefix sums the attention's grid numbers its tiles by, made in one launch (the
    launcher's torch path takes about eight small kernels). One program of 1024 threads walks the
    sequences 1024 at a time: each thread counts one, a scan in shared memory sums them, and
    every thread carries the running total to the next chunk."""
    import tilelang.language as T

    i32, CH, LOG_CH = "int32", 1024, 10
    BM1 = T.dynamic("BM1")

    @T.prim_func
    def prefill_tile_counts(cu_seqlens: T.Tensor((BM1,), key.cu_dtype), tile_cu: T.Tensor((BM1,), i32)):
        with T.Kernel(1, threads=CH):
            tid = T.get_thread_binding()
            counts = T.alloc_shared((CH,), i32)
            below = T.alloc_local((1,), i32)
            carry = T.alloc_local((1,), i32)
            carry[0] = 0
            if tid == 0:
                tile_cu[0] = 0
            for c in T.serial(T.ceildiv(BM1 - 1, CH)):
                b = c * CH + tid
                n = T.if_then_else(b < BM1 - 1, T.cast(cu_seqlens[T.min(b + 1, BM1 - 1)], i32)
                                   - T.cast(cu_seqlens[T.min(b, BM1 - 1)], i32), 0)
                counts[tid] = T.ceildiv(T.max(n, 0), block_m)
                for s in T.serial(LOG_CH):  # inclusive Hillis-Steele scan
                    T.sync_threads()
                    below[0] = T.if_then_else(tid >= T.shift_left(1, s), counts[tid - T.shift_left(1, s)], 0)
                    T.sync_threads()
                    counts[tid] = counts[tid] + below[0]
                T.sync_threads()
                if b < BM1 - 1:
                    tile_cu[b + 1] = carry[0] + counts[tid]
                carry[0] = carry[0] + counts[CH - 1]

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
    negative or past the pool: nothing; contiguous: ``b · cache_len + pos`` while ``pos <
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
                    row = T.cast(slot_mapping[start + q0 + i], i32)
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
            for i, d in T.Parallel(BM, D):
                if q0 + i < length:
                    out[start + q0 + i, hq, d] = T.cast(acc_o[i, d] / l_sum[i], dt)

    return attention_entry(key, tiling, tiling.threads, pipelined)


def prefill_attention_overlap_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:  # noqa: C901
    """The attention PrimFunc with its pipeline written out (same parameters, grid and
    semantics as :func:`prefill_attention_program`): warpgroup 0 loads (TMA), warpgroups 1
    and 2 own 64 query rows each and overlap the softmax of key tile j with the P·V product
    of tile j - 1, as FlashAttention-3 does.

    Per consumer step j: issue ``S_j = Q·K_jᵀ`` and ``O += P_{j-1}·V_{j-1}`` (asynchronous
    wgmma), wait for ``S_j`` only, run the softmax statistics of ``S_j`` in float32 while the
    P·V product runs, then wait for it, rescale ``O`` and round ``P_j`` to the input dtype.
    The K and V ring (``stages`` deep each) has full/empty barriers of its own, so a K stage
    is refilled as soon as both warpgroups' score products are done with it. The output is
    staged through the query tile's shared memory and written with 16-byte row stores (rows
    past the sequence's end are not written)."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    BM, BN, S = tiling.block_m, tiling.block_n, tiling.stages
    WM = BM // 2  # query rows of one consumer warpgroup
    if (BM, tiling.threads) != (128, 256):
        raise ValueError(f"the overlap prefill program is written for two consumer warpgroups of 64 query rows "
                         f"(block_m=128, threads=256), not block_m={BM}, threads={tiling.threads}")
    CONSUMER_WARPS = 8
    NEG = -T.infinity(f32)
    writes_caches = key.cache_write == "attention"
    write_caches = cache_rows_writer(key, tiling, 128)
    softmax_statistics = online_softmax_statistics(WM, BN)
    causal_scores = causal_scaled_scores(WM, BN)

    @T.macro
    def scores(wg: int, j: Any, q_s: Any, k_s: Any, k_full: Any, acc_s: Any):
        """Issue ``S_j = Q·K_jᵀ`` (asynchronous; nothing waits here)."""
        T.barrier_wait(k_full[j % S], (j // S) & 1)
        T.wgmma_gemm(q_s, k_s[j % S, :, :], acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                     clear_accum=True)

    @T.macro
    def statistics(wg: int, j: Any, k_empty: Any, acc_s: Any, m_cur: Any, m_prev: Any, rescale: Any, row_sum: Any,
                   l_sum: Any, r0: Any, length: Any, scale_log2: Any):
        """After ``S_j`` landed: free its K stage, mask and scale it, update the running maximum
        and sum; ``acc_s`` ends as the float32 probabilities (the accumulator is not touched)."""
        T.warpgroup_fence_operand(acc_s, num_regs=WM * BN // 128)
        if T.get_thread_binding() % 32 == 0:
            T.mbarrier_arrive(k_empty[j % S])
        causal_scores(acc_s, j * BN, r0, length, scale_log2)
        softmax_statistics(acc_s, m_cur, m_prev, rescale, row_sum, l_sum)

    @T.macro
    def values(j: Any, v_s: Any, v_full: Any, acc_p: Any, acc_o: Any):
        """Issue ``O += P_j·V_j`` (asynchronous)."""
        T.barrier_wait(v_full[j % S], (j // S) & 1)
        T.wgmma_gemm(acc_p, v_s[j % S, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def values_done(j: Any, v_empty: Any, acc_o: Any):
        T.warpgroup_fence_operand(acc_o, num_regs=WM * D // 128)
        if T.get_thread_binding() % 32 == 0:
            T.mbarrier_arrive(v_empty[j % S])

    @T.macro
    def consumer(wg: int, q_s: Any, k_s: Any, v_s: Any, q_full: Any, k_full: Any, k_empty: Any, v_full: Any,
                 v_empty: Any, acc_s: Any, acc_p: Any, acc_o: Any, m_cur: Any, m_prev: Any, rescale: Any,
                 row_sum: Any, l_sum: Any, out: Any, start: Any, length: Any, q0: Any, hq: Any, tiles: Any,
                 scale_log2: Any):
        """One consumer warpgroup's rows: tile 0, the overlapped steady state (straight-line, so
        ptxas keeps the products asynchronous), its last P·V product, the output."""
        T.inc_max_nreg(240)
        r0 = q0 + wg * WM  # this warpgroup's first query row
        # Key tiles with a key at or before one of this warpgroup's rows: the first warpgroup skips the
        # program's last tile when it lies wholly after its rows (every score masked). Its stage is never
        # refilled (the producer waits on an empty barrier only for a tile ``stages`` later), so the
        # other warpgroup alone releasing it deadlocks nothing.
        mine = T.min(tiles, T.ceildiv(r0 + WM, BN))
        if tiles > 0:
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, NEG)
            T.barrier_wait(q_full[0], 0)
            scores(wg, 0, q_s, k_s, k_full, acc_s)
            T.wait_wgmma(0)
            statistics(wg, 0, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
            T.copy(acc_s, acc_p)
            for j in T.serial(1, mine):
                scores(wg, j, q_s, k_s, k_full, acc_s)
                values(j - 1, v_s, v_full, acc_p, acc_o)
                T.wait_wgmma(1)
                statistics(wg, j, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
                T.wait_wgmma(0)
                values_done(j - 1, v_empty, acc_o)
                for i, d in T.Parallel(WM, D):
                    acc_o[i, d] *= rescale[i]
                T.copy(acc_s, acc_p)
            last = mine - 1
            T.barrier_wait(v_full[last % S], (last // S) & 1)
            if last * BN + BN > length:  # the end tile: value rows past the end become zeros
                for i, d in T.Parallel(BN, D):
                    if last * BN + i >= length:
                        v_s[last % S, i, d] = T.cast(0, dt)
                T.fence_proxy_async()
                T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            T.wgmma_gemm(acc_p, v_s[last % S, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)
            T.wait_wgmma(0)
            values_done(last, v_empty, acc_o)
            for i, d in T.Parallel(WM, D):
                q_s[i, d] = T.cast(acc_o[i, d] / l_sum[i], dt)
            T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            for i, d in T.Parallel(WM, D):
                if r0 + i < length:
                    out[start + r0 + i, hq, d] = q_s[i, d]

    @T.macro
    def overlap(query: Any, key_new: Any, value_new: Any, out: Any, scale_log2: Any, hq: Any, h: Any, start: Any,
                length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
        q_s0 = T.alloc_shared((WM, D), dt)
        q_s1 = T.alloc_shared((WM, D), dt)
        k_s = T.alloc_shared((S, BN, D), dt)
        v_s = T.alloc_shared((S, BN, D), dt)
        # Each consumer warpgroup's fragments are its own buffers (TileLang lays a fragment out
        # over the threads of the branch that uses it).
        acc_s0 = T.alloc_fragment((WM, BN), f32)
        acc_p0 = T.alloc_fragment((WM, BN), dt)
        acc_o0 = T.alloc_fragment((WM, D), f32)
        acc_s1 = T.alloc_fragment((WM, BN), f32)
        acc_p1 = T.alloc_fragment((WM, BN), dt)
        acc_o1 = T.alloc_fragment((WM, D), f32)
        stats0 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        stats1 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        # full: the producer's 128 threads arrive (and the bytes land); empty: lane 0 of each
        # consumer warp arrives when its products no longer read the stage.
        q_full = T.alloc_barrier([128])
        k_full = T.alloc_barrier([128] * S)
        k_empty = T.alloc_barrier([CONSUMER_WARPS] * S)
        v_full = T.alloc_barrier([128] * S)
        v_empty = T.alloc_barrier([CONSUMER_WARPS] * S)

        tx = T.get_thread_binding()
        if tx < 128:
            T.dec_max_nreg(24)
            if tiles > 0:
                T.tma_copy(query[start + q0 : start + q0 + WM, hq, :], q_s0, barrier=q_full[0])
                T.tma_copy(query[start + q0 + WM : start + q0 + BM, hq, :], q_s1, barrier=q_full[0])
                T.barrier_arrive(q_full[0])
            for j in T.serial(tiles):
                slot = j % S
                T.barrier_wait(k_empty[slot], ((j // S) & 1) ^ 1)
                T.tma_copy(key_new[start + j * BN : start + j * BN + BN, h, :], k_s[slot, :, :], barrier=k_full[slot])
                T.barrier_arrive(k_full[slot])
                T.barrier_wait(v_empty[slot], ((j // S) & 1) ^ 1)
                T.tma_copy(value_new[start + j * BN : start + j * BN + BN, h, :], v_s[slot, :, :],
                           barrier=v_full[slot])
                T.barrier_arrive(v_full[slot])
            if writes_caches:  # the loads are issued: the idle producer writes this program's share of rows
                write_caches(tx, key_new, value_new, out, hq, h, start, length, q0, b, bx, *cache)
        elif tx < 256:
            consumer(0, q_s0, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty, acc_s0, acc_p0, acc_o0, *stats0,
                     out, start, length, q0, hq, tiles, scale_log2)
        else:
            consumer(1, q_s1, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty, acc_s1, acc_p1, acc_o1, *stats1,
                     out, start, length, q0, hq, tiles, scale_log2)

    # The consumers' threads and a producer warpgroup, as TileLang's automatic pipeline launches.
    return attention_entry(key, tiling, tiling.threads + 128, overlap)
