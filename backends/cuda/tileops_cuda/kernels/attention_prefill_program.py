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

:func:`prefill_attention_overlap_program` is the same attention with its pipeline written out
(a producer warpgroup, barriers of its own, asynchronous products) so that the softmax of one key
tile overlaps the P·V product of the previous one; the build key's ``program`` picks it.
With the key's ``cache_write`` ``"attention"`` its producer warpgroup also does the cache write's
job once its loads are issued (:func:`cache_rows_writer`), and the cache-write program is not launched.
:func:`prefill_attention_q64_program` is that pipeline with one consumer warpgroup (64 query rows, 32-key
stages): 96 KiB of shared memory and 128 registers a thread at launch, so two programs share an SM and one's
fixed phases (query load, first tiles, epilogue) run under the other's key-tile loop. Both are
:func:`warp_specialised_attention` (shared producer and consumer macros).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._index_metadata import clip_tokens, narrowed_index
from .attention_decode_program import online_softmax_statistics, online_softmax_step

if TYPE_CHECKING:
    from .attention_prefill import PrefillBuildKey, PrefillTiling

__all__ = ["cache_rows_writer", "consumer_registers", "consumer_warpgroup", "prefill_attention_overlap_program",
           "prefill_attention_program", "prefill_attention_q64_program", "prefill_cache_program",
           "prefill_tile_counts_program", "producer_warpgroup", "Q64_PROGRAMS_PER_SM", "value_blocks",
           "value_blocks_refusal", "warp_specialised_attention"]


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


#: Rows of a consumer warpgroup's tensor-core tile (wgmma's M) in the warp-specialised programs.
CONSUMER_ROWS = 64
#: Threads of a warpgroup (the unit ``setmaxnreg`` reallocates registers by).
WARPGROUP = 128
#: Registers a producer thread keeps after ``setmaxnreg``; what it gives back goes to the consumers.
PRODUCER_REGISTERS = 24


def consumer_registers(consumers: int, programs_per_sm: int) -> int:
    """Registers a consumer thread can take with ``setmaxnreg`` in a program of one producer and
    ``consumers`` consumer warpgroups, ``programs_per_sm`` programs sharing an SM's 64 Ki registers:
    ptxas gives every thread ``65536 / (programs · threads)`` at launch (rounded down to 8), the
    producer gives back all but :data:`PRODUCER_REGISTERS`, the consumers share that evenly. One
    program of two consumers: 168 at launch, 240 a consumer; two programs of one: 128, 232."""
    launch = 65536 // (programs_per_sm * (consumers + 1) * WARPGROUP) // 8 * 8
    return (launch * (consumers + 1) - PRODUCER_REGISTERS) // consumers // 8 * 8


def _offset(base: Any, rows: int) -> Any:
    """``base + rows``, or ``base`` itself for no rows (no ``+ 0`` in the lowered index)."""
    return base + rows if rows else base


def _value_columns(v_s: Any, stage: Any, block: int, columns: int, blocks: int) -> Any:
    """V stage ``stage``'s columns of output block ``block`` (all of them for one block)."""
    return v_s[stage, :, :] if blocks == 1 else v_s[stage, :, block * columns : (block + 1) * columns]


#: Programs an SM the q64 program is sized for (shared memory and registers both allow it).
Q64_PROGRAMS_PER_SM = 2


def value_blocks(head_dim: int, programs_per_sm: int) -> int:
    """Column blocks the P·V product of a consumer warpgroup is issued in. ptxas fits each instruction into
    the registers a thread has at launch, not the ``setmaxnreg`` count of its region: a 64 x 256 float32
    accumulator (128 registers) plus the product's operands needs 158, more than the 128 of two programs an
    SM, so there the product is issued as 128-column blocks (64 accumulator registers each)."""
    return 2 if programs_per_sm > 1 and head_dim > 128 else 1


def value_blocks_refusal(head_dim: int, programs_per_sm: int) -> str | None:
    """Why a warp-specialised program run ``programs_per_sm`` an SM cannot split a ``head_dim``-column
    output into its :func:`value_blocks` (each a multiple of the shared V tile's 64-column swizzle
    atom), or None."""
    blocks = value_blocks(head_dim, programs_per_sm)
    if blocks > 1 and head_dim % (64 * blocks):
        return (f"at {programs_per_sm} programs an SM the P·V product is issued as {blocks} column blocks (the "
                f"registers a thread has at launch), each a multiple of 64 columns (the V tile's swizzle atom), "
                f"which D={head_dim} does not split into; use program='overlap'")
    return None


