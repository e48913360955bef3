"""The GQA decode step over a KV cache as TileLang programs: the split pass and the combine pass.

Host-side decisions (build keys, refusals, the split plan, the launcher) live in
:mod:`tileops_cuda.kernels.attention_decode`; semantics are ``manifest/attention.yaml``'s
``AttentionDecodeFwdOp`` (the reference is ``tileops_cpu_ref.attention.attention_decode``).

Split pass: one program per (split, key/value head, sequence). Sequence ``b`` with ``n =
cache_seqlens[b]`` attends to positions ``0 .. n``. Split ``s`` owns positions
``[s · chunk, (s + 1) · chunk)`` (``chunk`` a multiple of the tile ``BN``, chosen per call).
The program owning position ``n`` writes the step's key/value into that position's slot and
takes position ``n`` from the ``key``/``value`` inputs (replacing the row its bulk copy brought),
so nothing reads the slot back: no ordering between the write (generic proxy) and the bulk
copies (the async proxy, which a thread barrier does not order) is needed. The program loads
the ``G = NQ / NKV`` query heads of its key/value head as the first rows of a ``BH``-row tile
(the rest zeros) and streams its positions through shared memory ``BN`` at a time in a software
pipeline (bulk copies: TMA on sm_90a). The last tile may run past
``n``: its scores there are -inf and its value rows zeros (zeros, not only zero weights, keep
whatever those slots hold, NaN included, out of the product). Scores, the running maximum,
the exponentials and the sums are float32 (log2 domain: scores are multiplied by ``scale ·
log2(e)`` before the running maximum, so any sign of scale is exact); the probabilities are
rounded to the input dtype for the tensor-core product with V (as FlashAttention does), the
accumulator stays float32.

With one split (``num_splits == 1``, large batches) the split pass writes the output itself,
normalised and rounded once, zeros for padding sequences. Otherwise it writes each active
split's normalised float32 partial output and its log2-sum-exp, and the combine pass (one
program per (query head, sequence)) merges the ``n // chunk + 1`` active splits and rounds
once; padding sequences get zeros there.

Light program (``DecodeTiling.block_h`` 16, issue 21): at B=1 the 64-row program pads the 8
query heads of a group 8x and holds one program an SM (240 registers, 12.5% occupancy, issue
slots 6% busy: latency-bound). Sixteen score rows are one mma tile (wgmma needs 64), the
accumulator a quarter of the registers, 32-position tiles halve the shared memory: launch bounds
ask for ``launch_bound`` programs an SM, TileLang's ``setmaxnreg`` rebalancing is off (its 240
for the consumers would keep one).

Layouts: the caches are passed flat, ``[N · L, NKV, D]``. Position ``p`` of sequence ``b`` is
flat row ``b · L + p`` (contiguous, ``L`` the capacity, a runtime scalar: a last tile running
past the row reads the next row or, past the pool, zeros, all masked) or
``block_table[b, p // L] · L + p % L`` (paged, ``L`` the block size: compiled in when a tile
fits inside a block, so one table entry a tile; a runtime scalar in the row-by-row program).
Table entries past a sequence's last block are never read. Nothing is compiled per B,
context or pool size.

Unchecked metadata (contents checks off; the reference fails such a call on the host, a kernel
cannot): every program reads a length as ``index_or_padding(cache_seqlens[b], capacity)``
(``capacity``: L, or M · L paged; compared in the lengths' own dtype), so one at or past the
capacity is padding like a negative one: nothing written, zeros out (before, the contiguous
program wrote it into the next sequence's first row, and the paged ones read past the table
row). A block-table entry outside ``[0, N)`` is clamped, unsigned in its own dtype, to N, one
past the pool: the bounds-checked loads (TileLang's guards, TMA's bounds) read its rows as
zeros, and the step's key/value is not written there. That sequence's
output is then unspecified; nothing outside the caches and the table is read or written (before,
an entry past ``2**31 / L`` wrapped the guards' int32 row arithmetic and was read and written
far past the pool, and an int64 one past int32 was narrowed onto a real block).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._common import dependent_launch
from ._index_metadata import index_or_padding

if TYPE_CHECKING:
    from .attention_decode import DecodeBuildKey, DecodeTiling

__all__ = ["COMBINE_THREADS", "LOG2E", "SLICE_CHANNELS", "WGMMA_ROWS", "decode_combine_program",
           "decode_parallel_combine_program", "decode_sliced_combine_program", "decode_split_program",
           "lane_sums_macro", "online_softmax_step", "row_reciprocals", "split_weights_macro"]

#: log2(e): scores are exponentiated with exp2 after folding this into the softmax scale.
LOG2E = 1.4426950408889634

#: Rows of wgmma's tensor-core tile (its M): a split program of fewer score rows (16, one mma row
#: tile) is the light program (``DecodeTiling.block_h``).
WGMMA_ROWS = 64

#: Threads of a parallel-combine program: one split's log-sum-exp each (so at most this many
#: splits), then lanes of splits × 4-channel vectors for the weighted sum.
COMBINE_THREADS = 256

#: Channels of a row a sliced-combine program merges (:func:`decode_sliced_combine_program`): head sizes
#: that are a multiple of it are cut into ``D / SLICE_CHANNELS`` programs a query head; others stay whole.
SLICE_CHANNELS = 64

#: Splits a lane of the sliced combine holds in registers: its first loads cover ``lanes · _PREFETCH``
#: splits (128 at 64-channel slices), issued beside the log-sum-exps.
_PREFETCH = 8


def online_softmax_statistics(rows: int, cols: int) -> Any:
    """The TileLang macro of one key/value tile's online-softmax statistics: ``acc_s`` holds the
    tile's scaled scores (log2 domain, -inf where masked); after it ``acc_s`` holds the float32
    probabilities against the new running maximum ``m_cur``, ``rescale`` the factor that
    brings the accumulator to that maximum, and ``l_sum`` the updated sum."""
    import tilelang.language as T

    @T.macro
    def statistics(acc_s: Any, m_cur: Any, m_prev: Any, rescale: Any, row_sum: Any, l_sum: Any):
        T.copy(m_cur, m_prev)
        T.reduce_max(acc_s, m_cur, dim=1, clear=False)
        for i in T.Parallel(rows):
            rescale[i] = T.exp2(m_prev[i] - m_cur[i])
        for i, j in T.Parallel(rows, cols):
            acc_s[i, j] = T.exp2(acc_s[i, j] - m_cur[i])
        T.reduce_sum(acc_s, row_sum, dim=1)
        for i in T.Parallel(rows):
            l_sum[i] = l_sum[i] * rescale[i] + row_sum[i]

    return statistics


def row_reciprocals(rows: int) -> Any:
    """The TileLang macro ``inverted(l_sum)``: each row's running sum replaced by its reciprocal, so that the
    output is ``acc_o * l_sum`` (a multiply an element) rather than ``acc_o / l_sum``.

    Why: nvcc compiles a float32 division to IEEE's correctly rounded sequence (``MUFU.RCP``, ``FCHK``, four
    ``FFMA`` and a branch to a slow path), each in its own branch region, so an epilogue that divides every
    element of a 64 x 256 accumulator runs 128 such chains a thread one after another. Nsight Compute's
    warp-stall samples on the H200 (forty-seventh session, ``session-2026-12-06m/s47b``) put 24% of the paged
    prefill's attention kernel in those chains (2,060 of its consumer's 5,400 SASS instructions) and 9% of the
    B=1 decode split. One division a row and a multiply an element differ from the division by at most an
    ulp of float32 before the output is rounded to its 16-bit dtype. Valid rows have ``l_sum >= 1`` (their
    largest score contributes ``exp2(0)``); rows nobody writes may become inf."""
    import tilelang.language as T

    @T.macro
    def inverted(l_sum: Any):
        for i in T.Parallel(rows):
            l_sum[i] = T.float32(1) / l_sum[i]

    return inverted


def online_softmax_step(rows: int, cols: int, dim: int) -> Any:
    """The TileLang macro of one key/value tile's online-softmax update (both attention
    programs): :func:`online_softmax_statistics`, then ``acc_p`` holds the probabilities in the
    input dtype and ``acc_o`` is rescaled to the new running maximum (ready for
    ``acc_o += acc_p · V``)."""
    import tilelang.language as T

    statistics = online_softmax_statistics(rows, cols)

    @T.macro
    def softmax_step(acc_s: Any, acc_p: Any, acc_o: Any, m_cur: Any, m_prev: Any, rescale: Any, row_sum: Any,
                     l_sum: Any):
        statistics(acc_s, m_cur, m_prev, rescale, row_sum, l_sum)
        T.copy(acc_s, acc_p)
        for i, d in T.Parallel(rows, dim):
            acc_o[i, d] *= rescale[i]

    return softmax_step


def decode_split_program(key: "DecodeBuildKey", tiling: "DecodeTiling", page: int | None) -> Any:  # noqa: C901
    """The split PrimFunc: ``(query, key, value, key_cache, value_cache, cache_seqlens,
    block_table, o_part, lse_part, out, cache_len, capacity, chunk, scale_log2)``. The caches are flat
    ``[N · L, NKV, D]``; ``block_table`` is a ``[1, 1]`` dummy for the contiguous layout;
    ``cache_len`` is L: the capacity (contiguous) or the block size (paged); ``capacity`` is a
    sequence's positions (L, or M · L paged): a length at or past it is padding.

    ``page``: None for the contiguous layout (a tile is ``BN`` consecutive rows: one bulk copy, or
    ``tiling.gather``: the rows gathered as the paged layout's are);
    the block size for the paged layout when ``BN`` divides it (a tile lies inside one block:
    one bulk copy); 0 for any other block size (each row's address computed on its own and
    loaded synchronously: correct, slower).
    """
    import tilelang.language as T

    dt, f32, i32 = key.dtype, "float32", "int32"
    DEPENDENT = key.dependent_launch  # (the split program's ``key`` parameter shadows the build key inside)
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    G = NQ // NKV
    BH, BN, TH = tiling.block_h, tiling.block_n, tiling.threads
    B, NL, TB, MB, S = (T.dynamic(n) for n in ("B", "NL", "TB", "MB", "S"))
    NEG = -T.infinity(f32)
    softmax_step = online_softmax_step(BH, BN, D)
    inverted = row_reciprocals(BH)
    # Bulk copies (TMA) bring whole tiles as the slots held them before the step: position n
    # is then taken from the inputs and the value rows past it zeroed. Gathered rows (cp.async,
    # generic proxy) read slot n after this program wrote it, ordered by a thread barrier, and
    # clamp rows past n to row n, whose value is finite, so nothing needs replacing.
    bulk = not tiling.gather and (page is None or page > 0)
    light = BH < WGMMA_ROWS

    def pool_blocks(blocks: Any) -> Any:
        """The pool's blocks (paged): ``NL // page`` where the block size is compiled in (a shift or a
        multiply), else ``blocks``, the variable the row-by-row program divides into once (a let
        binding would be inlined at every row)."""
        return NL // page if page else blocks

    def pool_block(table: Any, b: Any, p: Any, cache_len: Any, blocks: Any) -> Any:
        """The pool block holding position ``p`` of sequence ``b`` (paged): its table entry where that is
        in ``[0, N)``, else N, one past the pool (the guarded loads read its rows as zeros; its rows fit
        int32): the entry clamped to N, unsigned in its own dtype, so a negative one is clamped too."""
        u = "uint64" if table.dtype == "int64" else "uint32"
        return T.cast(T.min(T.cast(table[b, p // (page or cache_len)], u), T.cast(pool_blocks(blocks), u)), i32)

    def in_pool(table: Any, b: Any, p: Any, cache_len: Any, blocks: Any) -> Any:
        """Whether position ``p`` of sequence ``b`` has a cache row (the contiguous layout's always do)."""
        return True if page is None else pool_block(table, b, p, cache_len, blocks) < pool_blocks(blocks)

    def flat_row(table: Any, b: Any, p: Any, cache_len: Any, blocks: Any) -> Any:
        """The flat cache row of position ``p`` of sequence ``b`` (``p`` inside the sequence)."""
        if page is None:
            return b * cache_len + p
        size = page or cache_len
        return pool_block(table, b, p, cache_len, blocks) * size + p % size

    @T.macro
    def load_tile(cache: Any, new: Any, tile: Any, table: Any, b: Any, h: Any, base: Any, n: Any, hi: Any,
                  cache_len: Any, blocks: Any):
        """Positions ``base .. base + BN - 1`` of sequence ``b``, head ``h``, into ``tile``. Bulk
        copies: rows at n and past ``hi`` hold whatever their (in-bounds) addresses hold, callers
        replace and mask them; gathered rows: position n as this program wrote it, rows past n
        copies of row n (masked by the callers); row by row: position n comes from ``new``, rows
        past ``hi`` are zeros."""
        if page is None and bulk:
            T.copy(cache[b * cache_len + base : b * cache_len + base + BN, h, :], tile)
        elif bulk:  # BN divides the block size: a tile lies inside one block
            T.copy(cache[flat_row(table, b, base, cache_len, blocks) :
                         flat_row(table, b, base, cache_len, blocks) + BN, h, :], tile)
        elif tiling.gather:
            for i, d in T.Parallel(BN, D):
                tile[i, d] = cache[flat_row(table, b, T.min(base + i, n), cache_len, blocks), h, d]
        else:
            for i, d in T.Parallel(BN, D):
                tile[i, d] = T.if_then_else(
                    base + i < hi, T.if_then_else(base + i == n, new[b, h, d],
                                                  cache[flat_row(table, b, T.min(base + i, n), cache_len, blocks),
                                                        h, d]),
                    T.cast(0, dt))

    @T.prim_func
    def decode_split(
        query: T.Tensor((B, NQ, D), dt),
        key_new: T.Tensor((B, NKV, D), dt),
        value_new: T.Tensor((B, NKV, D), dt),
        key_cache: T.Tensor((NL, NKV, D), dt),
        value_cache: T.Tensor((NL, NKV, D), dt),
        cache_seqlens: T.Tensor((B,), key.seqlens_dtype),
        block_table: T.Tensor((TB, MB), key.table_dtype or i32),
        o_part: T.Tensor((S, B, NQ, D), f32),
        lse_part: T.Tensor((S, B, NQ), f32),
        out: T.Tensor((B, NQ, D), dt),
        cache_len: T.int32,
        capacity: T.int32,
        chunk: T.int32,
        scale_log2: T.float32,
    ):
        with T.Kernel(S, NKV, B, threads=TH) as (sid, h, b):
            if light:
                T.annotate_min_blocks_per_sm(tiling.launch_bound)
                T.no_set_max_nreg()
            dependent_launch(DEPENDENT)
            q_s = T.alloc_shared((BH, D), dt)
            k_s = T.alloc_shared((BN, D), dt)
            v_s = T.alloc_shared((BN, D), dt)
            acc_s = T.alloc_fragment((BH, BN), f32)
            # (One mma row tile spreads the warps over the score columns; the value product needs
            # whole rows in every warp, so the light program's probabilities go through shared memory.)
            acc_p = T.alloc_shared((BH, BN), dt) if light else T.alloc_fragment((BH, BN), dt)
            acc_o = T.alloc_fragment((BH, D), f32)
            m_cur = T.alloc_fragment((BH,), f32)
            m_prev = T.alloc_fragment((BH,), f32)
            rescale = T.alloc_fragment((BH,), f32)
            row_sum = T.alloc_fragment((BH,), f32)
            l_sum = T.alloc_fragment((BH,), f32)
            blocks = T.alloc_var(i32)  # the row-by-row program's pool blocks (pool_blocks)

            # The queries first: their loads do not wait for the length's (the write below
            # branches on it), so both latencies overlap before the pipeline starts.
            for i, d in T.Parallel(BH, D):
                q_s[i, d] = T.if_then_else(i < G, query[b, h * G + T.min(i, G - 1), d], T.cast(0, dt))

            n = index_or_padding(cache_seqlens[b], capacity)
            if page == 0:
                blocks = NL // cache_len
            lo = sid * chunk
            hi = T.min(lo + chunk, n + 1)  # this program's positions: [lo, hi)
            active = n >= 0 and lo <= n
            tiles = T.if_then_else(active, T.ceildiv(hi - lo, BN), 0)

            if active and n < lo + chunk and in_pool(block_table, b, n, cache_len, blocks):
                # The step's key/value into position n's slot. Nothing reads it back from there
                # (this program takes position n from the inputs; no other program reads the
                # slot), so the write needs no ordering against the bulk copies.
                for d in T.Parallel(D):
                    key_cache[flat_row(block_table, b, n, cache_len, blocks), h, d] = key_new[b, h, d]
                    value_cache[flat_row(block_table, b, n, cache_len, blocks), h, d] = value_new[b, h, d]
            if tiling.gather:
                T.sync_threads()  # the gathered loads read the slot just written

            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, NEG)

            for k in T.Pipelined(tiles, num_stages=tiling.stages):
                base = lo + k * BN
                load_tile(key_cache, key_new, k_s, block_table, b, h, base, n, hi, cache_len, blocks)
                # The tile holding position n (the only one with rows past hi: chunks are whole
                # tiles): its key from the input.
                if bulk and n < base + BN:
                    for i, d in T.Parallel(BN, D):
                        k_s[i, d] = T.if_then_else(base + i == n, key_new[b, h, d], k_s[i, d])
                T.clear(acc_s)
                T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(BH, BN):  # scaled scores (log2 domain); -inf past hi
                    acc_s[i, j] = T.if_then_else(base + j < hi, acc_s[i, j] * scale_log2, NEG)
                softmax_step(acc_s, acc_p, acc_o, m_cur, m_prev, rescale, row_sum, l_sum)
                load_tile(value_cache, value_new, v_s, block_table, b, h, base, n, hi, cache_len, blocks)
                if bulk and n < base + BN:
                    # Position n's value from the input; zeros, not only zero weights, in the rows
                    # past hi: whatever the slots there hold (NaN) stays out of the product.
                    for i, d in T.Parallel(BN, D):
                        v_s[i, d] = T.if_then_else(base + i < hi, T.if_then_else(base + i == n, value_new[b, h, d],
                                                                                 v_s[i, d]), T.cast(0, dt))
                T.gemm(acc_p, v_s, acc_o, policy=T.GemmWarpPolicy.FullRow)

            if S == 1:
                inverted(l_sum)
                for i, d in T.Parallel(BH, D):
                    if i < G:
                        out[b, h * G + i, d] = T.if_then_else(n >= 0, T.cast(acc_o[i, d] * l_sum[i], dt),
                                                              T.cast(0, dt))
            elif active:
                for i in T.Parallel(BH):
                    if i < G:
                        lse_part[sid, b, h * G + i] = T.log2(l_sum[i]) + m_cur[i]
                inverted(l_sum)
                for i, d in T.Parallel(BH, D):
                    if i < G:
                        o_part[sid, b, h * G + i, d] = acc_o[i, d] * l_sum[i]

    return decode_split