def producer_warpgroup(key: "PrefillBuildKey", tiling: "PrefillTiling", consumers: int) -> Any:
    """The TileLang macro ``producer(tx, q_tiles, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty,
    query, key_new, value_new, out, hq, h, start, length, q0, tiles, b, bx, cache)`` of the
    warp-specialised programs: its warpgroup keeps :data:`PRODUCER_REGISTERS`, loads the query
    tile's 64-row parts (``q_tiles``, one a consumer) onto ``q_full``, then streams the K and V
    tiles through their ``stages``-deep rings (a stage refilled once its empty barrier says every
    consumer warp is done with it); with the key's ``cache_write`` ``"attention"`` it then writes
    the program's share of the caches (:func:`cache_rows_writer`)."""
    import tilelang.language as T

    BN, S = tiling.block_n, tiling.stages
    writes_caches = key.cache_write == "attention"
    write_caches = cache_rows_writer(key, tiling, WARPGROUP)
    parts = tuple(range(consumers))

    @T.macro
    def producer(tx: Any, q_tiles: Any, k_s: Any, v_s: Any, q_full: Any, k_full: Any, k_empty: Any, v_full: Any,
                 v_empty: Any, query: Any, key_new: Any, value_new: Any, out: Any, hq: Any, h: Any, start: Any,
                 length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
        T.dec_max_nreg(PRODUCER_REGISTERS)
        if tiles > 0:
            for part in parts:  # a Python tuple: unrolled as the program is built
                T.tma_copy(query[_offset(start + q0, part * CONSUMER_ROWS) : start + q0 + (part + 1) * CONSUMER_ROWS,
                                 hq, :], q_tiles[part], barrier=q_full[0])
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

    return producer


def consumer_warpgroup(key: "PrefillBuildKey", tiling: "PrefillTiling", registers: int, value_blocks: int) -> Any:
    """The TileLang macro ``consumer(wg, q_s, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty,
    acc_s, acc_p, acc_os, m_cur, m_prev, rescale, row_sum, l_sum, out, start, length, q0, hq, tiles,
    scale_log2)`` of the warp-specialised programs: consumer warpgroup ``wg`` (``registers`` a thread
    by ``setmaxnreg``) owns query rows ``q0 + 64 · wg ..`` and overlaps the softmax of key tile j with
    the P·V product of tile j - 1, as FlashAttention-3 does. ``acc_os`` is the output accumulator as
    ``value_blocks`` column blocks of ``D / value_blocks``, one tensor-core product each.

    Per step j: issue ``S_j = Q·K_jᵀ`` and ``O += P_{j-1}·V_{j-1}`` (asynchronous wgmma), wait for
    ``S_j`` only, run the softmax statistics of ``S_j`` in float32 while the P·V product runs, then
    wait for it, rescale ``O`` and round ``P_j`` to the input dtype. Each K and V stage's empty
    barrier counts one arrival a consumer warp. The output is staged through the warpgroup's query
    tile in shared memory and written with 16-byte row stores (rows past the sequence's end are not
    written)."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    WM, BN, S = CONSUMER_ROWS, tiling.block_n, tiling.stages
    DV = D // value_blocks  # output columns of one accumulator block
    blocks = tuple(range(value_blocks))  # a Python tuple: loops over it unroll as the program is built
    NEG = -T.infinity(f32)
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
    def value_products(j: Any, v_s: Any, acc_p: Any, acc_os: Any):
        """Issue ``O += P_j·V_j``, one asynchronous product a column block."""
        for c in blocks:
            T.wgmma_gemm(acc_p, _value_columns(v_s, j % S, c, DV, value_blocks), acc_os[c],
                         policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def values(j: Any, v_s: Any, v_full: Any, acc_p: Any, acc_os: Any):
        """Issue ``O += P_j·V_j`` (asynchronous)."""
        T.barrier_wait(v_full[j % S], (j // S) & 1)
        value_products(j, v_s, acc_p, acc_os)

    @T.macro
    def values_done(j: Any, v_empty: Any, acc_os: Any):
        for c in blocks:
            T.warpgroup_fence_operand(acc_os[c], num_regs=WM * DV // 128)
        if T.get_thread_binding() % 32 == 0:
            T.mbarrier_arrive(v_empty[j % S])

    @T.macro
    def consumer(wg: int, q_s: Any, k_s: Any, v_s: Any, q_full: Any, k_full: Any, k_empty: Any, v_full: Any,
                 v_empty: Any, acc_s: Any, acc_p: Any, acc_os: Any, m_cur: Any, m_prev: Any, rescale: Any,
                 row_sum: Any, l_sum: Any, out: Any, start: Any, length: Any, q0: Any, hq: Any, tiles: Any,
                 scale_log2: Any):
        """One consumer warpgroup's rows: tile 0, the overlapped steady state (straight-line, so
        ptxas keeps the products asynchronous), its last P·V product, the output."""
        T.inc_max_nreg(registers)
        r0 = q0 + wg * WM  # this warpgroup's first query row
        # Key tiles with a key at or before one of this warpgroup's rows: with two consumers the first skips
        # the program's last tile when it lies wholly after its rows (every score masked). Its stage is never
        # refilled (the producer waits on an empty barrier only for a tile ``stages`` later), so the
        # other warpgroup alone releasing it deadlocks nothing.
        mine = T.min(tiles, T.ceildiv(r0 + WM, BN))
        if tiles > 0:
            for c in blocks:
                T.fill(acc_os[c], 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, NEG)
            T.barrier_wait(q_full[0], 0)
            scores(wg, 0, q_s, k_s, k_full, acc_s)
            T.wait_wgmma(0)
            statistics(wg, 0, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
            T.copy(acc_s, acc_p)
            for j in T.serial(1, mine):
                scores(wg, j, q_s, k_s, k_full, acc_s)
                values(j - 1, v_s, v_full, acc_p, acc_os)
                T.wait_wgmma(value_blocks)  # S_j landed; the value products may still run
                statistics(wg, j, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
                T.wait_wgmma(0)
                values_done(j - 1, v_empty, acc_os)
                for c in blocks:
                    for i, d in T.Parallel(WM, DV):
                        acc_os[c][i, d] *= rescale[i]
                T.copy(acc_s, acc_p)
            last = mine - 1
            T.barrier_wait(v_full[last % S], (last // S) & 1)
            if last * BN + BN > length:  # the end tile: value rows past the end become zeros
                for i, d in T.Parallel(BN, D):
                    if last * BN + i >= length:
                        v_s[last % S, i, d] = T.cast(0, dt)
                T.fence_proxy_async()
                T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            value_products(last, v_s, acc_p, acc_os)
            T.wait_wgmma(0)
            values_done(last, v_empty, acc_os)
            for c in blocks:
                for i, d in T.Parallel(WM, DV):
                    q_s[i, _offset(d, c * DV)] = T.cast(acc_os[c][i, d] / l_sum[i], dt)
            T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            for i, d in T.Parallel(WM, D):
                if r0 + i < length:
                    out[start + r0 + i, hq, d] = q_s[i, d]

    return consumer


def warp_specialised_attention(key: "PrefillBuildKey", tiling: "PrefillTiling", consumers: int,
                               programs_per_sm: int) -> Any:
    """The attention PrimFunc (:func:`attention_entry`'s) of a producer warpgroup
    (:func:`producer_warpgroup`) and ``consumers`` consumer warpgroups of 64 query rows
    (:func:`consumer_warpgroup`), registers split for ``programs_per_sm`` programs an SM (above
    one, the launch bounds ask ptxas for it)."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    BM, BN, S = tiling.block_m, tiling.block_n, tiling.stages
    WM = CONSUMER_ROWS
    if (BM, tiling.threads) != (consumers * WM, consumers * WARPGROUP):
        raise ValueError(f"a warp-specialised prefill program of {consumers} consumer warpgroup(s) of {WM} query rows "
                         f"needs block_m={consumers * WM}, threads={consumers * WARPGROUP}, not block_m={BM}, "
                         f"threads={tiling.threads}")
    consumer_warps = consumers * WARPGROUP // 32
    producer = producer_warpgroup(key, tiling, consumers)
    reason = value_blocks_refusal(D, programs_per_sm)
    if reason is not None:
        raise ValueError(reason)
    value_parts = value_blocks(D, programs_per_sm)
    DV = D // value_parts
    consumer = consumer_warpgroup(key, tiling, consumer_registers(consumers, programs_per_sm), value_parts)

    @T.macro
    def warp_specialised(query: Any, key_new: Any, value_new: Any, out: Any, scale_log2: Any, hq: Any, h: Any,
                         start: Any, length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
        if programs_per_sm > 1:
            T.annotate_min_blocks_per_sm(programs_per_sm)
        # Each consumer warpgroup's query tile and fragments are its own buffers, named by the
        # assignment (TileLang lays a fragment out over the threads of the branch that uses it).
        q_s0 = T.alloc_shared((WM, D), dt)
        if consumers == 2:
            q_s1 = T.alloc_shared((WM, D), dt)
        k_s = T.alloc_shared((S, BN, D), dt)
        v_s = T.alloc_shared((S, BN, D), dt)
        acc_s0 = T.alloc_fragment((WM, BN), f32)
        acc_p0 = T.alloc_fragment((WM, BN), dt)
        acc_o0 = T.alloc_fragment((WM, DV), f32)
        if value_parts == 2:  # the output's upper columns, their own product (value_blocks)
            acc_o0_hi = T.alloc_fragment((WM, DV), f32)
        acc_os0 = (acc_o0,) if value_parts == 1 else (acc_o0, acc_o0_hi)
        if consumers == 2:
            acc_s1 = T.alloc_fragment((WM, BN), f32)
            acc_p1 = T.alloc_fragment((WM, BN), dt)
            acc_o1 = T.alloc_fragment((WM, D), f32)
        stats0 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        if consumers == 2:
            stats1 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        # full: the producer's 128 threads arrive (and the bytes land); empty: lane 0 of each
        # consumer warp arrives when its products no longer read the stage.
        q_full = T.alloc_barrier([WARPGROUP])
        k_full = T.alloc_barrier([WARPGROUP] * S)
        k_empty = T.alloc_barrier([consumer_warps] * S)
        v_full = T.alloc_barrier([WARPGROUP] * S)
        v_empty = T.alloc_barrier([consumer_warps] * S)
        ring = (k_s, v_s, q_full, k_full, k_empty, v_full, v_empty)
        rest = (out, start, length, q0, hq, tiles, scale_log2)
        rows0 = (0, q_s0, *ring, acc_s0, acc_p0, acc_os0, *stats0, *rest)

        tx = T.get_thread_binding()
        if tx < WARPGROUP:
            producer(tx, (q_s0,) if consumers == 1 else (q_s0, q_s1), *ring, query, key_new, value_new, out, hq, h,
                     start, length, q0, tiles, b, bx, cache)
        elif consumers == 1:
            consumer(*rows0)
        elif tx < 2 * WARPGROUP:
            consumer(*rows0)
        else:
            consumer(1, q_s1, *ring, acc_s1, acc_p1, (acc_o1,), *stats1, *rest)

    # The consumers' threads and a producer warpgroup, as TileLang's automatic pipeline launches.
    return attention_entry(key, tiling, tiling.threads + WARPGROUP, warp_specialised)


def prefill_attention_overlap_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The attention PrimFunc with its pipeline written out (same parameters, grid and
    semantics as :func:`prefill_attention_program`): warpgroup 0 loads (TMA), warpgroups 1
    and 2 own 64 query rows each (:func:`consumer_warpgroup`: the softmax of key tile j overlaps
    the P·V product of tile j - 1); 128 query rows a program, one program an SM (193 KiB of
    shared memory with 64-key stages at D = 256). The K and V ring (``stages`` deep each) has
    full/empty barriers of its own, so a K stage is refilled as soon as both warpgroups' score
    products are done with it."""
    return warp_specialised_attention(key, tiling, consumers=2, programs_per_sm=1)


def prefill_attention_q64_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The overlap program's pipeline with one consumer warpgroup: 64 query rows a program, the
    producer and that consumer (256 threads) sized so that two programs share an SM, one's fixed
    phases (query load, first K/V latency, the unoverlapped first score tile and last P·V product,
    the epilogue) running under the other's main loop. At D = 256 with 32-key stages: 96 KiB of
    shared memory (Q 32, two K and two V stages of 16), 128 registers a thread at launch, 232 a
    consumer thread after ``setmaxnreg`` (its 64 x 256 float32 accumulator takes 128)."""
    return warp_specialised_attention(key, tiling, consumers=1, programs_per_sm=Q64_PROGRAMS_PER_SM)