def decode_combine_program(key: "DecodeBuildKey", tiling: "DecodeTiling") -> Any:
    """The combine PrimFunc: ``(o_part, lse_part, cache_seqlens, out, capacity, chunk)``. One program per
    (query head, sequence); each thread owns ``ceil(D / threads)`` channels. Sequence ``b`` has
    ``n // chunk + 1`` active splits (the split pass wrote exactly those); padding (a length
    outside ``[0, capacity)``, as the split pass reads it) gets zeros."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    NQ, D = key.num_q_heads, key.head_dim
    TH = tiling.combine_threads
    PER = (D + TH - 1) // TH
    B, S = T.dynamic("B"), T.dynamic("S")

    @T.prim_func
    def decode_combine(
        o_part: T.Tensor((S, B, NQ, D), f32),
        lse_part: T.Tensor((S, B, NQ), f32),
        cache_seqlens: T.Tensor((B,), key.seqlens_dtype),
        out: T.Tensor((B, NQ, D), dt),
        capacity: T.int32,
        chunk: T.int32,
    ):
        with T.Kernel(NQ, B, threads=TH) as (q, b):
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            acc = T.alloc_local((PER,), f32)
            m = T.alloc_var(f32)
            total = T.alloc_var(f32)
            w = T.alloc_var(f32)
            n = index_or_padding(cache_seqlens[b], capacity)
            active = T.min(T.max(n, 0) // chunk + 1, S)
            for e in T.unroll(PER):
                acc[e] = T.float32(0)
            if n >= 0:
                m = -T.infinity(f32)
                for s in T.serial(active):
                    m = T.max(m, lse_part[s, b, q])
                total = T.float32(0)
                for s in T.serial(active):
                    total = total + T.exp2(lse_part[s, b, q] - m)
                for s in T.serial(active):
                    w = T.exp2(lse_part[s, b, q] - m) / total
                    for e in T.unroll(PER):
                        if tid + e * TH < D:
                            acc[e] = acc[e] + w * o_part[s, b, q, tid + e * TH]
            for e in T.unroll(PER):
                if tid + e * TH < D:
                    out[b, q, tid + e * TH] = T.cast(acc[e], dt)

    return decode_combine


def split_weights_macro(threads: int) -> Any:
    """The TileLang macro both parallel combines share: ``w_s[t]`` = split ``t``'s weight
    ``exp2(lse_t - max) / sum`` over the ``active`` splits (0 past them), from thread ``t``'s
    log-sum-exp ``lse`` (-inf past them): the maximum and the sum are warp shuffles, then one pass
    over the warps' results in shared memory ``warp_s`` (``[2, threads // 32]``)."""
    import tilelang.language as T

    f32, WARPS = "float32", threads // 32

    @T.macro
    def split_weights(lse: Any, active: Any, tid: Any, warp_s: Any, w_s: Any):
        x = T.alloc_var(f32)
        m = T.alloc_var(f32)
        e = T.alloc_var(f32)
        total = T.alloc_var(f32)
        x = lse
        for o in T.unroll(5):
            x = T.max(x, T.shfl_xor(x, 16 >> o))
        if tid % 32 == 0:
            warp_s[0, tid // 32] = x
        T.sync_threads()
        m = warp_s[0, 0]
        for w in T.unroll(1, WARPS):
            m = T.max(m, warp_s[0, w])
        e = T.if_then_else(tid < active, T.exp2(lse - m), T.float32(0))
        x = e
        for o in T.unroll(5):
            x = x + T.shfl_xor(x, 16 >> o)
        if tid % 32 == 0:
            warp_s[1, tid // 32] = x
        T.sync_threads()
        total = warp_s[1, 0]
        for w in T.unroll(1, WARPS):
            total = total + warp_s[1, w]
        w_s[tid] = T.if_then_else(tid < active, e / total, T.float32(0))
        T.sync_threads()

    return split_weights


def _vectors_and_lanes(channels: int) -> tuple[int, int]:
    """A parallel combine's layout of ``channels`` (a multiple of 4): the 4-channel vectors a row,
    and the lanes of splits (each vector's threads) that :data:`COMBINE_THREADS` hold."""
    vectors = channels // 4
    return vectors, COMBINE_THREADS // vectors


def lane_sums_macro(lanes: int, vectors: int, dtype: str) -> Any:
    """The TileLang macro ending both parallel combines: after a barrier, the first ``vectors`` threads
    add the ``lanes`` lanes' 4-channel sums in ``sum_s`` (``[lanes, 4 · vectors]``), in lane order, and
    store them rounded at ``out[b, q, c0 + 4 t ...]``."""
    import tilelang.language as T

    VEC = 4

    @T.macro
    def lane_sums_out(sum_s: Any, acc: Any, tid: Any, out: Any, b: Any, q: Any, c0: Any):
        T.sync_threads()
        if tid < vectors:
            for v in T.unroll(VEC):
                acc[v] = T.float32(0)
            for l in T.unroll(lanes):
                for v in T.vectorized(VEC):
                    acc[v] = acc[v] + sum_s[l, tid * VEC + v]
            for v in T.vectorized(VEC):
                out[b, q, c0 + tid * VEC + v] = T.cast(acc[v], dtype)

    return lane_sums_out


def decode_parallel_combine_program(key: "DecodeBuildKey") -> Any:
    """The combine PrimFunc with the splits read in parallel; the same parameters and result as
    :func:`decode_combine_program`, for at most :data:`COMBINE_THREADS` splits.

    Why: the serial combine's loops over splits are chains of dependent global loads (the
    weighted sum divides inside its loop, so nvcc does not hoist the next split's loads across
    the division's slow path): about one L2 round trip per split, ~15-20 µs at 64 splits, which
    is most of a B=1 step. Here thread ``t`` loads split ``t``'s log-sum-exp (one round trip);
    the maximum and the sum are warp shuffles plus one shared-memory pass; the normalised
    weights go to shared memory; then ``LANES = COMBINE_THREADS // (D / 4)`` lanes each sum
    every LANES-th split's partial over a 4-channel vector, ``UNROLL`` independent loads in
    flight, and the lanes' sums are added through shared memory. One program per (query head,
    sequence); padding sequences (no active split) get zeros.
    """
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    NQ, D = key.num_q_heads, key.head_dim
    TH, VEC, UNROLL = COMBINE_THREADS, 4, 8
    CH, LANES = _vectors_and_lanes(D)
    WARPS = TH // 32
    B, S = T.dynamic("B"), T.dynamic("S")
    NEG = -T.infinity(f32)
    split_weights = split_weights_macro(TH)
    lane_sums_out = lane_sums_macro(LANES, CH, dt)

    @T.prim_func
    def decode_parallel_combine(
        o_part: T.Tensor((S, B, NQ, D), f32),
        lse_part: T.Tensor((S, B, NQ), f32),
        cache_seqlens: T.Tensor((B,), key.seqlens_dtype),
        out: T.Tensor((B, NQ, D), dt),
        capacity: T.int32,
        chunk: T.int32,
    ):
        with T.Kernel(NQ, B, threads=TH) as (q, b):
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            w_s = T.alloc_shared((TH,), f32)
            warp_s = T.alloc_shared((2, WARPS), f32)
            sum_s = T.alloc_shared((LANES, D), f32)
            acc = T.alloc_local((VEC,), f32)
            lse = T.alloc_var(f32)
            wv = T.alloc_var(f32)

            n = index_or_padding(cache_seqlens[b], capacity)
            active = T.if_then_else(n >= 0, T.min(n // chunk + 1, S), 0)
            lane = tid // CH
            c = tid % CH
            # -- the weights: max and sum of the active splits' log-sum-exps -----------------
            lse = T.if_then_else(tid < active, lse_part[T.min(tid, S - 1), b, q], NEG)
            split_weights(lse, active, tid, warp_s, w_s)
            # -- the weighted sum: lane l takes splits l, l + LANES, ... ---------------------
            for v in T.unroll(VEC):
                acc[v] = T.float32(0)
            if lane < LANES:
                for i0 in T.serial(T.ceildiv(T.ceildiv(active, LANES), UNROLL)):
                    for u in T.unroll(UNROLL):
                        # Past the last active split: split active - 1 again, weight 0 (its
                        # partial is finite), so the loads need no branch.
                        wv = T.if_then_else((i0 * UNROLL + u) * LANES + lane < active,
                                            w_s[T.min((i0 * UNROLL + u) * LANES + lane, TH - 1)], T.float32(0))
                        for v in T.vectorized(VEC):
                            acc[v] = acc[v] + wv * o_part[T.min((i0 * UNROLL + u) * LANES + lane, active - 1), b, q,
                                                          c * VEC + v]
                for v in T.vectorized(VEC):
                    sum_s[lane, c * VEC + v] = acc[v]
            lane_sums_out(sum_s, acc, tid, out, b, q, 0)

    return decode_parallel_combine


def decode_sliced_combine_program(key: "DecodeBuildKey") -> Any:
    """The combine PrimFunc with every split's partial loaded beside its log-sum-exp; the same
    parameters and result as :func:`decode_combine_program`, for at most :data:`COMBINE_THREADS` splits.

    Why (issue 21, decode at B <= 8): the parallel combine waits for the log-sum-exps, reduces them,
    and only then loads the partials, UNROLL-deep rounds of them: at B = 1 with 64 splits that is three
    dependent round trips in one program per query head (16 programs on 132 SMs, 64 KiB each), and it
    measured 6.2 µs of a 16.7 µs step under Nsight Compute (NOTES "ncudec"). The partials do not depend
    on the weights, so here a lane's loads of its first ``_PREFETCH`` splits go out with the
    log-sum-exp loads (one round trip for up to ``lanes · _PREFETCH`` splits), and a query head's row is
    cut into :data:`SLICE_CHANNELS`-channel slices, a program each (4x the programs at D = 256, a quarter
    of the bytes each). The weights are formed as in the parallel combine (warp shuffles, one shared
    pass; every slice program of a head forms the same ones); lane ``l`` sums splits ``l, l + lanes, ...``
    of its 4-channel vector and the lanes' sums are added in lane order: the sums' order differs from
    the parallel combine's (its lanes are fewer), so the results agree within float32 rounding, both
    checked against float64. Partials of splits past the active ones (and of a padding sequence, which
    has none) are never written: their loads are clamped to a written split or to split 0 and their
    terms selected away, never multiplied by a zero weight (a stale NaN must not leak in).
    """
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    NQ, D = key.num_q_heads, key.head_dim
    TH, VEC, U = COMBINE_THREADS, 4, _PREFETCH
    DC = SLICE_CHANNELS if D % SLICE_CHANNELS == 0 else D  # channels a program
    DS, (CH, LANES), WARPS = D // DC, _vectors_and_lanes(DC), TH // 32
    B, S = T.dynamic("B"), T.dynamic("S")
    NEG = -T.infinity(f32)
    split_weights = split_weights_macro(TH)
    lane_sums_out = lane_sums_macro(LANES, CH, dt)

    @T.macro
    def load_partials(o_part: Any, part: Any, first: Any, lane: Any, last: Any, b: Any, q: Any, c: Any):
        """Lane ``lane``'s vectors at channel ``c`` of splits ``first + lane + u · LANES`` (clamped to ``last``)."""
        for u in T.unroll(U):
            for v in T.vectorized(VEC):
                part[u * VEC + v] = o_part[T.min(first + u * LANES + lane, last), b, q, c + v]

    @T.macro
    def add_weighted(acc: Any, part: Any, w_s: Any, first: Any, lane: Any, active: Any):
        """``acc += w · partial`` for the loaded splits before ``active`` (the rest selected away)."""
        for u in T.unroll(U):
            for v in T.unroll(VEC):
                acc[v] = acc[v] + T.if_then_else(first + u * LANES + lane < active,
                                                 w_s[T.min(first + u * LANES + lane, TH - 1)] * part[u * VEC + v],
                                                 T.float32(0))

    @T.prim_func
    def decode_sliced_combine(
        o_part: T.Tensor((S, B, NQ, D), f32),
        lse_part: T.Tensor((S, B, NQ), f32),
        cache_seqlens: T.Tensor((B,), key.seqlens_dtype),
        out: T.Tensor((B, NQ, D), dt),
        capacity: T.int32,
        chunk: T.int32,
    ):
        with T.Kernel(NQ, B, DS, threads=TH) as (q, b, ds):
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            w_s = T.alloc_shared((TH,), f32)
            warp_s = T.alloc_shared((2, WARPS), f32)
            sum_s = T.alloc_shared((LANES, DC), f32)
            part = T.alloc_local((U * VEC,), f32)
            acc = T.alloc_local((VEC,), f32)
            lse = T.alloc_var(f32)

            n = index_or_padding(cache_seqlens[b], capacity)
            active = T.if_then_else(n >= 0, T.min(n // chunk + 1, S), 0)
            last = T.max(active - 1, 0)  # a written split (split 0 when none is: its terms are selected away)
            lane = tid // CH
            c = ds * DC + (tid % CH) * VEC
            # -- the first splits' partials, in flight beside the log-sum-exps ---------------------
            load_partials(o_part, part, 0, lane, last, b, q, c)
            lse = T.if_then_else(tid < active, lse_part[T.min(tid, S - 1), b, q], NEG)
            # -- the weights: max and sum of the active splits' log-sum-exps -----------------------
            split_weights(lse, active, tid, warp_s, w_s)
            # -- the weighted sum: lane l takes splits l, l + LANES, ... -------------------------
            for v in T.vectorized(VEC):
                acc[v] = T.float32(0)
            if lane < LANES:
                add_weighted(acc, part, w_s, 0, lane, active)
                for r in T.serial(T.ceildiv(T.max(active - LANES * U, 0), LANES * U)):  # past the first loads
                    load_partials(o_part, part, (r + 1) * LANES * U, lane, last, b, q, c)
                    add_weighted(acc, part, w_s, (r + 1) * LANES * U, lane, active)
                for v in T.vectorized(VEC):
                    sum_s[lane, (tid % CH) * VEC + v] = acc[v]
            lane_sums_out(sum_s, acc, tid, out, b, q, ds * DC)

    return decode_sliced_combine
